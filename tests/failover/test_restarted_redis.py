"""A restarted Redis never wipes the others: it comes back fenced, and the controller
trusts it again only if it holds everything another Redis holds (issue #27).

Each test runs on every server of the supported matrix (``matrix_server``), since a
promise that held on one build (Redis 6.2) was broken on the others (7.0, Valkey 8.1).
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest_asyncio
import redis.asyncio as aioredis

from rideout.config import Config
from rideout.failover.controller import ControllerState, FailoverController
from rideout.store import keys
from rideout.store.acl import RedisRole
from rideout.store.auction import AuctionSettings, AuctionStore
from rideout.store.embedded import EmbeddedRedis, server_info
from rideout.store.functions import LIBRARY_NAME
from rideout.store.replication import compare, is_fenced, replication_status
from tests.conftest import as_user, replicated, until
from tests.failover.conftest import Pair

P, S = "us-east-1", "us-west-2"
HEALTHY = {P: True, S: True}


async def _bids(client: aioredis.Redis, room: str, count: int) -> None:
    for n in range(count):
        await client.xadd(keys.room_stream(room), {"state": f'{{"n":{n}}}', "epoch": "1"})


async def _synced(p: aioredis.Redis, count: int) -> None:
    await replicated(p)


@dataclass
class Restarting:
    """A running pair in sync (conftest's :func:`pair`), a controller over it, and the
    Redis servers a test starts again (each stopped at the end)."""

    config: Config
    primary: EmbeddedRedis
    replica: EmbeddedRedis
    p: aioredis.Redis
    s: aioredis.Redis
    controller: FailoverController
    restarted: list[EmbeddedRedis] = field(default_factory=list)

    async def written(self, count: int) -> None:
        """The controller's first round, then `count` room changes on the writer that
        the replica acknowledged."""
        await self.controller.tick(HEALTHY)
        await _bids(self.p, "lot", count)
        await _synced(self.p, count)

    async def start_fenced(self) -> EmbeddedRedis:
        """The primary's Redis started again on its data, fenced as the supervisor does."""
        again = EmbeddedRedis(replace(self.primary.spec, fenced=True))
        await again.start()
        self.restarted.append(again)
        return again

    async def restart_fenced(self, *, wipe: bool = False) -> EmbeddedRedis:
        """Stop the primary's Redis (SIGKILL, as a crash), lose its disk if `wipe`, and
        start it fenced."""
        await self.primary.stop(timeout=0)
        if wipe:
            shutil.rmtree(self.primary.spec.data_dir)
        return await self.start_fenced()


@pytest_asyncio.fixture
async def restarting(matrix_server: Path, pair: Pair) -> AsyncIterator[Restarting]:
    """On each server of the matrix (``matrix_server`` first: the pair runs it)."""
    controller = FailoverController(pair.config)
    it = Restarting(pair.config, pair.primary, pair.replica, pair.p, pair.s, controller)
    try:
        yield it
    finally:
        await controller.close()
        for server in it.restarted:
            await server.stop()


async def _tick_until_it_answers(controller: FailoverController, healthy: dict[str, bool]) -> None:
    """One round once the controller's connection to the restarted Redis is new (the
    first round after a restart may find the old connection reset: unreachable)."""
    for _ in range(20):
        await controller.tick(healthy)
        if all(view.reachable for view in controller.redis.values()):
            return
    raise AssertionError(f"a Redis stayed unreachable: {controller.redis}")


async def _stream_length(client: aioredis.Redis, room: str) -> int:
    return int(await client.xlen(keys.room_stream(room)))


async def test_a_writer_back_without_its_data_never_wipes_its_replica(
    restarting: Restarting,
) -> None:
    """The writer's disk is lost and its Redis restarts empty: it comes back a read-only
    replica of itself, its replica keeps every bid (it cannot sync from a fenced Redis),
    and the controller moves the writer to the replica and counts a dataset lost."""
    primary, p, s, controller = (
        restarting.primary, restarting.p, restarting.s, restarting.controller
    )  # fmt: skip
    await restarting.written(25)
    await restarting.restart_fenced(wipe=True)
    fenced = await replication_status(p)
    assert is_fenced(fenced, f"{primary.spec.address}:{primary.spec.port}")
    assert await p.dbsize() == 0
    await asyncio.sleep(1.5)  # the replica retries its link: refused, not wiped
    assert await _stream_length(s, "lot") == 25

    found = await compare(p, s)
    assert (found.lost, found.behind, found.lacks, found.extra) == (True, True, 25, 0)

    await _tick_until_it_answers(controller, HEALTHY)
    status = controller.status()
    kinds = [e["kind"] for e in status["events"]]
    assert kinds == ["start", "dataset-lost", "fail-over"], status["events"]
    assert "restarted without all its data" in status["events"][-1]["message"]
    assert (controller.writer, controller.epoch) == (S, 2)
    assert (status["datasets_lost"], status["lost_writes"]) == (1, 0)
    assert (await replication_status(s)).role == "master"

    # The next round makes the emptied Redis follow the new writer: all back.
    await controller.tick(HEALTHY)
    await until(lambda: _length_is(p, "lot", 25), message="the old writer resynced")
    assert await _stream_length(s, "lot") == 25


async def test_a_writer_back_behind_its_replica_is_not_trusted(restarting: Restarting) -> None:
    """Its AOF lost the newest writes (a truncated file, fsync's last second on a host
    crash): it comes back with an epoch but behind; the writer moves to the replica."""
    primary, p, s, controller = (
        restarting.primary, restarting.p, restarting.s, restarting.controller
    )  # fmt: skip
    old = primary.spec.data_dir.with_name("old-aof")
    await restarting.written(10)
    await primary.stop()  # SIGTERM: the AOF is complete on disk; keep a copy
    shutil.copytree(primary.spec.data_dir, old)
    await primary.start()
    await _tick_until_it_answers(controller, HEALTHY)  # reconciles the pair again
    await until(lambda: _linked(s), message="the replica followed the writer again")
    await _bids(p, "lot", 5)
    await _synced(p, 15)
    await primary.stop(timeout=0)
    shutil.rmtree(primary.spec.data_dir)
    shutil.copytree(old, primary.spec.data_dir)  # the older AOF: 5 bids short
    await restarting.start_fenced()
    assert await _stream_length(p, "lot") == 10

    await _tick_until_it_answers(controller, HEALTHY)
    status = controller.status()
    assert [e["kind"] for e in status["events"]][-2:] == ["behind", "fail-over"]
    assert "(5 room changes it lacks)" in status["events"][-2]["message"]
    assert controller.writer == S
    assert status["datasets_lost"] == 1
    await controller.tick(HEALTHY)
    await until(lambda: _length_is(p, "lot", 15), message="the old writer resynced")


async def test_a_writer_back_with_all_its_data_is_promoted_again(restarting: Restarting) -> None:
    """SIGKILL of the writer's Redis alone, mid-bid: it restarts fenced with every
    acknowledged bid (the AOF replays the bid script's effects, which Redis 7 and Valkey
    write as MULTI/EXEC: before the default user had the rights to replay them, 7.0 and
    8.1 came back empty), so it is the writer again; nothing moves, nothing is counted."""
    config, primary, p, s, controller = (
        restarting.config, restarting.primary, restarting.p, restarting.s, restarting.controller
    )  # fmt: skip
    app = aioredis.Redis(
        host=primary.spec.address, port=primary.spec.port, decode_responses=True,
        **as_user(config, RedisRole.APP),
    )  # fmt: skip
    store = AuctionStore(app, AuctionSettings(), P)
    try:
        await controller.tick(HEALTHY)
        for n in range(1, 21):
            result = await store.bid("lot", f"user-{n % 4}", n * 10, f"r{n}", epoch=1)
            assert result.accepted, result
        await _synced(p, 20)
        await restarting.restart_fenced()
        assert await _stream_length(p, "lot") == 20  # the AOF replayed whole
        newest = await p.xrevrange(keys.room_stream("lot"), count=1)
        assert '"bid":200,"bidder":"user-0","bids":20' in newest[0][1]["state"], newest
        await _tick_until_it_answers(controller, HEALTHY)
        status = controller.status()
        assert [e["kind"] for e in status["events"]] == ["start", "promote"]
        assert (controller.writer, status["datasets_lost"], status["lost_writes"]) == (P, 0, 0)
        assert (await replication_status(p)).role == "master"
        await controller.tick(HEALTHY)
        await until(lambda: _linked(s), message="the replica follows the writer again")
        assert await _stream_length(s, "lot") == 20
    finally:
        await app.aclose()


async def test_a_stale_writer_back_fenced_is_demoted_and_its_writes_counted(
    restarting: Restarting,
) -> None:
    """After a failover, the old writer's Redis restarts fenced holding a write that
    never reached the new writer (async mode): counted in lost_writes, then it follows."""
    primary, p, s, controller = (
        restarting.primary, restarting.p, restarting.s, restarting.controller
    )  # fmt: skip
    await restarting.written(3)
    await s.replicaof("NO", "ONE")
    await _bids(p, "lot", 1)  # never replicated
    await primary.stop()
    await controller.tick({P: False, S: True})
    assert controller.writer == S
    await restarting.start_fenced()
    await _tick_until_it_answers(controller, {P: False, S: True})
    status = controller.status()
    assert status["events"][-1]["kind"] == "follow"
    assert "restarted (fenced)" in status["events"][-1]["message"]
    assert status["lost_writes"] == 1


async def test_a_writer_back_empty_with_nobody_else_waits(restarting: Restarting) -> None:
    """The writer's Redis is back without its data and no other Redis answers: it is not
    promoted (when the others return it would be their source of a sync)."""
    p, controller = restarting.p, restarting.controller
    controller.state = ControllerState(writer=P, epoch=3)  # before its first round
    await restarting.replica.stop()
    await restarting.restart_fenced(wipe=True)
    for _ in range(20):  # until its connection to the restarted Redis is new
        await controller.tick({P: True, S: False})
        if controller.redis[P].reachable:
            break
    status = controller.status()
    assert status["events"][-1]["kind"] == "wait"
    assert "no other Redis answers" in status["events"][-1]["message"]
    assert (await replication_status(p)).role == "replica"


async def _length_is(client: aioredis.Redis, room: str, count: int) -> bool:
    return await _stream_length(client, room) == count


async def _linked(client: aioredis.Redis) -> bool:
    view = await replication_status(client)
    return view.role == "replica" and view.link == "up"


async def test_the_controller_loads_the_function_library_on_a_writer_without_it(
    matrix_server: Path, restarting: Restarting
) -> None:
    """A writer started from data older than the library (an upgrade), or set up by hand
    in external mode, has no rideout functions: the controller loads them (7.0+) before
    the app servers find them missing; after a move, on the new writer too."""
    p, controller = restarting.p, restarting.controller
    functions = server_info(matrix_server).key_permissions
    if functions:
        await p.function_delete(LIBRARY_NAME)
    await controller.tick(HEALTHY)
    kinds = [e["kind"] for e in controller.status()["events"]]
    assert kinds == (["start", "library"] if functions else ["start"])
    if functions:
        listed = await p.function_list(library=LIBRARY_NAME)
        assert listed, "the library was not loaded"
        await controller.tick(HEALTHY)  # once per writer, not every round
        assert [e["kind"] for e in controller.status()["events"]] == kinds
