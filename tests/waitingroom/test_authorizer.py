"""The auction's authorizer for room tokens: real keys, the room's store on a real
redis-server, and (end to end) real app servers in both regions."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx
import jwt
import pytest
import pytest_asyncio
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from rideout import routes
from rideout.auth import AuthError, AuthUnavailable
from rideout.auth.admin import load_or_create_admin_token
from rideout.auth.revocation import revoke_subject
from rideout.auth.room_tokens import RoomKeyRing, RoomTokenIssuer, RoomTokenSet, RoomTokenVerifier
from rideout.auth.tokens import Claims
from rideout.config import Config
from rideout.store.acl import RedisRole
from rideout.store.client import state_client
from rideout.store.revocations import RevocationStore
from rideout.waitingroom.authorizer import RoomAuthorizer, SessionCache
from rideout.waitingroom.errors import RoomUnavailable
from rideout.waitingroom.extension import WaitingRoom
from rideout.waitingroom.store import RoomStore
from tests.conftest import FakeClock, credentials, until
from tests.realtime.conftest import Deployment, running_deployment
from tests.waitingroom.conftest import Redis, new_event

pytestmark = pytest.mark.asyncio(loop_scope="module")

ISSUER = "https://room.rideout.test"


class Counting:
    """The real store, counting the session reads that reach it."""

    def __init__(self, store: RoomStore) -> None:
        self.store = store
        self.reads = 0

    async def session_status(self, event_id: str, request_id: str) -> int | None:
        self.reads += 1
        return await self.store.session_status(event_id, request_id)


class Broken:
    """A store whose Redis does not answer (as RoomStore reports it)."""

    async def session_status(self, event_id: str, request_id: str) -> int | None:
        raise RoomUnavailable("redis at 127.0.1.100:1 does not answer")


async def served_session(store: RoomStore, event_id: str) -> tuple[str, Any]:
    """A request that reached the front of the queue and took its token."""
    position = await store.assign(event_id)
    await store.increment_serving(event_id, position.queue_number)
    grant = await store.claim_token(event_id, position.request_id)
    return position.request_id, grant


def token_set(ring: RoomKeyRing, grant: Any) -> RoomTokenSet:
    return RoomTokenIssuer(ring, issuer=ISSUER).issue(
        event_id=grant.event_id, request_id=grant.request_id,
        queue_position=grant.queue_position, issued_at=grant.issued_at,
        expires_at=grant.expires_at,
    )  # fmt: skip


@pytest.fixture(scope="module")
def ring() -> RoomKeyRing:
    return RoomKeyRing.generate()


@pytest_asyncio.fixture(loop_scope="module")
async def store(redis_server: Redis) -> RoomStore:
    return RoomStore(redis_server.app, region="test")  # the real clock: tokens verify now


def authorizer(
    ring: RoomKeyRing, sessions: Any, *, events: frozenset[str], cache: SessionCache | None = None
) -> RoomAuthorizer:
    verifier = RoomTokenVerifier(ring, issuer=ISSUER, audiences=events)
    return RoomAuthorizer(verifier, sessions, cache=cache)


async def refusal(check: RoomAuthorizer, token: str) -> tuple[int, str]:
    with pytest.raises(AuthError) as caught:
        await check.authorize(token)
    return caught.value.status, caught.value.reason


async def test_an_active_sessions_access_token_is_accepted(
    ring: RoomKeyRing, store: RoomStore
) -> None:
    event = await new_event(store)
    request_id, grant = await served_session(store, event.event_id)
    check = authorizer(ring, store, events=frozenset({event.event_id}))
    claims = await check.authorize(token_set(ring, grant).access_token)
    assert isinstance(claims, Claims)  # what the handshake takes: sub is the request id
    assert claims is not None
    assert (claims.sub, claims.event_id, claims.queue_position) == (
        request_id,
        event.event_id,
        grant.queue_position,
    )


async def test_each_ended_session_is_refused_unlike_awss_authorizer(
    ring: RoomKeyRing, store: RoomStore
) -> None:
    event = await new_event(store)
    check = authorizer(ring, store, events=frozenset({event.event_id}), cache=SessionCache(0))
    completed_id, completed = await served_session(store, event.event_id)
    abandoned_id, abandoned = await served_session(store, event.event_id)
    await store.update_session(event.event_id, completed_id, 1)
    await store.update_session(event.event_id, abandoned_id, -1)
    assert await refusal(check, token_set(ring, completed).access_token) == (
        403,
        "session_completed",
    )
    assert await refusal(check, token_set(ring, abandoned).access_token) == (
        403,
        "session_abandoned",
    )
    # Signed by the room, but the store has no such session (a reset, another deployment).
    ghost = dataclasses.replace(completed, request_id="00000000-0000-4000-8000-000000000000")
    assert await refusal(check, token_set(ring, ghost).access_token) == (403, "session_unknown")


async def test_only_access_tokens_for_a_guarded_event_pass(
    ring: RoomKeyRing, store: RoomStore
) -> None:
    event = await new_event(store)
    _, grant = await served_session(store, event.event_id)
    tokens = token_set(ring, grant)
    check = authorizer(ring, store, events=frozenset({event.event_id}))
    assert await refusal(check, tokens.refresh_token) == (403, "wrong_token_use")
    assert await refusal(check, tokens.id_token) == (403, "wrong_token_use")
    unguarded = authorizer(ring, store, events=frozenset({"another-event"}))
    assert await refusal(unguarded, tokens.access_token) == (403, "wrong_audience")


async def test_a_token_that_is_not_the_rooms_is_left_to_others(
    ring: RoomKeyRing, store: RoomStore
) -> None:
    check = authorizer(ring, store, events=frozenset({"auction"}))
    stranger = RoomKeyRing.generate()
    _, grant = await served_session(store, (await new_event(store)).event_id)
    assert await check.authorize(token_set(stranger, grant).access_token) is None
    assert await check.authorize("not a token") is None
    assert await check.authorize("") is None


async def test_statuses_are_cached_for_the_ttl_and_then_read_again(
    ring: RoomKeyRing, store: RoomStore
) -> None:
    event = await new_event(store)
    request_id, grant = await served_session(store, event.event_id)
    clock = FakeClock(0.0)
    counting = Counting(store)
    check = authorizer(
        ring, counting, events=frozenset({event.event_id}), cache=SessionCache(1.0, clock=clock)
    )
    token = token_set(ring, grant).access_token
    for _ in range(50):
        assert await check.authorize(token) is not None
    assert counting.reads == 1  # one Redis round trip for fifty handshakes
    await store.update_session(event.event_id, request_id, 1)
    clock.advance(0.9)
    assert await check.authorize(token) is not None  # stale, within the bound
    clock.advance(0.1)
    assert await refusal(check, token) == (403, "session_completed")
    assert counting.reads == 2


async def test_concurrent_misses_share_one_read(ring: RoomKeyRing, store: RoomStore) -> None:
    event = await new_event(store)
    _, grant = await served_session(store, event.event_id)
    counting = Counting(store)
    check = authorizer(ring, counting, events=frozenset({event.event_id}))
    token = token_set(ring, grant).access_token
    results = await asyncio.gather(*(check.authorize(token) for _ in range(20)))
    assert all(result is not None for result in results)
    assert counting.reads == 1


async def test_the_cache_is_bounded_and_drops_the_least_recently_used() -> None:
    clock = FakeClock(0.0)
    cache = SessionCache(10.0, size=3, clock=clock)
    for n in range(3):
        cache.put(("ev", f"r{n}"), 0)
    assert cache.get(("ev", "r0")) == (True, 0)  # r0 is now the most recent
    cache.put(("ev", "r3"), 1)
    assert len(cache) == 3
    assert cache.get(("ev", "r1")) == (False, None)
    assert cache.get(("ev", "r0")) == (True, 0)
    assert cache.get(("ev", "r3")) == (True, 1)
    clock.advance(10.0)
    assert cache.get(("ev", "r3")) == (False, None)
    assert len(cache) == 2
    off = SessionCache(0)
    off.put(("ev", "r"), 0)
    assert len(off) == 0


async def test_a_store_that_does_not_answer_refuses_for_now(ring: RoomKeyRing) -> None:
    check = authorizer(ring, Broken(), events=frozenset({"auction"}))
    tokens = RoomTokenIssuer(ring, issuer=ISSUER).issue(
        event_id="auction", request_id="00000000-0000-4000-8000-000000000001",
        queue_position=1, issued_at=time.time(), expires_at=time.time() + 600,
    )  # fmt: skip
    with pytest.raises(AuthUnavailable, match="does not answer"):
        await check.authorize(tokens.access_token)
    assert len(check.cache) == 0  # a failure is not cached


# --------------------------------------------------------------------------- end to end


async def handshake(url: str) -> tuple[int, str | None]:
    """101 for an accepted handshake, else the refusal's status and error."""
    try:
        async with connect(url, open_timeout=5):
            return 101, None
    except InvalidStatus as exc:
        body = json.loads(exc.response.body or b"{}")
        return exc.response.status_code, body.get("error")


@contextlib.asynccontextmanager
async def room_deployment(
    make_config: Callable[..., Config],
) -> AsyncIterator[tuple[Deployment, httpx.AsyncClient, dict[str, str]]]:
    """Four app servers in two regions, each with the room and the /ws authorizer (as
    `rideout serve` builds them), an HTTP client on us-east-1's first, the admin header."""
    # The room's own inlet stays out of the way: the tests admit by hand.
    config = make_config(auth={"room_session_ttl": 0.5}, waitingroom={"inlet": "none"})
    admin = {"Authorization": f"Bearer {load_or_create_admin_token(config.keys_dir)}"}

    def room_and_authorizer() -> dict[str, Any]:
        authorizer = RoomAuthorizer.from_config(config)  # one per server, as in `serve`
        return {"extensions": [WaitingRoom(config), authorizer], "authorities": [authorizer]}

    async with (
        running_deployment(config, room_and_authorizer) as deployment,
        httpx.AsyncClient(base_url=deployment.urls["a1"].replace("ws:", "http:")) as http,
    ):
        yield deployment, http, admin


async def visitor_token(http: httpx.AsyncClient, admin: dict[str, str]) -> tuple[str, str]:
    """A visitor's request id and access token, through the room's HTTP API, as a
    visitor and the inlet would take them."""
    assigned = await http.post(routes.ROOM_ASSIGN_QUEUE_NUM, json={"event_id": "auction"})
    assert assigned.status_code == 200, assigned.text
    request_id = assigned.json()["api_request_id"]
    bumped = await http.post(
        routes.ROOM_PRIVATE_INCREMENT,
        json={"event_id": "auction", "increment_by": 1},
        headers=admin,
    )
    assert bumped.status_code == 200, bumped.text
    taken = await http.post(
        routes.ROOM_GENERATE_TOKEN, json={"event_id": "auction", "request_id": request_id}
    )
    assert taken.status_code == 200, taken.text
    return request_id, taken.json()["access_token"]


async def test_a_room_token_connects_to_ws_in_both_regions_until_its_session_ends(
    make_config: Callable[..., Config],
) -> None:
    async with room_deployment(make_config) as (deployment, http, admin):
        request_id, token = await visitor_token(http, admin)
        urls = [f"{deployment.urls[name]}/ws?token={token}" for name in ("a1", "b1")]
        for url in urls:  # us-east-1, and us-west-2 (its Redis a replica, the keys shared)
            await until(lambda url=url: _is(handshake(url), 101), 15, message=f"{url} accepts")
        ended = await http.post(
            routes.ROOM_PRIVATE_UPDATE_SESSION,
            json={"event_id": "auction", "request_id": request_id, "status": 1},
            headers=admin,
        )
        assert ended.status_code == 200, ended.text
        at = time.monotonic()
        for url in urls:
            await until(
                lambda url=url: _is(handshake(url), 403, "session_completed"),
                15,
                message=f"{url} refuses the completed session",
            )
        # The cache's 0.5 s, plus replication to us-west-2, plus the handshakes.
        assert time.monotonic() - at < 5.0


async def test_a_rotation_reaches_running_servers_without_a_restart(
    make_config: Callable[..., Config],
) -> None:
    async with room_deployment(make_config) as (deployment, http, admin):
        _, before = await visitor_token(http, admin)
        old_kid = RoomKeyRing.load(deployment.config.keys_dir).current_kid
        rotated = RoomKeyRing.load(deployment.config.keys_dir).rotate()  # `room rotate-key`

        async def signs_with_the_new_key() -> bool:
            _, token = await visitor_token(http, admin)
            return bool(
                json.loads(jwt.utils.base64url_decode(token.split(".")[0]))["kid"]
                == rotated.current_kid
            )

        await until(signs_with_the_new_key, 10, message="the room signs with the new key")
        _, after = await visitor_token(http, admin)
        for name in ("a1", "b1"):
            for token in (before, after):  # the previous key still verifies
                url = f"{deployment.urls[name]}/ws?token={token}"
                await until(lambda url=url: _is(handshake(url), 101), 10, message=url)
        jwks = (await http.get(routes.ROOM_JWKS)).json()
        assert [key["kid"] for key in jwks["keys"]] == [rotated.current_kid, old_kid]
        RoomKeyRing.load(deployment.config.keys_dir).rotate()  # `before`'s key is dropped now
        url = f"{deployment.urls['b1']}/ws?token={before}"
        await until(lambda: _is(handshake(url), 401, "unknown_kid"), 10, message=url)


async def test_revoking_a_visitor_closes_and_refuses_its_room_token(
    make_config: Callable[..., Config],
) -> None:
    """`rideout token revoke --sub REQUEST_ID`, as the command writes it: the room token's
    open connections close with 1008 and its handshakes get 403, in both regions."""
    async with room_deployment(make_config) as (deployment, http, admin):
        request_id, token = await visitor_token(http, admin)
        config = deployment.config
        primary = config.primary.redis
        writer = state_client(
            primary.address, primary.port, credentials=credentials(config, RedisRole.CONTROLLER)
        )
        urls = [f"{deployment.urls[name]}/ws?token={token}" for name in ("a1", "b1")]
        async with (
            writer,
            connect(urls[0], open_timeout=10) as here,
            connect(urls[1], open_timeout=10) as there,
        ):
            entry = revoke_subject(request_id, now=time.time(), max_ttl=86400, leeway=0)
            times = entry.record()
            await RevocationStore(writer, config.primary.name).record(
                entry.field, until_ms=times["until"], expires_ms=times["expires"],
                at_ms=times["at"], now_ms=times["at"],
            )  # fmt: skip
            for ws in (here, there):
                with pytest.raises(ConnectionClosed) as closed:
                    async with asyncio.timeout(15):
                        await ws.recv()
                assert closed.value.rcvd is not None
                assert (closed.value.rcvd.code, closed.value.rcvd.reason) == (1008, "token revoked")
        for url in urls:
            await until(lambda url=url: _is(handshake(url), 403, "token_revoked"), 15, message=url)


async def _is(
    outcome: Awaitable[tuple[int, str | None]], status: int, error: str | None = None
) -> bool:
    return await outcome == (status, error)


async def test_a_renewed_sessions_access_token_is_accepted_past_the_first_exp(
    ring: RoomKeyRing, redis_server: Redis
) -> None:
    # The session cache holds statuses, not expiries: a renewal (same session, still
    # 0) is never seen as expired, and costs no session read while the entry is fresh.
    clock = FakeClock(time.time())
    store = redis_server.store(clock)
    event = await new_event(store, validity=60)
    _, grant = await served_session(store, event.event_id)
    counting = Counting(store)
    verifier = RoomTokenVerifier(
        ring, issuer=ISSUER, audiences=frozenset({event.event_id}), clock=clock
    )
    check = RoomAuthorizer(verifier, counting, cache=SessionCache(3600, clock=clock))
    first = token_set(ring, grant)
    assert await check.authorize(first.access_token) is not None
    clock.advance(30)
    renewal = await store.renew(
        event.event_id, grant.request_id, jti=None, issued_at=grant.issued_at,
        queue_position=grant.queue_position,
    )  # fmt: skip
    renewed = RoomTokenIssuer(ring, issuer=ISSUER, clock=clock).issue(
        event_id=event.event_id, request_id=grant.request_id,
        queue_position=renewal.queue_position, issued_at=renewal.issued_at,
        expires_at=renewal.expires_at, refresh_jti=renewal.refresh_jti,
    )  # fmt: skip
    clock.advance(60)  # the first access token's exp (and leeway) passed
    assert await refusal(check, first.access_token) == (401, "token_expired")
    claims = await check.authorize(renewed.access_token)
    assert claims is not None
    assert claims.exp == renewal.expires_at
    assert counting.reads == 1  # the first handshake's read only
    assert await refusal(check, renewed.refresh_token) == (403, "wrong_token_use")


async def test_a_refreshed_access_token_connects_and_the_refresh_token_never_does(
    make_config: Callable[..., Config],
) -> None:
    async with room_deployment(make_config) as (deployment, http, admin):
        request_id, _ = await visitor_token(http, admin)
        taken = await http.post(
            routes.ROOM_GENERATE_TOKEN, json={"event_id": "auction", "request_id": request_id}
        )
        refreshed = await http.post(
            routes.ROOM_REFRESH_TOKEN,
            json={"event_id": "auction", "refresh_token": taken.json()["refresh_token"]},
        )
        assert refreshed.status_code == 200, refreshed.text
        tokens = refreshed.json()
        # us-west-2's Redis is a replica: a renewal is a write, for the writer region
        async with httpx.AsyncClient(
            base_url=deployment.urls["b1"].replace("ws:", "http:")
        ) as west:
            r = await west.post(
                routes.ROOM_REFRESH_TOKEN,
                json={"event_id": "auction", "refresh_token": tokens["refresh_token"]},
            )
            assert (r.status_code, r.headers.get("retry-after")) == (503, "1"), r.text
        for name in ("a1", "b1"):
            base = f"{deployment.urls[name]}/ws?token="
            url = base + tokens["access_token"]
            await until(lambda url=url: _is(handshake(url), 101), 15, message=f"{url} accepts")
            assert await handshake(base + tokens["refresh_token"]) == (403, "wrong_token_use")
