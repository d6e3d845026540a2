"""The control plane's part in a failback: the damping it saves and shows, and the
gradual drain of the old writer's zones (real app servers, real HTTP, real sockets)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from prometheus_client import generate_latest
from websockets.exceptions import ConnectionClosed

from rideout.auth.admin import load_or_create_admin_token
from rideout.config import Config
from rideout.controlplane.drain import PAUSE_LIMIT, FailbackDrain
from rideout.controlplane.runtime import ControlPlane
from rideout.failover.controller import ControllerState
from rideout.realtime.zone import ZoneMode
from tests.conftest import FakeClock, running_redis_pair, until
from tests.controlplane.test_runtime import healthy_for, report
from tests.realtime.conftest import Deployment, recv, running_deployment, send

P, S = "us-east-1", "us-west-2"


async def test_the_damping_state_survives_a_restart_and_is_shown(
    make_config: Callable[..., Config],
) -> None:
    """A restart neither forgets the recent moves nor resets the hold."""
    config = make_config()
    clock = FakeClock(1_800_000_000.0)
    first = ControlPlane(config, clock=clock)
    policy = first.controller.damping
    assert policy is not None
    state = ControllerState(writer=S, epoch=7, failovers=2, failbacks=1)
    for at in (clock.now - 6, clock.now - 4, clock.now - 2):
        state.damping = state.damping.record_move(policy, at)
    first.controller.state = state
    hold = first.controller.failback_hold()
    assert hold > 10
    first.save()

    clock.advance(3)  # down for three seconds
    second = ControlPlane(config, clock=clock)
    restored = second.controller.state
    assert restored is not None
    assert restored.damping == state.damping
    assert second.controller.failback_hold() == pytest.approx(hold - 3)
    damping = second.summary()["failover"]["damping"]
    assert damping["holding"]
    assert damping["suppressed"]
    assert damping["moves"] == 3
    assert damping["hold_seconds"] == pytest.approx(hold - 3, abs=0.01)

    async with running_redis_pair(config):  # one real round: the gauges follow
        await second.evaluate()
        text = generate_latest(second.registry).decode()
        await second.stop()
    assert "# TYPE rideout_failover_damping_penalty gauge" in text
    assert "# TYPE rideout_failback_hold_seconds gauge" in text
    penalty = second.registry.get_sample_value("rideout_failover_damping_penalty")
    held = second.registry.get_sample_value("rideout_failback_hold_seconds")
    assert penalty is not None
    assert penalty > config.failover.damping_suppress
    assert held is not None
    assert 0 < held <= config.failover.damping_max_hold
    assert second.registry.get_sample_value("rideout_failback_drain_active") == 0.0


# ------------------------------------------------------------------ the drain


def _admin(config: Config, address: str) -> str:
    return f"http://{address}:{config.app_port}/admin/mode"


async def _closed(ws: Any, loop: asyncio.AbstractEventLoop) -> tuple[int | None, float]:
    """The close code the server sent, and when it came."""
    try:
        while True:
            await recv(ws, timeout=15)
    except ConnectionClosed as closed:
        return (closed.rcvd.code if closed.rcvd else None, loop.time())


@contextlib.asynccontextmanager
async def _clients(deployment: Deployment, names: list[str], each: int) -> Any:
    """`each` connected (and served) clients on each of the servers `names`."""
    async with contextlib.AsyncExitStack() as stack:
        sockets = []
        for name in names:
            for i in range(each):
                ws = await stack.enter_async_context(deployment.connect(name, f"{name}-{i}"))
                await send(ws, action="heartbeat")
                assert await recv(ws) == "pong"
                sockets.append(ws)
        yield sockets


async def test_a_failback_drain_closes_the_zones_clients_over_the_spread_then_serves(
    make_config: Callable[..., Config],
) -> None:
    config = make_config(failover={"failback_drain_seconds": 1.5})
    async with (
        running_deployment(config) as deployment,
        _clients(deployment, ["a1", "a2"], 8) as sockets,
    ):
        loop = asyncio.get_running_loop()
        drain = FailbackDrain(config)
        start = loop.time()
        drain.start(P)  # the region whose zones a1 and a2 serve
        closes = await asyncio.gather(*(_closed(ws, loop) for ws in sockets))
        assert {code for code, _ in closes} == {1012}
        times = sorted(t - start for _, t in closes)
        assert times[-1] - times[0] > 0.3, times  # spread out, not one instant
        assert times[-1] < 1.5 + 1.5, times
        status = drain.status()
        assert status is not None
        assert status["zones"] == {"use1-az1": 8, "use1-az2": 8}
        assert "closing them with 1012 over 1.5 s" in status["notes"][0]["message"]
        for name in ("a1", "a2"):
            assert deployment.servers[name].mode is ZoneMode.SERVING  # the standby, always
        await until(lambda: not drain.running, 10)
        assert drain.status()["state"] == "done"  # type: ignore[index]
        assert drain.status()["left"] == 0  # type: ignore[index]
        await drain.stop()


async def test_a_move_during_the_drain_stops_it_and_other_modes_are_left_alone(
    make_config: Callable[..., Config],
) -> None:
    config = make_config(failover={"failback_drain_seconds": 30.0})
    async with (
        running_deployment(config) as deployment,
        _clients(deployment, ["a1"], 20) as sockets,
    ):
        token = load_or_create_admin_token(config.keys_dir)
        auth = {"Authorization": f"Bearer {token}"}
        async with httpx.AsyncClient(trust_env=False) as http:
            # An operator degraded use1-az2: the drain does not touch it.
            degraded = _admin(config, config.primary.zones[1].address)
            await http.post(degraded, json={"mode": "degraded"}, headers=auth)
            drain = FailbackDrain(config)
            drain.start(P)
            a1 = deployment.servers["a1"]
            await until(lambda: a1.draining is not None, 10)
            assert deployment.servers["a2"].mode is ZoneMode.DEGRADED
            drain.cancel()  # the writer moved again: its clients must stay now
            await until(lambda: a1.draining is None, 10)
            await until(lambda: not drain.running, 10)
            kept = len(a1.connections)
            assert kept > 0  # over 30 s, most had not been closed yet
            await asyncio.sleep(0.5)
            assert len(a1.connections) == kept
            assert len(sockets) == 20
            status = drain.status()
            assert status is not None
            assert status["state"] == "cancelled"
            assert any("left alone" in n["message"] for n in status["notes"])
            assert deployment.servers["a2"].mode is ZoneMode.DEGRADED
            await http.post(degraded, json={"mode": "serving"}, headers=auth)
            await drain.stop()


async def test_the_drain_pauses_while_the_region_it_sends_clients_to_fails_a_probe(
    make_config: Callable[..., Config],
) -> None:
    config = make_config(failover={"failback_drain_seconds": 2.0})
    strained = {S: False}
    async with (
        running_deployment(config) as deployment,
        _clients(deployment, ["a1"], 16) as sockets,
    ):
        loop = asyncio.get_running_loop()
        drain = FailbackDrain(config, strained=strained.__getitem__)
        closes = [asyncio.create_task(_closed(ws, loop)) for ws in sockets]
        assert drain.ends_at() is None
        started = time.time()
        drain.start(P, toward=S)
        planned = drain.ends_at()
        assert planned is not None
        assert planned == pytest.approx(started + 2.0 + 0.5, abs=0.5)
        a1 = deployment.servers["a1"]
        await until(lambda: len(a1.connections) < 16, 10)
        strained[S] = True  # the clients sent so far strain the writer's region
        await until(lambda: (drain.status() or {}).get("pauses") == 1, 10)
        await until(lambda: a1.draining is None, 10)
        kept = len(a1.connections)
        assert kept > 0
        await asyncio.sleep(1.0)  # still strained: nobody else is sent
        assert len(a1.connections) == kept
        paused_until = drain.ends_at()
        assert paused_until is not None
        assert paused_until > planned + 0.5  # each paused period moves the end on
        strained[S] = False  # it passes its probes again: the rest follow
        assert {code for code, _ in await asyncio.gather(*closes)} == {1012}
        await until(lambda: not drain.running, 10)
        ended = drain.ends_at()
        assert ended is not None
        assert paused_until - 1.0 < ended <= time.time()
        status = drain.status()
        assert status is not None
        assert (status["state"], status["pauses"], status["left"]) == ("done", 1, 0)
        assert status["paused_seconds"] >= 1.0
        messages = [n["message"] for n in status["notes"]]
        assert any(m.startswith("paused: us-west-2 failed a canary probe") for m in messages)
        assert any(m.startswith("resumed after") for m in messages)
        assert "over 2 s (paused once, " in messages[-1]
        await drain.stop()


async def test_a_drain_toward_a_region_that_never_recovers_still_ends(
    make_config: Callable[..., Config],
) -> None:
    """Pausing is bounded (PAUSE_LIMIT spreads in all): a drain that never ends strands
    its clients as surely as none; a region that really fails is failed over instead."""
    config = make_config(failover={"failback_drain_seconds": 0.6})
    async with (
        running_deployment(config) as deployment,
        _clients(deployment, ["a1"], 8) as sockets,
    ):
        loop = asyncio.get_running_loop()
        drain = FailbackDrain(config, strained=lambda region: True)
        started = loop.time()
        drain.start(P, toward=S)
        closes = await asyncio.gather(*(_closed(ws, loop) for ws in sockets))
        assert {code for code, _ in closes} == {1012}
        assert max(t for _, t in closes) - started < 0.6 * (1 + PAUSE_LIMIT) + 5.0
        await until(lambda: not drain.running, 10)
        status = drain.status()
        assert status is not None
        assert status["state"] == "done"
        assert status["paused_seconds"] <= 0.6 * PAUSE_LIMIT + 1.0
        await drain.stop()


async def test_a_failover_from_a_region_still_serving_drains_it_toward_the_new_writer(
    make_config: Callable[..., Config],
) -> None:
    """Its clients' bids are refused there once the writer has left: without the drain
    they stayed, 526 of 1,000 in a drill, writing nothing for 22 s until the next move."""
    config = make_config(failover={"failback_drain_seconds": 1.0})
    clock = FakeClock(1_800_000_000.0)
    async with (
        running_deployment(config) as deployment,
        _clients(deployment, ["a1"], 6) as sockets,
    ):
        plane = ControlPlane(config, clock=clock)
        try:
            await healthy_for(plane, clock)
            loop = asyncio.get_running_loop()
            for _ in range(20):  # the primary's canary fails; its Redis still answers
                clock.now += plane.period
                report(plane, clock, P, healthy=False)
                report(plane, clock, S)
                await plane.evaluate()
                if plane.controller.state is not None and plane.controller.state.writer == S:
                    break
            state = plane.controller.state
            assert state is not None
            assert (state.writer, state.failovers) == (S, 1)
            assert "FAILOVER" in state.events[-1].message  # coordinated: P was alive
            closes = await asyncio.gather(*(_closed(ws, loop) for ws in sockets))
            assert {code for code, _ in closes} == {1012}
            drain = plane.summary()["failover"]["drain"]
            assert drain["region"] == P
            assert drain["zones"] == {"use1-az1": 6, "use1-az2": 0}
        finally:
            await plane.stop()


def test_outside_local_mode_the_drain_is_skipped_and_says_why(
    make_config: Callable[..., Config],
) -> None:
    config = dataclasses.replace(make_config(), mode="external")
    drain = FailbackDrain(config)
    drain.start(S)
    assert not drain.running
    assert "each app server drains itself" in drain.notes[-1]["message"]
