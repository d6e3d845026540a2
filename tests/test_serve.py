from __future__ import annotations

import asyncio
import json
import logging
import resource
import socket
import subprocess
import sys
import time
from typing import Any

import pytest
import uvicorn
import websockets

from rideout._guard import (
    FD_HEADROOM,
    ConnectionTable,
    GuardedHttpProtocol,
    ServerLimits,
    connection_cap,
)
from rideout._serve import RedactTokens, uvicorn_config
from rideout.errors import InvalidArgument
from tests.conftest import asgi_lifespan, free_port, serving, until


def test_tokens_never_reach_the_logs() -> None:
    record = logging.LogRecord(
        "uvicorn.error", logging.INFO, __file__, 1, '%s - "WebSocket %s" [accepted]',
        ("127.0.0.1:5000", "/ws?room=a&token=eyJhbGciOi.payload.sig&x=1"), None,
    )  # fmt: skip
    assert RedactTokens().filter(record)
    assert (
        record.getMessage()
        == '127.0.0.1:5000 - "WebSocket /ws?room=a&token=[redacted]&x=1" [accepted]'
    )
    plain = logging.LogRecord("x", logging.INFO, __file__, 1, "GET /ws?token=abc", None, None)
    RedactTokens().filter(plain)
    assert plain.getMessage() == "GET /ws?token=[redacted]"
    untouched = logging.LogRecord(
        "x", logging.INFO, __file__, 1, "%s tokens=%d", ("mytoken=1", 3), None
    )
    RedactTokens().filter(untouched)
    assert untouched.getMessage() == "mytoken=1 tokens=3"


async def test_no_line_per_websocket_connection_and_the_rest_stays() -> None:
    """uvicorn logs every WebSocket accept (and websockets every open and close) on its
    error logger whatever ``access_log`` says: a herd of reconnects became a herd of
    log lines. They are dropped; its other lines are not."""

    async def echo(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            return await asgi_lifespan(receive, send)
        await receive()
        await send({"type": "websocket.accept"})
        await send({"type": "websocket.send", "text": "hi"})
        await send({"type": "websocket.close", "code": 1000})

    lines: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    logger, keep = logging.getLogger("uvicorn.error"), Keep()
    port = free_port("127.0.0.1")
    server = uvicorn.Server(uvicorn_config(echo, "127.0.0.1", port, log_level="info"))
    server.config.setup_event_loop = lambda: None  # type: ignore[method-assign]
    logger.addHandler(keep)
    task = asyncio.create_task(server.serve())
    try:
        async with asyncio.timeout(10):
            while not server.started:
                await asyncio.sleep(0.01)
            for _ in range(3):
                async with websockets.connect(f"ws://127.0.0.1:{port}/ws") as ws:
                    assert await ws.recv() == "hi"
    finally:
        server.should_exit = True
        await task
        logger.removeHandler(keep)
    assert any("startup complete" in line for line in lines), lines
    assert not [line for line in lines if "WebSocket" in line or "connection " in line], lines


# --------------------------------------------------------------------------- the guard


class Waiter:
    def __init__(self, table: ConnectionTable) -> None:
        self.table = table
        self.gave_up = False

    def give_up(self) -> None:
        self.gave_up = True
        self.table.closed(self)  # what the transport's connection_lost then does


def test_the_table_expires_waiting_connections_oldest_first() -> None:
    now = [0.0]
    table = ConnectionTable(limit=10, timeout=2.0, clock=lambda: now[0])
    first, second, done = Waiter(table), Waiter(table), Waiter(table)
    for waiter in (first, second, done):
        assert table.opened()
        table.wait(waiter)
        now[0] += 0.5
    table.done(done)  # its request came in
    assert table.expire() == 2.0  # nothing due yet: the first deadline
    now[0] = 2.2
    assert table.expire() == 2.5  # the first is overdue, the second not yet
    assert (first.gave_up, second.gave_up) == (True, False)
    now[0] = 10.0
    assert table.expire() is None
    assert (second.gave_up, done.gave_up) == (True, False)
    assert (table.count, table.waiting, table.expired) == (1, 0, 2)


def test_a_kept_alive_connection_ended_idle_is_counted_apart_from_one_that_never_asked() -> None:
    now = [0.0]
    table = ConnectionTable(limit=10, timeout=2.0, clock=lambda: now[0])
    silent, idle, trickling, evicted = (Waiter(table) for _ in range(4))
    assert all(table.opened() for _ in range(4))
    table.wait(silent)  # never sends a request
    table.wait(idle, idle=True)  # answered, kept alive, says nothing more
    table.wait(trickling, idle=True)
    table.requesting(trickling)  # begins its next request, and never finishes it
    table.wait(evicted, idle=True)
    table.closed(evicted)  # the client went away: nothing to count
    now[0] = 3.0
    assert table.expire() is None
    assert (silent.gave_up, idle.gave_up, trickling.gave_up) == (True, True, True)
    assert (table.expired, table.idle) == (2, 1)
    waiter = Waiter(table)
    assert table.opened()
    table.wait(waiter, idle=True)
    table.wait(waiter)  # a new wait that is not idle (an upgrade) forgets it was
    now[0] = 6.0
    table.expire()
    assert (table.expired, table.idle, table.count) == (3, 1, 0)


async def test_only_connections_that_never_asked_are_warned_about(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Ending an idle kept-alive connection is what every HTTP server does (and the
    control plane's drain left one per zone at every failback): no warning. A connection
    that never sent a request is still one."""

    async def ok(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            return await asgi_lifespan(receive, send)
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-length", b"2")]})  # fmt: skip
        await send({"type": "http.response.body", "body": b"ok"})

    port = free_port("127.0.0.1")
    limits = ServerLimits(handshake_timeout=0.3)
    caplog.set_level(logging.WARNING, logger="rideout.serve")
    async with serving(ok, "127.0.0.1", port, limits=limits) as server:
        table = server.config.guard.table  # type: ignore[attr-defined]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        async with asyncio.timeout(5):
            assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200")
            assert await reader.read(-1) == b"ok"  # then closed at the deadline, idle
        writer.close()
        assert (table.idle, table.expired) == (1, 0)
        assert "sent no request" not in caplog.text
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        async with asyncio.timeout(5):
            assert await reader.read(-1) == b""  # silent: closed at the deadline
        writer.close()
        await until(lambda: "sent no request" in caplog.text, 5, message="the warning")
    assert (table.idle, table.expired) == (1, 1)
    assert "closed 1 connections that sent no request in 0.3 s" in caplog.text


def test_at_the_cap_the_longest_waiting_makes_room_and_without_any_the_new_is_refused() -> None:
    table = ConnectionTable(limit=3, timeout=60.0)
    waiters = [Waiter(table) for _ in range(3)]
    for waiter in waiters:
        assert table.opened()
        table.wait(waiter)
    table.done(waiters[0])  # being served: never pushed out
    assert table.opened()  # the fourth pushes out the oldest still waiting
    assert [w.gave_up for w in waiters] == [False, True, False]
    table.done(waiters[2])
    assert not table.opened()  # nobody waits: refused, not counted
    assert (table.count, table.evicted, table.refused) == (3, 1, 1)


def test_limits_are_checked_and_the_cap_fits_the_open_file_limit() -> None:
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert connection_cap(10**9) == soft - FD_HEADROOM
    assert connection_cap(100) == 100
    with pytest.raises(InvalidArgument):
        ServerLimits(handshake_timeout=0)
    with pytest.raises(InvalidArgument):
        ServerLimits(max_line=9000)  # over websockets' own line limit
    with pytest.raises(TypeError, match="GuardedConfig"):
        GuardedHttpProtocol(uvicorn.Config(app=None), server_state=None, app_state={})  # type: ignore[arg-type]


async def test_an_upgrade_the_app_never_accepts_gets_503_at_the_deadline() -> None:
    """The deadline holds for the server's side too: an app stuck before accepting
    (say, on a slow dependency) does not keep the socket forever."""

    async def stuck(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            return await asgi_lifespan(receive, send)
        await asyncio.Event().wait()

    port = free_port("127.0.0.1")
    async with serving(stuck, "127.0.0.1", port, limits=ServerLimits(handshake_timeout=0.3)):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(
            b"GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
        )
        started = time.monotonic()
        async with asyncio.timeout(3):
            raw = await reader.read(-1)
        waited = time.monotonic() - started
        writer.close()
    assert 0.25 <= waited < 2.0
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 503")
    assert json.loads(body)["error"] == "handshake_timeout"


_STUBBORN_SERVER = """
import asyncio, socket, sys
from rideout._serve import serve

async def stubborn():  # a pass that swallows its cancellation, as a buggy library can
    while True:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            pass

async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                asyncio.get_running_loop().create_task(stubborn(), name="stubborn")
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return

serve(app, "127.0.0.1", int(sys.argv[1]), own_logging=True)
"""


def test_a_server_that_cannot_bind_exits_even_when_a_task_ignores_its_cancellation() -> None:
    """uvicorn gives up on a port in use with SystemExit (3); a task that swallows its
    cancellation would keep asyncio.run, and the process, waiting forever. The server
    ends the process itself, with uvicorn's code, and says which task was stuck."""
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    try:
        result = subprocess.run(
            [sys.executable, "-c", _STUBBORN_SERVER, str(taken.getsockname()[1])],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
    finally:
        taken.close()
    assert result.returncode == 3, result.stderr  # uvicorn's "startup failed"
    assert "task stubborn ignored its cancellation" in result.stderr, result.stderr
