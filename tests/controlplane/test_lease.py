"""The control plane's lease and shared state, against a real (locked) redis-server, as
the controller user; and two control planes sharing one lease."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
import redis.asyncio as aioredis
from prometheus_client import generate_latest
from redis.exceptions import NoPermissionError

from rideout.config import Config, parse_config
from rideout.controlplane.lease import LeaseView, RedisLease, describe_holder, lease_deadline
from rideout.controlplane.runtime import ControlPlane
from rideout.dns.feed import DnsView
from rideout.store import keys
from rideout.store.acl import RedisRole, load_credentials, load_or_create_users
from rideout.store.client import state_client
from rideout.store.embedded import RedisSpec
from tests.conftest import (
    FakeClock,
    config_data,
    free_port,
    locked_auth,
    running_redis,
    running_redis_pair,
    until,
)


@pytest_asyncio.fixture
async def lease_redis(tmp_path: Path) -> AsyncIterator[tuple[RedisSpec, Path]]:
    """A locked redis-server and the keys directory with its users' passwords."""
    address = "127.0.1.100"
    keys_dir = tmp_path / "keys"
    spec = RedisSpec("redis", address, free_port(address), tmp_path, tmp_path / "redis.log",
                     auth=locked_auth(keys_dir))  # fmt: skip
    async with running_redis(spec):
        yield spec, keys_dir


def client(
    spec: RedisSpec, keys_dir: Path, role: RedisRole = RedisRole.CONTROLLER
) -> aioredis.Redis:
    return state_client(spec.address, spec.port, credentials=load_credentials(keys_dir, role))


def test_deadline_keeps_a_third_back_and_the_standby_says_who_holds_it() -> None:
    assert lease_deadline(100.0, 6.0) == 104.0
    view = LeaseView(False, "cp-a", 3, 1_700_000_000.0)
    assert describe_holder(view) == "standby: lease held by cp-a (fence 3) until 22:13:20 UTC"
    assert "nobody holds" in describe_holder(LeaseView(False, None, None, None))
    assert "does not answer" in describe_holder(LeaseView(False, None, None, None, "refused"))


async def test_one_holder_fenced_renewed_taken_over_and_released(
    lease_redis: tuple[RedisSpec, Path],
) -> None:
    spec, keys_dir = lease_redis
    ca, cb = client(spec, keys_dir), client(spec, keys_dir)
    clock = FakeClock(0.0)
    a = RedisLease(ca, "cp-a", 0.6, clock=clock)
    b = RedisLease(cb, "cp-b", 0.6)
    try:
        first = await a.tick()
        assert (first.mine, first.holder, first.fence) == (True, "cp-a", 1)
        assert a.held
        seen = await b.tick()
        assert (seen.mine, seen.holder, seen.fence) == (False, "cp-a", 1)
        assert await b.may_act() is not None
        assert not await b.save_state('{"by": "b"}')  # a standby's write never lands
        assert await a.may_act() is None
        assert await a.save_state('{"by": "a"}')
        assert await b.load_state() == '{"by": "a"}'

        # a's process stalls past its deadline: it may not act on what it last knew.
        clock.advance(0.5)
        assert not a.held

        # ...and past the TTL: b takes the lease with a higher fence; a's late write is
        # refused by the lease script, and a learns it lost at its next round.
        await until(lambda: _taken(b), 10, interval=0.1, message="b takes the expired lease")
        assert b.view.fence == 2
        assert not await a.save_state('{"by": "stale a"}')
        assert await b.load_state() == '{"by": "a"}'
        lost = await a.tick()
        assert (lost.mine, lost.holder) == (False, "cp-b")

        # A clean stop gives it up at once.
        await b.release()
        assert await ca.get(keys.CONTROL_PLANE_LEASE) is None
        again = await a.tick()
        assert (again.mine, again.fence) == (True, 3)
    finally:
        await ca.aclose()
        await cb.aclose()


async def _taken(lease: RedisLease) -> bool:
    return (await lease.tick()).mine


async def test_only_the_controller_user_may_touch_the_lease(
    lease_redis: tuple[RedisSpec, Path],
) -> None:
    spec, keys_dir = lease_redis
    for role in (RedisRole.MONITOR, RedisRole.APP):
        other = client(spec, keys_dir, role)
        try:
            with pytest.raises(NoPermissionError):
                await other.get(keys.CONTROL_PLANE_LEASE)
        finally:
            await other.aclose()


class _Views:
    def __init__(self) -> None:
        self.views: list[DnsView] = []

    def publish(self, view: DnsView) -> None:
        self.views.append(view)


def _external(tmp_path: Path) -> Config:
    """External mode over the default topology's Redis, the primary holding the lease,
    the users' passwords read from files as a mounted secret would be."""
    data = config_data(tmp_path / ".rideout")
    secrets = tmp_path / ".rideout" / "keys" / "redis"
    r = data["regions"][0]["redis"]
    data["mode"] = "external"
    data["control_plane"].update(
        state_redis_url=f"redis://{r['address']}:{r['port']}", lease_ttl=3.0
    )  # 3 s, renewed every second: a loop stall under load shorter than 2 s keeps it
    data["redis"] = {f"{role}_password_file": str(secrets / f"{role}.password")
                     for role in ("app", "controller", "monitor")}  # fmt: skip
    config = parse_config(data)
    load_or_create_users(config.keys_dir)
    return config


@contextlib.asynccontextmanager
async def two_planes(config: Config) -> AsyncIterator[tuple[ControlPlane, ControlPlane]]:
    """The regions' Redis, and two control planes started in turn ("one" first: it
    takes the lease), both stopped however the test ends."""
    async with running_redis_pair(config):
        one = ControlPlane(config, dns_feed=_Views(), instance="one")
        two = ControlPlane(config, dns_feed=_Views(), instance="two")
        try:
            await one.start()
            await two.start()
            assert one.readiness()[0]
            assert not two.readiness()[0]
            yield one, two
        finally:
            await one.stop()
            await two.stop()


async def test_two_control_planes_one_acts_the_other_takes_over_with_its_state(
    tmp_path: Path,
) -> None:
    async with two_planes(_external(tmp_path)) as (one, two):
        _, body = two.readiness()
        assert body["message"].startswith("standby: lease held by one")
        assert two.summary()["lease"]["role"] == "standby"
        # The holder bootstraps the writer and saves it; the standby follows.
        await until(lambda: two.controller.state is not None, 15, message="standby reloads")
        assert two.controller.writer == "us-east-1"
        started = [e.kind for e in two.controller.state.events]  # type: ignore[union-attr]
        assert started[0] == "start"

        await one.stop()  # saves, gives the lease up
        await until(lambda: two.readiness()[0], 15, message="two takes over")
        assert two.summary()["lease"]["holder"] == "two"
        await until(
            lambda: "rideout_control_plane_lease_fence 2.0"
            in generate_latest(two.registry).decode(),
            10, message="the round that took the lease updates the metrics",
        )  # fmt: skip
        assert "rideout_control_plane_lease_held 1.0" in generate_latest(two.registry).decode()
        assert two.controller.state is not None
        assert two.controller.state.events[0].kind == "start"  # one's, carried over


async def test_the_lease_is_kept_between_rounds_longer_than_it(tmp_path: Path) -> None:
    """Rounds 30 s apart, a lease of 9 s: renewed in between, the standby never gets it.

    The lease is 9 s (renewed every 3 s), not shorter: both planes share this test's
    event loop, and a stall longer than two thirds of the TTL lets the standby take it,
    correctly. CI ran a 1.5 s lease out, and then a 3 s one, in a stall of 4.4 s."""
    config = _external(tmp_path)
    config = dataclasses.replace(
        config,
        timing=dataclasses.replace(config.timing, canary_interval=30.0, canary_timeout=1.0),
        control_plane=dataclasses.replace(config.control_plane, lease_ttl=9.0),
    )
    async with two_planes(config) as (one, two):
        lease = one.lease
        assert lease is not None
        renewals = 0
        tick = lease.tick

        async def counted() -> LeaseView:
            nonlocal renewals
            renewals += 1
            return await tick()

        async def no_round() -> None:  # a round renews too: none is counted
            return None

        lease.tick = counted  # type: ignore[method-assign]
        one.evaluate = no_round  # type: ignore[method-assign]
        # A third of a TTL past the TTL with no round after the one under way: renewed
        # every third of the TTL, the lease now expires later than one taken at start.
        taken_at = time.time()
        await asyncio.sleep(lease.ttl * 4 / 3)
        assert renewals >= 4, renewals
        assert lease.view.mine
        assert lease.view.expires_at is not None
        assert lease.view.expires_at > taken_at + lease.ttl
        assert lease.view.fence == 1  # never lost, never taken again
        assert not two.readiness()[0]
