"""Run an ASGI app under uvicorn with the settings every rideout server shares."""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import re
import signal
import socket
from collections.abc import Awaitable, Callable
from types import FrameType
from typing import Final

import uvicorn
from starlette.types import ASGIApp

from rideout._guard import GuardedConfig, ServerLimits, raise_fd_limit

__all__ = [
    "GC_THRESHOLDS",
    "LEFTOVER_TIMEOUT",
    "ClientFaults",
    "DrainingServer",
    "QuietConnections",
    "RedactTokens",
    "ServerLimits",
    "end_leftover_tasks",
    "filter_uvicorn_logs",
    "serve",
    "tune_gc",
    "uvicorn_config",
]

log = logging.getLogger("rideout.serve")

_TOKEN = re.compile(r"((?:^|[?&])token=)[^&\s\"']+")


class RedactTokens(logging.Filter):
    """Remove bearer tokens from log lines (uvicorn logs each WebSocket path with its
    query string, and browsers may pass ``?token=...``)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str):
            record.msg = _TOKEN.sub(r"\1[redacted]", record.msg)
        if isinstance(record.args, tuple):
            record.args = tuple(
                _TOKEN.sub(r"\1[redacted]", a) if isinstance(a, str) else a for a in record.args
            )
        return True


class QuietConnections(logging.Filter):
    """Drop the per-connection lines uvicorn logs for every WebSocket on its error logger
    (``"WebSocket /ws" [accepted]``, the status of a refused upgrade, "connection open",
    "connection closed"), whatever the access log says. They are an access log: the app
    counts handshakes, refusals and closes in ``/metrics``. A herd of reconnecting
    clients logged one line each, ~4% of an app server's CPU during a failover."""

    _FORMATS: Final = frozenset(
        {
            '%s - "WebSocket %s" [accepted]',
            '%s - "WebSocket %s" 403',
            '%s - "WebSocket %s" %d',
            "connection open",
            "connection closed",
        }
    )

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.levelno <= logging.INFO and record.msg in self._FORMATS)


class ClientFaults(logging.Filter):
    """uvicorn's errors that a client causes on purpose, with no credential, become one
    WARNING line without a traceback: a WebSocket text frame of invalid UTF-8 (the
    connection is closed with 1007; uvicorn logged it as an exception)."""

    _MESSAGES: Final = frozenset({"Invalid UTF-8 sequence received from client."})

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno > logging.WARNING and record.msg in self._MESSAGES:
            record.levelno, record.levelname = logging.WARNING, "WARNING"
            record.exc_info = record.exc_text = None
            record.msg = f"{record.msg} (the connection is closed with 1007)"
        return True


_REDACT_TOKENS: Final = RedactTokens()
_QUIET_CONNECTIONS: Final = QuietConnections()
_CLIENT_FAULTS: Final = ClientFaults()


def filter_uvicorn_logs() -> None:
    """Tokens redacted from uvicorn's lines, its per-connection WebSocket lines dropped,
    the faults a client causes one warning each (idempotent: the same filters, added
    once)."""
    for name in ("uvicorn.error", "uvicorn.access"):
        logging.getLogger(name).addFilter(_REDACT_TOKENS)
    logging.getLogger("uvicorn.error").addFilter(_QUIET_CONNECTIONS)
    logging.getLogger("uvicorn.error").addFilter(_CLIENT_FAULTS)


# Young generations collected every 20,000 allocations instead of 700, and a full
# collection considered ten times less often. A server with thousands of connections
# tracks ~155 objects per connection; a full collection over them took 243 ms in the
# fan-out profile and set the tail of the slowest bids (bench/profile_realtime.py).
GC_THRESHOLDS = (20_000, 20, 100)


def tune_gc() -> None:
    """Objects from start-up live for the whole process: freeze them out of the
    collector's way; then collect less often (see GC_THRESHOLDS)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


def uvicorn_config(
    app: ASGIApp,
    host: str,
    port: int,
    *,
    ws_max_size: int = 16 * 1024 * 1024,
    log_level: str = "info",
    limits: ServerLimits | None = None,
    own_logging: bool = False,
) -> uvicorn.Config:
    """The settings every rideout server runs with (tests and benchmarks too).

    uvloop + httptools + the sans-I/O websockets protocol measured fastest here, each
    guarded by :mod:`rideout._guard` (`limits`: a cap on connections, a deadline for
    request heads and upgrades, bounded heads; defaults: :class:`ServerLimits`);
    permessage-deflate is off (it costs ~33 KB per connection). Frames larger than
    `ws_max_size` close the connection with 1009. Every app is ASGI 3 (said outright: a
    class instance's plain ``__call__`` would be taken for ASGI 2), and no proxy-headers
    middleware: the client address the per-address cap counts is the TCP peer's, and
    each layer keeps a frame alive per WebSocket connection. With `own_logging`,
    uvicorn leaves logging as the caller configured it (JSON logs, say). Either way its
    lines lose their tokens and its per-connection WebSocket lines are dropped
    (:func:`filter_uvicorn_logs`).
    """
    extra = {"log_config": None} if own_logging else {}
    config = GuardedConfig(
        app,
        limits=limits or ServerLimits(),
        host=host,
        port=port,
        loop="uvloop",
        ws_per_message_deflate=False,
        ws_max_size=ws_max_size,
        interface="asgi3",
        proxy_headers=False,
        lifespan="on",
        access_log=False,
        log_level=log_level,
        timeout_graceful_shutdown=3,
        server_header=False,
        **extra,
    )
    filter_uvicorn_logs()  # after: uvicorn configures its loggers in Config()
    return config


LEFTOVER_TIMEOUT = 5.0
"""Seconds the tasks still running after the server's shutdown get to end once cancelled."""


async def end_leftover_tasks(timeout: float, code: int) -> None:
    """Cancel the tasks still running after the shutdown and give them `timeout` s;
    if one ignores its cancellation, log where it is stuck and end the process with
    `code` now. (asyncio.run would otherwise wait for it forever: a server that could
    not bind stayed alive, and its supervisor never saw it exit.)"""
    current = asyncio.current_task()
    left = [t for t in asyncio.all_tasks() if t is not current and not t.done()]
    for task in left:
        task.cancel()
    if not left:
        return
    _, stuck = await asyncio.wait(left, timeout=timeout)
    if not stuck:
        return
    for task in stuck:
        where = "".join(
            f"\n  {f.f_code.co_filename}:{f.f_lineno} in {f.f_code.co_name}"
            for f in task.get_stack(limit=8)
        )
        log.error("task %s ignored its cancellation for %g s:%s", task.get_name(), timeout, where)
    log.error("exiting now (code %d): %d task(s) would keep the process alive", code, len(stuck))
    logging.shutdown()
    os._exit(code)


class DrainingServer(uvicorn.Server):
    """uvicorn, except that SIGTERM first runs `drain` (at most `drain_timeout`
    seconds) while still serving, then shuts down as usual; a second signal, or SIGINT,
    stops at once. For rolling deploys: clients are moved off before the process goes."""

    def __init__(
        self,
        config: uvicorn.Config,
        drain: Callable[[], Awaitable[None]] | None = None,
        drain_timeout: float = 10.0,
    ) -> None:
        super().__init__(config)
        self._drain = drain
        self._drain_timeout = drain_timeout
        self._loop: asyncio.AbstractEventLoop | None = None
        self._draining: asyncio.Task[None] | None = None

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        code = 0
        try:
            await super().serve(sockets)
        except SystemExit as exc:  # uvicorn's way out when it cannot bind
            code = exc.code if isinstance(exc.code, int) else 1
            raise
        finally:
            await end_leftover_tasks(LEFTOVER_TIMEOUT, code)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if sig != signal.SIGTERM or self._drain is None or self._loop is None or self._draining:
            super().handle_exit(sig, frame)
            return
        self._loop.call_soon_threadsafe(self._begin_drain)

    def _begin_drain(self) -> None:
        if self._draining is None:
            self._draining = asyncio.ensure_future(self._drain_then_exit())

    async def _drain_then_exit(self) -> None:
        assert self._drain is not None
        log.info("SIGTERM: draining (at most %g s), then exiting", self._drain_timeout)
        try:
            async with asyncio.timeout(self._drain_timeout):
                await self._drain()
            log.info("drained: exiting")
        except TimeoutError:
            log.warning("drain not done within %g s: exiting anyway", self._drain_timeout)
        except Exception:  # the drain must never keep the process from exiting
            log.exception("drain failed: exiting")
        self.should_exit = True


def serve(
    app: ASGIApp,
    host: str,
    port: int,
    *,
    ws_max_size: int = 16 * 1024 * 1024,
    reuse_port: bool = False,
    log_level: str = "info",
    limits: ServerLimits | None = None,
    sock: socket.socket | None = None,
    drain: Callable[[], Awaitable[None]] | None = None,
    drain_timeout: float = 10.0,
    own_logging: bool = False,
) -> None:
    """Serve `app` until SIGINT/SIGTERM, then shut down gracefully within a few seconds
    (settings: :func:`uvicorn_config`). With `reuse_port`, several processes serve one
    address and port (SO_REUSEPORT): the kernel spreads connections. Given `sock`, a
    socket already bound to ``host:port``, it serves on that one. The open-file
    limit is raised to its hard limit first, and the connection cap kept under it.
    With `drain`, SIGTERM runs it first (see :class:`DrainingServer`).
    """
    raise_fd_limit()
    config = uvicorn_config(
        app, host, port, ws_max_size=ws_max_size, log_level=log_level, limits=limits,
        own_logging=own_logging,
    )  # fmt: skip
    tune_gc()
    server = DrainingServer(config, drain, drain_timeout)
    if sock is not None:
        server.run(sockets=[sock])
        return
    if not reuse_port:
        server.run()
        return
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    sock.set_inheritable(True)
    server.run(sockets=[sock])
