"""[failover] replication = "sync": an ack promises the other region has the bid."""

from __future__ import annotations

from collections.abc import Callable

import httpx

from rideout.config import Config
from tests.realtime.conftest import recv, recv_type, running_deployment, send


async def test_acks_wait_for_the_replica(make_config: Callable[..., Config]) -> None:
    config = make_config(failover={"replication": "sync", "sync_timeout": 0.3})
    async with running_deployment(config) as d, d.connect("a1") as ws:
        await send(ws, action="bid", room="s1", amount=10, id="r1")
        ack = await recv_type(ws, "ack")
        assert ack["accepted"] is True
        # The replica has it the moment the ack arrives: read it in the other region.
        async with d.connect("b1", "bob") as other:
            await send(other, action="getState", room="s1")
            assert (await recv_type(other, "state"))["state"]["bid"] == 10


async def test_replica_down_rejects_and_the_retry_is_acked_once_replicated(
    make_config: Callable[..., Config],
) -> None:
    config = make_config(
        failover={"replication": "sync", "sync_timeout": 0.2, "replica_down": "reject"}
    )
    async with running_deployment(config) as d, d.connect("a1") as ws:
        replica = d.redis[config.secondary.name]
        await replica.stop()
        await send(ws, action="bid", room="s2", amount=10, id="r1")
        error = await recv_type(ws, "error")
        assert (error["code"], error["id"]) == ("unavailable", "r1")
        assert "not yet replicated" in error["message"]
        # The same id again, still no replica: still not acknowledged.
        await send(ws, action="bid", room="s2", amount=10, id="r1")
        assert (await recv_type(ws, "error"))["id"] == "r1"
        await replica.start()
        # As any client does: retry with the same id until the replica confirms (right
        # after a resync that can take a WAIT or two on a busy machine).
        for _ in range(20):
            await send(ws, action="bid", room="s2", amount=10, id="r1")
            reply = await recv(ws)
            if reply["type"] == "ack":
                break
            assert (reply["type"], reply["code"], reply["id"]) == ("error", "unavailable", "r1")
        assert reply["type"] == "ack"
        assert reply["accepted"] is True  # the original decision, now replicated


async def test_replica_down_degrades_to_async_when_configured(
    make_config: Callable[..., Config],
) -> None:
    config = make_config(
        failover={"replication": "sync", "sync_timeout": 0.2, "replica_down": "degrade"}
    )
    async with running_deployment(config) as d, d.connect("a1") as ws:
        await d.redis[config.secondary.name].stop()
        await send(ws, action="bid", room="s3", amount=10, id="r1")
        assert (await recv_type(ws, "ack"))["accepted"] is True
        zone = config.primary.zones[0]
        async with httpx.AsyncClient(trust_env=False) as http:
            base = f"http://{zone.address}:{config.app_port}"
            health = (await http.get(base + "/health")).json()
            assert health["replication"] == {"mode": "sync", "unreplicated_acks": 1}
            metrics = (await http.get(base + "/metrics")).text
            assert 'rideout_sync_replication_total{outcome="degraded"} 1.0' in metrics
