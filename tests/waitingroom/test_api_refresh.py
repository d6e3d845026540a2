"""``POST /refresh_token`` over HTTP (a real uvicorn on loopback) over a real
redis-server: a refresh token renews an active session, once; every bad token is
refused (hypothesis: garbage, forged signatures, another event's, other token uses)
and changes nothing."""

from __future__ import annotations

import asyncio
import json
import secrets
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import pytest_asyncio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rideout.auth.room_tokens import RoomKeyRing, RoomTokenIssuer, RoomTokenVerifier
from rideout.waitingroom.http import CACHE_PRIVATE
from tests.conftest import examples, until
from tests.waitingroom.conftest import (
    AUTH,
    ISSUER,
    Redis,
    ServedAPI,
    served_api,
)

pytestmark = pytest.mark.asyncio(loop_scope="module")


class Room(ServedAPI):
    def verifier(self) -> RoomTokenVerifier:
        return RoomTokenVerifier(self.ring, issuer=ISSUER, clock=self.clock)

    async def served(self, **settings: Any) -> tuple[str, str, dict[str, Any]]:
        """A new event's first position, served: (event id, request id, its token set)."""
        event_id, request_id = await self.served_position("refresh", **settings)
        r = await self.http.post(
            "/generate_token", json={"event_id": event_id, "request_id": request_id}
        )
        assert r.status_code == 200, r.text
        return event_id, request_id, r.json()

    async def refresh(self, event_id: str, token: object, **headers: str) -> httpx.Response:
        return await self.http.post(
            "/refresh_token", json={"event_id": event_id, "refresh_token": token}, headers=headers
        )


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def room(redis_server: Redis) -> AsyncIterator[Room]:
    async with served_api(redis_server) as api:
        yield Room(api.http, api.store, api.clock, api.ring)


async def test_a_refresh_token_renews_the_session_and_rotates(room: Room) -> None:
    event_id, rid, first = await room.served(validity=600)
    room.clock.advance(300)
    r = await room.refresh(event_id, first["refresh_token"])
    assert r.status_code == 200, r.text
    assert r.headers["access-control-allow-origin"] == "*"
    assert r.headers["cache-control"] == CACHE_PRIVATE
    renewed = r.json()
    assert set(renewed) == set(first)
    assert (renewed["token_type"], renewed["expires_in"]) == ("Bearer", 600)
    access = room.verifier().verify(renewed["access_token"], audience=event_id)
    assert (access.sub, access.iat, access.exp) == (rid, room.clock.now, room.clock.now + 600)
    refresh = room.verifier().verify(renewed["refresh_token"], token_use="refresh")
    assert refresh.raw["jti"]  # the one the next renewal takes
    assert room.verifier().verify(renewed["id_token"], token_use="id").exp == access.exp
    # single use: the first refresh token is refused now; the new one renews once
    r = await room.refresh(event_id, first["refresh_token"])
    assert r.status_code == 401
    assert "already used" in r.json()["error"]
    room.clock.advance(400)  # past the first token's exp
    r = await room.refresh(event_id, renewed["refresh_token"])
    assert r.status_code == 200, r.text
    assert r.json()["expires_in"] == 600
    assert (await room.refresh(event_id, renewed["refresh_token"])).status_code == 401
    assert await room.store.num_active_tokens(event_id) == 1
    # generate_token answers the renewed claims (its refresh token does not renew)
    r = await room.http.post("/generate_token", json={"event_id": event_id, "request_id": rid})
    assert r.json()["expires_in"] == 600
    assert (await room.refresh(event_id, r.json()["refresh_token"])).status_code == 401


async def test_concurrent_refreshes_with_one_token_one_wins(room: Room) -> None:
    event_id, _, first = await room.served()
    answers = await asyncio.gather(
        *(room.refresh(event_id, first["refresh_token"]) for _ in range(20))
    )
    assert sorted(r.status_code for r in answers) == [200] + [401] * 19


async def test_a_retry_with_the_idempotency_key_gets_the_same_answer(room: Room) -> None:
    event_id, _, first = await room.served()
    key = {"Idempotency-Key": secrets.token_hex(8)}
    a = await room.refresh(event_id, first["refresh_token"], **key)
    assert a.status_code == 200, a.text
    retries: list[httpx.Response] = []

    async def replayed() -> bool:  # the answer was lost: the client retries
        r = await room.refresh(event_id, first["refresh_token"], **key)
        retries.append(r)
        # 409 Retry-After while the middleware still records the first answer (it
        # records it after sending it), then the replay
        assert r.status_code in (200, 409), r.text
        return r.status_code == 200

    await until(replayed, 10, message="the retry gets the recorded answer")
    assert retries[-1].json() == a.json()
    r = await room.http.options(
        "/refresh_token",
        headers={"Origin": "https://site.example", "Access-Control-Request-Method": "POST"},
    )
    assert r.status_code == 204
    assert r.headers["access-control-allow-origin"] == "*"


async def test_an_expired_or_ended_session_gets_410(room: Room) -> None:
    event_id, rid, tokens = await room.served(validity=60)
    room.clock.advance(61)
    r = await room.refresh(event_id, tokens["refresh_token"])
    assert r.status_code == 410, r.text  # within the verifier's leeway: the store says so
    room.clock.advance(60)
    r = await room.refresh(event_id, tokens["refresh_token"])
    assert (r.status_code, r.json()["error"]) == (
        410, "Refresh token has expired: the session has ended",
    )  # fmt: skip
    event_id, rid, tokens = await room.served()
    r = await room.http.post("/private/update_session", headers=AUTH,
                             json={"event_id": event_id, "request_id": rid, "status": 1})  # fmt: skip
    assert r.status_code == 200
    r = await room.refresh(event_id, tokens["refresh_token"])
    assert r.status_code == 410
    assert "completed or abandoned" in r.json()["error"]


async def test_malformed_requests_get_400(room: Room) -> None:
    event_id, _, tokens = await room.served()
    for body in ({"event_id": event_id}, {"refresh_token": tokens["refresh_token"]},
                 {"event_id": event_id, "refresh_token": 7},
                 {"event_id": event_id, "refresh_token": ""},
                 {"event_id": 3, "refresh_token": tokens["refresh_token"]}, [1]):  # fmt: skip
        r = await room.http.post("/refresh_token", json=body)
        assert r.status_code == 400, (body, r.text)
        assert isinstance(r.json()["error"], str)
    r = await room.http.post("/refresh_token", content=b"{not json")
    assert r.status_code == 400
    assert (await room.refresh(event_id, tokens["refresh_token"])).status_code == 200


_B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"


def _flip(token: str, at: int) -> str:
    """`token` with one character changed in its high bits (a change of the low bits of
    a segment's last character may change no decoded byte)."""
    i = at % len(token)
    replacement = "w" if _B64.find(token[i]) < 32 else "A"
    return token[:i] + replacement + token[i + 1 :]


@settings(max_examples=examples(60), deadline=None, suppress_health_check=list(HealthCheck))
@given(
    kind=st.sampled_from(
        ["garbage", "flipped", "forged", "other_event", "access", "id", "wrong_event_id"]
    ),
    text=st.text(max_size=300),
    at=st.integers(0, 10_000),
)
async def test_a_bad_refresh_token_is_refused_and_changes_nothing(
    room: Room, kind: str, text: str, at: int
) -> None:
    event_id, rid, tokens = await room.served()
    other_event, _, other = await room.served()
    claims = room.verifier().verify(tokens["refresh_token"], token_use="refresh")
    forged = RoomTokenIssuer(RoomKeyRing.generate(), issuer=ISSUER, clock=room.clock).issue(
        event_id=event_id, request_id=rid, queue_position=claims.queue_position,
        issued_at=claims.iat, expires_at=claims.exp,
    )  # fmt: skip
    token = {
        "garbage": text,
        "flipped": _flip(tokens["refresh_token"], at),
        "forged": forged.refresh_token,  # the same claims, another key
        "other_event": other["refresh_token"],  # a genuine token for another event
        "access": tokens["access_token"],
        "id": tokens["id_token"],
        "wrong_event_id": tokens["refresh_token"],
    }[kind]
    target = other_event if kind == "wrong_event_id" else event_id
    before = await room.store.claim_token(event_id, rid)
    counters = await room.store.counters(event_id)
    r = await room.refresh(target, token)
    assert r.status_code == (400 if token == "" else 401), (kind, token, r.text)
    assert isinstance(r.json()["error"], str)
    after = await room.store.claim_token(event_id, rid)
    assert (after.issued_at, after.expires_at) == (before.issued_at, before.expires_at)
    assert await room.store.counters(event_id) == counters
    # and the genuine token still renews: a refusal consumed nothing
    r = await room.refresh(event_id, tokens["refresh_token"])
    assert r.status_code == 200, r.text
    assert json.loads(r.text)["access_token"]
