"""`rideout up`'s run: start the supervisor, stream its children's logs, print what runs
where once it is ready, and stop everything on a signal."""

from __future__ import annotations

import asyncio
import time

from rich.text import Text

from rideout._signals import stop_on_signals
from rideout.cli._console import console, err
from rideout.cli._status import print_status
from rideout.config import Config
from rideout.store.client import cancel_and_wait

__all__ = ["LogPrinter", "run_up"]


_PALETTE = [
    "cyan",
    "magenta",
    "green",
    "yellow",
    "blue",
    "bright_cyan",
    "bright_magenta",
    "bright_green",
]


class LogPrinter:
    """Prefixes each process's lines with its name, one colour per process."""

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet
        self._styles: dict[str, str] = {"rideout": "bold white"}

    def __call__(self, name: str, line: str) -> None:
        if self.quiet and name != "rideout":
            return
        style = self._styles.setdefault(name, _PALETTE[len(self._styles) % len(_PALETTE)])
        console.print(Text.assemble((f"{name:>16} │ ", style), line), soft_wrap=True)


async def run_up(config: Config, printer: LogPrinter, ready_timeout: float) -> int:
    """Run the local deployment until a signal (SIGINT, SIGTERM, SIGHUP); the exit code."""
    from rideout.cluster.supervisor import LocalCluster

    with stop_on_signals() as stop:
        cluster = LocalCluster(config, sink=printer, ready_timeout=ready_timeout)
        started = time.monotonic()
        try:
            starting = asyncio.create_task(cluster.start())
            stopping = asyncio.create_task(stop.event.wait())
            await asyncio.wait({starting, stopping}, return_when=asyncio.FIRST_COMPLETED)
            if not starting.done():
                # Its clean-up stops every process started so far.
                await cancel_and_wait(starting, timeout=60.0)
                printer("rideout", f"{stop.why} during start-up: stopped everything")
                return 130
            stopping.cancel()
            starting.result()  # raises what start raised (after it cleaned up)
            printer("rideout", f"ready in {time.monotonic() - started:.1f} s")
            from rideout.cluster.status import collect_status

            print_status(await collect_status(config), title="rideout is up")
            await _print_login_link(config)
            console.print("Press Ctrl-C to stop (or run `rideout down` elsewhere).\n")
            await stop.event.wait()
            printer("rideout", f"{stop.why} received: shutting down")
            return 0
        finally:
            t0 = time.monotonic()
            if await cluster.stop():
                printer("rideout", f"stopped in {time.monotonic() - t0:.1f} s")


async def _print_login_link(config: Config) -> None:
    from rideout.controlplane.login import LoginLinkError, request_login_link

    try:
        link = await request_login_link(config)
    except LoginLinkError as exc:
        err.print(f"no dashboard login link: {exc}")
        return
    minutes = config.control_plane.login_code_ttl / 60
    console.print(
        f"dashboard login (one use, within {minutes:g} min; `rideout dashboard login` "
        f"prints a new one): {link}",
        soft_wrap=True,
    )
