"""``Idempotency-Key`` on the room's API (a real uvicorn on loopback, a real
redis-server): a stored answer belongs to the credential that made it, the admin
check runs before the record is looked at, and refusals are never stored. Every route
the middleware is mounted on (each POST and PATCH) is tried in both directions: the
operator's answer is not replayed to an anonymous caller, and an anonymous caller's
401 is not replayed to the operator."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
import pytest_asyncio

from rideout.idempotency import REPLAYED_HEADER, credential_principal
from rideout.store import keys
from tests.waitingroom.conftest import (
    ADMIN_TOKEN,
    AUTH,
    Redis,
    ServedAPI,
    fresh_event,
    served_api,
)

pytestmark = pytest.mark.asyncio(loop_scope="module")


class Room(ServedAPI):
    redis: Redis

    async def served(self) -> tuple[str, str]:
        return await self.served_position("idem", validity=600)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def room(redis_server: Redis) -> AsyncIterator[Room]:
    async with served_api(redis_server) as api:
        room = Room(api.http, api.store, api.clock, api.ring)
        room.redis = redis_server
        yield room


# Each private POST/PATCH route: (method, path, body), made for a fresh served event.
Case = Callable[[Room], Awaitable[tuple[str, str, dict[str, Any]]]]


async def _increment(room: Room) -> tuple[str, str, dict[str, Any]]:
    event_id, _ = await room.served()
    return "POST", "/private/increment_serving_counter", {"event_id": event_id, "increment_by": 1}


async def _update_session(room: Room) -> tuple[str, str, dict[str, Any]]:
    event_id, rid = await room.served()
    await room.store.claim_token(event_id, rid)
    return "POST", "/private/update_session", {"event_id": event_id, "request_id": rid, "status": 1}


async def _reset(room: Room) -> tuple[str, str, dict[str, Any]]:
    event_id, _ = await room.served()
    return "POST", "/private/reset_initial_state", {"event_id": event_id}


async def _generate_token(room: Room) -> tuple[str, str, dict[str, Any]]:
    event_id, rid = await room.served()
    return "POST", "/private/generate_token", {"event_id": event_id, "request_id": rid}


async def _create_event(room: Room) -> tuple[str, str, dict[str, Any]]:
    return "POST", "/private/events", {"event_id": fresh_event("idem-new")}


async def _change_event(room: Room) -> tuple[str, str, dict[str, Any]]:
    event_id, _ = await room.served()
    return "PATCH", f"/private/events/{event_id}", {"validity": 300}


async def _open_event(room: Room) -> tuple[str, str, dict[str, Any]]:
    event_id, _ = await room.served()
    return "POST", f"/private/events/{event_id}/open", {}


async def _close_event(room: Room) -> tuple[str, str, dict[str, Any]]:
    event_id, _ = await room.served()
    return "POST", f"/private/events/{event_id}/close", {}


PRIVATE: dict[str, Case] = {
    "increment_serving_counter": _increment,
    "update_session": _update_session,
    "reset_initial_state": _reset,
    "generate_token": _generate_token,
    "create_event": _create_event,
    "change_event": _change_event,
    "open_event": _open_event,
    "close_event": _close_event,
}

BAD_CREDENTIALS: list[dict[str, str]] = [
    {},  # anonymous
    {"Authorization": "Bearer " + secrets.token_urlsafe(32)},  # a wrong token
]


@pytest.mark.parametrize("route", list(PRIVATE))
async def test_the_operators_answer_is_not_replayed_to_anyone_else(room: Room, route: str) -> None:
    method, path, body = await PRIVATE[route](room)
    key = {"Idempotency-Key": "k1-" + secrets.token_hex(8)}
    first = await room.http.request(method, path, json=body, headers={**AUTH, **key})
    assert first.is_success, first.text
    for credentials in BAD_CREDENTIALS:
        other = await room.http.request(method, path, json=body, headers={**credentials, **key})
        assert other.status_code == 401, (route, other.status_code, other.text)
        assert REPLAYED_HEADER.lower() not in other.headers
        assert other.content != first.content
    again = await room.http.request(method, path, json=body, headers={**AUTH, **key})
    assert again.headers.get(REPLAYED_HEADER) == "true"  # the operator's own retry replays
    assert again.content == first.content


@pytest.mark.parametrize("route", list(PRIVATE))
async def test_an_anonymous_401_is_not_replayed_to_the_operator(room: Room, route: str) -> None:
    method, path, body = await PRIVATE[route](room)
    key = {"Idempotency-Key": "k2-" + secrets.token_hex(8)}
    for credentials in BAD_CREDENTIALS:
        refused = await room.http.request(method, path, json=body, headers={**credentials, **key})
        assert refused.status_code == 401
    operator = await room.http.request(method, path, json=body, headers={**AUTH, **key})
    assert operator.is_success, (route, operator.status_code, operator.text)
    assert REPLAYED_HEADER.lower() not in operator.headers


async def test_the_operators_record_is_kept_under_a_hash_of_its_credential(room: Room) -> None:
    method, path, body = await _increment(room)
    key = "k3-" + secrets.token_hex(8)
    r = await room.http.request(method, path, json=body, headers={**AUTH, "Idempotency-Key": key})
    assert r.status_code == 200
    admin = room.redis.admin
    principal = credential_principal(ADMIN_TOKEN)
    assert ADMIN_TOKEN not in principal
    assert await admin.exists(keys.idempotency("waitingroom", key, principal)) == 1
    assert await admin.exists(keys.idempotency("waitingroom", key)) == 0


async def test_public_refusals_are_not_stored(room: Room) -> None:
    # 403: a closed event refuses arrivals; once opened, the same keyed request runs
    event_id, _ = await room.served()
    await room.store.update_event(event_id, open=False)
    key = {"Idempotency-Key": "k4-" + secrets.token_hex(8)}
    body = {"event_id": event_id}
    refused = await room.http.post("/assign_queue_num", json=body, headers=key)
    assert refused.status_code == 403, refused.text
    await room.store.update_event(event_id, open=True)
    admitted = await room.http.post("/assign_queue_num", json=body, headers=key)
    assert admitted.status_code == 200, admitted.text
    assert REPLAYED_HEADER.lower() not in admitted.headers
    # 401: a refresh token that does not verify is refused anew each time, never replayed
    key = {"Idempotency-Key": "k5-" + secrets.token_hex(8)}
    body = {"event_id": event_id, "refresh_token": "not-a-token"}
    for _ in range(2):
        r = await room.http.post("/refresh_token", json=body, headers=key)
        assert r.status_code == 401
        assert REPLAYED_HEADER.lower() not in r.headers
