"""``GET /queue_num`` through the per-process position cache, over a real redis-server:
most polls need no Redis, a polling visitor is never abandoned for the coarser touch, a
reset or delete made through another process is seen within ``micro_cache_ttl``, and
the answers are those of the uncached path after any sequence of operations."""

from __future__ import annotations

import asyncio
import math
import random
import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import pytest_asyncio
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry
from starlette.applications import Starlette

from rideout.store import keys
from rideout.waitingroom import touches as touches_module
from rideout.waitingroom.api import RoomAPI
from rideout.waitingroom.errors import RoomError, UnknownEvent, UnknownRequest
from rideout.waitingroom.metrics import RoomMetrics
from rideout.waitingroom.model import EventSettings, PositionState
from rideout.waitingroom.poll_cache import TOUCH_DELAY
from rideout.waitingroom.store import RoomStore
from tests.conftest import FakeClock, examples, until
from tests.waitingroom.conftest import Redis, fresh_event

pytestmark = pytest.mark.asyncio(loop_scope="module")

ADMIN_TOKEN = secrets.token_urlsafe(32)
AUTH = {"Authorization": f"Bearer {ADMIN_TOKEN}"}


@dataclass
class Process:
    """One app server's room: its API (and caches) over the shared Redis."""

    api: RoomAPI
    client: httpx.AsyncClient
    metrics: RoomMetrics

    async def poll(self, event_id: str, request_id: str) -> tuple[int, Any]:
        r = await self.client.get(
            "/queue_num", params={"event_id": event_id, "request_id": request_id}
        )
        return r.status_code, r.json()

    async def post(self, path: str, body: dict[str, Any], **headers: str) -> Any:
        r = await self.client.post(path, json=body, headers=headers)
        assert r.status_code < 300, r.text
        return r.json() if r.content else None

    def count(self, name: str) -> float:
        return float(getattr(self.metrics, name)._value.get())


@pytest_asyncio.fixture(loop_scope="module")
async def processes(redis_server: Redis, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Any]:
    """Makes processes; their touches are written only when a test says (``flush``):
    the worst case of the batching, which may take up to TOUCH_DELAY."""
    monkeypatch.setattr(touches_module, "_TOUCH_BATCH", 3600.0)
    opened: list[Process] = []

    async def make(clock: FakeClock, *, ttl: float = 0.0, size: int = 100_000) -> Process:
        metrics = RoomMetrics(CollectorRegistry())
        api = RoomAPI(
            redis_server.store(clock), admin_token=ADMIN_TOKEN, issuer="http://room.test",
            micro_cache_ttl=ttl, position_cache_size=size, metrics=metrics,
        )  # fmt: skip
        client = httpx.AsyncClient(
            transport=httpx.ASGITransport(Starlette(routes=api.routes())),
            base_url="http://room.test",
        )
        opened.append(Process(api, client, metrics))
        return opened[-1]

    try:
        yield make
    finally:
        for process in opened:
            await process.api.aclose()
            await process.client.aclose()


async def event(store: RoomStore, **settings: Any) -> str:
    event_id = fresh_event("qn")
    await store.create_event(EventSettings(event_id, **settings))
    return event_id


async def test_polls_of_a_numbered_position_need_no_redis(
    processes: Any, redis_server: Redis
) -> None:
    clock = FakeClock(1_800_000_000.0)
    a = await processes(clock, ttl=60)
    event_id = await event(a.api.store)  # abandonment off: no touches at all
    rid = (await a.post("/assign_queue_num", {"event_id": event_id}))["api_request_id"]
    seen_key = keys.waitingroom_event_keys(event_id)["seen"]
    seen = await redis_server.admin.zscore(seen_key, rid)
    answers = []
    for _ in range(50):
        clock.advance(3)
        answers.append(await a.poll(event_id, rid))
    assert answers == [(200, answers[0][1])] * 50
    assert answers[0][1]["queue_number"] == 1
    assert answers[0][1]["status"] == 1
    assert (a.count("position_polls"), a.count("position_loads")) == (50, 1)
    assert a.count("position_touches") == 0
    assert await redis_server.admin.zscore(seen_key, rid) == seen  # never written


async def test_the_abandonment_clock_is_touched_once_per_interval(
    processes: Any, redis_server: Redis
) -> None:
    clock = FakeClock(1_800_000_000.0)
    a = await processes(clock, ttl=60)
    event_id = await event(a.api.store, abandon_after=100, expiry=0)  # interval 10 s
    rid = (await a.post("/assign_queue_num", {"event_id": event_id}))["api_request_id"]
    seen_key = keys.waitingroom_event_keys(event_id)["seen"]
    for _ in range(60):  # 60 polls, 2 s apart: 120 s
        clock.advance(2)
        assert (await a.poll(event_id, rid))[0] == 200
    # the first poll's touch rode with its read; then one every 9.5 s (as polled: 10)
    assert a.count("position_loads") == 1
    assert a.count("position_touches") == 11
    await a.api.flush_touches()
    assert await redis_server.admin.zscore(seen_key, rid) == 1_800_000_112_000  # the last touch
    # once served, no more touches
    await a.api.store.increment_serving(event_id, 1)
    await a.api.store.claim_token(event_id, rid)
    a.api.positions.forget(event_id)  # as if this process read it again after
    for _ in range(20):
        clock.advance(2)
        assert (await a.poll(event_id, rid))[1]["queue_number"] == 1
    assert a.count("position_touches") == 11


async def _visit(
    procs: list[Process], store: RoomStore, clock: FakeClock, gaps: list[float]
) -> tuple[str, str, str]:
    """A polling visitor (its polls `gaps` seconds apart, each to the next process), a
    silent one, and the scheduler sweeping every half second; the event's id and theirs.
    Queued touches are written as late as they may be: TOUCH_DELAY after the poll."""
    event_id = await event(store, abandon_after=10, expiry=0)  # slack 1 s, interval 0.5 s
    polling = (await procs[0].post("/assign_queue_num", {"event_id": event_id}))["api_request_id"]
    silent = (await procs[0].post("/assign_queue_num", {"event_id": event_id}))["api_request_id"]
    last_poll = clock.now

    async def sweep() -> None:
        if clock.now - last_poll >= TOUCH_DELAY:
            for p in procs:
                await p.api.flush_touches()
        await store.sweep(event_id)

    await sweep()
    step = 0.25
    for i, gap in enumerate(gaps):
        left = gap
        while left > step:
            clock.advance(step)
            left -= step
            await sweep()
        clock.advance(left)
        status, answer = await procs[i % len(procs)].poll(event_id, polling)
        assert (status, answer["queue_number"]) == (200, 1)
        last_poll = clock.now
        await sweep()
    return event_id, polling, silent


async def test_a_visitor_who_keeps_polling_is_never_abandoned(
    processes: Any, redis_server: Redis
) -> None:
    clock = FakeClock(1_800_000_000.0)
    procs = [await processes(clock, ttl=0), await processes(clock, ttl=0)]
    store = redis_server.store(clock)
    draw = random.Random(13)
    # gaps up to just under the hold, many of them within a touch interval
    gaps = [draw.choice([0.3, 0.9, 1.1, 4.0, 9.0, 9.9]) for _ in range(120)]
    event_id, polling, silent = await _visit(procs, store, clock, gaps)
    states = [(await store.position(event_id, r)).status for r in (polling, silent)]
    assert states == [PositionState.WAITING, PositionState.ABANDONED]
    # each process read the position once; gaps mostly past the 1 s interval: touched
    assert [(p.count("position_polls"), p.count("position_loads")) for p in procs] == [
        (60, 1), (60, 1),
    ]  # fmt: skip


@settings(max_examples=examples(15), deadline=None, suppress_health_check=list(HealthCheck))
@given(gaps=st.lists(st.floats(min_value=0.001, max_value=9.99), min_size=1, max_size=25))
@example(gaps=[0.9, 9.9, 0.5, 9.99])  # a skipped touch, then nearly the hold of silence
@example(gaps=[0.5, 0.9, 9.99, 0.3])  # the same, and the next touch is written late
async def test_any_polling_rhythm_under_the_hold_keeps_the_place(
    processes: Any, redis_server: Redis, gaps: list[float]
) -> None:
    clock = FakeClock(1_800_000_000.0)
    procs = [await processes(clock, ttl=0)]
    store = redis_server.store(clock)
    event_id, polling, _ = await _visit(procs, store, clock, gaps)
    assert (await store.position(event_id, polling)).status is PositionState.WAITING
    await store.delete_event(event_id)


async def test_a_silent_visitor_is_abandoned_within_the_hold_and_its_slack(
    processes: Any, redis_server: Redis
) -> None:
    clock = FakeClock(1_800_000_000.0)
    a = await processes(clock, ttl=0)
    store = redis_server.store(clock)
    event_id = await event(store, abandon_after=10, expiry=0)
    rid = (await a.post("/assign_queue_num", {"event_id": event_id}))["api_request_id"]
    await a.poll(event_id, rid)  # its last poll, at 0
    abandoned_at = None
    for tick in range(1, 40):
        clock.advance(0.5)
        if (await store.sweep(event_id)).abandoned:
            abandoned_at = tick * 0.5
            break
    assert abandoned_at is not None
    assert 10 < abandoned_at <= 11.5
    # still answered: AWS's queue_num keeps a position's number whatever became of it
    assert (await a.poll(event_id, rid))[0] == 200


async def test_turning_abandonment_on_does_not_abandon_those_who_poll(
    processes: Any, redis_server: Redis
) -> None:
    """Polls do not touch the clock while abandonment is off; turning it on restarts
    every waiting position's clock, so a visitor polling since is not abandoned."""
    clock = FakeClock(1_800_000_000.0)
    a = await processes(clock, ttl=0)
    store = redis_server.store(clock)
    event_id = await event(store, expiry=0)
    rid = (await a.post("/assign_queue_num", {"event_id": event_id}))["api_request_id"]
    for _ in range(10):
        clock.advance(30)
        await a.poll(event_id, rid)
    await store.update_event(event_id, abandon_after=10)
    for _ in range(60):
        clock.advance(0.5)
        if _ % 8 == 0:
            await a.poll(event_id, rid)
        await a.api.flush_touches()
        assert (await store.sweep(event_id)).abandoned == 0
    assert (await store.position(event_id, rid)).status is PositionState.WAITING


async def test_a_reset_or_delete_through_another_process_is_seen_within_the_ttl(
    processes: Any,
) -> None:
    ttl = 0.3
    clock = FakeClock(1_800_000_000.0)
    a, b = await processes(clock, ttl=ttl), await processes(clock, ttl=ttl)
    event_id = await event(a.api.store)
    rids = [
        (await a.post("/assign_queue_num", {"event_id": event_id}))["api_request_id"]
        for _ in range(3)
    ]
    assert [(await b.poll(event_id, r))[1]["queue_number"] for r in rids] == [1, 2, 3]
    await a.post("/private/reset_initial_state", {"event_id": event_id}, **AUTH)
    assert (await a.poll(event_id, rids[0]))[0] == 404  # the process that reset: at once
    await asyncio.sleep(ttl + 0.05)  # b's view of the event is at most `ttl` old
    assert [(await b.poll(event_id, r))[0] for r in rids] == [404, 404, 404]
    # delete, and create again under the same id: b never answers the old numbers
    again = (await a.post("/assign_queue_num", {"event_id": event_id}))["api_request_id"]
    assert (await b.poll(event_id, again))[1]["queue_number"] == 1
    r = await a.client.delete(f"/private/events/{event_id}", headers=AUTH)
    assert r.status_code == 204
    await asyncio.sleep(ttl + 0.05)
    status, answer = await b.poll(event_id, again)
    assert (status, answer["error"]) == (400, f"Invalid event ID: no event {event_id!r}")
    await a.post("/private/events", {"event_id": event_id}, **AUTH)
    await asyncio.sleep(ttl + 0.05)
    assert (await b.poll(event_id, again))[0] == 404


OPS = st.lists(
    st.tuples(
        st.sampled_from(
            ["assign", "poll", "poll", "poll", "increment", "claim", "advance", "sweep",
             "release", "reset", "recreate", "update"]
        ),
        st.integers(-3, 7),
    ),
    max_size=40,
)  # fmt: skip


@settings(max_examples=examples(40), deadline=None, suppress_health_check=list(HealthCheck))
@given(ops=OPS, abandon=st.booleans(), prequeue=st.booleans())
@example(ops=[("assign", 0), ("poll", 1), ("reset", 0), ("poll", 1)], abandon=True, prequeue=False)
@example(ops=[("assign", 0), ("poll", 1), ("recreate", 0), ("assign", 0), ("poll", 1)],
         abandon=False, prequeue=False)  # fmt: skip
@example(ops=[("assign", 0), ("poll", 1), ("advance", 4), ("release", 0), ("poll", 1)],
         abandon=False, prequeue=True)  # fmt: skip
async def test_answers_are_the_uncached_paths_after_any_sequence(
    processes: Any,
    redis_server: Redis,
    ops: list[tuple[str, int]],
    abandon: bool,
    prequeue: bool,
) -> None:
    clock = FakeClock(1_800_000_000.0)
    cached = await processes(clock, ttl=0, size=2)  # small: evictions happen too
    plain = await processes(clock, ttl=0, size=0)  # every poll reads Redis
    store = redis_server.store(clock)
    settings_ = EventSettings(
        fresh_event("eq"), expiry=30, abandon_after=20 if abandon else 0,
        prequeue_until=clock.now + 15 if prequeue else 0,
    )  # fmt: skip
    event_id = settings_.event_id
    await store.create_event(settings_)
    rids = ["00000000-0000-4000-8000-000000000000"]  # never assigned: 404 on both
    for op, n in ops:
        pick = rids[n % len(rids)]
        try:
            if op == "assign":
                rids.append((await store.assign(event_id)).request_id)
            elif op == "poll":
                # the cached process polls first, so a stale answer could not hide
                answer = await cached.poll(event_id, pick)
                assert answer == await plain.poll(event_id, pick)
                assert answer == await _scripted(store, event_id, pick)
            elif op == "increment":
                await store.increment_serving(event_id, n)
            elif op == "claim":
                await store.claim_token(event_id, pick)
            elif op == "advance":
                clock.advance(abs(n) * 4)
            elif op == "sweep":
                await store.sweep(event_id)
            elif op == "release":
                await store.release_prequeue(event_id)
            elif op == "reset":
                await plain.post("/private/reset_initial_state", {"event_id": event_id}, **AUTH)
            elif op == "recreate":
                await store.delete_event(event_id)
                await store.create_event(settings_)
            elif op == "update":
                await store.update_event(event_id, abandon_after=abs(n) * 5)
        except RoomError:
            pass
    for rid in rids:
        answer = await cached.poll(event_id, rid)
        assert answer == await plain.poll(event_id, rid) == await _scripted(store, event_id, rid)
    await store.delete_event(event_id)


async def _scripted(store: RoomStore, event_id: str, request_id: str) -> tuple[int, Any]:
    """What queue_num answered before the cache: the POSITION script's reading, with
    every state but pre-queued a 200 (AWS's: a position keeps its number)."""
    try:
        p = await store.position(event_id, request_id)
    except UnknownRequest as exc:
        return 404, {"error": str(exc)}
    except UnknownEvent as exc:
        return 400, {"error": str(exc)}
    if p.status is PositionState.PREQUEUED:
        return 202, {"error": "Request ID pre-queued: numbers are given at the start"}
    entry = math.floor(p.entry_time)
    return 200, {"queue_number": p.queue_number, "entry_time": entry, "event_id": event_id,
                 "status": 1}  # fmt: skip


async def test_touches_queued_while_a_batch_is_written_go_in_the_next(
    processes: Any, redis_server: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = FakeClock(1_800_000_000.0)
    a = await processes(clock, ttl=0)
    event_id = await event(a.api.store, abandon_after=100, expiry=0)
    rids = [
        (await a.post("/assign_queue_num", {"event_id": event_id}))["api_request_id"]
        for _ in range(2)
    ]
    for rid in rids:
        await a.poll(event_id, rid)  # read (and touched with the read)
    monkeypatch.setattr(touches_module, "_TOUCH_BATCH", 0.01)
    write = a.api.store.touch_many
    batches: list[dict[str, dict[str, float]]] = []

    async def slow_write(touches: Any) -> bool:
        batches.append({e: dict(t) for e, t in touches.items()})
        if len(batches) == 1:  # a poll arrives while this batch is on its way
            clock.advance(10)
            assert (await a.poll(event_id, rids[1]))[0] == 200
        return await write(touches)

    monkeypatch.setattr(a.api.store, "touch_many", slow_write)
    clock.advance(10)
    assert (await a.poll(event_id, rids[0]))[0] == 200  # a touch is queued
    seen = keys.waitingroom_event_keys(event_id)["seen"]

    async def second_written() -> bool:
        return await redis_server.admin.zscore(seen, rids[1]) == 1_800_000_020_000

    await until(second_written, 5, message="the touch queued during the first batch")
    assert [list(b[event_id]) for b in batches] == [[rids[0]], [rids[1]]]
    assert await redis_server.admin.zscore(seen, rids[0]) == 1_800_000_010_000
