"""Fault injection through a running supervisor's control socket."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import connect

from rideout import routes
from rideout._process import pid_alive
from rideout.auth import SigningKey, TokenIssuer
from rideout.cluster.chaos import ChaosError, send_command
from rideout.cluster.runstate import RunState
from rideout.cluster.supervisor import LocalCluster
from rideout.config import Config
from tests.cluster.conftest import chaos
from tests.conftest import until

pytestmark = pytest.mark.slow


@pytest.fixture
async def cluster(make_config: Callable[..., Config]) -> AsyncIterator[LocalCluster]:
    config = make_config(realtime={"workers": 2})
    running = LocalCluster(config)
    try:
        await running.start()
        yield running
    finally:
        await running.stop()


def region_pids(cluster: LocalCluster, region: str, kind: str | None = None) -> list[int]:
    state = RunState.read(cluster.config.run_dir)
    assert state is not None
    return [
        p.pid for p in state.processes if p.region == region and (kind is None or p.kind == kind)
    ]


def proc_state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


async def heartbeat(cluster: LocalCluster, zone_address: str) -> Any:
    config = cluster.config
    token = TokenIssuer(
        SigningKey.load_or_create(config.keys_dir), config.auth.issuer, config.auth.audience, 60
    ).issue("t")
    async with connect(
        f"ws://{zone_address}:{config.app_port}/ws?token={token}", open_timeout=5
    ) as ws:
        await ws.send(json.dumps({"action": "heartbeat"}))
        reply = await asyncio.wait_for(ws.recv(), 5)
        return reply if reply == "pong" else json.loads(reply)


def every_reply(
    cluster: LocalCluster, zone_address: str, expected: Callable[[Any], bool]
) -> Callable[[], Awaitable[bool]]:
    """A condition: six heartbeats on fresh connections, whichever worker the kernel
    gives each, all get the `expected` reply (a signal reaches each worker's loop in
    its own time)."""

    async def check() -> bool:
        for _ in range(6):
            if not expected(await heartbeat(cluster, zone_address)):
                return False
        return True

    return check


def degraded(reply: Any) -> bool:
    return isinstance(reply, dict) and reply.get("code") == "unavailable"


def pong(reply: Any) -> bool:
    return reply == "pong"


async def refused_commands(cluster: LocalCluster) -> None:
    """Commands the supervisor refuses; they change nothing."""
    with pytest.raises(ChaosError, match="no region 'mars-1'"):
        await chaos(cluster, "kill", "mars-1")
    with pytest.raises(ChaosError, match="expected"):
        await chaos(cluster, "explode", "us-east-1")
    reply = await cluster.command(b"not json")
    assert reply["ok"] is False
    # A zone: only with kill, freeze, throttle and restore, and one of the region's.
    no_zone = await cluster.command(b'{"op": "kill", "region": "us-east-1", "zone": "usw2-az1"}')
    assert no_zone["ok"] is False
    assert "no zone 'usw2-az1' in region 'us-east-1'" in no_zone["error"]
    redis = await cluster.command(
        b'{"op": "kill-redis", "region": "us-east-1", "zone": "use1-az1"}'
    )
    assert redis["ok"] is False
    assert "not with kill-redis" in redis["error"]


async def test_refused_commands_change_nothing_and_throttle_reaches_every_worker(
    cluster: LocalCluster,
) -> None:
    await refused_commands(cluster)  # first: they must leave the deployment as it was
    zone = cluster.config.primary.zones[0].address
    message = await chaos(cluster, "throttle", "us-east-1")
    assert "throttled us-east-1: 4 app servers" in message
    await until(every_reply(cluster, zone, degraded), message="every worker degraded")
    # Every connection, whichever worker the kernel picks, is degraded.
    for _ in range(6):
        reply = await heartbeat(cluster, zone)
        assert reply["code"] == "unavailable"
    assert await heartbeat(cluster, cluster.config.secondary.zones[0].address) == "pong"
    assert "app servers serving" in await chaos(cluster, "restore", "us-east-1")
    await until(every_reply(cluster, zone, pong), message="every worker serving")
    for _ in range(6):
        assert await heartbeat(cluster, zone) == "pong"


async def test_freeze_and_restore_then_kill_and_restore_a_region(cluster: LocalCluster) -> None:
    # The canary runs outside the region it probes (the default placement): it sees the
    # region fail instead of dying with it.
    (canary,) = region_pids(cluster, "us-west-2", kind="canary")
    pids = [p for p in region_pids(cluster, "us-west-2") if p != canary]
    assert "froze us-west-2" in await chaos(cluster, "freeze", "us-west-2")
    # SIGSTOP is delivered asynchronously.
    await until(lambda: {proc_state(p) for p in pids} == {"T"}, 2, interval=0.02)
    assert {proc_state(p) for p in pids} == {"T"}
    assert proc_state(canary) != "T"
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(heartbeat(cluster, cluster.config.secondary.zones[0].address), 1.0)
    assert "resumed" in await chaos(cluster, "restore", "us-west-2")
    assert "T" not in {proc_state(p) for p in pids}
    assert await heartbeat(cluster, cluster.config.secondary.zones[0].address) == "pong"

    # The same region, killed this time.
    assert len(pids) == 1 + 2 * 2  # Redis, two zones of two workers
    assert "killed us-west-2: 5 processes" in await chaos(cluster, "kill", "us-west-2")
    await until(lambda: not any(pid_alive(p) for p in pids), 5, message="the region's processes")
    assert not any(pid_alive(p) for p in pids)
    assert pid_alive(canary)
    message = await chaos(cluster, "restore", "us-west-2")
    assert "restarted redis-us-west-2" in message
    assert "restarted 4 servers" in message
    new = region_pids(cluster, "us-west-2")
    assert len(new) == 6
    assert set(new) & set(pids) == set()
    assert canary in new
    assert await heartbeat(cluster, cluster.config.secondary.zones[1].address) == "pong"


async def test_kill_redis_only(cluster: LocalCluster) -> None:
    before = region_pids(cluster, "us-east-1")
    (redis,) = region_pids(cluster, "us-east-1", kind="redis")
    message = await chaos(cluster, "kill-redis", "us-east-1")
    assert message.startswith("killed redis-us-east-1")
    await until(lambda: not pid_alive(redis), 5, message="redis-us-east-1 gone")

    async def app_servers_report_redis_gone() -> bool:  # so they noticed, and stayed up
        async with httpx.AsyncClient(trust_env=False, timeout=2) as http:
            for zone in cluster.config.primary.zones:
                url = routes.zone_url(cluster.config, zone.address, routes.HEALTH)
                if (await http.get(url)).status_code != 503:
                    return False
        return True

    await until(app_servers_report_redis_gone, message="app servers reporting Redis gone")
    alive = [p for p in before if pid_alive(p)]
    assert len(alive) == len(before) - 1  # everything but Redis


@pytest.mark.parametrize(("placement", "dies_with_it"), [("outside", False), ("in-region", True)])
def test_the_canary_dies_with_its_region_only_when_placed_in_it(
    make_config: Callable[..., Config], placement: str, dies_with_it: bool
) -> None:
    cluster = LocalCluster(make_config(failover={"canary_placement": placement}))
    cluster._plan_servers()
    kinds = sorted(c.record.kind for c in cluster._region_children("us-east-1"))
    assert kinds == sorted(["app", "app"] + (["canary"] if dies_with_it else []))


def test_no_supervisor(tmp_path: Any) -> None:
    with pytest.raises(ChaosError, match="rideout is not running"):
        send_command(tmp_path / "run", "kill", "us-east-1")
