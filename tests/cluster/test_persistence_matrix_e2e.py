"""Nothing acknowledged is lost across restarts, on every server of the supported matrix
(issue #27): `rideout up` on Valkey 8.1, Redis 7.0 and Redis 6.2 in turn.

What a user writes through rideout's scripts (Redis 7 and Valkey write a script's
effects to the AOF as MULTI/EXEC: the writes that were silently dropped on reload) and
through plain commands: a room's bids, a waiting room's event and positions, an
``Idempotency-Key`` record and a token revocation. They must come back after SIGKILL of
the writer's Redis alone, SIGKILL of every process (the supervisor included), and a clean
``down``/``up``; in both regions. A writer's Redis that comes back without its disk is
reported (``dataset-lost``) and not trusted: the data is served from the other region.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis

from rideout import routes
from rideout.config import Config, RegionConfig, parse_config
from rideout.routes import control_plane_url
from rideout.store import keys
from rideout.store.acl import RedisRole
from rideout.store.auction import AuctionSettings, AuctionStore
from rideout.store.revocations import RevocationStore
from rideout.waitingroom.model import EventSettings, InletSettings
from rideout.waitingroom.store import RoomStore
from tests.cluster.conftest import rideout, started
from tests.conftest import as_user, replicated

# Three `up`s, a SIGKILL of everything and a lost disk: 60-80 s on a quiet machine, past
# the suite's 120 s on a loaded one (each step has its own WITHIN and says what it waited for).
pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

WITHIN = 45.0
BIDS = 12


def _load(workdir: Path) -> Config:
    shown = rideout("config", "show", "--json", "-c", "rideout.toml", cwd=workdir)
    return parse_config(json.loads(shown.stdout))


def _summary(workdir: Path) -> dict[str, Any]:
    result = rideout("status", "--json", "-c", "rideout.toml", cwd=workdir)
    assert result.returncode == 0, result.stderr
    view: dict[str, Any] = json.loads(result.stdout)
    failover: dict[str, Any] = view["control_plane"]["summary"]["body"]["failover"]
    return failover


def _pid(workdir: Path, name: str) -> int:
    state = json.loads((workdir / ".rideout" / "run" / "up.json").read_text())
    pid: int = next(p["pid"] for p in state["processes"] if p["name"] == name)
    assert pid > 0, f"{name} does not run"
    return pid


def _client(config: Config, region: RegionConfig, role: RedisRole) -> aioredis.Redis:
    return aioredis.Redis(
        host=region.redis.address, port=region.redis.port, decode_responses=True,
        **as_user(config, role),
    )  # fmt: skip


async def _write_everything(config: Config) -> dict[str, Any]:
    """Write each kind of state through rideout's own stores on the writer (the primary
    at a first start); what to find again."""
    app = _client(config, config.primary, RedisRole.APP)
    controller = _client(config, config.primary, RedisRole.CONTROLLER)
    try:
        auction = AuctionStore(app, AuctionSettings(), config.primary.name)
        for n in range(1, BIDS + 1):
            result = await auction.bid("persisted", f"user-{n % 3}", n * 5, f"req-{n}", epoch=1)
            assert result.accepted, result
        room = RoomStore(app, region=config.primary.name)
        event = EventSettings(
            "persisted-event", validity=600, inlet=InletSettings("max_size", max_size=100)
        )
        await room.create_event(event)
        positions = [await room.assign(event.event_id) for _ in range(3)]
        record = keys.idempotency("private", "key-1", "operator")
        await app.set(record, '{"status":201}', px=600_000)
        now = int(time.time() * 1000)
        revocations = RevocationStore(controller, config.primary.name)
        await revocations.record(
            "sub:mallory", until_ms=now, expires_ms=now + 600_000, at_ms=now, now_ms=now
        )
        await replicated(app)
        return {
            "event": event,
            "positions": [(p.request_id, p.queue_number) for p in positions],
            "record": record,
        }
    finally:
        await app.aclose()
        await controller.aclose()


async def _bid_until_it_fails(config: Config, epoch: int, acked: list[int]) -> str:
    """Bid in room "inflight" on the writer, one after another, until the writer goes:
    every amount the store acknowledged goes into `acked`. Why it stopped, in words."""
    app = _client(config, config.primary, RedisRole.APP)
    auction = AuctionStore(app, AuctionSettings(), config.primary.name)
    n = len(acked)
    try:
        while True:
            n += 1
            try:
                result = await auction.bid(
                    "inflight", "bidder", n * 5, f"inflight-{n}", epoch=epoch
                )
            except Exception as exc:  # the kill: whatever the client raises, bidding ends
                return f"{type(exc).__name__}: {exc}"
            assert result.accepted, result
            acked.append(n * 5)
    finally:
        await app.aclose(close_connection_pool=True)


async def _acked_bids_are_there(config: Config, region: RegionConfig, acked: list[int]) -> None:
    app = _client(config, region, RedisRole.APP)
    try:
        entries = await app.xrange(keys.room_stream("inflight"))
        amounts = [json.loads(fields["state"])["bid"] for _, fields in entries]
        missing = sorted(set(acked) - set(amounts))
        assert not missing, f"{region.name}: {len(missing)} acknowledged bids lost: {missing[:5]}"
    finally:
        await app.aclose()


async def _everything_is_there(config: Config, region: RegionConfig, wrote: dict[str, Any]) -> None:
    app = _client(config, region, RedisRole.APP)
    try:
        entries = await app.xrange(keys.room_stream("persisted"))
        assert len(entries) == BIDS, f"{region.name}: {len(entries)} of {BIDS} bids"
        assert f'"bid":{BIDS * 5},' in entries[-1][1]["state"]
        room = RoomStore(app, region=region.name)
        assert await room.get_event(wrote["event"].event_id) == wrote["event"]
        for request_id, number in wrote["positions"]:
            assert (await room.position(wrote["event"].event_id, request_id)).queue_number == number
        assert await app.get(wrote["record"]) == '{"status":201}'
        version = await RevocationStore(app, region.name).version()
        assert version is not None, f"{region.name}: the revocation is gone"
    finally:
        await app.aclose()


async def _eventually(check: Callable[[], Any], what: str) -> None:
    deadline = time.monotonic() + WITHIN
    last: BaseException | None = None
    while time.monotonic() < deadline:
        try:
            await check()
            return
        except (AssertionError, OSError, Exception) as exc:  # a server still starting
            last = exc
        await asyncio.sleep(0.3)
    raise AssertionError(f"{what}: not within {WITHIN} s ({last!r})")


async def _writes_accepted(config: Config, epoch: int) -> None:
    """The writer's Redis takes a bid again: a restarted Redis is fenced (a replica of
    itself, READONLY) until the control plane has compared it and promoted it."""
    app = _client(config, config.primary, RedisRole.APP)
    try:
        auction = AuctionStore(app, AuctionSettings(), config.primary.name)
        result = await auction.bid(
            "probe", "prober", 5, f"probe-{time.monotonic_ns()}", epoch=epoch
        )
        assert result.accepted, result
    finally:
        await app.aclose()


async def _at_least(bidding: asyncio.Task[str], acked: list[int], count: int) -> None:
    if bidding.done():  # not retried: bidding ended before the kill
        pytest.fail(f"bidding stopped after {len(acked)} bids, before the kill: {bidding.result()}")
    assert len(acked) >= count, len(acked)


async def _in_both_regions(config: Config, wrote: dict[str, Any], when: str) -> None:
    for region in config.regions:
        await _eventually(
            lambda r=region: _everything_is_there(config, r, wrote), f"{when}, {region.name}"
        )


async def test_nothing_is_lost_across_kills_down_up_and_a_lost_disk(
    matrix_server: Path, make_workdir: Callable[..., Path]
) -> None:
    workdir = make_workdir()
    config = _load(workdir)
    with started(workdir) as up:
        up.wait_ready()
        wrote = await _write_everything(config)
        # SIGKILL of the writer's Redis alone: restarted fenced, compared, trusted again.
        os.kill(_pid(workdir, f"redis-{config.primary.name}"), signal.SIGKILL)
        await _in_both_regions(config, wrote, "after SIGKILL of the writer's Redis")
        failover = _summary(workdir)
        assert (failover["writer"], failover["datasets_lost"], failover["lost_writes"]) == (
            config.primary.name, 0, 0,
        ), failover["events"]  # fmt: skip
        await _eventually(
            lambda: _writes_accepted(config, failover["epoch"]),
            "a bid accepted by the writer's restarted Redis",
        )
        # SIGKILL of `rideout up` in the middle of bidding: every process dies with it
        # (Redis by SIGKILL too), while bids are in flight.
        acked: list[int] = []
        bidding = asyncio.create_task(_bid_until_it_fails(config, failover["epoch"], acked))
        await _eventually(
            lambda: _at_least(bidding, acked, 50), "bids acknowledged before the kill"
        )
        up.proc.kill()
        up.wait_exit()
        stopped = await asyncio.wait_for(bidding, WITHIN)
    with started(workdir) as up:
        up.wait_ready()
        await _in_both_regions(config, wrote, "after SIGKILL of everything, then up")
        # The writer's own AOF kept every bid it acknowledged (its replica may lag by the
        # last few: async replication's window, which these direct bids did not WAIT for).
        await _eventually(
            lambda: _acked_bids_are_there(config, config.primary, acked),
            f"the {len(acked)} bids acknowledged until the kill ({stopped})",
        )
        down = rideout("down", "-c", "rideout.toml", cwd=workdir)
        assert down.returncode == 0, down.stderr
        assert up.wait_exit() == 0
    with started(workdir) as up:
        up.wait_ready()
        await _in_both_regions(config, wrote, "after down, then up")
        assert _summary(workdir)["datasets_lost"] == 0
        # No server refused a line of its own AOF (the CRITICAL lines of redis/redis#14541).
        for log in sorted(config.logs_dir.glob("redis-*.log")):
            refused = [line for line in log.read_text().splitlines() if "CRITICAL" in line]
            assert not refused, f"{log.name}: {refused[:3]}"

        # Then the writer's disk goes (the running server keeps its open files), and the
        # process: it comes back empty, is reported, and is not trusted.
        shutil.rmtree(config.region_data_dir(config.primary.name))
        os.kill(_pid(workdir, f"redis-{config.primary.name}"), signal.SIGKILL)

        async def reported() -> None:
            failover = _summary(workdir)
            assert failover["datasets_lost"] == 1, failover["events"]

        await _eventually(reported, "the lost dataset reported")
        # ... also to Prometheus (RideoutRedisDatasetLost pages on it).
        async with httpx.AsyncClient(trust_env=False) as http:
            metrics = (await http.get(control_plane_url(config, routes.METRICS))).text
        assert "rideout_redis_datasets_lost 1.0" in metrics.splitlines()
        failover = _summary(workdir)
        kinds = [e["kind"] for e in failover["events"]]
        # Served from what the other region holds (and, once the emptied Redis has
        # resynced from it, failed back by a coordinated FAILOVER, which loses nothing).
        lost = kinds.index("dataset-lost")
        assert kinds[lost + 1] == "fail-over", failover["events"]
        assert failover["lost_writes"] == 0
        await _in_both_regions(config, wrote, "after the writer's disk was lost")
        shown = rideout("status", "-c", "rideout.toml", cwd=workdir)
        assert "came back without all its data" in " ".join(shown.stdout.split()), shown.stdout
        up.proc.send_signal(signal.SIGTERM)
        assert up.wait_exit() == 0
