"""A dead or frozen writer Redis behind healthy app servers, end to end (issue #11,
finding 6): `rideout up`, then the writer's Redis alone is killed (`rideout chaos
kill-redis`) or stopped (SIGSTOP). The canary's probe goes through the state store, so
the alarm goes off, the controller promotes the other region and DNS follows; nothing
acknowledged is lost, and the frozen writer, resumed, is fenced and demoted (no split
brain). Before the fix both faults went unnoticed: the canary's heartbeat never touched
Redis, the alarms stayed OK and nothing failed over.
"""

from __future__ import annotations

import json
import os
import re
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import connect

from rideout.config import Config, parse_config
from tests.cluster.conftest import rideout, started
from tests.cluster.test_failover_e2e import _answers, _next, answer, session, summary
from tests.conftest import until

pytestmark = pytest.mark.slow

PRIMARY = ["127.0.1.1", "127.0.1.2"]
SECONDARY = ["127.0.2.1", "127.0.2.2"]


def _config(workdir: Path) -> Config:
    shown = rideout("config", "show", "--json", "-c", "rideout.toml", cwd=workdir)
    return parse_config(json.loads(shown.stdout))


async def _believes(config: Config, address: str, epoch: int) -> bool:
    """Whether the app server at `address` believes in `epoch` (its ``rideout_epoch``,
    learned from the control plane's ``/v1/writer``, not read from its own Redis)."""
    async with httpx.AsyncClient(trust_env=False, timeout=2) as http:
        text = (await http.get(f"http://{address}:{config.app_port}/metrics")).text
    found = re.search(r"^rideout_epoch (\S+)$", text, re.M)
    return found is not None and float(found.group(1)) == epoch


def _token(workdir: Path, sub: str) -> str:
    return rideout("token", "issue", "--sub", sub, "-c", "rideout.toml", cwd=workdir).stdout.strip()


async def _failed_over(config: Config) -> dict[str, Any]:
    """Wait until DNS answers the secondary; the summary then."""
    await until(lambda: _answers(config, SECONDARY), 45, interval=0.1, message="no failover")
    state = await summary(config)
    assert state["failover"]["writer"] == "us-west-2"
    assert state["failover"]["epoch"] == 2
    assert state["alarms"]["us-east-1"]["state"] == "ALARM"
    return state


async def test_a_killed_writer_redis_is_detected_and_failed_over(
    make_workdir: Callable[..., Path],
) -> None:
    workdir = make_workdir()
    config = _config(workdir)
    with started(workdir) as up:
        up.wait_ready()
        token = _token(workdir, "alice")
        assert await answer(config) == PRIMARY
        before = await session(config, token, [10, 20], "redis-dead")
        assert before["region"] == "us-east-1"
        said = rideout("chaos", "kill-redis", "us-east-1", "-c", "rideout.toml", cwd=workdir)
        assert "killed redis-us-east-1" in said.stdout, said
        await _failed_over(config)
        during = await session(config, token, [30], "redis-dead")
        assert during["region"] == "us-west-2"
        assert (during["state"]["bid"], during["state"]["bids"]) == (30, 3)  # nothing lost

        # Mended: the old writer's Redis comes back as a replica; the writer fails back.
        rideout("chaos", "restore", "us-east-1", "-c", "rideout.toml", cwd=workdir)
        await until(lambda: _answers(config, PRIMARY), 60, interval=0.1, message="no failback")
        after = await session(config, token, [40], "redis-dead")
        assert after["region"] == "us-east-1"
        assert (after["state"]["bid"], after["state"]["bids"]) == (40, 4)


async def test_a_frozen_writer_redis_is_detected_failed_over_and_fenced_when_it_resumes(
    make_workdir: Callable[..., Path],
) -> None:
    workdir = make_workdir(failover={"auto_failback": False})
    config = _config(workdir)
    with started(workdir) as up:
        view = up.wait_ready()
        token = _token(workdir, "alice")
        before = await session(config, token, [10, 20], "redis-frozen")
        assert before["region"] == "us-east-1"
        pid = next(r["redis"]["pid"] for r in view["regions"] if r["name"] == "us-east-1")
        assert pid
        os.kill(pid, signal.SIGSTOP)
        try:
            await _failed_over(config)
            during = await session(config, token, [30], "redis-frozen")
            assert during["region"] == "us-west-2"
            assert (during["state"]["bid"], during["state"]["bids"]) == (30, 3)
            # What fences the frozen writer once it resumes: its region's servers follow
            # the control plane's epoch. They poll it; on a loaded machine the poll after
            # the move can come after the test's next step (CI saw a bid acknowledged at
            # epoch 1 then), so the test waits for it, as the claim below assumes.
            for address in PRIMARY:
                await until(lambda a=address: _believes(config, a, 2), 15, interval=0.2,
                            message=f"{address} never learned epoch 2")  # fmt: skip
        finally:
            os.kill(pid, signal.SIGCONT)
        # Resumed, the old writer still believes it is a master at epoch 1; its region's
        # servers know epoch 2, so a bid there is refused, never acknowledged.
        address = f"ws://{PRIMARY[0]}:{config.app_port}/ws?token={token}"
        async with connect(address, open_timeout=10) as ws:
            await ws.send(json.dumps({"action": "bid", "room": "redis-frozen", "amount": 99,
                                      "id": "split-brain"}))  # fmt: skip
            reply = await _next(ws, "ack", "error")
        assert reply["type"] == "error" and reply["code"] == "unavailable", reply  # noqa: PT018

        async def demoted() -> bool:
            redis = (await summary(config))["failover"]["redis"].get("us-east-1", {})
            return bool(redis.get("role") == "replica" and redis.get("link") == "up")

        await until(demoted, 30, interval=0.2, message="the stale writer was never demoted")
        state = await summary(config)
        assert state["failover"]["writer"] == "us-west-2"
        assert state["failover"]["failovers"] == 1
        final = await session(config, token, [], "redis-frozen")
        assert (final["state"]["bid"], final["state"]["bids"]) == (30, 3)  # 99 never applied
