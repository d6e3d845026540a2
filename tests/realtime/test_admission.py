"""Admission control for replays: a few at once, a bounded queue with a deadline."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

import pytest

from rideout.config import Config, RealtimeConfig
from rideout.protocol import parse_retry_hint
from rideout.realtime.admission import AdmissionPolicy, ReplayGate
from rideout.realtime.backend import probe_store
from tests.conftest import until
from tests.realtime.conftest import Deployment, hold_lag, recv, running_deployment, send
from tests.realtime.test_limits import fill_room


def test_the_policy_is_the_config_s_and_checks_itself() -> None:
    policy = AdmissionPolicy.for_config(
        RealtimeConfig(max_replays=3, replay_queue=0, replay_wait=0.5)
    )
    assert policy == AdmissionPolicy(concurrency=3, queue=0, wait=0.5)
    assert AdmissionPolicy.for_config(RealtimeConfig()) == AdmissionPolicy()
    with pytest.raises(ValueError, match="concurrency"):
        AdmissionPolicy(concurrency=0)


async def test_places_are_taken_then_queued_in_order_then_refused() -> None:
    gate = ReplayGate(AdmissionPolicy(concurrency=1, queue=2, wait=10.0))
    assert await gate.enter() is None
    order: list[int] = []

    async def wait_turn(n: int) -> None:
        assert await gate.enter() is None
        order.append(n)

    waiters = [asyncio.create_task(wait_turn(n)) for n in (1, 2)]
    await until(lambda: gate.waiting == 2)
    assert await gate.enter() == "queue_full"  # at once: nothing waits behind a full queue
    gate.leave()
    await until(lambda: order == [1])
    assert gate.running == 1  # the place passed on
    gate.leave()
    await asyncio.gather(*waiters)
    assert order == [1, 2]
    gate.leave()
    assert (gate.running, gate.waiting) == (0, 0)


async def test_a_wait_that_runs_out_is_refused_and_leaves_the_queue() -> None:
    gate = ReplayGate(AdmissionPolicy(concurrency=1, queue=4, wait=0.01))
    assert await gate.enter() is None
    assert await gate.enter() == "queue_timeout"
    assert (gate.running, gate.waiting) == (1, 0)
    gate.leave()
    assert await gate.enter() is None


async def test_a_cancelled_waiter_gives_back_nothing_it_did_not_hold() -> None:
    gate = ReplayGate(AdmissionPolicy(concurrency=1, queue=4, wait=10.0))
    assert await gate.enter() is None
    waiter = asyncio.create_task(gate.enter())
    await until(lambda: gate.waiting == 1)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert (gate.running, gate.waiting) == (1, 0)
    gate.leave()
    assert gate.running == 0


async def test_with_no_queue_the_excess_is_refused_at_once() -> None:
    gate = ReplayGate(AdmissionPolicy(concurrency=2, queue=0))
    assert [await gate.enter() for _ in range(3)] == [None, None, "queue_full"]


# ------------------------------------------------------------------ on a real app server


async def test_replays_past_the_zone_s_places_are_refused_with_a_hint(
    make_config: Callable[..., Config],
) -> None:
    """Many users, each within its own replay budget, ask for a full replay at once: one
    runs, one waits, the rest are refused at once with ``throttled`` and the hint to
    come back after; counted as shed. A getState with no position is no replay. (Each
    from a position of its own: identical replays share one read and one place,
    tests/realtime/test_coalesced_reads.py.)"""
    config = make_config(realtime={"max_replays": 1, "replay_queue": 1})
    async with running_deployment(config) as d:
        since = await fill_room(d, "lot", 200)
        users = [f"user-{n}" for n in range(8)]
        async with contextlib.AsyncExitStack() as stack:
            sockets = [await stack.enter_async_context(d.connect(sub=u, max_size=None))
                       for u in users]  # fmt: skip
            ms, _, seq = str(since["offset"]).partition("-")
            for n, ws in enumerate(sockets):
                position = {"epoch": since["epoch"], "offset": f"{ms}-{int(seq) + n}"}
                await send(ws, action="getState", room="lot", since=position)
            replies = [await recv(ws) for ws in sockets]
            kinds = sorted(r["type"] if r["type"] == "state" else r["code"] for r in replies)
            assert kinds.count("state") >= 2, kinds  # the one running and the one waiting
            assert set(kinds) == {"state", "throttled"}, kinds
            refused = [r for r in replies if r["type"] == "error"]
            assert all("replays are all taken" in r["message"] for r in refused)
            # Come back once the queue has moved (twice its wait), not after a backoff's cap.
            hint = max(2 * config.realtime.replay_wait, config.timing.backoff_base)
            assert {parse_retry_hint(r["message"]) for r in refused} == {hint}
            await send(sockets[0], action="getState", room="lot")  # the full state: cheap
            assert (await recv(sockets[0]))["type"] == "state"
        server = d.servers["a1"]
        assert server.metrics.shed.labels("replay", "queue_full")._value.get() == len(refused)
        assert (server.replays.running, server.replays.waiting) == (0, 0)


async def test_a_late_loop_sheds_replays_but_not_full_states(
    make_config: Callable[..., Config],
) -> None:
    config = make_config()
    async with running_deployment(config, shed=True) as d:
        since = await fill_room(d, "lot", 20)
        held = hold_lag(d, 0.0)
        async with d.connect(sub="late-replayer") as ws:
            for lag in held:
                lag.held = config.timing.canary_timeout / 2
            await send(ws, action="getState", room="lot", since=since)
            refused = await recv(ws)
            assert (refused["type"], refused["code"]) == ("error", "throttled")
            assert "event loop is running" in refused["message"]
            assert parse_retry_hint(refused["message"]) == config.timing.backoff_cap
            await send(ws, action="getState", room="lot")
            assert (await recv(ws))["type"] == "state"
        assert d.servers["a1"].metrics.shed.labels("replay", "loop_lag")._value.get() == 1


async def test_the_store_probe_has_a_redis_pool_of_its_own(deployment: Deployment) -> None:
    server = deployment.servers["a1"]
    assert server.probe_store is not None
    assert server.probe_store.client.connection_pool is not server.store.client.connection_pool
    before = server.probe_store.client.connection_pool.connection_kwargs["host"]
    assert before == deployment.config.primary.redis.address
    outcome = await probe_store(server)
    assert outcome.role == "writer"
