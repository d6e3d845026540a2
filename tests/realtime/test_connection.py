"""The connection's send queue and rate limiter in isolation."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest

from rideout.config import Config
from rideout.protocol import CloseCode, parse_retry_hint
from rideout.realtime import connection as connection_module
from rideout.realtime.connection import Connection, TokenBucket, WebSocketEndpoint
from rideout.realtime.metrics import AppMetrics


def test_token_bucket_refills_at_its_rate() -> None:
    now = [0.0]
    bucket = TokenBucket(rate=2.0, burst=3, clock=lambda: now[0])
    assert [bucket.take() for _ in range(4)] == [True, True, True, False]
    now[0] += 0.5  # one token back
    assert bucket.take() is True
    assert bucket.take() is False
    now[0] += 100  # never more than the burst
    assert sum(bucket.take() for _ in range(10)) == 3


class StuckPeer:
    """Stands in for the server's ASGI `send` to a client that stopped reading. A real
    one on loopback only blocks the server after megabytes have filled the socket
    buffers, which would make these tests slow; everything else is the real Connection."""

    def __init__(self, *, stuck: bool = True) -> None:
        self.sent: list[str] = []
        self.closed: tuple[int, str] | None = None
        self.unblock = asyncio.Event()
        if not stuck:
            self.unblock.set()

    async def __call__(self, message: dict[str, Any]) -> None:
        if message["type"] == "websocket.send":
            self.sent.append(message["text"])
        else:
            assert message["type"] == "websocket.close"
            self.closed = (message["code"], message["reason"])
        await self.unblock.wait()


def connection(config: Config, peer: StuckPeer) -> Connection:
    server: Any = SimpleNamespace(
        config=config, metrics=AppMetrics("r", "z"), connections=set(),
        hub=SimpleNamespace(unsubscribe=lambda room, conn: None),
    )  # fmt: skip
    return Connection(peer, "alice", 2e9, server)


class Client:
    """The server's ASGI `receive` for a client that sends `messages`, then stays."""

    def __init__(self) -> None:
        self.inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

    async def __call__(self) -> dict[str, Any]:
        return await self.inbox.get()

    def leave(self) -> None:
        self.inbox.put_nowait({"type": "websocket.disconnect", "code": 1001})


async def test_sends_finish_on_the_spot_when_the_transport_takes_them(
    make_config: Callable[..., Config],
) -> None:
    peer = StuckPeer(stuck=False)
    conn = connection(make_config(), peer)
    conn._seen["lot"] = (0, 0)
    for i in range(1, 4):
        conn.deliver("lot", (i, 0), f"update {i}")
    # No task switch needed: the updates are with the transport already.
    assert peer.sent == ["update 1", "update 2", "update 3"]
    assert conn._flusher is None


async def test_a_consumer_that_falls_behind_is_closed_with_1013(
    make_config: Callable[..., Config],
) -> None:
    config = make_config(realtime={"send_queue": 4})
    peer = StuckPeer()
    conn = connection(config, peer)
    conn._seen["lot"] = (0, 0)
    for i in range(1, 20):
        conn.deliver("lot", (i, 0), f"update {i}")
        await asyncio.sleep(0)
    assert conn._flusher is not None
    assert len(conn._queue) == 1  # everything dropped but the close
    peer.unblock.set()
    await asyncio.wait_for(conn._flusher, 5)
    assert conn._flusher is None
    assert peer.closed is not None
    code, reason = peer.closed
    assert code == CloseCode.OVERLOADED
    assert parse_retry_hint(reason) == pytest.approx(config.timing.backoff_base)
    assert peer.sent == ["update 1"]  # the one in flight when it stalled
    assert conn.server.metrics.slow_consumers._value.get() == 1


async def test_updates_are_filtered_by_offset_and_held_while_state_is_read(
    make_config: Callable[..., Config],
) -> None:
    peer = StuckPeer(stuck=False)
    conn = connection(make_config(), peer)
    conn.deliver("lot", (5, 0), "not subscribed: dropped")
    conn._pending["lot"] = []
    conn.deliver("lot", (6, 0), "held")
    assert conn._pending["lot"] == [((6, 0), "held")]
    del conn._pending["lot"]
    conn._seen["lot"] = (6, 0)
    conn.deliver("lot", (6, 0), "duplicate: dropped")
    conn.deliver("lot", (5, 9), "older: dropped")
    conn.deliver("lot", (7, 0), "new")
    assert peer.sent == ["new"]
    conn.close_soon(CloseCode.DRAINING, "bye")
    conn.close_soon(CloseCode.OVERLOADED, "ignored: already closing")
    assert peer.closed == (CloseCode.DRAINING, "bye")
    conn.deliver("lot", (8, 0), "after the close: dropped")
    assert peer.sent == ["new"]


async def test_a_close_queued_behind_a_stuck_send_gets_a_grace_period(
    make_config: Callable[..., Config], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(connection_module, "CLOSE_GRACE", 0.05)
    peer, client = StuckPeer(), Client()
    conn = connection(make_config(), peer)
    serving = asyncio.create_task(conn.serve(client))
    await asyncio.sleep(0)
    conn._send("stuck")
    flusher = conn._flusher
    assert flusher is not None
    conn.close_soon(CloseCode.DRAINING, "bye")
    client.inbox.put_nowait({"type": "websocket.receive", "text": "ignored"})
    await asyncio.wait_for(serving, 5)  # gave up on the stuck peer after the grace
    assert flusher.cancelled()
    assert peer.closed is None
    assert conn.server.connections == set()


async def test_a_client_that_leaves_stops_its_flusher_at_once(
    make_config: Callable[..., Config],
) -> None:
    peer, client = StuckPeer(), Client()
    conn = connection(make_config(), peer)
    serving = asyncio.create_task(conn.serve(client))
    await asyncio.sleep(0)
    conn._send("stuck")
    conn._send("queued")
    flusher = conn._flusher
    assert flusher is not None
    assert list(conn._queue) == ["queued"]
    client.leave()
    await asyncio.wait_for(serving, 5)
    assert flusher.cancelled()
    assert conn._flusher is None
    assert peer.sent == ["stuck"]


async def test_a_send_to_a_client_that_is_gone_is_not_an_error(
    make_config: Callable[..., Config],
) -> None:
    async def gone(message: dict[str, Any]) -> None:
        raise OSError("client disconnected")  # what uvicorn's ClientDisconnected is

    conn = connection(make_config(), StuckPeer())
    conn._asgi_send = gone
    conn._send("lost")
    conn.close_soon(CloseCode.DRAINING, "not sent either")
    assert conn._flusher is None


async def test_a_send_that_fails_after_waiting_ends_the_flusher_quietly(
    make_config: Callable[..., Config],
) -> None:
    gate = asyncio.Event()

    async def breaks_when_unblocked(message: dict[str, Any]) -> None:
        await gate.wait()
        raise OSError("client disconnected")

    conn = connection(make_config(), StuckPeer())
    conn._asgi_send = breaks_when_unblocked
    conn._send("waits, then fails")
    conn._send("queued behind it")
    flusher = conn._flusher
    assert flusher is not None
    gate.set()
    await asyncio.wait_for(flusher, 5)
    assert conn._flusher is None
    assert conn._queue is None
    conn._send("after: dropped, not raised")
    assert conn._flusher is None


class Sent(list[dict[str, Any]]):
    async def __call__(self, message: dict[str, Any]) -> None:
        self.append(message)


def endpoint_state(config: Config) -> SimpleNamespace:
    zone = SimpleNamespace(
        mode="draining", config=config, metrics=AppMetrics("r", "z"),
        origin_allowed=lambda origin: True,
    )  # fmt: skip
    return SimpleNamespace(zone=zone)


async def test_a_denial_without_the_http_response_extension_is_a_close(
    make_config: Callable[..., Config],
) -> None:
    """Servers without ASGI's websocket.http.response extension can only refuse with a
    close (the client sees 403); uvicorn has it, so the other tests see the JSON body."""
    sent, client = Sent(), Client()
    client.inbox.put_nowait({"type": "websocket.connect"})
    scope = {"type": "websocket", "path": "/ws", "headers": [], "extensions": {}}
    await WebSocketEndpoint(endpoint_state(make_config()))(scope, client, sent)
    assert sent == [{"type": "websocket.close", "code": CloseCode.POLICY}]


async def test_a_connection_that_never_asked_to_connect_gets_nothing(
    make_config: Callable[..., Config],
) -> None:
    sent, client = Sent(), Client()
    client.leave()
    scope = {"type": "websocket", "path": "/ws", "headers": []}
    await WebSocketEndpoint(endpoint_state(make_config()))(scope, client, sent)
    assert sent == []
