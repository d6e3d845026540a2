"""The room's HTTP API over a real redis-server, through httpx's ASGI transport."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import pytest_asyncio
from starlette.applications import Starlette

from rideout.store import keys
from rideout.waitingroom.api import RoomAPI
from rideout.waitingroom.http import CACHE_COUNTERS, CACHE_PRIVATE
from rideout.waitingroom.model import EventSettings
from rideout.waitingroom.store import new_request_id
from tests.conftest import FakeClock
from tests.waitingroom.conftest import Redis, fresh_event

pytestmark = pytest.mark.asyncio(loop_scope="module")

ADMIN_TOKEN = secrets.token_urlsafe(32)
AUTH = {"Authorization": f"Bearer {ADMIN_TOKEN}"}


class Room:
    def __init__(self, api: RoomAPI, client: httpx.AsyncClient, clock: FakeClock) -> None:
        self.api, self.client, self.clock = api, client, clock

    async def event(self, **settings: Any) -> str:
        event_id = fresh_event("api")
        r = await self.client.post(
            "/private/events", json={"event_id": event_id, **settings}, headers=AUTH
        )
        assert r.status_code == 201, r.text
        return event_id

    async def assign(self, event_id: str, **headers: str) -> dict[str, Any]:
        r = await self.client.post(
            "/assign_queue_num", json={"event_id": event_id}, headers=headers
        )
        assert r.status_code == 200, r.text
        return r.json()  # type: ignore[no-any-return]

    async def increment(self, event_id: str, by: int) -> int:
        r = await self.client.post(
            "/private/increment_serving_counter",
            json={"event_id": event_id, "increment_by": by},
            headers=AUTH,
        )
        assert r.status_code == 200, r.text
        return r.json()["serving_num"]  # type: ignore[no-any-return]

    async def counters(self, event_id: str) -> dict[str, int]:
        r = await self.client.get(f"/private/events/{event_id}", headers=AUTH)
        assert r.status_code == 200, r.text
        return r.json()["counters"]  # type: ignore[no-any-return]


@pytest_asyncio.fixture(loop_scope="module")
async def room(redis_server: Redis) -> AsyncIterator[Room]:
    clock = FakeClock(1_800_000_000.0)
    api = RoomAPI(
        redis_server.store(clock),
        admin_token=ADMIN_TOKEN,
        issuer="http://room.test",
        micro_cache_ttl=0,
    )
    app = Starlette(routes=api.routes())
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app), base_url="http://room.test"
    ) as client:
        yield Room(api, client, clock)


# ----------------------------------------------------------------------------- public


async def test_the_public_flow_with_aws_field_names_and_types(room: Room) -> None:
    event_id = await room.event(validity=600)
    first = await room.assign(event_id)
    assert set(first) == {"api_request_id", "event_id", "queue_number", "entry_time"}
    rid = first["api_request_id"]
    r = await room.client.get("/queue_num", params={"event_id": event_id, "request_id": rid})
    assert r.status_code == 200
    assert r.json() == {
        "queue_number": 1,
        "entry_time": int(room.clock.now),
        "event_id": event_id,
        "status": 1,
    }
    assert r.headers["access-control-allow-origin"] == "*"
    assert r.headers["cache-control"] == CACHE_PRIVATE
    r = await room.client.get("/serving_num", params={"event_id": event_id})
    assert r.json() == {"serving_counter": "0"}  # a JSON string, as AWS's
    assert r.headers["cache-control"] == CACHE_COUNTERS
    r = await room.client.get("/waiting_num", params={"event_id": event_id})
    assert r.json() == {"waiting_num": 1}
    r = await room.client.get("/queue_pos_expiry", params={"event_id": event_id, "request_id": rid})
    assert (r.status_code, r.json()) == (202, {"error": "Request ID not being served yet"})
    r = await room.client.post("/generate_token", json={"event_id": event_id, "request_id": rid})
    assert r.status_code == 503  # no signer configured on this API
    await room.increment(event_id, 1)
    r = await room.client.get("/queue_pos_expiry", params={"event_id": event_id, "request_id": rid})
    assert (r.status_code, r.json()) == (200, {"expires_in": 900})
    r = await room.client.get("/estimated_wait", params={"event_id": event_id, "request_id": rid})
    assert r.json()["ahead"] == 0
    assert r.json()["estimated_wait"] == 0


async def test_preflight_allows_any_origin_on_the_public_api_only(room: Room) -> None:
    headers = {"Origin": "https://shop.example", "Access-Control-Request-Method": "POST"}
    r = await room.client.options("/assign_queue_num", headers=headers)
    assert r.status_code == 204
    assert r.headers["access-control-allow-origin"] == "*"
    assert "Idempotency-Key" in r.headers["access-control-allow-headers"]
    r = await room.client.options("/private/increment_serving_counter", headers=headers)
    assert r.status_code == 405
    assert "access-control-allow-origin" not in r.headers


async def test_unknown_events_and_bad_ids_get_json_errors_and_count_nothing(room: Room) -> None:
    event_id = await room.event()
    rid = (await room.assign(event_id))["api_request_id"]
    cases = [
        ("POST", "/assign_queue_num", {"json": {"event_id": "nope-nope"}}, 400),
        ("POST", "/assign_queue_num", {"json": {}}, 400),
        ("POST", "/assign_queue_num", {"json": {"event_id": 5}}, 400),
        ("POST", "/assign_queue_num", {"content": b"{not json"}, 400),
        ("POST", "/assign_queue_num", {"content": b"[]"}, 400),
        ("POST", "/assign_queue_num", {"content": b'{"event_id": "a", "event_id": "b"}'}, 400),
        ("POST", "/assign_queue_num", {"content": b" " * 5000}, 413),
        ("GET", "/queue_num", {"params": {"event_id": event_id}}, 400),
        (
            "GET",
            "/queue_num",
            {"params": {"event_id": event_id, "request_id": rid + "garbage"}},
            400,
        ),
        (
            "GET",
            "/queue_num",
            {"params": {"event_id": event_id, "request_id": new_request_id()}},
            404,
        ),
        (
            "GET",
            "/queue_num",
            {"params": [("event_id", event_id), ("event_id", event_id), ("request_id", rid)]},
            400,
        ),
        ("GET", "/serving_num", {"params": {"event_id": "nope-nope"}}, 400),
        ("GET", "/waiting_num", {}, 400),
        ("GET", "/public_key", {"params": {"event_id": "nope-nope"}}, 400),
        ("POST", "/generate_token", {"json": {"event_id": event_id}}, 400),
    ]
    for method, path, kw, status in cases:
        r = await room.client.request(method, path, **kw)
        assert r.status_code == status, (path, kw, r.text)
        assert isinstance(r.json()["error"], str), r.text
    c = await room.counters(event_id)
    assert (c["queue"], c["serving"], c["waiting"]) == (1, 0, 1)


async def test_a_closed_room_refuses_arrivals_and_reopens(room: Room) -> None:
    event_id = await room.event()
    r = await room.client.post(f"/private/events/{event_id}/close", headers=AUTH)
    assert r.json()["open"] is False
    r = await room.client.post("/assign_queue_num", json={"event_id": event_id})
    assert r.status_code == 403
    await room.client.post(f"/private/events/{event_id}/open", headers=AUTH)
    assert (await room.assign(event_id))["queue_number"] == 1


async def test_an_idempotency_key_keeps_one_position_across_retries(room: Room) -> None:
    event_id = await room.event()
    key = {"Idempotency-Key": secrets.token_hex(8)}
    answers = [await room.assign(event_id, **key) for _ in range(5)]
    assert len({a["api_request_id"] for a in answers}) == 1
    r = await room.client.post("/assign_queue_num", json={"event_id": event_id}, headers=key)
    assert r.headers["idempotent-replayed"] == "true"
    r = await room.client.post("/assign_queue_num", json={"event_id": "other-one"}, headers=key)
    assert r.status_code == 422  # the key reused for another request: refused, readable by a page
    assert r.headers["access-control-allow-origin"] == "*"
    assert (await room.counters(event_id))["queue"] == 1
    other = await room.assign(event_id)  # no key: a new arrival
    assert other["queue_number"] == 2


async def test_a_retry_whose_answer_was_lost_finds_the_first_position(room: Room) -> None:
    """Drawing the number and storing the answer are two writes: a region killed between
    them (the number replicated, the answer not) leaves the other region with the
    position and no record. The retry with the same key finds that position, not a
    second number: the request id comes from the key's record."""
    event_id = await room.event()
    key = secrets.token_hex(8)
    first = await room.assign(event_id, **{"Idempotency-Key": key})
    assert await room.api.store.redis.delete(keys.idempotency("waitingroom", key)) == 1
    r = await room.client.post(
        "/assign_queue_num", json={"event_id": event_id}, headers={"Idempotency-Key": key}
    )
    assert (r.status_code, r.json()) == (200, first)
    assert "idempotent-replayed" not in r.headers  # it ran again, and found the position
    assert (await room.counters(event_id))["queue"] == 1
    # Another key is another arrival.
    assert (await room.assign(event_id, **{"Idempotency-Key": key + "x"}))["queue_number"] == 2


async def test_queue_pos_expiry_follows_aws_statuses(room: Room) -> None:
    event_id = await room.event(expiry=60)
    off = await room.event(expiry=0)
    rid = (await room.assign(event_id))["api_request_id"]
    rid_off = (await room.assign(off))["api_request_id"]
    r = await room.client.get("/queue_pos_expiry", params={"event_id": off, "request_id": rid_off})
    assert (r.status_code, r.json()["error"]) == (202, "Queue position expiration not enabled")
    await room.increment(event_id, 1)
    room.clock.advance(61)
    r = await room.client.get("/queue_pos_expiry", params={"event_id": event_id, "request_id": rid})
    assert (r.status_code, r.json()["error"]) == (410, "Queue position has expired")


# ---------------------------------------------------------------------------- private


async def test_the_private_api_needs_the_admin_token(room: Room) -> None:
    event_id = await room.event()
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": ADMIN_TOKEN}):
        r = await room.client.post(
            "/private/increment_serving_counter",
            json={"event_id": event_id, "increment_by": 5},
            headers=headers,
        )
        assert r.status_code == 401
        assert "access-control-allow-origin" not in r.headers
        assert r.headers["www-authenticate"].startswith("Bearer")
    for path in (
        "/private/events",
        f"/private/events/{event_id}",
        f"/private/num_active_tokens?event_id={event_id}",
    ):
        assert (await room.client.get(path)).status_code == 401
    assert (await room.counters(event_id))["serving"] == 0


async def test_events_are_managed_at_runtime(room: Room) -> None:
    event_id = await room.event(validity=120)
    r = await room.client.post("/private/events", json={"event_id": event_id}, headers=AUTH)
    assert r.status_code == 409
    r = await room.client.post(
        "/private/events", json={"event_id": "x", "validity": -1}, headers=AUTH
    )
    assert r.status_code == 400
    assert "validity" in r.json()["error"]
    r = await room.client.patch(
        f"/private/events/{event_id}", json={"abandon_after": 300}, headers=AUTH
    )
    assert r.json()["abandon_after"] == 300
    r = await room.client.patch(
        f"/private/events/{event_id}", json={"abandon_after": "soon"}, headers=AUTH
    )
    assert r.status_code == 400
    r = await room.client.get("/private/events", headers=AUTH)
    assert event_id in {e["event_id"] for e in r.json()["events"]}
    assert (
        await room.client.delete(f"/private/events/{event_id}", headers=AUTH)
    ).status_code == 204
    assert (await room.client.get(f"/private/events/{event_id}", headers=AUTH)).status_code == 400
    assert (await room.client.get(f"/private/events/{'x' * 80}", headers=AUTH)).status_code == 400


async def test_sessions_and_token_counts_through_the_private_api(
    room: Room, redis_server: Redis
) -> None:
    event_id = await room.event(validity=60)
    rids = [(await room.assign(event_id))["api_request_id"] for _ in range(3)]
    await room.increment(event_id, 3)
    store = room.api.store
    for rid in rids:
        await store.claim_token(event_id, rid)
    r = await room.client.get(
        "/private/num_active_tokens", params={"event_id": event_id}, headers=AUTH
    )
    assert r.json() == {"active_tokens": 3}
    body = {"event_id": event_id, "request_id": rids[0], "status": 1}
    r = await room.client.post("/private/update_session", json=body, headers=AUTH)
    assert r.status_code == 200
    r = await room.client.post("/private/update_session", json=body, headers=AUTH)
    assert r.status_code == 404
    r = await room.client.post("/private/update_session", json={**body, "status": 2}, headers=AUTH)
    assert r.status_code == 400
    room.clock.advance(61)
    r = await room.client.get(
        "/private/expired_tokens", params={"event_id": event_id, "limit": 2}, headers=AUTH
    )
    first = r.json()
    assert len(first) == 2
    r = await room.client.get(
        "/private/expired_tokens",
        params={"event_id": event_id, "cursor": r.headers["next-cursor"]},
        headers=AUTH,
    )
    assert sorted(first + r.json()) == sorted(rids)  # one expiry second: by id within it
    assert "next-cursor" not in r.headers
    r = await room.client.post(
        "/private/reset_initial_state", json={"event_id": event_id}, headers=AUTH
    )
    assert r.status_code == 200
    assert (await room.counters(event_id))["queue"] == 0


async def test_the_micro_cache_takes_a_surge_of_polls_with_one_read(redis_server: Redis) -> None:
    api = RoomAPI(
        redis_server.store(), admin_token=ADMIN_TOKEN, issuer="http://room.test", micro_cache_ttl=30
    )
    event = EventSettings(fresh_event("cache"))
    await api.store.create_event(event)
    app = Starlette(routes=api.routes())
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app), base_url="http://room.test"
    ) as client:
        answers = await asyncio.gather(
            *(client.get("/serving_num", params={"event_id": event.event_id}) for _ in range(200))
        )
        unknown = await asyncio.gather(
            *(client.get("/serving_num", params={"event_id": "never-made"}) for _ in range(50))
        )
    assert {r.status_code for r in answers} == {200}
    assert {r.status_code for r in unknown} == {400}
    assert api.cache.loads == 2


async def test_proof_of_work_is_asked_for_checked_and_good_once(room: Room) -> None:
    from rideout.waitingroom.model import solve_pow

    event_id = await room.event(pow_bits=8)
    r = await room.client.post("/assign_queue_num", json={"event_id": event_id})
    assert r.status_code == 400
    assert (r.json()["pow_bits"], r.json()["server_time"]) == (8, int(room.clock.now))
    stale = solve_pow(event_id, 8, room.clock.now - 1000)
    r = await room.client.post("/assign_queue_num", json={"event_id": event_id, "pow": stale})
    assert r.status_code == 400
    stamp = solve_pow(event_id, 8, room.clock.now)
    r = await room.client.post("/assign_queue_num", json={"event_id": event_id, "pow": stamp})
    assert (r.status_code, r.json()["queue_number"]) == (200, 1)
    r = await room.client.post("/assign_queue_num", json={"event_id": event_id, "pow": stamp})
    assert (r.status_code, r.json()["error"]) == (
        400,
        "Proof of work already used: solve a new one",
    )
    assert (await room.counters(event_id))["queue"] == 1


async def test_concurrent_generate_token_calls_get_the_same_tokens(redis_server: Redis) -> None:
    from rideout.auth import JWKSet
    from rideout.auth.room_tokens import RoomKeyRing, RoomTokenIssuer, RoomTokenVerifier

    ring = RoomKeyRing.generate()
    clock = FakeClock(1_800_000_000.0)
    store = redis_server.store(clock)
    api = RoomAPI(
        store, admin_token=ADMIN_TOKEN, issuer="http://room.test", micro_cache_ttl=0,
        signer=RoomTokenIssuer(ring, issuer="http://room.test", clock=clock), keys=ring,
    )  # fmt: skip
    event = EventSettings(fresh_event("tok"), validity=600)
    await store.create_event(event)
    position = await store.assign(event.event_id)
    await store.increment_serving(event.event_id, 1)
    app = Starlette(routes=api.routes())
    body = {"event_id": event.event_id, "request_id": position.request_id}
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app), base_url="http://room.test"
    ) as client:
        answers = await asyncio.gather(
            *(client.post("/generate_token", json=body) for _ in range(50))
        )
        clock.advance(100)
        later = (await client.post("/generate_token", json=body)).json()
        key = (await client.get("/public_key", params={"event_id": event.event_id})).json()
    assert {r.status_code for r in answers} == {200}
    assert len({r.json()["access_token"] for r in answers}) == 1  # EdDSA: deterministic
    assert (await store.counters(event.event_id)).tokens == 1
    assert later["access_token"] == answers[0].json()["access_token"]
    assert later["expires_in"] == 500
    verifier = RoomTokenVerifier(JWKSet({"keys": [key]}), issuer="http://room.test", clock=clock)
    claims = verifier.verify(later["access_token"], audience=event.event_id)
    assert (claims.sub, claims.queue_position, claims.exp - claims.iat) == (
        position.request_id,
        1,
        600,
    )


async def test_the_estimated_wait_follows_the_admission_rate(room: Room) -> None:
    event_id = await room.event()
    rids = [(await room.assign(event_id))["api_request_id"] for _ in range(30)]
    for _ in range(4):  # 10 a minute
        room.clock.advance(30)
        await room.increment(event_id, 5)
    r = await room.client.get(
        "/estimated_wait", params={"event_id": event_id, "request_id": rids[29]}
    )
    body = r.json()
    assert (body["serving_counter"], body["ahead"]) == (20, 10)
    assert body["admitted_per_minute"] == pytest.approx(10, rel=0.2)
    assert body["estimated_wait"] == pytest.approx(60, rel=0.2)
    assert r.headers["cache-control"] == CACHE_PRIVATE
    r = await room.client.get("/estimated_wait", params={"event_id": event_id})
    assert (r.json()["ahead"], r.headers["cache-control"]) == (11, CACHE_COUNTERS)
    fresh = await room.event()
    r = await room.client.get("/estimated_wait", params={"event_id": fresh})
    assert r.json()["estimated_wait"] is None  # nothing admitted: unknown


async def test_the_private_overrides_apply_to_their_call_only(redis_server: Redis) -> None:
    from rideout.auth import JWKSet
    from rideout.auth.room_tokens import RoomKeyRing, RoomTokenIssuer, RoomTokenVerifier

    ring = RoomKeyRing.generate()
    store = redis_server.store(FakeClock(1_800_000_000.0))
    api = RoomAPI(
        store, admin_token=ADMIN_TOKEN, issuer="http://room.test", micro_cache_ttl=0,
        signer=RoomTokenIssuer(ring, issuer="http://room.test"), keys=ring,
    )  # fmt: skip
    event = EventSettings(fresh_event("ovr"), validity=600)
    await store.create_event(event)
    a, b = await store.assign(event.event_id), await store.assign(event.event_id)
    await store.increment_serving(event.event_id, 2)
    app = Starlette(routes=api.routes())
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app), base_url="http://room.test"
    ) as client:
        body = {"event_id": event.event_id, "request_id": a.request_id}
        r = await client.post("/private/generate_token", headers=AUTH,
                              json={**body, "issuer": "https://oidc.test", "validity_period": 60})  # fmt: skip
        assert r.status_code == 200, r.text
        first = r.json()
        r = await client.post(
            "/generate_token", json={"event_id": event.event_id, "request_id": b.request_id}
        )
        second = r.json()
        for bad in (
            {"issuer": ""},
            {"validity_period": 0},
            {"validity_period": "60"},
            {"issuer": 5},
        ):
            r = await client.post("/private/generate_token", headers=AUTH, json={**body, **bad})
            assert r.status_code == 400, bad
    keys = JWKSet(ring.jwks())
    at = FakeClock(1_800_000_000.0)
    overridden = RoomTokenVerifier(keys, issuer="https://oidc.test", clock=at).verify(
        first["access_token"]
    )
    assert overridden.exp - overridden.iat == 60
    default = RoomTokenVerifier(keys, issuer="http://room.test", clock=at).verify(
        second["access_token"]
    )
    assert default.exp - default.iat == 600  # neither override reached the next call
