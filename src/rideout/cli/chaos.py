"""`rideout chaos`: break a region of a running deployment on purpose, and mend it,
through the supervisor's control socket (:mod:`rideout.cluster.chaos`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from rideout.cli._core import ConfigOption, app, console, fail, load

__all__: list[str] = []

chaos_app = typer.Typer(
    rich_markup_mode="markdown",
    help="Break a region of a running deployment on purpose (and mend it).",
    no_args_is_help=True,
)
app.add_typer(chaos_app, name="chaos")

RegionArgument = Annotated[str, typer.Argument(help="The region, e.g. us-east-1.")]


ZoneOption = Annotated[
    str | None, typer.Option("--zone", help="Only this zone's app servers (a zone outage).")
]


def _chaos(op: str, region: str, config_path: Path | None, zone: str | None = None) -> None:
    from rideout.cluster.chaos import ChaosError, send_command

    config = load(config_path)
    try:
        console.print(send_command(config.run_dir, op, region, zone=zone))
    except ChaosError as exc:
        fail(str(exc))


@chaos_app.command("kill")
def chaos_kill(
    region: RegionArgument, zone: ZoneOption = None, config_path: ConfigOption = None
) -> None:
    """SIGKILL every process of REGION, Redis included: the region is gone (its canary
    too, if `failover.canary_placement` puts it in the region)."""
    _chaos("kill", region, config_path, zone)


@chaos_app.command("kill-redis")
def chaos_kill_redis(region: RegionArgument, config_path: ConfigOption = None) -> None:
    """SIGKILL only REGION's Redis."""
    _chaos("kill-redis", region, config_path)


@chaos_app.command("freeze")
def chaos_freeze(
    region: RegionArgument, zone: ZoneOption = None, config_path: ConfigOption = None
) -> None:
    """SIGSTOP every process of REGION: connections hang, like a network blackhole (its
    canary too, if placed in the region)."""
    _chaos("freeze", region, config_path, zone)


@chaos_app.command("throttle")
def chaos_throttle(
    region: RegionArgument, zone: ZoneOption = None, config_path: ConfigOption = None
) -> None:
    """REGION's app servers answer every message with error/unavailable (sockets stay open)."""
    _chaos("throttle", region, config_path, zone)


@chaos_app.command("restore")
def chaos_restore(region: RegionArgument, config_path: ConfigOption = None) -> None:
    """Undo kill, kill-redis, freeze and throttle: REGION comes back."""
    _chaos("restore", region, config_path)
