"""A regional outage, end to end: `rideout up`, `rideout chaos`, a client that follows DNS.

Kill the primary region: the canary's silence raises the alarm, the health check turns,
the secondary's Redis is promoted with a higher epoch, and DNS answers the secondary; a
client that re-resolves the name finds its state there. Restore the primary: it catches
up, the writer moves back with a coordinated FAILOVER, DNS follows; no acknowledged bid
is lost (sync replication, degrading to async while the other region is down).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dns.asyncquery
import dns.exception
import dns.message
import dns.rdatatype
import pytest
from websockets.asyncio.client import connect

from rideout.config import Config, parse_config
from tests.cluster.conftest import rideout, started
from tests.conftest import control_plane_summary as summary
from tests.conftest import until

# On every server of the supported matrix (issue #27).
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("matrix_server")]


async def resolve(config: Config, name: str | None = None) -> list[str]:
    """One query for `name` (the app's name by default): its addresses, sorted."""
    query = dns.message.make_query(name or config.app_domain, dns.rdatatype.A)
    cp = config.control_plane
    response = await dns.asyncquery.udp(query, cp.address, port=cp.dns_port, timeout=2)
    return sorted(str(r) for rrset in response.answer for r in rrset)


async def answer(config: Config, name: str | None = None, attempts: int = 3) -> list[str]:
    """The name's addresses now, for a direct check. A query that times out says nothing
    about where the name points (a name server starved by the suite's other workers), so
    it is asked again, up to `attempts` times; an answer is never asked twice."""
    for _ in range(attempts - 1):
        with contextlib.suppress(dns.exception.Timeout):
            return await resolve(config, name)
    return await resolve(config, name)  # the last one's timeout is the test's failure


async def session(config: Config, token: str, bids: list[int], room: str) -> dict[str, Any]:
    """Resolve the name, connect to the first address, bid `bids` (acks required), and
    return the final state."""
    address = (await resolve(config))[0]
    async with connect(f"ws://{address}:{config.app_port}/ws?token={token}", open_timeout=5) as ws:
        await ws.send(json.dumps({"action": "getState", "room": room}))
        state = await _next(ws, "state")
        for amount in bids:
            # Like any client: `unavailable` (e.g. fenced while the server learns the new
            # epoch) means retry with the same id; idempotency makes that safe.
            bid = {"action": "bid", "room": room, "amount": amount, "id": f"bid-{amount}"}
            for _ in range(20):
                await ws.send(json.dumps(bid))
                reply = await _next(ws, "ack", "error")
                if reply["type"] == "ack":
                    break
                assert reply["code"] == "unavailable", reply
                await asyncio.sleep(0.2)
            assert reply["type"] == "ack", reply
            assert reply["accepted"], reply
        await ws.send(json.dumps({"action": "getState", "room": room}))
        state = await _next(ws, "state")
        return state


async def _next(ws: Any, *kinds: str) -> dict[str, Any]:
    while True:
        msg = json.loads(await asyncio.wait_for(ws.recv(), 10))
        if msg["type"] in kinds:
            return msg
        assert msg["type"] != "error", msg


async def test_region_outage_failover_and_failback(make_workdir: Callable[..., Path]) -> None:
    # sync replication; while the other region is down, acknowledge anyway (and count it)
    # rather than refuse every bid: replica_down = "degrade".
    workdir = make_workdir(
        failover={"replication": "sync", "sync_timeout": 0.3, "replica_down": "degrade"}
    )
    config = parse_config(
        json.loads(rideout("config", "show", "--json", "-c", "rideout.toml", cwd=workdir).stdout)
    )
    timing = config.timing
    primary = ["127.0.1.1", "127.0.1.2"]
    secondary = ["127.0.2.1", "127.0.2.2"]
    with started(workdir) as up:
        up.wait_ready()
        token = rideout(
            "token", "issue", "--sub", "alice", "-c", "rideout.toml", cwd=workdir
        ).stdout.strip()
        await until(lambda: _alarms_ok(config), 20, interval=0.1)
        assert await resolve(config) == primary
        before = await session(config, token, [10, 20, 30], "e2e")
        assert before["region"] == "us-east-1"

        # The primary region dies.
        assert (
            "killed us-east-1"
            in rideout("chaos", "kill", "us-east-1", "-c", "rideout.toml", cwd=workdir).stdout
        )
        detected = await until(lambda: _answers(config, secondary), 30, interval=0.1)
        # CloudWatch semantics with a silent canary: about N + 2 periods to alarm, plus a
        # period to complete and one evaluation round; generous bounds for a busy machine.
        expected = (timing.failover_datapoints + 4) * timing.canary_interval + timing.dns_ttl
        assert detected < expected + 10, (
            f"DNS moved after {detected:.1f} s (expected ~{expected:.1f} s)"
        )
        state = await summary(config)
        assert (state["failover"]["writer"], state["failover"]["epoch"]) == ("us-west-2", 2)
        assert state["alarms"]["us-east-1"]["state"] == "ALARM"

        # The client re-resolves, lands in the secondary, finds every acknowledged bid.
        during = await session(config, token, [40], "e2e")
        assert during["region"] == "us-west-2"
        assert during["state"]["bid"] == 40
        assert during["state"]["bids"] == 4
        assert during["position"]["epoch"] == 2

        # The primary comes back: it catches up, and the writer moves back to it.
        rideout("chaos", "restore", "us-east-1", "-c", "rideout.toml", cwd=workdir)
        await until(lambda: _answers(config, primary), 60, interval=0.1)
        state = await summary(config)
        assert (state["failover"]["writer"], state["failover"]["epoch"]) == ("us-east-1", 3)
        kinds = [e["kind"] for e in state["failover"]["events"]]
        assert kinds[-1] == "fail-back"
        assert "coordinated FAILOVER" in state["failover"]["events"][-1]["message"]

        after = await session(config, token, [50], "e2e")
        assert after["region"] == "us-east-1"
        assert (after["state"]["bid"], after["state"]["bids"]) == (
            50,
            5,
        )  # no acknowledged bid lost
        assert after["position"]["epoch"] == 3
        report = json.loads(rideout("status", "--json", "-c", "rideout.toml", cwd=workdir).stdout)
        assert report["running"]


async def _alarms_ok(config: Config) -> bool:
    state = await summary(config)
    return {a["state"] for a in state["alarms"].values()} == {"OK"}


async def _answers(config: Config, addresses: list[str]) -> bool:
    try:
        return await resolve(config) == addresses
    except dns.exception.DNSException:
        return False
