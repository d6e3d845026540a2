"""A refresh token renews an active session: RoomStore.renew (the RENEW script) against a
real redis-server, as the app user, with an injected clock."""

from __future__ import annotations

import asyncio

import pytest

from rideout.store import keys
from rideout.waitingroom.errors import RefreshTokenReused, SessionEnded
from rideout.waitingroom.events import SESSION_RENEWED, read_events
from rideout.waitingroom.model import EventSettings, Renewal, TokenGrant
from rideout.waitingroom.store import RoomStore
from tests.conftest import FakeClock
from tests.waitingroom.conftest import Redis, new_event

pytestmark = pytest.mark.asyncio(loop_scope="module")


async def served(store: RoomStore, event: EventSettings) -> TokenGrant:
    """A new position of `event`, served, with its first token."""
    position = await store.assign(event.event_id)
    await store.increment_serving(event.event_id, 1)
    return await store.claim_token(event.event_id, position.request_id)


async def renew(store: RoomStore, grant: TokenGrant, jti: str | None = None) -> Renewal:
    """Renew with the refresh token of `grant` (the first set's when `jti` is None)."""
    return await store.renew(
        grant.event_id, grant.request_id, jti=jti, issued_at=grant.issued_at,
        queue_position=grant.queue_position,
    )  # fmt: skip


async def test_a_renewal_extends_the_session_and_its_active_count(
    redis_server: Redis, clock: FakeClock
) -> None:
    store = redis_server.store(clock)
    event = await new_event(store, validity=600)
    grant = await served(store, event)
    clock.advance(500)
    assert await store.num_active_tokens(event.event_id) == 1
    renewed = await renew(store, grant)
    assert (renewed.issued_at, renewed.expires_at) == (int(clock.now), int(clock.now) + 600)
    assert renewed.started_at == grant.issued_at
    assert renewed.queue_position == grant.queue_position
    assert renewed.refresh_jti
    clock.advance(200)  # past the first token's exp, within the renewed one's
    assert await store.num_active_tokens(event.event_id) == 1
    assert await store.holding(event.event_id) == 1  # what a MaxSize inlet subtracts
    assert await store.admit_up_to(event.event_id, 1) == 1  # no room made for anyone else
    assert not (await store.expired_tokens(event.event_id)).request_ids
    # generate_token's answer follows the session: the renewed claims
    again = await store.claim_token(event.event_id, grant.request_id)
    assert (again.issued_at, again.expires_at) == (renewed.issued_at, renewed.expires_at)
    assert (await store.counters(event.event_id)).tokens == 1  # still one session
    clock.advance(401)
    assert await store.num_active_tokens(event.event_id) == 0
    assert (await store.expired_tokens(event.event_id)).request_ids == (grant.request_id,)
    entries = [e for e in await read_events(redis_server.app, event.event_id)
               if e.type == SESSION_RENEWED]  # fmt: skip
    assert [e.detail for e in entries] == [
        {"event_id": event.event_id, "request_id": grant.request_id, "queue_position": 1,
         "expires_at": renewed.expires_at}
    ]  # fmt: skip


async def test_refresh_tokens_rotate_an_old_one_is_refused(
    redis_server: Redis, clock: FakeClock
) -> None:
    store = redis_server.store(clock)
    event = await new_event(store, validity=600)
    grant = await served(store, event)
    clock.advance(10)
    first = await renew(store, grant)
    with pytest.raises(RefreshTokenReused):
        await renew(store, grant)  # the first set's refresh token, used already
    clock.advance(10)
    second = await renew(store, first, first.refresh_jti)
    assert second.refresh_jti != first.refresh_jti
    assert second.started_at == grant.issued_at
    for stale in (first.refresh_jti, "forged-jti", None):
        with pytest.raises(RefreshTokenReused):
            await renew(store, second, stale)
    # generate_token's set after a renewal has the renewed claims but no jti: it
    # cannot renew (only the latest renewal's refresh token does)
    with pytest.raises(RefreshTokenReused):
        await renew(store, await store.claim_token(event.event_id, grant.request_id))
    third = await renew(store, second, second.refresh_jti)
    assert third.expires_at == int(clock.now) + 600
    # a refused renewal changed nothing
    assert (await store.claim_token(event.event_id, grant.request_id)).expires_at == (
        third.expires_at
    )


async def test_renewals_with_one_refresh_token_at_once_one_wins(
    redis_server: Redis, clock: FakeClock
) -> None:
    store = redis_server.store(clock)
    event = await new_event(store)
    grant = await served(store, event)
    results = await asyncio.gather(*(renew(store, grant) for _ in range(50)),
                                   return_exceptions=True)  # fmt: skip
    wins = [r for r in results if isinstance(r, Renewal)]
    assert len(wins) == 1
    assert all(isinstance(r, RefreshTokenReused) for r in results if r is not wins[0])
    follow = await asyncio.gather(
        *(renew(store, wins[0], wins[0].refresh_jti) for _ in range(50)), return_exceptions=True
    )
    assert sum(isinstance(r, Renewal) for r in follow) == 1


async def test_an_expired_or_ended_session_is_not_renewed(
    redis_server: Redis, clock: FakeClock
) -> None:
    store = redis_server.store(clock)
    event = await new_event(store, validity=60)
    expired, completed, abandoned = [await served(store, event) for _ in range(3)]
    await store.update_session(event.event_id, completed.request_id, 1)
    await store.update_session(event.event_id, abandoned.request_id, -1)
    for ended in (completed, abandoned):
        with pytest.raises(SessionEnded, match="completed or abandoned"):
            await renew(store, ended)
    clock.advance(60)  # exp reached
    with pytest.raises(SessionEnded, match="expired"):
        await renew(store, expired)
    clock.advance(1)
    assert await store.session_status(event.event_id, completed.request_id) == 1
    assert await store.num_active_tokens(event.event_id) == 0


async def test_a_reset_event_has_no_session_to_renew(redis_server: Redis, clock: FakeClock) -> None:
    store = redis_server.store(clock)
    event = await new_event(store)
    grant = await served(store, event)
    await store.reset(event.event_id)
    with pytest.raises(SessionEnded, match="reset"):
        await renew(store, grant)


async def test_max_session_caps_the_renewals(redis_server: Redis, clock: FakeClock) -> None:
    store = redis_server.store(clock)
    event = await new_event(store, validity=600, max_session=1000)
    grant = await served(store, event)
    clock.advance(300)
    first = await renew(store, grant)
    assert first.expires_at == grant.issued_at + 900
    clock.advance(300)
    second = await renew(store, first, first.refresh_jti)
    assert second.expires_at == grant.issued_at + 1000  # capped, not now + 600
    clock.advance(100)  # still active, but it runs to its cap already
    with pytest.raises(SessionEnded, match="max_session"):
        await renew(store, second, second.refresh_jti)
    assert await store.num_active_tokens(event.event_id) == 1


async def test_the_rotation_record_outlives_the_session_and_names_no_secret(
    redis_server: Redis, clock: FakeClock
) -> None:
    store = redis_server.store(clock)
    event = await new_event(store, validity=600)
    grant = await served(store, event)
    renewed = await renew(store, grant)
    key = keys.waitingroom_refresh(event.event_id, grant.request_id)
    assert await redis_server.admin.pttl(key) > 600_000  # an hour past the session's end
    assert renewed.refresh_jti in await redis_server.admin.get(key)
