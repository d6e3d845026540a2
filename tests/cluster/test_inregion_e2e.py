"""Writes after a failover in sync mode, end to end (issue #11, finding 3): `rideout up`
with an in-region replica per region, ``replication = "sync"``, ``replica_down =
"reject"``. Kill the primary region: bids are acknowledged again in the secondary
within the failover's time, while the primary is still down (before: every bid was
refused until the primary returned, its Redis being the new writer's only replica).
Each acknowledgement there means the bid is in both of the secondary's zones: its
in-region replica holds every acknowledged bid when the writer's zone is lost next.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
from websockets.asyncio.client import connect

from rideout.config import Config, parse_config
from rideout.store import keys
from rideout.store.acl import RedisRole, load_credentials
from tests.cluster.conftest import rideout, started
from tests.cluster.test_failover_e2e import _answers, _next, answer, resolve, summary
from tests.conftest import free_port, until

pytestmark = pytest.mark.slow

PRIMARY = ["127.0.1.1", "127.0.1.2"]
SECONDARY = ["127.0.2.1", "127.0.2.2"]
ROOM = "inregion"


def _regions() -> list[dict[str, Any]]:
    port = free_port("127.0.1.100", "127.0.1.101", "127.0.2.100", "127.0.2.101")
    regions = []
    for name, role, prefix, zones in (
        ("us-east-1", "primary", "127.0.1", ("use1-az1", "use1-az2")),
        ("us-west-2", "secondary", "127.0.2", ("usw2-az1", "usw2-az2")),
    ):
        regions.append(
            {
                "name": name, "role": role,
                "redis": {
                    "address": f"{prefix}.100", "port": port,
                    "replica": {"address": f"{prefix}.101", "port": port},
                },
                "zones": [
                    {"name": zones[0], "address": f"{prefix}.1"},
                    {"name": zones[1], "address": f"{prefix}.2"},
                ],
            }
        )  # fmt: skip
    return regions


def _sync_deployment(make_workdir: Callable[..., Path]) -> tuple[Path, Config]:
    """A workdir for sync/reject with an in-region replica per region, and its config."""
    workdir = make_workdir(
        regions=_regions(),
        failover={"replication": "sync", "sync_timeout": 0.3, "replica_down": "reject"},
    )
    shown = rideout("config", "show", "--json", "-c", "rideout.toml", cwd=workdir)
    return workdir, parse_config(json.loads(shown.stdout))


def _token(workdir: Path, sub: str) -> str:
    return rideout("token", "issue", "--sub", sub, "-c", "rideout.toml", cwd=workdir).stdout.strip()


async def _bid_until_acked(config: Config, token: str, amount: int, within: float) -> float:
    """Bid `amount` (one id, retried on `unavailable` and on a lost connection, following
    DNS) until it is acknowledged; the time that took."""
    start = time.monotonic()
    bid = {"action": "bid", "room": ROOM, "amount": amount, "id": f"bid-{amount}"}
    last: object = None
    while time.monotonic() - start < within:
        try:
            address = (await resolve(config))[0]
            url = f"ws://{address}:{config.app_port}/ws?token={token}"
            async with connect(url, open_timeout=3) as ws:
                while time.monotonic() - start < within:
                    await ws.send(json.dumps(bid))
                    reply = await _next(ws, "ack", "error")
                    if reply["type"] == "ack":
                        assert reply["accepted"], reply
                        return time.monotonic() - start
                    assert reply["code"] == "unavailable", reply
                    last = reply
                    await asyncio.sleep(0.1)
        except (OSError, TimeoutError, ConnectionError, AssertionError) as exc:
            if isinstance(exc, AssertionError) and "unavailable" not in str(exc):
                raise
            last = exc
        except Exception as exc:  # websockets' ConnectionClosed and friends
            last = exc
        await asyncio.sleep(0.1)
    raise AssertionError(f"bid {amount} not acknowledged within {within} s (last: {last!r})")


async def _amounts_in(config: Config, address: str, port: int) -> list[int]:
    """The amounts of the room's accepted bids as one Redis holds them (read-only user)."""
    monitor = load_credentials(config.keys_dir, RedisRole.MONITOR)
    client = aioredis.Redis(
        host=address, port=port, username=monitor.username, password=monitor.password,
        decode_responses=True, socket_timeout=2,
    )  # fmt: skip
    try:
        entries = await client.xrange(keys.room_stream(ROOM))
    finally:
        await client.aclose()
    return [int(json.loads(fields["state"])["bid"]) for _, fields in entries]


async def test_writes_return_in_the_secondary_while_the_primary_is_down(
    make_workdir: Callable[..., Path],
) -> None:
    workdir, config = _sync_deployment(make_workdir)
    west = config.secondary
    assert west.replica is not None
    with started(workdir) as up:
        view = up.wait_ready()
        names = {p["name"] for p in json.loads(
            (workdir / ".rideout" / "run" / "up.json").read_text()
        )["processes"]}  # fmt: skip
        assert {"redis-us-east-1-replica", "redis-us-west-2-replica"} <= names, view
        token_text = _token(workdir, "alice")
        assert await answer(config) == PRIMARY
        acked = []
        for amount in (10, 20):
            await _bid_until_acked(config, token_text, amount, 20)
            acked.append(amount)

        killed = rideout("chaos", "kill", "us-east-1", "-c", "rideout.toml", cwd=workdir)
        assert "killed us-east-1" in killed.stdout, killed
        fault = time.monotonic()
        # Acknowledged again in the secondary, the primary still down: the failover's
        # time (~2-3 s here) plus a client's reconnect; generous for a loaded machine.
        await _bid_until_acked(config, token_text, 30, 45)
        write_rto = time.monotonic() - fault
        acked.append(30)
        assert await answer(config) == SECONDARY
        state = await summary(config)
        assert state["failover"]["writer"] == "us-west-2"
        assert write_rto < 45
        for amount in (40, 50):
            await _bid_until_acked(config, token_text, amount, 20)
            acked.append(amount)
        # Every acknowledged bid is in the secondary's other zone too: losing the
        # writer's zone now would lose none of them.
        await until(
            lambda: _holds(config, west.replica.address, west.replica.port, acked),  # type: ignore[union-attr]
            10, interval=0.1, message="the in-region replica lacks acknowledged bids",
        )  # fmt: skip
        in_replica = await _amounts_in(config, west.replica.address, west.replica.port)
        assert in_replica == acked  # nothing lost, nothing applied twice

        # Then the secondary loses its writer's zone Redis: promoted in the region (no
        # DNS move, a higher epoch), every acknowledged bid still there.
        killed = rideout("chaos", "kill-redis", "us-west-2", "-c", "rideout.toml", cwd=workdir)
        assert "killed redis-us-west-2" in killed.stdout, killed
        await until(lambda: _writer_redis(config, "us-west-2/replica"), 45, interval=0.2,
                    message="no in-region promotion")  # fmt: skip
        state = await summary(config)
        events = [e for e in state["failover"]["events"] if e["kind"] == "promote-in-region"]
        assert len(events) == 1, state["failover"]["events"]
        assert state["failover"]["writer"] == "us-west-2"
        # DNS did not move: the name still points into the secondary. Not necessarily at
        # both of its zones yet: their store probes failed with the writer's Redis, and
        # each zone's check turns healthy again in its own round (a rehearsal saw the
        # answer [usw2-az1] alone right after the promotion).
        answered = await answer(config)
        assert answered, "no address"
        assert set(answered) <= set(SECONDARY), answered
        await until(lambda: _answers(config, SECONDARY), 30, interval=0.2,
                    message="both of the secondary's zones back in the answer")  # fmt: skip
        assert await _amounts_in(config, west.replica.address, west.replica.port) == acked
        # The app servers follow their region's new writer: reads answer from it (writes
        # wait for a second failure domain: sync, replica_down = reject, nothing else up).
        seen = await _state(config, token_text)
        assert (seen["state"]["bid"], seen["state"]["bids"]) == (acked[-1], len(acked))

        # The lost Redis comes back: it follows the new writer, writes are acknowledged.
        rideout("chaos", "restore", "us-west-2", "-c", "rideout.toml", cwd=workdir)
        await _bid_until_acked(config, token_text, 60, 60)
        acked.append(60)
        master = f"{west.replica.address}:{west.replica.port}"

        async def followed() -> bool:  # the controller's view is as of its last round
            rows = (await summary(config))["failover"]["topology"]
            return any(r["redis"] == "us-west-2" and r["master"] == master for r in rows)

        await until(
            followed, 30, interval=0.2, message="us-west-2's view never showed it following"
        )
        state = await summary(config)
        assert state["failover"]["writer_redis"] == "us-west-2/replica"
        parts = {row["redis"]: row for row in state["failover"]["topology"]}
        assert parts["us-west-2/replica"]["part"] == "writer"
        assert parts["us-west-2"]["part"] == "in-region replica"
        assert parts["us-west-2"]["master"] == f"{west.replica.address}:{west.replica.port}"
        assert await _amounts_in(config, west.redis.address, west.redis.port) == acked
        shown = rideout("status", "-c", "rideout.toml", cwd=workdir)
        assert shown.returncode == 0, shown
        text = " ".join(shown.stdout.split())
        assert "redis us-west-2/replica (usw2-az2): writer" in text, shown.stdout
        assert "redis us-west-2 (usw2-az1): in-region replica, link up" in text, shown.stdout

        # The primary returns: it follows the writer, the writer fails back to it with a
        # coordinated FAILOVER, and the topology is the one `up` started with.
        rideout("chaos", "restore", "us-east-1", "-c", "rideout.toml", cwd=workdir)
        await until(lambda: _answers(config, PRIMARY), 90, interval=0.2, message="no failback")
        await _bid_until_acked(config, token_text, 70, 45)
        acked.append(70)

        async def restored() -> bool:
            rows = (await summary(config))["failover"]["topology"]
            return {r["redis"]: (r["part"], r["master"], r["link"]) for r in rows} == {
                "us-east-1": ("writer", None, "n/a"),
                "us-east-1/replica": ("in-region replica", east_main, "up"),
                "us-west-2": ("cross-region replica", east_main, "up"),
                "us-west-2/replica": ("cross-region replica", west_main, "up"),
            }

        east_main = f"{config.primary.redis.address}:{config.primary.redis.port}"
        west_main = f"{west.redis.address}:{west.redis.port}"
        await until(restored, 30, interval=0.2, message="the topology was not re-established")
        east = config.primary.redis
        assert await _amounts_in(config, east.address, east.port) == acked


async def _holds(config: Config, address: str, port: int, acked: list[int]) -> bool:
    return await _amounts_in(config, address, port) == acked


async def _writer_redis(config: Config, node: str) -> bool:
    return bool((await summary(config))["failover"].get("writer_redis") == node)


async def _state(config: Config, token: str) -> dict[str, Any]:
    address = (await resolve(config))[0]
    async with connect(f"ws://{address}:{config.app_port}/ws?token={token}", open_timeout=5) as ws:
        for _ in range(50):  # until the zone has moved to the new writer
            await ws.send(json.dumps({"action": "getState", "room": ROOM}))
            reply = await _next(ws, "state", "error")
            if reply["type"] == "state":
                return reply
            await asyncio.sleep(0.2)
    raise AssertionError("no state from the secondary after the in-region promotion")


async def test_a_frozen_writer_redis_is_replaced_in_its_region_and_fenced_when_it_resumes(
    make_workdir: Callable[..., Path],
) -> None:
    """SIGSTOP of the primary's writer Redis alone: the canary's store probe fails, the
    controller promotes the region's replica in the other zone (no DNS move, epoch 2),
    the zone's servers follow it and bids are acknowledged again (the other region's
    replica now follows the new writer). Resumed, the old writer is fenced and demoted."""
    workdir, config = _sync_deployment(make_workdir)
    east = config.primary
    assert east.replica is not None
    with started(workdir) as up:
        view = up.wait_ready()
        token_text = _token(workdir, "bob")
        acked = []
        for amount in (10, 20):
            await _bid_until_acked(config, token_text, amount, 20)
            acked.append(amount)
        pid = next(r["redis"]["pid"] for r in view["regions"] if r["name"] == "us-east-1")
        assert pid
        os.kill(pid, signal.SIGSTOP)
        try:
            await until(lambda: _writer_redis(config, "us-east-1/replica"), 45, interval=0.2,
                        message="no in-region promotion")  # fmt: skip
            await _bid_until_acked(config, token_text, 30, 45)
            acked.append(30)
            assert await answer(config) == PRIMARY  # DNS never moved
            state = await summary(config)
            assert state["failover"]["writer"] == "us-east-1"
            assert state["failover"]["epoch"] == 2
            assert state["failover"]["failovers"] == 0
        finally:
            os.kill(pid, signal.SIGCONT)

        async def demoted() -> bool:
            redis = (await summary(config))["failover"]["redis"].get("us-east-1", {})
            return bool(redis.get("role") == "replica" and redis.get("link") == "up")

        await until(demoted, 30, interval=0.2, message="the stale writer was never demoted")
        await _bid_until_acked(config, token_text, 40, 30)
        acked.append(40)
        assert await _amounts_in(config, east.replica.address, east.replica.port) == acked
        west = config.secondary.redis
        await until(lambda: _holds(config, west.address, west.port, acked), 10, interval=0.2,
                    message="the other region's replica lacks acknowledged bids")  # fmt: skip
