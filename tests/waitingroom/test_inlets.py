"""The scheduler against a real redis-server: inlets step once per tick however many
processes run it, the sweep and the pre-queue release, metrics events, the alarm."""

from __future__ import annotations

import asyncio

import httpx
import pytest
import pytest_asyncio
from prometheus_client import CollectorRegistry
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from rideout.waitingroom.events import WAITING_ROOM_METRICS, follow_events, read_events
from rideout.waitingroom.inlets import RoomScheduler, control_plane_alarm_state
from rideout.waitingroom.metrics import RoomMetrics
from rideout.waitingroom.model import InletSettings
from tests.conftest import FakeClock
from tests.waitingroom.conftest import Redis, new_event

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(autouse=True, loop_scope="module")
async def no_other_events(redis_server: Redis) -> None:
    """A scheduler looks at every event: each test here starts with none."""
    await redis_server.admin.flushall()


async def test_a_periodic_inlet_admits_once_per_tick_across_processes(
    redis_server: Redis, clock: FakeClock
) -> None:
    stores = [redis_server.store(clock) for _ in range(4)]
    schedulers = [RoomScheduler(s, metrics_interval=3600) for s in stores]
    event = await new_event(
        stores[0], expiry=0,
        inlet=InletSettings("periodic", period=60, increment_by=10, start=clock.now, end=clock.now + 150),
    )  # fmt: skip
    for _ in range(25):
        await stores[0].assign(event.event_id)
    for _ in range(3):  # three looks within one tick
        for scheduler in schedulers:
            await scheduler.run_once()
    assert await stores[0].serving(event.event_id) == 10
    clock.advance(60)
    reports = [await s.run_once() for s in schedulers]
    assert sum(r.admitted.get(event.event_id, 0) for r in reports) == 10
    assert await stores[0].serving(event.event_id) == 20
    clock.advance(120)  # past the end
    for scheduler in schedulers:
        await scheduler.run_once()
    assert await stores[0].serving(event.event_id) == 20


async def test_schedulers_running_at_once_admit_once_per_tick(
    redis_server: Redis, clock: FakeClock
) -> None:
    stores = [redis_server.store(clock) for _ in range(8)]
    schedulers = [RoomScheduler(s, metrics_interval=60) for s in stores]
    event = await new_event(stores[0], inlet=InletSettings("max_size", period=5, max_size=7))
    for _ in range(20):
        await stores[0].assign(event.event_id)
    for _ in range(3):
        await asyncio.gather(*(s.run_once() for s in schedulers))
    assert await stores[0].serving(event.event_id) == 7
    entries = await read_events(stores[0].redis, event.event_id)
    assert [e.type for e in entries] == [WAITING_ROOM_METRICS]  # once, not 8 times


async def test_a_periodic_inlet_holds_back_while_its_alarm_is_in_alarm(
    redis_server: Redis, clock: FakeClock
) -> None:
    state = {"site-latency": "ALARM"}

    async def alarm_state(name: str) -> str | None:
        return state.get(name)

    store = redis_server.store(clock)
    scheduler = RoomScheduler(store, alarm_state=alarm_state, metrics_interval=3600)
    event = await new_event(
        store, inlet=InletSettings("periodic", period=10, increment_by=3, alarm="site-latency")
    )
    for _ in range(5):
        await store.assign(event.event_id)
    await scheduler.run_once()
    assert await store.serving(event.event_id) == 0
    state["site-latency"] = "OK"
    clock.advance(10)
    await scheduler.run_once()
    assert await store.serving(event.event_id) == 3


async def test_a_periodic_inlet_never_raises_the_counter_past_the_queue(
    redis_server: Redis, clock: FakeClock
) -> None:
    store = redis_server.store(clock)
    scheduler = RoomScheduler(store, metrics_interval=3600)
    event = await new_event(
        store, expiry=0, inlet=InletSettings("periodic", period=10, increment_by=50)
    )
    for _ in range(3):  # nobody waits: nothing to admit
        await scheduler.run_once()
        clock.advance(10)
    assert await store.serving(event.event_id) == 0
    for _ in range(5):
        await store.assign(event.event_id)
    report = await scheduler.run_once()
    assert (await store.serving(event.event_id), report.admitted[event.event_id]) == (5, 5)
    for _ in range(4):  # each period, only who arrived since
        clock.advance(10)
        await scheduler.run_once()
    assert await store.serving(event.event_id) == 5
    await store.assign(event.event_id)
    clock.advance(10)
    await scheduler.run_once()
    counters = await store.counters(event.event_id)
    assert (counters.queue, counters.serving) == (6, 6)


async def test_each_pass_exports_the_counters_and_forgets_a_deleted_event(
    redis_server: Redis, clock: FakeClock
) -> None:
    store, registry = redis_server.store(clock), CollectorRegistry()
    scheduler = RoomScheduler(store, metrics_interval=3600, metrics=RoomMetrics(registry))
    event = await new_event(
        store, expiry=0, inlet=InletSettings("periodic", period=10, increment_by=2)
    )
    for _ in range(5):
        await store.assign(event.event_id)
    await scheduler.run_once()  # the inlet admits 2 of 5, then the gauges are read

    def gauge(name: str) -> float | None:
        return registry.get_sample_value(name, {"event": event.event_id})

    assert gauge("rideout_room_queue_number") == 5
    assert gauge("rideout_room_serving_number") == 2
    assert gauge("rideout_room_waiting") == 5
    assert gauge("rideout_room_tokens") == 0
    await store.delete_event(event.event_id)
    await scheduler.run_once()
    assert gauge("rideout_room_queue_number") is None


async def test_max_size_keeps_the_site_at_its_capacity(
    redis_server: Redis, clock: FakeClock
) -> None:
    store = redis_server.store(clock)
    schedulers = [RoomScheduler(store, metrics_interval=3600) for _ in range(3)]
    event = await new_event(
        store, inlet=InletSettings("max_size", period=5, max_size=3), validity=30
    )
    positions = [await store.assign(event.event_id) for _ in range(10)]
    for s in schedulers:
        await s.run_once()
    assert await store.serving(event.event_id) == 3
    for p in positions[:3]:
        await store.claim_token(event.event_id, p.request_id)
    await store.update_session(event.event_id, positions[0].request_id, 1)
    clock.advance(5)
    for s in schedulers:
        await s.run_once()
    assert await store.serving(event.event_id) == 4
    clock.advance(31)  # every token expired: their capacity is free again
    for s in schedulers:
        await s.run_once()
    assert await store.serving(event.event_id) == 4 + 2  # position 4 holds one slot untokened


async def test_the_scheduler_sweeps_releases_and_writes_metrics(
    redis_server: Redis, clock: FakeClock
) -> None:
    store = redis_server.store(clock)
    scheduler = RoomScheduler(store, metrics_interval=60)
    event = await new_event(store, expiry=30, abandon_after=100, prequeue_until=clock.now + 10)
    early = [await store.assign(event.event_id) for _ in range(3)]
    report = await scheduler.run_once()
    assert report.metrics == 1
    clock.advance(11)
    report = await scheduler.run_once()
    assert report.released == 3
    await store.increment_serving(event.event_id, 1)
    clock.advance(31)
    report = await scheduler.run_once()
    assert report.expired == 1
    abandoned = written = 0
    # 116 s of passes every 4 s (a longer gap would be an outage): the 31 s gap above
    # was one, so abandonment waits for the hold and its slack (110 s) after it
    for _ in range(29):
        clock.advance(4)
        report = await scheduler.run_once()
        abandoned, written = abandoned + report.abandoned, written + report.metrics
    assert abandoned == 2
    assert written >= 1  # a metrics event each minute
    c = await store.counters(event.event_id)
    assert (c.queue, c.expired, c.abandoned, c.waiting) == (3, 1, 2, 0)
    events = await read_events(store.redis, event.event_id)
    metrics = [e for e in events if e.type == WAITING_ROOM_METRICS]
    assert len(metrics) >= 2
    assert metrics[-1].detail["queue_counter"] == "3"  # AWS's: a string
    assert metrics[-1].detail["num_active_tokens"] == 0
    later = await read_events(store.redis, event.event_id, after=events[0].id)
    assert [e.id for e in later] == [e.id for e in events[1:]]
    assert early[0].request_id


async def test_follow_yields_new_events_as_they_come(redis_server: Redis, clock: FakeClock) -> None:
    store = redis_server.store(clock)
    event = await new_event(store)
    p = await store.assign(event.event_id)
    await store.increment_serving(event.event_id, 1)
    stream = follow_events(store.redis, event.event_id, after="0-0", block=0.5)
    await store.claim_token(event.event_id, p.request_id)
    await store.update_session(event.event_id, p.request_id, -1)
    first = await anext(stream)
    second = await anext(stream)
    await stream.aclose()
    assert (first.type, first.detail["request_id"]) == ("token_generated", p.request_id)
    assert (second.type, second.detail["status"]) == ("session_updated", "abandoned")


async def test_the_alarm_state_comes_from_the_control_plane_summary() -> None:
    async def summary(request: Request) -> JSONResponse:
        return JSONResponse({"alarms": {"us-east-1": {"name": "us-east-1", "state": "ALARM"}}})

    app = Starlette(routes=[Route("/v1/summary", summary)])
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app), base_url="http://cp.test"
    ) as client:
        assert (
            await control_plane_alarm_state(client, "http://cp.test/v1/summary", "us-east-1")
            == "ALARM"
        )
        assert await control_plane_alarm_state(client, "http://cp.test/v1/summary", "other") is None
        assert (
            await control_plane_alarm_state(client, "http://cp.test/nothing", "us-east-1") is None
        )


async def test_the_scheduler_stops_even_when_its_cancel_is_lost(redis_server: Redis) -> None:
    """A cancel can be swallowed inside a library call (Python 3.11: a socket timeout
    expiring at the cancel's moment becomes a TimeoutError). Here the pause between
    passes swallows it: the loop must still end, at its next look at the stop flag."""
    lost = asyncio.Event()
    pausing = asyncio.Event()

    async def swallowing_sleep(seconds: float) -> None:
        pausing.set()
        try:
            # Longer than the test: the stop below must land here, not in a pass (a
            # cancel in a pass is not swallowed, and proves nothing about the flag).
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            lost.set()  # swallowed: the loop goes on as if nothing happened

    scheduler = RoomScheduler(redis_server.store(), interval=0.05, sleep=swallowing_sleep)
    scheduler.start()
    await asyncio.wait_for(pausing.wait(), 10)  # a pass is done; the loop is in its pause
    task = scheduler._task
    assert task is not None
    await scheduler.stop()
    assert lost.is_set()
    assert task.done()
