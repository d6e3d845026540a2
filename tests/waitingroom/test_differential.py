"""The differential test: the room's Lua scripts on a real redis-server and the
reference room (:mod:`rideout.waitingroom.reference`, the specification) driven side by
side through random sequences of operations (Hypothesis stateful testing), on one
injected clock; after every step every answer, counter, position record, abandonment
clock and serving-counter move must agree.

The scripts take the time as an argument (the store's clock, in milliseconds), never
Redis's TIME, so one FakeClock drives both; the only real-time thing, a tick claim's
TTL, is set far beyond a run's length. The pre-queue's random draws come from the
test (the store's ``randbelow``)."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import pytest
import redis.asyncio as aioredis
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from rideout.store import keys
from rideout.store.acl import RedisRole, load_credentials
from rideout.store.client import state_client
from rideout.waitingroom.errors import RoomError
from rideout.waitingroom.model import LATE_DRAW, EventSettings, PositionState, Record, tick_of
from rideout.waitingroom.reference import ReferenceRoom
from rideout.waitingroom.store import OUTAGE_AFTER, RoomStore
from tests.conftest import ADMIN, FakeClock, examples
from tests.waitingroom.conftest import Redis, fresh_event

T = TypeVar("T")

START = 1_800_000_000.0
PERIOD = 1.0  # the inlets' period: a tick claim per task per second of the clock
CLAIM_TTL = 3600.0  # real seconds: no claim expires during a run
REGIONS = ("us-east-1", "us-west-2")

SETTINGS = settings(
    max_examples=examples(60),
    stateful_step_count=50,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)


class Sides:
    """A loop of its own (the test is synchronous, as Hypothesis's state machines are),
    the app user's client for the stores, and a superuser's for reading raw state."""

    def __init__(self, server: Redis) -> None:
        spec = server.spec
        self.loop = asyncio.new_event_loop()
        creds = load_credentials(spec.data_dir / "keys", RedisRole.APP)
        self.app = state_client(spec.address, spec.port, credentials=creds)
        self.admin = aioredis.Redis(
            host=spec.address, port=spec.port, decode_responses=True, **ADMIN
        )

    def run(self, call: Awaitable[T]) -> T:
        return self.loop.run_until_complete(call)  # type: ignore[arg-type]

    async def read(self, event_id: str) -> list[Any]:
        """An event's position records, abandonment clocks and serving-counter moves."""
        event_keys = keys.waitingroom_event_keys(event_id)
        async with self.admin.pipeline(transaction=False) as pipe:
            pipe.hgetall(event_keys["requests"])
            pipe.zrange(event_keys["seen"], 0, -1, withscores=True)
            pipe.zrange(event_keys["servable"], 0, -1)
            return await pipe.execute()  # type: ignore[no-any-return]

    def close(self) -> None:
        self.run(self.app.aclose())
        self.run(self.admin.aclose())
        self.loop.close()


@contextmanager
def sides(server: Redis) -> Iterator[Sides]:
    opened = Sides(server)
    try:
        yield opened
    finally:
        opened.close()


_rids = itertools.count(1)


def new_rid() -> str:
    n = next(_rids)
    return f"{n:08x}-0000-4000-8000-{n:012x}"


def render(rec: Record) -> str:
    """A reference record as the scripts write it."""
    opt = ["" if v is None else str(v) for v in (rec.iat, rec.exp, rec.status)]
    return ",".join([str(rec.q), str(rec.entry_ms), rec.state.value, *opt])


def outcome(call: Callable[[], T]) -> tuple[str, Any]:
    try:
        return "ok", call()
    except RoomError as exc:
        return type(exc).__name__, str(exc)


# Time without a sweep (an outage, when the next sweep comes more than OUTAGE_AFTER
# later): around the rules' edges (abandon_after 2 s + its 0.2 s slack, expiry 3 s,
# validity 3 s), and anything up to 20 s. The rules scale: short holds make a short
# sequence of steps reach them.
durations = st.one_of(
    st.sampled_from([1.0, 2.201, 3.001, 2.2, 3.0, 0.001, 5.001, 10.0]),
    st.integers(1, 20_000).map(lambda ms: ms / 1000),
)


picks = st.integers(0, 63)
changes = st.sampled_from(
    ["open=no", "open=yes", "abandon_after=0", "abandon_after=2", "expiry=3",
     "incr_on_expiry=yes", "reset"]
)  # fmt: skip
VALUES: dict[str, object] = {"no": False, "yes": True, "0": 0.0, "2": 2.0, "3": 3.0}


def machine(side: Sides) -> type[RuleBasedStateMachine]:
    class RoomMachine(RuleBasedStateMachine):
        """One event in Redis and in the reference, moved by the same operations."""

        def __init__(self) -> None:
            super().__init__()
            self.clock = FakeClock(START)
            self.draw = 0
            self.stores = {
                region: RoomStore(
                    side.app, clock=self.clock, region=region, randbelow=lambda _: self.draw
                )
                for region in REGIONS
            }
            self.store = self.stores[REGIONS[0]]
            self.event_id = fresh_event("diff")
            self.room: ReferenceRoom | None = None
            self.known: list[str] = []

        # ------------------------------------------------------------ helpers

        def both(
            self, store: Callable[[RoomStore], Awaitable[T]], ref: Callable[[], T]
        ) -> T | None:
            """Run one operation on both sides; their answers (or refusals) must agree."""
            try:
                got: tuple[str, Any] = ("ok", side.run(store(self.store)))
            except RoomError as exc:
                got = (type(exc).__name__, str(exc))
            want = outcome(ref)
            assert got == want, f"store answered {got}, the reference {want}"
            return got[1] if got[0] == "ok" else None

        @property
        def ref(self) -> ReferenceRoom:
            assert self.room is not None
            return self.room

        # -------------------------------------------------------------- event

        @initialize(
            expiry=st.sampled_from([3.0, 9.0, 0.0]),
            abandon_after=st.sampled_from([2.0, 4.5, 0.0]),
            incr_on_expiry=st.sampled_from([True, False]),
            threshold=st.sampled_from([0, 0, 1, 3]),
            prequeue_in=st.sampled_from([0.0, 0.0, 0.0, 1.5, 6.0]),
            validity=st.sampled_from([3.0, 12.5]),
        )
        def create(
            self,
            expiry: float,
            abandon_after: float,
            incr_on_expiry: bool,
            threshold: int,
            prequeue_in: float,
            validity: float,
        ) -> None:
            event = EventSettings(
                self.event_id, validity=validity, expiry=expiry, abandon_after=abandon_after,
                incr_on_expiry=incr_on_expiry, auto_open_threshold=threshold,
                prequeue_until=START + prequeue_in if prequeue_in else 0.0,
            )  # fmt: skip
            side.run(self.store.create_event(event))
            self.room = ReferenceRoom(event)

        def teardown(self) -> None:
            if self.room is not None:
                side.run(self.store.delete_event(self.event_id))

        def pick(self, i: int) -> str:
            return self.known[i % len(self.known)]

        @rule(change=changes)
        def update(self, change: str) -> None:
            if change == "reset":
                side.run(self.store.reset(self.event_id))
                self.ref.reset()
                self.known.clear()
                return
            name, value = change.split("=")
            updated = side.run(self.store.update_event(self.event_id, **{name: VALUES[value]}))
            self.ref.update(updated, self.clock.now)

        # ----------------------------------------------------------- positions

        @rule(draws=st.lists(st.integers(0, LATE_DRAW - 1), min_size=1, max_size=3))
        def arrive(self, draws: list[int]) -> None:
            for draw in draws:
                rid, self.draw = new_rid(), draw
                self.both(
                    lambda s: s.assign(self.event_id, rid),  # noqa: B023
                    lambda: self.ref.assign(rid, self.clock.now, draw),  # noqa: B023
                )
                if rid in self.ref.records:
                    self.known.append(rid)

        @precondition(lambda self: self.known)
        @rule(
            some=st.lists(picks, min_size=1, max_size=3),
            how=st.sampled_from(["poll", "poll", "again", "late", "expiry"]),
        )
        def poll(self, some: list[int], how: str) -> None:
            """Visitors polling (``queue_num`` through the store's poll, or a process's
            queued touches written late), asking ``queue_pos_expiry``, or retrying
            their arrival (the same position)."""
            now = self.clock.now
            for rid in map(self.pick, some):
                if how == "again":
                    self.both(
                        lambda s: s.assign(self.event_id, rid),  # noqa: B023
                        lambda: self.ref.assign(rid, now, 0),  # noqa: B023
                    )
                elif how == "expiry":
                    self.both(
                        lambda s: s.expiry(self.event_id, rid),  # noqa: B023
                        lambda: self.ref.expiry(rid, now),  # noqa: B023
                    )
                elif how == "late":
                    side.run(self.store.touch_many({self.event_id: {rid: now - 0.3}}))
                    self.ref.touch(rid, now - 0.3)
                else:
                    self.both(
                        lambda s: s.poll(self.event_id, rid),  # noqa: B023
                        lambda: self.ref.poll(rid, now),  # noqa: B023
                    )

        @rule(batch=st.integers(1, 3))
        def release_prequeue(self, batch: int) -> None:
            self.both(
                lambda s: s.release_prequeue(self.event_id, batch=batch),
                lambda: self.ref.release_prequeue(self.clock.now, batch),
            )

        # --------------------------------------------------------------- tokens

        @precondition(lambda self: self.known)
        @rule(
            some=st.lists(picks, min_size=1, max_size=3),
            validity=st.sampled_from([None, None, None, 1.5, 60.0]),
        )
        def claim_token(self, some: list[int], validity: float | None) -> None:
            for rid in map(self.pick, some):
                self.both(
                    lambda s: s.claim_token(self.event_id, rid, validity=validity),  # noqa: B023
                    lambda: self.ref.claim_token(rid, self.clock.now, validity),  # noqa: B023
                )

        @precondition(lambda self: self.known)
        @rule(i=picks, status=st.sampled_from([1, -1, 1, -1, 0]))
        def update_session(self, i: int, status: int) -> None:
            """The site ends a session: most often one that took its token."""
            served = [r for r in self.known if self.ref.records[r].state is PositionState.SERVED]
            rid = served[i % len(served)] if served and i % 4 else self.pick(i)
            self.both(
                lambda s: s.update_session(self.event_id, rid, status),
                lambda: self.ref.update_session(rid, status),
            )

        # ------------------------------------------------------ serving counter

        @rule(
            how=st.sampled_from(["by", "max_size", "periodic"]),
            n=st.sampled_from([5, 3, 2, 1, 0, -1, -3]),
        )
        def move_counter(self, how: str, n: int) -> None:
            """An operator's increment, or a MaxSize or periodic inlet's step (claimed
            per tick, as the scheduler's processes do)."""
            now = self.clock.now
            tick = tick_of(now, PERIOD)
            if how == "by":
                self.both(
                    lambda s: s.increment_serving(self.event_id, n),
                    lambda: self.ref.increment_serving(n, now),
                )
            elif how == "max_size":
                self.both(
                    lambda s: s.admit_up_to(self.event_id, abs(n), claim=(how, tick, CLAIM_TTL)),
                    lambda: self.ref.admit_up_to(abs(n), now, claim=(how, tick)),
                )
            else:
                self.both(
                    lambda s: s.admit(self.event_id, abs(n), claim=(how, tick, CLAIM_TTL)),
                    lambda: self.ref.admit(abs(n), now, claim=(how, tick)),
                )

        # ------------------------------------------------------- time and sweep

        @rule(seconds=durations)
        def advance(self, seconds: float) -> None:
            self.clock.advance(seconds)

        @rule(
            seconds=st.sampled_from([0.5, 2.1, 1.0, 3.0, 0.201, 2.201, 0.001, 5.001]),
            times=st.integers(1, 8),
            batch=st.integers(1, 4),
        )
        def tick(self, seconds: float, times: int, batch: int) -> None:
            """The scheduler's passes, `times` of them `seconds` apart: each sweeps (a
            pause longer than ``OUTAGE_AFTER`` since the last sweep is an outage)."""
            for _ in range(times):
                self.clock.advance(seconds)
                self.both(
                    lambda s: s.sweep(self.event_id, batch=batch, outage_after=OUTAGE_AFTER),
                    lambda: self.ref.sweep(
                        self.clock.now, batch=batch, outage_after=OUTAGE_AFTER,
                        region=self.store.region,
                    ),
                )  # fmt: skip

        @rule()
        def failover(self) -> None:
            """The other region's writer sweeps from now on."""
            self.store = self.stores[REGIONS[1] if self.store.region == REGIONS[0] else REGIONS[0]]

        # ------------------------------------------------------------ compared

        @invariant()
        @precondition(lambda self: self.room is not None)
        def agree(self) -> None:
            room, now = self.ref, self.clock.now
            counters, active, holding = side.run(self.store.status(self.event_id))
            assert counters == room.counters
            assert (active, holding) == (room.num_active_tokens(now), room.holding(now))
            assert counters.queue == (
                counters.tokens + counters.waiting + counters.expired + counters.abandoned
            )
            raw, seen, moves = side.run(side.read(self.event_id))
            assert raw == {rid: render(rec) for rid, rec in room.records.items()}
            assert {rid: int(ms) for rid, ms in seen} == room.seen
            assert moves == [f"{counter}:{ms}" for counter, ms in room.moves]

    return RoomMachine


def test_the_scripts_do_what_the_reference_room_says(redis_server: Redis) -> None:
    with sides(redis_server) as side:
        run_state_machine_as_test(machine(side), settings=SETTINGS)


@pytest.mark.asyncio(loop_scope="module")
async def test_regression_a_lowered_counter_keeps_when_positions_became_servable(
    redis_server: Redis,
) -> None:
    """Found by the differential test: lowering the serving counter dropped the move
    that had reached the positions still under it, so their expiry counted from their
    entry instead, and a counter lowered from 5 to 2 expired positions 1 and 2 at once
    (entered 100 s before, servable for 1 s, expiry 30 s)."""
    clock = FakeClock(START)
    store = redis_server.store(clock)
    event = EventSettings(fresh_event("lowered"), expiry=30)
    await store.create_event(event)
    room = ReferenceRoom(event)
    rids = [new_rid(), new_rid()]
    for rid in rids:
        await store.assign(event.event_id, rid)
        room.assign(rid, clock.now, 0)
    clock.advance(100)
    for by in (5, -3):
        assert await store.increment_serving(event.event_id, by) == room.increment_serving(
            by, clock.now
        )
    clock.advance(1)
    grant = await store.claim_token(event.event_id, rids[0])
    assert grant == room.claim_token(rids[0], clock.now)
    assert (await store.sweep(event.event_id)).expired == 0
    assert (await store.expiry(event.event_id, rids[1])).expires_in == 29
    assert await store.serving_history(event.event_id) == [(START + 100, 2)]
    await store.delete_event(event.event_id)
