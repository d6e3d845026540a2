"""Run a lab deployment (:mod:`rideout.lab.deployment`) until told to stop: build the lab,
make the secrets with ``rideout secrets init``, write the configs, start every process on
its host stage by stage (each stage ready before the next), start the WAN links and
their control socket, say what runs where, wait, and tear everything down.

Teardown runs on every exit path: a signal (the caller's handler sets `stop`, or cancels
the task), a part that exits or is not ready in time, an error while building. Processes
are stopped last started first (SIGTERM, then SIGKILL), then the links and the control
socket, then the lab (``with Lab``), which also kills whatever still runs in a
namespace. Only SIGKILL of this process leaves anything behind: ``rideout lab down``
removes it from the lab's record.

Readiness is probed from inside the part's own host (a socket made in its namespace,
:func:`~rideout.lab.relay.socket_in`): the caller's namespace cannot reach lab addresses.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import socket
import ssl
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

from rideout._files import replace_atomically
from rideout._process import ManagedProcess
from rideout._signals import stop_on_signals
from rideout.lab.deployment import LabDeployment, LabPart, where
from rideout.lab.errors import LabError
from rideout.lab.netns import Lab, start_in
from rideout.lab.relay import Link, serve_control, socket_in
from rideout.store.acl import RedisRole, load_credentials
from rideout.store.tls_files import TlsFiles

__all__ = ["LabParts", "http_status", "redis_pings", "run_deployment", "run_until_signal"]

Say = Callable[[str], None]
_PROBE_TIMEOUT = 2.0
_STOP_TIMEOUT = 8.0


class _Interrupted(LabError):
    """`stop` was set while the lab was starting (caught by :func:`run_deployment`)."""


def _connecting_socket() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setblocking(False)
    return sock


async def _open(
    netns: str, address: str, port: int, *, tls: ssl.SSLContext | None = None
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    sock = socket_in(netns, _connecting_socket)
    try:
        await asyncio.get_running_loop().sock_connect(sock, (address, port))
    except BaseException:
        sock.close()
        raise
    return await asyncio.open_connection(
        sock=sock, ssl=tls, server_hostname=address if tls else None
    )


async def http_status(
    netns: str, address: str, port: int, path: str, timeout: float = _PROBE_TIMEOUT
) -> int | None:
    """The status code of ``GET path`` on ``address:port``, asked from inside `netns`;
    None if it cannot be asked."""
    writer: asyncio.StreamWriter | None = None
    try:
        async with asyncio.timeout(timeout):
            reader, writer = await _open(netns, address, port)
            writer.write(
                f"GET {path} HTTP/1.0\r\nHost: {address}:{port}\r\nConnection: close\r\n\r\n".encode()
            )
            await writer.drain()
            parts = (await reader.readline()).split()
            return int(parts[1]) if len(parts) >= 2 and parts[1].isdigit() else None
    except (OSError, TimeoutError, ValueError):
        return None
    finally:
        if writer is not None:
            writer.transport.abort()


def _resp(*args: str) -> bytes:
    out = [f"*{len(args)}\r\n".encode()]
    for arg in args:
        data = arg.encode()
        out.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(out)


async def redis_pings(
    netns: str, address: str, port: int, secrets: Path, timeout: float = _PROBE_TIMEOUT
) -> bool:
    """Whether the Redis at ``address:port`` answers PING over TLS (with rideout's client
    certificate) as the monitor user, asked from inside `netns`."""
    tls_files = TlsFiles.of(secrets)
    writer: asyncio.StreamWriter | None = None
    try:
        user = load_credentials(secrets, RedisRole.MONITOR)
        context = ssl.create_default_context(cafile=str(tls_files.ca[0]))
        context.load_cert_chain(str(tls_files.client[0]), str(tls_files.client[1]))
        async with asyncio.timeout(timeout):
            reader, writer = await _open(netns, address, port, tls=context)
            writer.write(_resp("AUTH", user.username, user.password) + _resp("PING"))
            await writer.drain()
            auth, pong = await reader.readline(), await reader.readline()
            return auth.startswith(b"+OK") and pong.startswith(b"+PONG")
    except (OSError, TimeoutError, ValueError, ssl.SSLError):
        return False
    except Exception:  # unreadable credentials: not ready (the log says why)
        return False
    finally:
        if writer is not None:
            writer.transport.abort()


async def _is_ready(deployment: LabDeployment, part: LabPart) -> bool:
    netns = deployment.topology.host(part.host).netns
    address = deployment.address(part.host)
    if part.ready == "redis":
        return await redis_pings(netns, address, part.port, deployment.paths.secrets)
    return await http_status(netns, address, part.port, part.ready) == 200


async def _wait_ready(
    deployment: LabDeployment, part: LabPart, process: ManagedProcess, deadline: float
) -> None:
    while True:
        if not process.running:
            code = await process.wait()
            raise LabError(
                f"{part.name} on {part.host} exited with {code} before it was ready "
                f"(log {process.log_file}): {' | '.join(process.tail()[-5:])}"
            )
        if await _is_ready(deployment, part):
            return
        if time.monotonic() > deadline:
            raise LabError(
                f"{part.name} on {part.host} was not ready ({part.ready}) in time "
                f"(log {process.log_file}): {' | '.join(process.tail()[-5:])}"
            )
        await asyncio.sleep(0.2)


class LabParts:
    """The running deployment's processes by part name, for a drill that kills parts and
    starts them again (:func:`run_deployment` fills it as it starts them). A part started
    again replaces the killed one in teardown's list, so teardown still stops it."""

    def __init__(self) -> None:
        self._running: dict[str, tuple[LabPart, list[ManagedProcess], int]] = {}
        self._start: Callable[[LabPart], Awaitable[ManagedProcess]] | None = None
        self._ready: Callable[[LabPart, ManagedProcess], Awaitable[None]] | None = None

    def _add(self, part: LabPart, stage: list[ManagedProcess], index: int) -> None:
        self._running[part.name] = (part, stage, index)

    def _known(self, names: Sequence[str]) -> list[tuple[LabPart, list[ManagedProcess], int]]:
        unknown = sorted(set(names) - set(self._running))
        if unknown:
            raise LabError(f"no such running part: {', '.join(unknown)}")
        return [self._running[name] for name in names]

    async def kill(self, names: Sequence[str]) -> None:
        """SIGKILL each of `names` (a process that does not run is left as it is) and
        wait for it to be gone."""
        found = self._known(names)
        for _, stage, index in found:
            stage[index].signal(signal.SIGKILL)
        await asyncio.gather(*(stage[index].wait() for _, stage, index in found))

    async def restart(self, names: Sequence[str]) -> None:
        """Start each of `names` again (its log goes on in the same file) and wait until
        each is ready; LabError if one is not in the lab's ready timeout, or still runs."""
        found = self._known(names)
        assert self._start is not None
        assert self._ready is not None
        for part, stage, index in found:
            if stage[index].running:
                raise LabError(f"{part.name} still runs: kill it before starting it again")
            stage[index] = await self._start(part)
        await asyncio.gather(*(self._ready(part, stage[index]) for part, stage, index in found))


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    replace_atomically(path, text.encode())


def _prepare_files(deployment: LabDeployment) -> None:
    """Fresh data for this run (a lab is not a place to keep a bid), the config and each
    Redis config; the secrets are kept, as `rideout secrets init` keeps them."""
    paths = deployment.paths
    paths.work.mkdir(parents=True, exist_ok=True, mode=0o700)
    paths.work.chmod(0o700)
    for old in (paths.redis, paths.data, paths.logs):
        shutil.rmtree(old, ignore_errors=True)
    _write(paths.config, deployment.config_text)
    for host, text in deployment.redis_configs.items():
        paths.redis_dir(host).mkdir(parents=True, mode=0o700)
        _write(paths.redis_config(host), text)


def _child_env() -> dict[str, str]:
    """The caller's environment without RIDEOUT_*: every part reads the lab's config
    alone, whatever the shell that started the lab had set."""
    return {k: v for k, v in os.environ.items() if not k.startswith("RIDEOUT_")}


async def _secrets_init(deployment: LabDeployment, python: str) -> None:
    process = ManagedProcess(
        "secrets-init",
        deployment.secrets_init_argv(python),
        log_file=deployment.paths.logs / "secrets-init.log",
        env=_child_env(),
    )
    await process.start()
    try:
        code = await asyncio.wait_for(process.wait(), 120)
    finally:
        await process.stop()
    if code != 0:
        raise LabError(f"`rideout secrets init` failed ({code}): {' | '.join(process.tail()[-5:])}")


def _where_text(deployment: LabDeployment) -> list[str]:
    rows = [("group", "host", "address", "runs"), *where(deployment)]
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    return [
        f"  {g:<{widths[0]}}  {h:<{widths[1]}}  {a:<{widths[2]}}  {w}".rstrip()
        for g, h, a, w in rows
    ]


async def _stop_all(processes: Sequence[Sequence[ManagedProcess]]) -> None:
    """Stop each stage's processes together, the last stage first."""
    for stage in reversed(processes):
        await asyncio.gather(*(p.stop(_STOP_TIMEOUT) for p in stage), return_exceptions=True)


async def run_deployment(
    deployment: LabDeployment,
    state_dir: Path,
    *,
    python: str,
    stop: asyncio.Event,
    say: Say,
    ready_timeout: float = 60.0,
    up: asyncio.Event | None = None,
    parts: LabParts | None = None,
) -> bool:
    """Build the lab, run `deployment` in it until `stop` is set, and tear it all down
    (on every exit path: see the module docstring); False if `stop` was set before it
    was up. LabError when it cannot start. `up` is set once every part is ready (a drill
    waits for it, then breaks the lab through its record, ``Lab.load``, or kills and
    restarts parts through `parts`)."""
    try:
        await _run(deployment, state_dir, python=python, stop=stop, say=say,
                   ready_timeout=ready_timeout, up=up, parts=parts or LabParts())  # fmt: skip
    except _Interrupted:
        return False
    return True


async def _run(
    deployment: LabDeployment,
    state_dir: Path,
    *,
    python: str,
    stop: asyncio.Event,
    say: Say,
    ready_timeout: float,
    up: asyncio.Event | None,
    parts: LabParts,
) -> None:
    started = time.monotonic()
    processes: list[list[ManagedProcess]] = []
    links: list[Link] = []
    control: asyncio.Server | None = None
    topology = deployment.topology
    say(f"building lab {topology.lab_id}: {len(topology.hosts)} hosts and a router")
    with Lab(topology, state_dir) as lab:
        try:
            _prepare_files(deployment)
            say(f"rideout secrets init --dir {deployment.paths.secrets}")
            await _secrets_init(deployment, python)
            for wan in deployment.links:
                lab.intercept(wan.source, wan.host, wan.port)
                address = (deployment.address(wan.host), wan.port)
                link = Link(
                    wan.name, address, address, netns=topology.router_netns,
                    upstream_netns=topology.router_netns, transparent=True,
                )  # fmt: skip
                await link.start()
                links.append(link)
            control = await serve_control(
                deployment.paths.control_socket, {link.name: link for link in links}
            )
            env = _child_env()

            async def start(part: LabPart) -> ManagedProcess:
                return await start_in(lab, part.host, part.name, part.argv,
                                      log_file=deployment.paths.logs / f"{part.name}.log",
                                      env=env)  # fmt: skip

            async def ready(part: LabPart, process: ManagedProcess) -> None:
                await _wait_ready(deployment, part, process, time.monotonic() + ready_timeout)

            parts._start, parts._ready = start, ready
            for stage, stage_parts in deployment.stages:
                if stop.is_set():
                    raise _Interrupted
                say(f"starting {stage}: {', '.join(p.name for p in stage_parts)}")
                started_now: list[ManagedProcess] = []
                processes.append(started_now)
                for part in stage_parts:
                    parts._add(part, started_now, len(started_now))
                    started_now.append(await start(part))
                deadline = time.monotonic() + ready_timeout
                waiting: asyncio.Future[list[None]] = asyncio.gather(
                    *(
                        _wait_ready(deployment, part, process, deadline)
                        for part, process in zip(stage_parts, started_now, strict=True)
                    )
                )
                stopping: asyncio.Future[bool] = asyncio.ensure_future(stop.wait())
                pending: set[asyncio.Future[object]] = {waiting, stopping}  # type: ignore[arg-type]
                try:
                    await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    stopping.cancel()
                if not waiting.done():
                    waiting.cancel()
                    await asyncio.wait({waiting})  # the probes end (a cancel of ours still raises)
                    if not waiting.cancelled():
                        waiting.exception()  # retrieved: a part that failed meanwhile is moot
                    raise _Interrupted
                waiting.result()
            say(f"what runs where (config {deployment.paths.config}; logs in "
                f"{deployment.paths.logs}):")  # fmt: skip
            for line in _where_text(deployment):
                say(line)
            say(
                "the WAN link (latency, loss: `rideout lab latency|loss`) carries "
                + ", ".join(link.name for link in links)
            )
            say(
                f"lab {topology.lab_id} is up in {time.monotonic() - started:.1f} s: "
                f"`rideout lab status --id {topology.lab_id}`; Ctrl-C or SIGTERM stops it"
            )
            watch = [
                asyncio.ensure_future(_report_exit(p, say)) for stage in processes for p in stage
            ]
            if up is not None:
                up.set()
            try:
                await stop.wait()
            finally:
                for task in watch:
                    task.cancel()
        finally:
            t0 = time.monotonic()
            await _stop_all(processes)
            if control is not None:
                control.close()
                with contextlib.suppress(Exception):
                    await control.wait_closed()
                with contextlib.suppress(FileNotFoundError):
                    deployment.paths.control_socket.unlink()
            for link in links:
                await link.stop()
            say(f"stopped {sum(map(len, processes))} processes in {time.monotonic() - t0:.1f} s; "
                f"removing lab {topology.lab_id}")  # fmt: skip


async def _report_exit(process: ManagedProcess, say: Say) -> None:
    """Say so when a part exits while the lab runs (the lab keeps running: a drill may
    have stopped it on purpose)."""
    code = await process.wait()
    say(f"{process.name} exited with {code} (log {process.log_file})")


async def run_until_signal(
    deployment: LabDeployment,
    state_dir: Path,
    *,
    python: str,
    say: Say,
    ready_timeout: float = 60.0,
) -> int:
    """:func:`run_deployment` until SIGINT, SIGTERM or SIGHUP (as ``rideout up`` runs);
    the exit code: 0 after a signal once up, 130 for a signal during start-up."""
    with stop_on_signals() as stop:
        up = await run_deployment(
            deployment, state_dir, python=python, stop=stop.event, say=say,
            ready_timeout=ready_timeout,
        )  # fmt: skip
    say(f"{stop.why} {'received: lab removed' if up else 'during start-up: lab removed'}")
    return 0 if up else 130
