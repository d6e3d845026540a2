"""`chaos restore` against the controller, by forced interleaving (issue #11, finding 1).

Restore starts the region's Redis and then takes its epoch step; the controller may
demote that Redis in between. Here a real controller step runs exactly there (the
supervisor's ``after_redis_start`` hook), not by timing luck: restore must still bring
the app servers and the canary back, leave the epoch as the controller set it, and say
what it did; a step that fails is named, with what is up and what is not.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from rideout._process import pid_alive
from rideout.cluster.chaos import ChaosError
from rideout.cluster.runstate import RunState
from rideout.cluster.supervisor import LocalCluster
from rideout.failover.controller import ControllerState, FailoverController
from rideout.store.acl import RedisRole, credentials_for
from rideout.store.client import probe_client
from rideout.store.replication import read_epoch, replication_status
from tests.cluster.conftest import chaos
from tests.conftest import control_plane_summary as summary
from tests.conftest import until

pytestmark = pytest.mark.slow

P, S = "us-east-1", "us-west-2"


async def failed_over(cluster: LocalCluster) -> int:
    """Kill the primary region, wait for the control plane to fail over: the epoch."""
    config = cluster.config
    assert "killed us-east-1" in await chaos(cluster, "kill", P)

    async def moved() -> bool:
        try:
            return bool((await summary(config))["failover"]["writer"] == S)
        except httpx.HTTPError:
            return False

    await until(moved, 45, interval=0.1, message="no failover")
    epoch: int = (await summary(config))["failover"]["epoch"]
    assert epoch >= 2
    return epoch


def alive_in(cluster: LocalCluster, region: str) -> dict[str, bool]:
    state = RunState.read(cluster.config.run_dir)
    assert state is not None
    return {p.name: bool(p.pid and pid_alive(p.pid)) for p in state.processes if p.region == region}


async def test_a_restored_redis_comes_back_fenced_and_the_controller_makes_it_follow(
    cluster: LocalCluster,
) -> None:
    """The old writer's Redis restarts fenced (a replica of itself: no epoch is written
    by the supervisor, and nothing can sync from it), whatever the controller does
    meanwhile; the controller makes it follow the writer, which gives it the epoch."""
    config = cluster.config
    epoch = await failed_over(cluster)
    redis = config.primary.redis
    client = probe_client(
        redis.address, redis.port, credentials=credentials_for(config, RedisRole.CONTROLLER)
    )
    seen: list[str] = []

    async def controller_demotes_it(region: str) -> None:
        # A real controller step, between the Redis start and restore's epoch step.
        controller = FailoverController(config, state=ControllerState(writer=S, epoch=epoch))
        try:
            await controller.tick({P: False, S: True})
        finally:
            await controller.close()
        seen.append((await replication_status(client)).role)

    cluster.after_redis_start = controller_demotes_it
    try:
        message = await chaos(cluster, "restore", P)
        assert seen == ["replica"]  # the interleaving happened
        assert message.startswith("restored us-east-1"), message
        assert "restarted redis-us-east-1" in message
        assert "epoch" not in message  # fenced: the supervisor writes nothing to it
        assert "restarted 2 servers" in message  # two app servers (the canary, outside, lived)
        assert all(alive_in(cluster, P).values()), alive_in(cluster, P)
        # The epoch is the controller's: the replica gets it from the writer, never 1.
        await until(lambda: _epoch_is(client, epoch), 30, message="the epoch never synced")
    finally:
        await client.aclose()


async def _epoch_is(client: Any, epoch: int) -> bool:
    return await read_epoch(client) == epoch


async def test_a_restore_step_that_fails_is_named_and_the_rest_still_comes_up(
    cluster: LocalCluster,
) -> None:
    """Before the fix a failed Redis step ended restore there: the region's app servers
    and canary stayed down and nothing said so."""
    await failed_over(cluster)

    async def epoch_step_fails(region: str) -> None:
        raise RuntimeError("injected: the epoch step failed")

    cluster.after_redis_start = epoch_step_fails
    with pytest.raises(ChaosError) as info:
        await chaos(cluster, "restore", P)
    message = str(info.value)
    assert "restore us-east-1 is incomplete" in message, message
    assert "failed: redis-us-east-1 (injected: the epoch step failed)" in message
    assert "restarted 2 servers" in message
    alive = alive_in(cluster, P)
    assert all(alive[name] for name in alive if not name.startswith("redis-")), alive

    cluster.after_redis_start = None  # its keeper, or a second restore, brings it back
    await until(lambda: all(alive_in(cluster, P).values()), 30, message="redis never came back")
    assert (await chaos(cluster, "restore", P)).startswith("restored us-east-1")
