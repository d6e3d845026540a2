"""The room's store against a real redis-server, as the app user (one server per module)."""

from __future__ import annotations

import asyncio

import pytest

from rideout.store import keys
from rideout.waitingroom.errors import (
    EventExists,
    InvalidRequest,
    NotServedYet,
    PositionExpired,
    RoomClosed,
    SessionEnded,
    UnknownEvent,
    UnknownRequest,
)
from rideout.waitingroom.model import (
    Counters,
    EventSettings,
    ExpiryState,
    InletSettings,
    PositionState,
)
from rideout.waitingroom.store import RoomStore, new_request_id
from tests.conftest import FakeClock
from tests.waitingroom.conftest import Redis, fresh_event, new_event

pytestmark = pytest.mark.asyncio(loop_scope="module")


def invariant(c: Counters) -> None:
    assert c.queue == c.tokens + c.waiting + c.expired + c.abandoned
    assert min(c.queue, c.serving, c.tokens, c.expired, c.abandoned, c.waiting) >= 0


# ------------------------------------------------------------------------------ events


async def test_events_are_created_listed_changed_and_deleted(redis_server: Redis) -> None:
    store = redis_server.store()
    event = EventSettings(
        fresh_event(), validity=600, inlet=InletSettings("periodic", increment_by=5)
    )
    await store.create_event(event)
    assert await store.get_event(event.event_id) == event
    assert event in await store.list_events()
    with pytest.raises(EventExists):
        await store.create_event(event)
    changed = await store.update_event(event.event_id, open=False, inlet={"increment_by": 7})
    assert not changed.open
    assert changed.inlet.increment_by == 7
    assert changed.inlet.kind == "periodic"
    assert await store.get_event(event.event_id) == changed
    await store.assign(event.event_id) if changed.open else None
    await store.delete_event(event.event_id)
    with pytest.raises(UnknownEvent):
        await store.get_event(event.event_id)
    assert event.event_id not in {e.event_id for e in await store.list_events()}
    assert not await redis_server.admin.keys(f"rideout:wr:{{{event.event_id}}}:*")


async def test_the_index_of_events_is_kept_apart_from_each_events_keys(
    redis_server: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The index is a key of another cluster slot than an event's (docs/capacity.md), so
    it is written by plain commands around the event's script: an id left without its
    event (a create that failed after indexing it) is skipped; a create that fails after
    its event is made leaves the event indexed."""
    store = redis_server.store()
    await redis_server.admin.sadd(keys.WAITINGROOM_INDEX, "no-such-event")
    assert "no-such-event" not in {e.event_id for e in await store.list_events()}

    event = EventSettings(fresh_event(), validity=600)
    index = store._index
    calls: list[str] = []

    async def second_sadd_fails(command: str, event_id: str) -> None:
        calls.append(command)
        if len(calls) == 2:
            raise ConnectionError("the store went away after the event was made")
        await index(command, event_id)

    monkeypatch.setattr(store, "_index", second_sadd_fails)
    with pytest.raises(ConnectionError):
        await store.create_event(event)
    assert calls == ["SADD", "SADD"]
    assert event in await store.list_events()  # made, and indexed before it was made


async def test_a_create_and_a_delete_of_one_event_at_once_never_leave_it_unlisted(
    redis_server: Redis,
) -> None:
    """Two operators at once: a create and a delete of the same id, their index writes
    and scripts interleaved on one Redis. Whichever wins, an event that exists is
    listed (the inlets and sweeps go by the index)."""
    store = redis_server.store()
    for round_ in range(30):
        event = EventSettings(fresh_event(), validity=600)
        if round_ % 2:
            await store.create_event(event)  # half the rounds start with the event there
        await asyncio.gather(
            store.create_event(event), store.delete_event(event.event_id),
            return_exceptions=True,
        )  # fmt: skip
        exists = await redis_server.admin.exists(
            keys.waitingroom_event_keys(event.event_id)["event"]
        )
        listed = event.event_id in {e.event_id for e in await store.list_events()}
        assert listed == bool(exists), (round_, exists, listed)


async def test_a_bad_change_is_refused_and_changes_nothing(redis_server: Redis) -> None:
    store = redis_server.store()
    event = await new_event(store)
    for changes in ({"validity": -1}, {"open": "yes"}, {"nope": 1}, {"event_id": "other"}):
        with pytest.raises(ValueError, match=r"\w"):
            await store.update_event(event.event_id, **changes)
    assert await store.get_event(event.event_id) == event
    with pytest.raises(UnknownEvent):
        await store.update_event("missing-event", open=False)


# --------------------------------------------------------------------------- positions


async def test_positions_are_consecutive_and_one_per_request(
    redis_server: Redis, clock: FakeClock
) -> None:
    store = redis_server.store(clock)
    event = await new_event(store)
    first = await store.assign(event.event_id)
    second = await store.assign(event.event_id)
    assert (first.queue_number, second.queue_number) == (1, 2)
    assert first.entry_time == clock.now
    assert first.status is PositionState.WAITING
    again = await store.assign(event.event_id, first.request_id)
    assert again == first
    assert await store.position(event.event_id, second.request_id) == second
    assert (await store.counters(event.event_id)).queue == 2


async def test_concurrent_arrivals_get_distinct_positions(redis_server: Redis) -> None:
    store = redis_server.store()
    event = await new_event(store)
    positions = await asyncio.gather(*(store.assign(event.event_id) for _ in range(200)))
    assert sorted(p.queue_number for p in positions) == list(range(1, 201))
    rid = new_request_id()
    same = await asyncio.gather(*(store.assign(event.event_id, rid) for _ in range(50)))
    assert len({p.queue_number for p in same}) == 1
    assert (await store.counters(event.event_id)).queue == 201


async def test_refused_arrivals_count_nothing(redis_server: Redis) -> None:
    store = redis_server.store()
    event = await new_event(store, open=False)
    with pytest.raises(RoomClosed):
        await store.assign(event.event_id)
    with pytest.raises(UnknownEvent):
        await store.assign("no-such-event")
    with pytest.raises(UnknownEvent):
        await store.assign("bad id with spaces")
    for bad in ("x", new_request_id() + "trailing", "________-____-____-____-____________"):
        with pytest.raises(InvalidRequest):
            await store.assign(event.event_id, bad)
    assert (await store.counters(event.event_id)).queue == 0
    assert not await redis_server.admin.exists(
        *keys.waitingroom_event_keys("no-such-event").values()
    )
    with pytest.raises(UnknownRequest):
        await store.position(event.event_id, new_request_id())


# ------------------------------------------------------------------------------ tokens


async def test_a_token_waits_for_the_serving_counter(redis_server: Redis, clock: FakeClock) -> None:
    store = redis_server.store(clock)
    event = await new_event(store, validity=600)
    a, b = await store.assign(event.event_id), await store.assign(event.event_id)
    with pytest.raises(NotServedYet):
        await store.claim_token(event.event_id, a.request_id)
    assert await store.increment_serving(event.event_id, 1) == 1
    grant = await store.claim_token(event.event_id, a.request_id)
    assert grant.first
    assert (grant.queue_position, grant.issued_at, grant.expires_at) == (
        1,
        int(clock.now),
        int(clock.now) + 600,
    )
    with pytest.raises(NotServedYet):
        await store.claim_token(event.event_id, b.request_id)
    clock.advance(30)
    again = await store.claim_token(event.event_id, a.request_id, validity=5)
    assert not again.first
    assert (again.issued_at, again.expires_at) == (grant.issued_at, grant.expires_at)
    assert again.expires_in(clock.now) == 570
    c = await store.counters(event.event_id)
    assert (c.queue, c.serving, c.tokens, c.waiting) == (2, 1, 1, 1)
    invariant(c)
    assert (await store.position(event.event_id, a.request_id)).status is PositionState.SERVED


async def test_the_first_token_is_recorded_once_under_concurrency(redis_server: Redis) -> None:
    store = redis_server.store()
    event = await new_event(store)
    position = await store.assign(event.event_id)
    await store.increment_serving(event.event_id, 1)
    grants = await asyncio.gather(
        *(store.claim_token(event.event_id, position.request_id) for _ in range(100))
    )
    assert sum(g.first for g in grants) == 1
    assert len({(g.issued_at, g.expires_at, g.queue_position) for g in grants}) == 1
    c = await store.counters(event.event_id)
    assert c.tokens == 1
    invariant(c)


async def test_a_validity_override_applies_to_that_call_only(
    redis_server: Redis, clock: FakeClock
) -> None:
    store = redis_server.store(clock)
    event = await new_event(store, validity=600)
    a, b = await store.assign(event.event_id), await store.assign(event.event_id)
    await store.increment_serving(event.event_id, 2)
    first = await store.claim_token(event.event_id, a.request_id, validity=60)
    second = await store.claim_token(event.event_id, b.request_id)
    assert first.expires_at - first.issued_at == 60
    assert second.expires_at - second.issued_at == 600


async def test_sessions_end_once_and_then_refuse_tokens(
    redis_server: Redis, clock: FakeClock
) -> None:
    store = redis_server.store(clock)
    event = await new_event(store)
    a, b = await store.assign(event.event_id), await store.assign(event.event_id)
    await store.increment_serving(event.event_id, 2)
    with pytest.raises(UnknownRequest):
        await store.update_session(event.event_id, a.request_id, 1)  # no token yet
    assert await store.session_status(event.event_id, a.request_id) is None
    await store.claim_token(event.event_id, a.request_id)
    await store.claim_token(event.event_id, b.request_id)
    assert await store.session_status(event.event_id, a.request_id) == 0
    assert await store.num_active_tokens(event.event_id) == 2
    with pytest.raises(InvalidRequest):
        await store.update_session(event.event_id, a.request_id, 2)
    await store.update_session(event.event_id, a.request_id, 1)
    await store.update_session(event.event_id, b.request_id, -1)
    with pytest.raises(UnknownRequest):
        await store.update_session(event.event_id, a.request_id, -1)
    assert await store.session_status(event.event_id, a.request_id) == 1
    assert await store.session_status(event.event_id, b.request_id) == -1
    with pytest.raises(SessionEnded):
        await store.claim_token(event.event_id, a.request_id)
    c = await store.counters(event.event_id)
    assert (c.completed, c.sessions_abandoned, c.tokens) == (1, 1, 2)
    assert await store.num_active_tokens(event.event_id) == 0
    invariant(c)


async def test_expired_tokens_are_listed_in_pages(redis_server: Redis, clock: FakeClock) -> None:
    store = redis_server.store(clock)
    event = await new_event(store, validity=60)
    rids = []
    for _ in range(5):
        p = await store.assign(event.event_id)
        rids.append(p.request_id)
    await store.increment_serving(event.event_id, 5)
    for rid in rids:
        await store.claim_token(event.event_id, rid)
        clock.advance(1)
    assert (await store.expired_tokens(event.event_id)).request_ids == ()
    clock.advance(59)  # now: 64 s after the first token
    page = await store.expired_tokens(event.event_id, limit=2)
    assert page.request_ids == tuple(rids[:2])
    assert page.cursor is not None
    seen = list(page.request_ids)
    while page.cursor is not None:
        page = await store.expired_tokens(event.event_id, cursor=page.cursor, limit=2)
        seen.extend(page.request_ids)
    assert seen == rids[:4]  # the fifth expires at exactly now
    assert await store.num_active_tokens(event.event_id) == 1
    with pytest.raises(InvalidRequest):
        await store.expired_tokens(event.event_id, cursor="x")


# ------------------------------------------------------------------- serving counter


async def test_the_serving_counter_never_goes_below_its_floor(redis_server: Redis) -> None:
    store = redis_server.store()
    event = await new_event(store)
    positions = [await store.assign(event.event_id) for _ in range(3)]
    assert await store.increment_serving(event.event_id, -5) == 0
    assert await store.increment_serving(event.event_id, 3) == 3
    await store.claim_token(event.event_id, positions[1].request_id)
    assert await store.increment_serving(event.event_id, -3) == 2
    assert await store.increment_serving(event.event_id, 10) == 12


async def test_an_inlet_tick_moves_the_counter_once_across_processes(redis_server: Redis) -> None:
    stores = [redis_server.store() for _ in range(8)]
    event = await new_event(stores[0])
    results = await asyncio.gather(
        *(s.increment_serving(event.event_id, 10, claim=("periodic", 7, 60)) for s in stores)
    )
    assert sorted(results) == [-1] * 7 + [10]
    assert await stores[0].increment_serving(event.event_id, 10, claim=("periodic", 8, 60)) == 20


async def test_max_size_admits_up_to_the_capacity_never_negative(redis_server: Redis) -> None:
    store = redis_server.store()
    event = await new_event(store)
    positions = [await store.assign(event.event_id) for _ in range(10)]
    assert await store.admit_up_to(event.event_id, 4) == 4  # 4 admitted, none tokened
    assert await store.holding(event.event_id) == 4
    assert await store.admit_up_to(event.event_id, 4) == 4  # they still hold capacity
    for p in positions[:4]:
        await store.claim_token(event.event_id, p.request_id)
    await store.update_session(event.event_id, positions[0].request_id, 1)
    assert await store.holding(event.event_id) == 3
    assert await store.admit_up_to(event.event_id, 4) == 5
    assert await store.admit_up_to(event.event_id, 2) == 5  # over capacity: 0, not negative


async def test_max_size_admits_only_positions_that_exist(redis_server: Redis) -> None:
    """An idle room's counter does not run ahead of its queue (found by the surge drill:
    the counter stood at 380 when the burst came, and every arrival was admitted at
    once, over capacity)."""
    store = redis_server.store()
    event = await new_event(store)
    for _ in range(5):
        assert await store.admit_up_to(event.event_id, 4) == 0
    for _ in range(3):
        await store.assign(event.event_id)
    assert await store.admit_up_to(event.event_id, 4) == 3
    assert await store.admit_up_to(event.event_id, 4) == 3
    for _ in range(6):
        await store.assign(event.event_id)
    assert await store.admit_up_to(event.event_id, 4) == 4  # 3 still hold: 1 more
    assert await store.holding(event.event_id) == 4


async def test_auto_open_serves_at_once_below_the_threshold(redis_server: Redis) -> None:
    store = redis_server.store()
    event = await new_event(store, auto_open_threshold=2)
    a = await store.assign(event.event_id)
    b = await store.assign(event.event_id)
    c = await store.assign(event.event_id)
    assert await store.serving(event.event_id) == 2
    await store.claim_token(event.event_id, a.request_id)
    await store.claim_token(event.event_id, b.request_id)
    with pytest.raises(NotServedYet):
        await store.claim_token(event.event_id, c.request_id)
    await store.update_session(event.event_id, a.request_id, 1)
    d = await store.assign(event.event_id)
    assert await store.serving(event.event_id) == d.queue_number == 4


# ------------------------------------------------------------- expiry and abandonment


async def test_a_servable_position_expires_after_the_period(
    redis_server: Redis, clock: FakeClock
) -> None:
    store = redis_server.store(clock)
    event = await new_event(store, expiry=900)
    a, b = await store.assign(event.event_id), await store.assign(event.event_id)
    assert (await store.expiry(event.event_id, a.request_id)).state is ExpiryState.NOT_SERVED
    clock.advance(2000)  # waiting long before being servable does not expire a position
    await store.increment_serving(event.event_id, 2)
    left = await store.expiry(event.event_id, a.request_id)
    assert (left.state, left.expires_in) == (ExpiryState.ACTIVE, 900)
    await store.claim_token(event.event_id, b.request_id)
    clock.advance(901)
    assert (await store.expiry(event.event_id, a.request_id)).state is ExpiryState.EXPIRED
    served = await store.expiry(event.event_id, b.request_id)
    assert served.state is ExpiryState.SERVED  # a position that took its token does not expire
    with pytest.raises(PositionExpired):
        await store.claim_token(event.event_id, a.request_id)
    with pytest.raises(PositionExpired):
        await store.claim_token(event.event_id, a.request_id)
    again = await store.claim_token(event.event_id, b.request_id)
    assert not again.first
    c = await store.counters(event.event_id)
    assert (c.expired, c.tokens, c.waiting) == (1, 1, 0)
    invariant(c)


async def test_the_sweep_expires_and_recycles_capacity(
    redis_server: Redis, clock: FakeClock
) -> None:
    store = redis_server.store(clock)
    event = await new_event(store, expiry=60, incr_on_expiry=True)
    positions = [await store.assign(event.event_id) for _ in range(5)]
    await store.increment_serving(event.event_id, 2)
    await store.claim_token(event.event_id, positions[0].request_id)
    clock.advance(61)
    result = await store.sweep(event.event_id)
    assert (result.expired, result.incremented) == (1, 1)  # position 2 expired: 3 is servable
    c = await store.counters(event.event_id)
    assert (c.serving, c.expired, c.max_expired, c.waiting) == (3, 1, 2, 3)
    invariant(c)
    assert (await store.expiry(event.event_id, positions[2].request_id)).expires_in == 60
    assert await store.sweep(event.event_id) == (0, 0, 0)
    entries = await redis_server.admin.xrange(keys.waitingroom_event_keys(event.event_id)["events"])
    kinds = [fields["type"] for _, fields in entries]
    assert kinds == ["token_generated", "automatic_serving_counter_incr"]


async def test_a_silent_position_is_abandoned_after_the_hold(
    redis_server: Redis, clock: FakeClock
) -> None:
    store = redis_server.store(clock)
    event = await new_event(store, abandon_after=300, expiry=0)
    quiet, polling = await store.assign(event.event_id), await store.assign(event.event_id)
    for _ in range(4):
        clock.advance(100)
        await store.poll(event.event_id, polling.request_id)
    assert (await store.sweep(event.event_id)).abandoned == 1
    assert (
        await store.position(event.event_id, quiet.request_id)
    ).status is PositionState.ABANDONED
    assert (
        await store.position(event.event_id, polling.request_id)
    ).status is PositionState.WAITING
    await store.increment_serving(event.event_id, 2)
    with pytest.raises(PositionExpired):
        await store.claim_token(event.event_id, quiet.request_id)
    await store.claim_token(event.event_id, polling.request_id)
    c = await store.counters(event.event_id)
    assert (c.abandoned, c.tokens, c.waiting) == (1, 1, 0)
    invariant(c)


async def test_an_outage_restarts_the_abandonment_clock(
    redis_server: Redis, clock: FakeClock
) -> None:
    """Visitors who could not poll while no writer swept (a failover, a store outage)
    are not abandoned for it: the first sweep after the gap restarts every waiting
    position's clock, and only silence after that counts."""
    store = redis_server.store(clock)
    event = await new_event(store, abandon_after=10, expiry=0)
    back, gone = await store.assign(event.event_id), await store.assign(event.event_id)
    assert (await store.sweep(event.event_id, outage_after=5)).abandoned == 0
    clock.advance(4)
    assert (await store.sweep(event.event_id, outage_after=5)).abandoned == 0
    clock.advance(30)  # an outage: nobody swept, nobody could poll
    assert (await store.sweep(event.event_id, outage_after=5)).abandoned == 0
    for _ in range(2):  # sweeping as usual again; one visitor polls again, one never does
        clock.advance(4)
        await store.poll(event.event_id, back.request_id)
        assert (await store.sweep(event.event_id, outage_after=5)).abandoned == 0
    clock.advance(4)  # 12 s since the sweeps resumed: `gone` has been silent for the hold
    await store.poll(event.event_id, back.request_id)
    assert (await store.sweep(event.event_id, outage_after=5)).abandoned == 1
    states = [(await store.position(event.event_id, p.request_id)).status for p in (back, gone)]
    assert states == [PositionState.WAITING, PositionState.ABANDONED]
    invariant(await store.counters(event.event_id))


async def test_a_sweep_by_another_region_restarts_the_abandonment_clock(
    redis_server: Redis, clock: FakeClock
) -> None:
    """A failover: the new writer's region sweeps at once (no gap a sweep could see),
    but its visitors reach it only through DNS and their backoff. The first sweep by
    another region restarts every waiting position's clock, as an outage does."""
    east = RoomStore(redis_server.app, clock=clock, region="us-east-1")
    west = RoomStore(redis_server.app, clock=clock, region="us-west-2")
    event = await new_event(east, abandon_after=10, expiry=0)
    back, gone = await east.assign(event.event_id), await east.assign(event.event_id)
    for _ in range(2):
        clock.advance(4)
        assert (await east.sweep(event.event_id, outage_after=5)).abandoned == 0
    clock.advance(3)  # 11 s unseen, and 3 s since the last sweep: no outage by the gap
    assert (await west.sweep(event.event_id, outage_after=5)).abandoned == 0
    clock.advance(4)  # 15 s unseen, past the hold and its slack, but the clock restarted
    assert (await west.sweep(event.event_id, outage_after=5)).abandoned == 0
    await west.poll(event.event_id, back.request_id)  # the visitor found the new region
    clock.advance(4)
    assert (await west.sweep(event.event_id, outage_after=5)).abandoned == 0
    clock.advance(4)  # 12 s since west's first sweep: `gone` was silent for the hold
    assert (await west.sweep(event.event_id, outage_after=5)).abandoned == 1
    states = [(await west.position(event.event_id, p.request_id)).status for p in (back, gone)]
    assert states == [PositionState.WAITING, PositionState.ABANDONED]
    invariant(await west.counters(event.event_id))


async def test_regular_sweeps_abandon_on_time(redis_server: Redis, clock: FakeClock) -> None:
    store = redis_server.store(clock)
    event = await new_event(store, abandon_after=10, expiry=0)
    silent = await store.assign(event.event_id)
    abandoned = 0
    for _ in range(6):  # every 2 s: no gap is an outage
        clock.advance(2)
        abandoned += (await store.sweep(event.event_id, outage_after=5)).abandoned
    assert abandoned == 1
    assert (
        await store.position(event.event_id, silent.request_id)
    ).status is PositionState.ABANDONED


# ---------------------------------------------------------------- pre-queue and reset


async def test_the_prequeue_is_numbered_in_random_order_at_the_start(
    redis_server: Redis, clock: FakeClock
) -> None:
    store = redis_server.store(clock)
    event = await new_event(store, prequeue_until=clock.now + 60)
    early = [await store.assign(event.event_id) for _ in range(40)]
    assert {p.queue_number for p in early} == {0}
    assert {p.status for p in early} == {PositionState.PREQUEUED}
    assert await store.release_prequeue(event.event_id) == 40
    clock.advance(61)
    # an arrival after the start, before the release ran, goes behind the pre-queue
    behind = await store.assign(event.event_id)
    assert behind.status is PositionState.PREQUEUED
    assert await store.release_prequeue(event.event_id, batch=15) == 26
    assert await store.release_prequeue(event.event_id) == 0
    numbers = [(await store.position(event.event_id, p.request_id)).queue_number for p in early]
    assert sorted(numbers) == list(range(1, 41))
    assert numbers != sorted(numbers)  # 1 in 40! to fail by chance
    assert (await store.position(event.event_id, behind.request_id)).queue_number == 41
    late = await store.assign(event.event_id)
    assert late.queue_number == 42
    c = await store.counters(event.event_id)
    assert (c.queue, c.prequeued) == (42, 0)
    invariant(c)


async def test_reset_forgets_positions_and_counters(redis_server: Redis) -> None:
    store = redis_server.store()
    event = await new_event(store)
    p = await store.assign(event.event_id)
    await store.increment_serving(event.event_id, 1)
    await store.claim_token(event.event_id, p.request_id)
    await store.reset(event.event_id)
    assert await store.counters(event.event_id) == Counters()
    with pytest.raises(UnknownRequest):
        await store.position(event.event_id, p.request_id)
    assert (await store.assign(event.event_id)).queue_number == 1
    assert await store.get_event(event.event_id) == event


async def test_abandoned_positions_give_their_capacity_back(
    redis_server: Redis, clock: FakeClock
) -> None:
    store = redis_server.store(clock)
    event = await new_event(store, abandon_after=10, expiry=0, incr_on_expiry=True)
    silent = [await store.assign(event.event_id) for _ in range(2)]
    polling = await store.assign(event.event_id)
    await store.increment_serving(event.event_id, 1)
    clock.advance(12)  # past the hold and its touch slack (a tenth of it)
    await store.poll(event.event_id, polling.request_id)
    result = await store.sweep(event.event_id)
    assert (result.abandoned, result.incremented) == (2, 2)  # 1, then 2 once the counter reached it
    assert await store.serving(event.event_id) == 3
    assert (await store.claim_token(event.event_id, polling.request_id)).queue_position == 3
    assert [s.status for s in [await store.position(event.event_id, p.request_id) for p in silent]] == [
        PositionState.ABANDONED, PositionState.ABANDONED,
    ]  # fmt: skip
    invariant(await store.counters(event.event_id))
