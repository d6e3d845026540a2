"""One real redis-server per test module (locked as `rideout up` locks it), a fresh
event per test, and the room's store over the app user's client."""

from __future__ import annotations

import contextlib
import itertools
import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import pytest_asyncio
import redis.asyncio as aioredis
from starlette.applications import Starlette

from rideout.auth.room_tokens import RoomKeyRing, RoomTokenIssuer
from rideout.store.acl import RedisRole, load_credentials
from rideout.store.client import state_client
from rideout.store.embedded import RedisSpec
from rideout.waitingroom.api import RoomAPI
from rideout.waitingroom.model import EventSettings
from rideout.waitingroom.store import RoomStore
from tests.conftest import ADMIN, FakeClock, free_port, locked_auth, running_redis, serving

ADMIN_TOKEN = secrets.token_urlsafe(32)
AUTH = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
ISSUER = "http://room.test/waitingroom"
ADDRESS = "127.0.0.1"

_events = itertools.count()


def fresh_event(prefix: str = "ev") -> str:
    """An event id no other test of the run uses."""
    return f"{prefix}-{next(_events)}"


@dataclass
class Redis:
    spec: RedisSpec
    app: aioredis.Redis  # the app user's client, as the zone servers make it
    admin: aioredis.Redis  # the tests' superuser

    def store(self, clock: FakeClock | None = None, **kw: object) -> RoomStore:
        return RoomStore(self.app, clock=clock or FakeClock(), region="test", **kw)  # type: ignore[arg-type]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def redis_server(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Redis]:
    directory = tmp_path_factory.mktemp("room-redis")
    address = "127.0.1.100"
    keys_dir = directory / "keys"
    spec = RedisSpec(
        "redis", address, free_port(address), directory, directory / "redis.log",
        auth=locked_auth(keys_dir),
    )  # fmt: skip
    async with running_redis(spec):
        app = state_client(
            address, spec.port, credentials=load_credentials(keys_dir, RedisRole.APP)
        )
        admin = aioredis.Redis(host=address, port=spec.port, decode_responses=True, **ADMIN)
        try:
            yield Redis(spec, app, admin)
        finally:
            await app.aclose()
            await admin.aclose()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(1_800_000_000.0)


async def new_event(store: RoomStore, **settings: object) -> EventSettings:
    """Create a fresh event with `settings` in `store`."""
    event = EventSettings(fresh_event(), **settings)  # type: ignore[arg-type]
    await store.create_event(event)
    return event


@dataclass
class ServedAPI:
    """The room's API with a signing ring, on a real uvicorn on loopback."""

    http: httpx.AsyncClient
    store: RoomStore
    clock: FakeClock
    ring: RoomKeyRing

    async def served_position(self, prefix: str, **settings: Any) -> tuple[str, str]:
        """A new event's first position, served: (event id, request id)."""
        event_id = fresh_event(prefix)
        await self.store.create_event(EventSettings(event_id, **settings))
        position = await self.store.assign(event_id)
        await self.store.increment_serving(event_id, 1)
        return event_id, position.request_id


@contextlib.asynccontextmanager
async def served_api(redis: Redis) -> AsyncIterator[ServedAPI]:
    """:class:`RoomAPI` (admin token :data:`ADMIN_TOKEN`, issuer :data:`ISSUER`) over
    `redis`, served on :data:`ADDRESS`, and an HTTP client of it."""
    clock = FakeClock(1_800_000_000.0)
    store = redis.store(clock)
    ring = RoomKeyRing.generate()
    api = RoomAPI(
        store, admin_token=ADMIN_TOKEN, issuer=ISSUER,
        signer=RoomTokenIssuer(ring, issuer=ISSUER, clock=clock), keys=ring, micro_cache_ttl=0,
    )  # fmt: skip
    port = free_port(ADDRESS)
    async with (
        serving(Starlette(routes=api.routes()), ADDRESS, port),
        httpx.AsyncClient(base_url=f"http://{ADDRESS}:{port}", trust_env=False) as http,
    ):
        yield ServedAPI(http, store, clock, ring)
