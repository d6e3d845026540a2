"""A region's worth of real app servers on loopback, sharing real Redis."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import InvalidStatus

from rideout._looplag import LoopLag
from rideout._serve import ServerLimits
from rideout.auth import SigningKey, TokenIssuer
from rideout.config import Config
from rideout.realtime.app import create_app
from rideout.realtime.zone import ZoneServer
from rideout.store.client import probe_client
from rideout.store.embedded import EmbeddedRedis
from rideout.store.replication import ensure_epoch
from tests.conftest import TEST_ADMIN, free_port, replicated, running_redis_pair, serving


@dataclass
class Deployment:
    """Servers by name: a1 and a1b (two workers of use1-az1), a2 (use1-az2), b1 (usw2-az1)."""

    config: Config
    issuer: TokenIssuer
    urls: dict[str, str] = field(default_factory=dict)
    servers: dict[str, ZoneServer] = field(default_factory=dict)
    redis: dict[str, EmbeddedRedis] = field(default_factory=dict)  # by region

    def token(self, sub: str = "alice", **kw: Any) -> str:
        return self.issuer.issue(sub, **kw)

    def connect(self, name: str = "a1", sub: str = "alice", **kw: Any) -> connect:
        return connect(f"{self.urls[name]}/ws?token={self.token(sub)}", open_timeout=5, **kw)


async def recv(ws: ClientConnection, timeout: float = 5.0) -> Any:
    """The next message: parsed JSON, or the bare text (``pong``)."""
    raw = await asyncio.wait_for(ws.recv(), timeout)
    try:
        return json.loads(raw)
    except ValueError:
        return raw


async def recv_type(ws: ClientConnection, kind: str, timeout: float = 5.0) -> dict[str, Any]:
    """Skip messages until one of `kind` arrives."""
    async with asyncio.timeout(timeout):
        while True:
            msg = await recv(ws, timeout)
            if isinstance(msg, dict) and msg.get("type") == kind:
                return msg


async def send(ws: ClientConnection, **message: Any) -> None:
    await ws.send(json.dumps(message))


async def rejected(url: str, **kw: Any) -> tuple[int, dict[str, Any]]:
    """A handshake the server refuses: its HTTP status and JSON body."""
    with pytest.raises(InvalidStatus) as info:
        async with connect(url, open_timeout=5, **kw):
            pass
    response = info.value.response
    return response.status_code, json.loads(response.body or b"{}")


class HeldLag(LoopLag):
    """A loop lag held where the test puts it (the shedder's input; the watcher that
    measures the real one keeps writing to the server's own, replaced, LoopLag)."""

    def __init__(self, held: float) -> None:
        super().__init__()
        self.held = held

    def worst(self, now: float) -> float:
        return self.held

    def typical(self, now: float, count: int) -> float:
        return self.held


def hold_lag(d: Deployment, lag: float) -> list[HeldLag]:
    """Hold the primary region's servers' lag at `lag` (each one's HeldLag, to move)."""
    held = []
    for name in ("a1", "a1b", "a2"):  # the primary region's servers
        d.servers[name].lag = HeldLag(lag)
        held.append(d.servers[name].lag)
    return held


@contextlib.asynccontextmanager
async def running_deployment(
    config: Config, app_options: Callable[[], dict[str, Any]] = dict, *, shed: bool = False
) -> AsyncIterator[Deployment]:
    """The four servers, each app built with ``create_app(..., **app_options())``.

    They run on this test's one event loop, so its lag is every server's and the test's
    own, not a zone's: their load shedding is off unless `shed` (the tests of shedding
    hold the lag where they want it, see :func:`hold_lag`)."""
    if not shed:
        config = dataclasses.replace(
            config, realtime=dataclasses.replace(config.realtime, shed_load=False)
        )
    key = SigningKey.load_or_create(config.keys_dir)
    deployment = Deployment(config, TokenIssuer(key, config.auth.issuer, config.auth.audience, 600))
    primary, secondary = config.primary, config.secondary
    plan = [
        ("a1", primary.name, primary.zones[0], config.app_port),
        ("a1b", primary.name, primary.zones[0], free_port(primary.zones[0].address)),
        ("a2", primary.name, primary.zones[1], config.app_port),
        ("b1", secondary.name, secondary.zones[0], config.app_port),
    ]
    async with running_redis_pair(config) as pair, contextlib.AsyncExitStack() as stack:
        deployment.redis = {primary.name: pair[0], secondary.name: pair[1]}
        # The read must outlast WAIT's own 5 s bound, or a slow replica fails the fixture.
        # WAIT covers the writes of its own connection: the superuser does both.
        writer = probe_client(
            primary.redis.address, primary.redis.port, credentials=TEST_ADMIN, timeout=6.0
        )
        try:
            await ensure_epoch(writer)
            # The replica region's server reads the epoch from its own Redis when no
            # control plane answers: let the replica have it before any server starts.
            await replicated(writer)
        finally:
            await writer.aclose()
        for name, region, zone, port in plan:
            app = create_app(config, region, zone.name, **app_options())
            limits = ServerLimits.from_config(config)
            await stack.enter_async_context(serving(app, zone.address, port, limits=limits))
            deployment.urls[name] = f"ws://{zone.address}:{port}"
            deployment.servers[name] = app.state.zone
        yield deployment


@pytest.fixture
async def deployment(make_config: Callable[..., Config]) -> AsyncIterator[Deployment]:
    async with running_deployment(make_config()) as d:
        yield d
