"""The store probe and heartbeats that reflect the state store (issue #11, finding 6),
against real app servers and a real Redis pair that is killed or frozen (SIGSTOP)."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Callable, Iterator

from websockets.asyncio.client import connect

from rideout.config import Config
from rideout.health.canary import probe
from rideout.health.names import CANARY_PROBE, PROBE_CLAIM
from rideout.protocol import PONG
from rideout.realtime.backend import probe_store, probe_timeout
from rideout.realtime.zone import BackendHealth
from tests.conftest import FakeClock, until
from tests.realtime.conftest import Deployment, recv, running_deployment, send


def canary_token(deployment: Deployment) -> str:
    return deployment.token("canary-us-east-1", extra_claims={PROBE_CLAIM: CANARY_PROBE})


def test_backend_health_degrades_after_two_failures_in_a_row_and_recovers_on_one_success() -> None:
    clock = FakeClock(100.0)
    health = BackendHealth(clock)
    assert not health.degraded
    assert not health.failed("timeout")  # one slow call is not an outage
    assert not health.degraded
    assert not health.ok()
    assert health.failures == 0
    health.failed("refused")
    clock.advance(1.0)
    assert health.failed("refused again")  # the second in a row begins it
    assert health.degraded
    assert health.reason == "refused again"
    assert health.since == 101.0
    assert not health.failed("still")  # already degraded
    clock.advance(2.0)
    assert health.ok()
    assert not health.degraded
    assert health.reason is None
    assert health.since == 103.0


async def test_the_probe_writes_through_the_writer_and_reads_through_the_replica(
    deployment: Deployment,
) -> None:
    writer = await probe_store(deployment.servers["a1"])
    assert writer.role == "writer"
    assert writer.epoch == deployment.servers["a1"].epoch.value
    assert writer.replicas is None  # async mode: no WAIT
    replica = await probe_store(deployment.servers["b1"])
    assert replica.role == "replica"


async def test_in_sync_mode_the_writer_waits_for_its_replica_and_the_replica_answers(
    make_config: Callable[..., Config],
) -> None:
    """A replica refuses WAIT: the standby region's probe must still pass (the first
    version failed it, and the standby sat in ALARM)."""
    config = make_config(failover={"replication": "sync", "replica_down": "reject"})
    async with running_deployment(config) as deployment:
        writer = await probe_store(deployment.servers["a1"])
        assert (writer.role, writer.replicas) == ("writer", 1)
        replica = await probe_store(deployment.servers["b1"])
        assert (replica.role, replica.replicas) == ("replica", None)
        assert not deployment.servers["b1"].backend.failures


async def test_the_probe_is_for_the_canary_only(deployment: Deployment) -> None:
    async with deployment.connect("a1", "mallory") as ws:
        await send(ws, action="probe")
        reply = await recv(ws)
    assert reply["type"] == "error"
    assert reply["code"] == "forbidden"
    url = deployment.urls["a1"] + "/ws"
    token = canary_token(deployment)
    async with connect(f"{url}?token={token}") as ws:
        await send(ws, action="probe")
        reply = await recv(ws)
    assert reply == {
        "type": "probe", "region": "us-east-1", "zone": "use1-az1", "role": "writer",
        "epoch": deployment.servers["a1"].epoch.value, "replicas": None, "full": False,
        "busy": False,
    }  # fmt: skip


@contextlib.contextmanager
def frozen(pid: int) -> Iterator[None]:
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


async def test_a_frozen_writer_fails_the_probe_within_its_bound_and_heartbeats_follow(
    deployment: Deployment,
) -> None:
    """Before the fix the canary only heartbeated: `pong` never touched Redis, so a
    frozen writer passed every probe."""
    url = deployment.urls["a1"] + "/ws"
    token = canary_token(deployment)
    timeout = deployment.config.timing.canary_timeout
    assert await probe(url, token, timeout * 5) == (True, None, False, False)
    server = deployment.servers["a1"]
    redis = deployment.redis["us-east-1"]
    assert redis.pid is not None
    async with deployment.connect("a1", "bob") as ws:
        await send(ws, action="heartbeat")
        assert await recv(ws) == PONG
        with frozen(redis.pid):
            healthy, why, *_ = await probe(url, token, timeout * 5)
            assert not healthy
            # The server's bound answered, not the canary's own timeout.
            bound = probe_timeout(deployment.config.timing)
            assert f"did not answer the probe within {bound:g} s" in (why or ""), why
            # The zone's own prober (every canary interval) makes heartbeats fail too.
            await until(lambda: server.backend.degraded, 10, message="the zone never noticed")
            await send(ws, action="heartbeat")
            reply = await recv(ws)
            assert reply["type"] == "error"
            assert reply["code"] == "unavailable"
            assert "state store" in reply["message"]
        await until(lambda: not server.backend.degraded, 10, message="never recovered")
        await send(ws, action="heartbeat")
        assert await recv(ws) == PONG
    assert await probe(url, token, timeout * 5) == (True, None, False, False)


async def test_a_dead_writer_fails_the_probe_with_the_reason(deployment: Deployment) -> None:
    url = deployment.urls["a2"] + "/ws"
    token = canary_token(deployment)
    redis = deployment.redis["us-east-1"]
    assert redis.pid is not None
    os.kill(redis.pid, signal.SIGKILL)
    healthy, why, *_ = await probe(url, token, 5.0)
    assert not healthy
    assert "store probe failed" in (why or ""), why
    server = deployment.servers["a2"]
    await until(lambda: server.backend.degraded, 10)
    assert server.metrics.registry.get_sample_value("rideout_store_backend_up") == 0.0
