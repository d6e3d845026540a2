from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
import redis.asyncio as aioredis

from rideout.config import Config
from rideout.failover.controller import ControllerState, FailoverController, decide
from rideout.store import keys
from rideout.store.replication import ensure_epoch, replication_status
from tests.conftest import running_redis_pair

P, S = "us-east-1", "us-west-2"


@pytest.mark.parametrize(
    ("writer", "healthy", "auto", "move", "target"),
    [
        (P, {P: True, S: True}, True, "none", None),
        (P, {P: False, S: True}, True, "fail-over", S),
        (P, {P: False, S: False}, True, "none", None),  # both down: stay
        (P, {P: True, S: False}, True, "none", None),
        (S, {P: True, S: True}, True, "fail-back", P),
        (S, {P: True, S: True}, False, "none", None),  # failback is manual
        (S, {P: True, S: False}, False, "fail-back", P),  # the writer's region failed
        (S, {P: False, S: True}, True, "none", None),
        (S, {P: False, S: False}, True, "none", None),
        (P, {}, True, "none", None),  # no health check: healthy
    ],
)
def test_decide(
    writer: str, healthy: dict[str, bool], auto: bool, move: str, target: str | None
) -> None:
    decision = decide(writer=writer, primary=P, secondary=S, healthy=healthy, auto_failback=auto)
    assert (decision.move, decision.target) == (move, target)
    assert decision.reason


def test_state_round_trip() -> None:
    state = ControllerState(writer=S, epoch=3, lost_writes=2, failovers=1)
    from rideout.failover.controller import FailoverEvent

    state.events.append(FailoverEvent(1.0, "fail-over", "m", S, 3))
    assert ControllerState.from_dict(state.to_dict()).to_dict() == state.to_dict()


async def wait_for(predicate: Callable[[], object], timeout: float = 10.0) -> None:
    async with asyncio.timeout(timeout):
        while not await predicate():  # type: ignore[misc]
            await asyncio.sleep(0.05)


async def test_fail_over_demote_the_stale_writer_and_fail_back(
    make_config: Callable[..., Config],
) -> None:
    config = make_config()
    async with running_redis_pair(config):
        p = aioredis.Redis(
            host=config.primary.redis.address, port=config.primary.redis.port, decode_responses=True
        )
        s = aioredis.Redis(
            host=config.secondary.redis.address,
            port=config.secondary.redis.port,
            decode_responses=True,
        )
        events: list[str] = []
        controller = FailoverController(
            config, on_change=lambda st: events.append(st.events[-1].kind)
        )
        try:
            await ensure_epoch(p)
            await p.xadd(keys.room_stream("lot"), {"state": "{}", "epoch": "1"})
            await p.wait(1, 2000)
            assert (await controller.tick({P: True, S: True})).move == "none"
            assert (controller.writer, controller.epoch) == (P, 1)
            assert controller.dns_health({P: True, S: True}) == {P: True, S: False}

            # A partition: the secondary stops hearing the primary, which takes one more write.
            await s.replicaof("NO", "ONE")
            await p.xadd(keys.room_stream("lot"), {"state": "{}", "epoch": "1"})
            decision = await controller.tick({P: False, S: True})
            assert decision.move == "fail-over"
            assert (controller.writer, controller.epoch) == (S, 2)
            assert await s.get(keys.EPOCH) == "2"
            assert controller.dns_health({P: False, S: True}) == {P: False, S: True}
            # The old writer was reachable: demoted in the same tick, its extra write counted.
            assert (await replication_status(p)).role == "replica"
            status = controller.status()
            assert status["lost_writes"] == 1
            assert [e["kind"] for e in status["events"]] == ["start", "fail-over", "demote"]

            # The primary is healthy again: a coordinated switchover, then a new epoch.
            await wait_for(lambda: _linked(p))
            await s.set("after-failover", "kept")  # acknowledged by the interim writer
            decision = await controller.tick({P: True, S: True})
            assert decision.move == "fail-back"
            assert (controller.writer, controller.epoch) == (P, 3)
            assert (await replication_status(p)).role == "master"
            assert (await replication_status(s)).role == "replica"
            assert await p.get("after-failover") == "kept"  # nothing acknowledged was lost
            assert await p.get(keys.EPOCH) == "3"
            assert "coordinated FAILOVER" in controller.status()["events"][-1]["message"]
            assert events[-1] == "fail-back"
        finally:
            await controller.close()
            await p.aclose()
            await s.aclose()


async def _linked(client: aioredis.Redis) -> bool:
    return (await replication_status(client)).link == "up"


async def test_a_writer_that_restarts_as_a_replica_is_promoted_again(
    make_config: Callable[..., Config],
) -> None:
    config = make_config()
    async with running_redis_pair(config):
        p = aioredis.Redis(
            host=config.primary.redis.address, port=config.primary.redis.port, decode_responses=True
        )
        s = aioredis.Redis(
            host=config.secondary.redis.address,
            port=config.secondary.redis.port,
            decode_responses=True,
        )
        controller = FailoverController(config, state=ControllerState(writer=S, epoch=5))
        try:
            # The secondary is the writer (state remembered across a restart), but its
            # Redis came back with its configured role, a replica of the primary.
            assert (await replication_status(s)).role == "replica"
            await controller.tick({P: False, S: True})
            assert (await replication_status(s)).role == "master"
            assert await s.get(keys.EPOCH) == "5"
            assert (await replication_status(p)).role == "replica"
            kinds = [e["kind"] for e in controller.status()["events"]]
            assert "promote" in kinds
            assert "epoch" in kinds
        finally:
            await controller.close()
            await p.aclose()
            await s.aclose()


async def test_an_unreachable_target_is_an_error_event_not_a_crash(
    make_config: Callable[..., Config],
) -> None:
    config = make_config()  # no Redis running at all
    controller = FailoverController(config, state=ControllerState(writer=P, epoch=1))
    try:
        decision = await controller.tick({P: False, S: True})
        assert decision.move == "fail-over"
        assert controller.writer == P  # nothing moved
        assert controller.status()["events"][-1]["kind"] == "error"
        assert "unreachable" in controller.status()["events"][-1]["message"]
    finally:
        await controller.close()
