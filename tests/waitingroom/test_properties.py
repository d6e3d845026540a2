"""Property tests (hypothesis) over a real redis-server: any request to any endpoint
gets a JSON answer below 500, a refused one counts nothing; and after any sequence of
operations the counters add up: ``queue = tokens + waiting + expired + abandoned``."""

from __future__ import annotations

import json
import secrets
from collections.abc import AsyncIterator
from urllib.parse import quote

import httpx
import pytest
import pytest_asyncio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.applications import Starlette

from rideout.auth.room_tokens import RoomKeyRing, RoomTokenIssuer
from rideout.waitingroom.api import RoomAPI
from rideout.waitingroom.errors import RoomError
from rideout.waitingroom.model import Counters, EventSettings
from rideout.waitingroom.store import RoomStore
from tests.conftest import FakeClock, examples
from tests.waitingroom.conftest import Redis, fresh_event

pytestmark = pytest.mark.asyncio(loop_scope="module")

ADMIN_TOKEN = secrets.token_urlsafe(32)
EVENT = fresh_event("prop")
KNOWN_RID: list[str] = []

PUBLIC = [
    ("POST", "/assign_queue_num"), ("GET", "/queue_num"), ("GET", "/serving_num"),
    ("GET", "/waiting_num"), ("GET", "/queue_pos_expiry"), ("POST", "/generate_token"),
    ("GET", "/public_key"), ("GET", "/estimated_wait"), ("POST", "/refresh_token"),
]  # fmt: skip
PRIVATE = [
    ("POST", "/private/increment_serving_counter"), ("POST", "/private/update_session"),
    ("GET", "/private/num_active_tokens"), ("GET", "/private/expired_tokens"),
    ("POST", "/private/reset_initial_state"), ("POST", "/private/generate_token"),
    ("GET", "/private/events"), ("POST", "/private/events"),
    ("GET", "/private/events/{e}"), ("PATCH", "/private/events/{e}"),
    ("DELETE", "/private/events/{e}"), ("POST", "/private/events/{e}/open"),
    ("POST", "/private/events/{e}/close"),
]  # fmt: skip

texts = st.one_of(
    st.sampled_from([EVENT, "nope", "", "a" * 100, "00000000-0000-0000-0000-000000000000"]),
    st.text(max_size=40),
)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.floats(allow_nan=False) | texts,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)
field_names = st.sampled_from(
    ["event_id", "request_id", "increment_by", "status", "issuer", "validity_period", "open",
     "validity", "expiry", "cursor", "limit", "inlet", "refresh_token", "max_session"]
)  # fmt: skip
bodies = st.one_of(
    st.dictionaries(field_names, json_values, max_size=5),
    json_values,
    st.binary(max_size=64),
)
params = st.dictionaries(field_names, texts, max_size=4)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def room(redis_server: Redis) -> AsyncIterator[tuple[httpx.AsyncClient, RoomStore]]:
    store = redis_server.store(FakeClock(1_800_000_000.0))
    await store.create_event(EventSettings(EVENT, expiry=60))
    for _ in range(3):
        KNOWN_RID.append((await store.assign(EVENT)).request_id)
    ring = RoomKeyRing.generate()  # signing configured, as every deployed zone has it
    api = RoomAPI(
        store,
        admin_token=ADMIN_TOKEN,
        issuer="http://room.test",
        signer=RoomTokenIssuer(ring, issuer="http://room.test"),
        keys=ring,
        micro_cache_ttl=0,
    )
    app = Starlette(routes=api.routes())
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app), base_url="http://room.test"
    ) as client:
        yield client, store


async def _counters(store: RoomStore) -> Counters | None:
    try:
        return await store.counters(EVENT)
    except RoomError:
        return None  # deleted by an example


def _check(c: Counters | None) -> None:
    if c is not None:
        assert c.queue == c.tokens + c.waiting + c.expired + c.abandoned
        assert min(c.serving, c.tokens, c.expired, c.abandoned, c.waiting) >= 0


@settings(max_examples=examples(150), deadline=None, suppress_health_check=list(HealthCheck))
@given(
    endpoint=st.sampled_from(PUBLIC + PRIVATE),
    query=params,
    body=bodies,
    authorized=st.booleans(),
    path_event=texts,
    rid=st.sampled_from([0, 1, 2, None]),
)
async def test_any_request_gets_json_below_500_and_a_refusal_counts_nothing(
    room: tuple[httpx.AsyncClient, RoomStore],
    endpoint: tuple[str, str],
    query: dict[str, str],
    body: object,
    authorized: bool,
    path_event: str,
    rid: int | None,
) -> None:
    client, store = room
    method, path = endpoint
    if "{e}" in path:
        # ("/" would name another path, which is not the room's to answer)
        path = path.replace("{e}", quote(path_event.replace("/", "x"), safe="") or "x")
    if rid is not None:
        query["request_id"] = KNOWN_RID[rid]
        if isinstance(body, dict):
            body["request_id"] = KNOWN_RID[rid]
    headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"} if authorized else {}
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    before = await _counters(store)
    r = await client.request(method, path, params=query, content=content, headers=headers)
    after = await _counters(store)
    assert r.status_code < 500, (method, path, query, body, r.text)
    if r.status_code != 204:
        answer = r.json()
        if r.status_code >= 400:
            assert isinstance(answer, dict), r.text
            assert isinstance(answer.get("error"), str), r.text
            if before is not None and after is not None:
                assert after == before, (method, path, query, body, r.text)
    _check(after)
    if after is None:  # an example deleted the event: put it back for the next
        await store.create_event(EventSettings(EVENT, expiry=60))
        KNOWN_RID[:] = [(await store.assign(EVENT)).request_id for _ in range(3)]


OPS = st.lists(
    st.tuples(
        st.sampled_from(
            [
                "assign",
                "assign_again",
                "increment",
                "claim",
                "complete",
                "abandon",
                "advance",
                "sweep",
            ]
        ),
        st.integers(-3, 5),
    ),
    max_size=40,
)


@settings(max_examples=examples(60), deadline=None, suppress_health_check=list(HealthCheck))
@given(ops=OPS, abandon=st.booleans(), recycle=st.booleans())
async def test_the_counters_add_up_after_any_sequence(
    redis_server: Redis, ops: list[tuple[str, int]], abandon: bool, recycle: bool
) -> None:
    clock = FakeClock(1_800_000_000.0)
    store = redis_server.store(clock)
    event = EventSettings(
        fresh_event("seq"), expiry=30, abandon_after=20 if abandon else 0, incr_on_expiry=recycle
    )
    await store.create_event(event)
    rids: list[str] = []
    for op, n in ops:
        pick = rids[n % len(rids)] if rids else None
        try:
            if op == "assign":
                rids.append((await store.assign(event.event_id)).request_id)
            elif op == "assign_again" and pick:
                await store.assign(event.event_id, pick)
            elif op == "increment":
                await store.increment_serving(event.event_id, n)
            elif op == "claim" and pick:
                await store.claim_token(event.event_id, pick)
            elif op in ("complete", "abandon") and pick:
                await store.update_session(event.event_id, pick, 1 if op == "complete" else -1)
            elif op == "advance":
                clock.advance(abs(n) * 7)
            elif op == "sweep":
                await store.sweep(event.event_id)
        except RoomError:
            pass
        c = await store.counters(event.event_id)
        _check(c)
        assert c.serving >= 0
    await store.delete_event(event.event_id)
