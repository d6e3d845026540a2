"""The connection's send queue and rate limiter in isolation."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest

from rideout.auth import Claims
from rideout.config import Config
from rideout.protocol import CloseCode, parse_retry_hint
from rideout.realtime.connection import Connection, TokenBucket
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
    """Stands in for a client that stopped reading. A real one on loopback only blocks
    the server after megabytes have filled the socket buffers, which would make this
    test slow; everything else here is the real Connection."""

    def __init__(self) -> None:
        self.sent: list[str] = []
        self.closed: tuple[int, str] | None = None
        self.unblock = asyncio.Event()

    async def send_text(self, text: str) -> None:
        self.sent.append(text)
        await self.unblock.wait()

    async def close(self, code: int, reason: str) -> None:
        self.closed = (code, reason)


def connection(config: Config, peer: StuckPeer) -> Connection:
    server: Any = SimpleNamespace(config=config, metrics=AppMetrics("r", "z"))
    claims = Claims(sub="alice", exp=2e9, iat=0, jti="j", raw={})
    return Connection(peer, claims, server)  # type: ignore[arg-type]


async def test_a_consumer_that_falls_behind_is_closed_with_1013(
    make_config: Callable[..., Config],
) -> None:
    config = make_config(realtime={"send_queue": 4})
    peer = StuckPeer()
    conn = connection(config, peer)
    writer = asyncio.create_task(conn._write())
    conn._seen["lot"] = (0, 0)
    for i in range(1, 20):
        conn.deliver("lot", (i, 0), f"update {i}")
        await asyncio.sleep(0)
    assert len(conn._queue) == 1  # everything dropped but the close
    peer.unblock.set()
    await asyncio.wait_for(writer, 5)
    assert peer.closed is not None
    code, reason = peer.closed
    assert code == CloseCode.OVERLOADED
    assert parse_retry_hint(reason) == pytest.approx(config.timing.backoff_base)
    assert peer.sent == ["update 1"]  # the one in flight when it stalled
    assert conn.server.metrics.slow_consumers._value.get() == 1


async def test_updates_are_filtered_by_offset_and_held_while_state_is_read(
    make_config: Callable[..., Config],
) -> None:
    peer = StuckPeer()
    peer.unblock.set()
    conn = connection(make_config(), peer)
    writer = asyncio.create_task(conn._write())
    conn.deliver("lot", (5, 0), "not subscribed: dropped")
    conn._pending["lot"] = []
    conn.deliver("lot", (6, 0), "held")
    assert conn._pending["lot"] == [((6, 0), "held")]
    del conn._pending["lot"]
    conn._seen["lot"] = (6, 0)
    conn.deliver("lot", (6, 0), "duplicate: dropped")
    conn.deliver("lot", (5, 9), "older: dropped")
    conn.deliver("lot", (7, 0), "new")
    await asyncio.sleep(0.01)
    assert peer.sent == ["new"]
    conn.close_soon(CloseCode.DRAINING, "bye")
    conn.close_soon(CloseCode.OVERLOADED, "ignored: already closing")
    await asyncio.wait_for(writer, 5)
    assert peer.closed == (CloseCode.DRAINING, "bye")
