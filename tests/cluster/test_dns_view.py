"""The control plane hands its DNS decision to `rideout dns` through the view file, and a
restarted control plane hands over the same decision (the answer does not flip)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path

from rideout.config import Config
from rideout.controlplane.runtime import VIEW_REPUBLISH, ControlPlane
from rideout.dns.feed import DnsFollower, ViewFile
from rideout.dns.records import DnsZoneConfig
from rideout.health.canary import ProbeResult, metric_data
from rideout.store.acl import RedisRole
from rideout.store.client import probe_client
from rideout.store.replication import ensure_epoch
from tests.conftest import FakeClock, credentials, running_redis_pair

P, S = "us-east-1", "us-west-2"


async def round_of(plane: ControlPlane, clock: FakeClock, *regions: str) -> None:
    """One period in which `regions` report healthy (the others are silent)."""
    clock.now += plane.period
    for region in regions:
        zones = plane.config.region(region).zones
        plane.put_metric_data(
            metric_data([ProbeResult(region, z.name, True, 0.01, None, clock.now) for z in zones])
        )
    await plane.evaluate()


@contextlib.asynccontextmanager
async def redis_with_epoch(config: Config) -> AsyncIterator[None]:
    """Both regions' Redis running, the primary's epoch set (as `rideout up` leaves it)."""
    async with running_redis_pair(config):
        writer = probe_client(
            config.primary.redis.address, config.primary.redis.port,
            credentials=credentials(config, RedisRole.CONTROLLER),
        )  # fmt: skip
        try:
            await ensure_epoch(writer)
        finally:
            await writer.aclose()
        yield


def answer(follower: DnsFollower) -> str | None:
    follower.refresh()
    return follower.view.answer(follower.zone).region if follower.view else None


async def test_the_view_follows_the_writer_and_survives_a_restart(
    make_config: Callable[..., Config], tmp_path: Path
) -> None:
    config = make_config()
    clock = FakeClock(1_800_000_000.0)
    feed = ViewFile(tmp_path / "dns-view.json")
    follower = DnsFollower(DnsZoneConfig.from_config(config), feed)
    async with redis_with_epoch(config):
        plane = ControlPlane(config, clock=clock, dns_feed=feed)
        try:
            await plane.start()
            assert not plane.dns.running  # DNS is served elsewhere
            assert answer(follower) == P  # published at start, before any round
            for _ in range(12):
                await round_of(plane, clock, P, S)
            assert answer(follower) == P
            for _ in range(20):  # the primary goes silent
                await round_of(plane, clock, S)
                if answer(follower) == S:
                    break
            assert answer(follower) == S
            assert plane.summary()["failover"]["writer"] == S
        finally:
            await plane.stop()
        published = follower.view

        clock.now += 30  # down for a while; the view stays as it was meanwhile
        assert answer(follower) == S
        again = ControlPlane(config, clock=clock, dns_feed=feed)
        try:
            await again.start()
            assert answer(follower) == S  # the restored decision, not a fresh one
            for _ in range(4):
                await round_of(again, clock, S)
                assert answer(follower) == S
        finally:
            await again.stop()
        assert follower.view is not None
        assert published is not None
        assert follower.view.same_decision(published)


async def test_an_unchanged_view_is_republished_so_its_age_tells_staleness(
    make_config: Callable[..., Config], tmp_path: Path
) -> None:
    """Every VIEW_REPUBLISH seconds the same decision is published again: the DNS
    process's view age stays small while the control plane runs, and its precomputed
    replies are not rebuilt for it (the generation is the decision, not the time)."""
    config = make_config()
    clock = FakeClock(1_800_000_000.0)
    feed = ViewFile(tmp_path / "dns-view.json")
    follower = DnsFollower(DnsZoneConfig.from_config(config), feed, clock=clock)
    async with redis_with_epoch(config):
        plane = ControlPlane(config, clock=clock, dns_feed=feed)
        try:
            await plane.start()
            assert answer(follower) == P
            generation = follower.generation()
            ages = []
            for _ in range(int(3 * VIEW_REPUBLISH / plane.period)):
                await round_of(plane, clock, P, S)
                follower.refresh()
                ages.append(follower.age())
            assert max(a for a in ages if a is not None) <= VIEW_REPUBLISH + plane.period
            assert follower.generation() == generation
        finally:
            await plane.stop()
        clock.now += 60  # the control plane is gone: the view ages, and stays in force
        follower.refresh()
        assert (follower.age() or 0) >= 60
        assert answer(follower) == P
