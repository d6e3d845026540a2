"""A restarted Redis never wipes the others: it comes back fenced, and the controller
trusts it again only if it holds everything another Redis holds (issue #27).

Each test runs on every server of the supported matrix (``matrix_server``), since a
promise that held on one build (Redis 6.2) was broken on the others (7.0, Valkey 8.1).
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import redis.asyncio as aioredis

from rideout.config import Config
from rideout.failover.controller import ControllerState, FailoverController
from rideout.store import keys
from rideout.store.acl import RedisRole
from rideout.store.auction import AuctionSettings, AuctionStore
from rideout.store.embedded import EmbeddedRedis, server_info
from rideout.store.functions import LIBRARY_NAME
from rideout.store.replication import compare, ensure_epoch, is_fenced, replication_status
from tests.conftest import ADMIN, as_user, running_redis_pair, until

P, S = "us-east-1", "us-west-2"
HEALTHY = {P: True, S: True}


def _client(config: Config, region: str) -> aioredis.Redis:
    redis = config.region(region).redis
    return aioredis.Redis(host=redis.address, port=redis.port, decode_responses=True, **ADMIN)


async def _bids(client: aioredis.Redis, room: str, count: int) -> None:
    for n in range(count):
        await client.xadd(keys.room_stream(room), {"state": f'{{"n":{n}}}', "epoch": "1"})


async def _synced(p: aioredis.Redis, count: int) -> None:
    assert await p.wait(1, 5000) == 1, "the replica did not acknowledge"


async def _restart_fenced(server: EmbeddedRedis, *, wipe: Path | None = None) -> EmbeddedRedis:
    """Stop `server` (SIGKILL, as a crash), optionally lose its disk, start it fenced as
    the supervisor does."""
    await server.stop(timeout=0)
    if wipe is not None:
        shutil.rmtree(wipe)
    again = EmbeddedRedis(replace(server.spec, fenced=True))
    await again.start()
    return again


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
    matrix_server: Path, make_config: Callable[..., Config]
) -> None:
    """The writer's disk is lost and its Redis restarts empty: it comes back a read-only
    replica of itself, its replica keeps every bid (it cannot sync from a fenced Redis),
    and the controller moves the writer to the replica and counts a dataset lost."""
    config = make_config()
    async with running_redis_pair(config) as (primary, _):
        p, s = _client(config, P), _client(config, S)
        controller = FailoverController(config)
        restarted: EmbeddedRedis | None = None
        try:
            await ensure_epoch(p)
            await controller.tick(HEALTHY)
            await _bids(p, "lot", 25)
            await _synced(p, 25)
            restarted = await _restart_fenced(primary, wipe=primary.spec.data_dir)
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
        finally:
            await controller.close()
            await p.aclose()
            await s.aclose()
            if restarted is not None:
                await restarted.stop()


async def test_a_writer_back_behind_its_replica_is_not_trusted(
    matrix_server: Path, make_config: Callable[..., Config]
) -> None:
    """Its AOF lost the newest writes (a truncated file, fsync's last second on a host
    crash): it comes back with an epoch but behind; the writer moves to the replica."""
    config = make_config()
    async with running_redis_pair(config) as (primary, _):
        p, s = _client(config, P), _client(config, S)
        controller = FailoverController(config)
        restarted: EmbeddedRedis | None = None
        old = primary.spec.data_dir.with_name("old-aof")
        try:
            await ensure_epoch(p)
            await controller.tick(HEALTHY)
            await _bids(p, "lot", 10)
            await _synced(p, 10)
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
            restarted = EmbeddedRedis(replace(primary.spec, fenced=True))
            await restarted.start()
            assert await _stream_length(p, "lot") == 10

            await _tick_until_it_answers(controller, HEALTHY)
            status = controller.status()
            assert [e["kind"] for e in status["events"]][-2:] == ["behind", "fail-over"]
            assert "(5 room changes it lacks)" in status["events"][-2]["message"]
            assert controller.writer == S
            assert status["datasets_lost"] == 1
            await controller.tick(HEALTHY)
            await until(lambda: _length_is(p, "lot", 15), message="the old writer resynced")
        finally:
            await controller.close()
            await p.aclose()
            await s.aclose()
            if restarted is not None:
                await restarted.stop()


async def test_a_writer_back_with_all_its_data_is_promoted_again(
    matrix_server: Path, make_config: Callable[..., Config]
) -> None:
    """SIGKILL of the writer's Redis alone, mid-bid: it restarts fenced with every
    acknowledged bid (the AOF replays the bid script's effects, which Redis 7 and Valkey
    write as MULTI/EXEC: before the default user had the rights to replay them, 7.0 and
    8.1 came back empty), so it is the writer again; nothing moves, nothing is counted."""
    config = make_config()
    async with running_redis_pair(config) as (primary, _):
        p, s = _client(config, P), _client(config, S)
        app = aioredis.Redis(
            host=primary.spec.address, port=primary.spec.port, decode_responses=True,
            **as_user(config, RedisRole.APP),
        )  # fmt: skip
        store = AuctionStore(app, AuctionSettings(), P)
        controller = FailoverController(config)
        restarted: EmbeddedRedis | None = None
        try:
            await ensure_epoch(p)
            await controller.tick(HEALTHY)
            for n in range(1, 21):
                result = await store.bid("lot", f"user-{n % 4}", n * 10, f"r{n}", epoch=1)
                assert result.accepted, result
            await _synced(p, 20)
            restarted = await _restart_fenced(primary)
            assert await _stream_length(p, "lot") == 20  # the AOF replayed whole
            newest = await p.xrevrange(keys.room_stream("lot"), count=1)
            assert '"bid":200,"bidder":"user-0","bids":20' in newest[0][1]["state"], newest
            await _tick_until_it_answers(controller, HEALTHY)
            status = controller.status()
            assert [e["kind"] for e in status["events"]] == ["start", "promote"]
            assert (controller.writer, status["datasets_lost"], status["lost_writes"]) == (
                P,
                0,
                0,
            )
            assert (await replication_status(p)).role == "master"
            await controller.tick(HEALTHY)
            await until(lambda: _linked(s), message="the replica follows the writer again")
            assert await _stream_length(s, "lot") == 20
        finally:
            await controller.close()
            await app.aclose()
            await p.aclose()
            await s.aclose()
            if restarted is not None:
                await restarted.stop()


async def test_a_stale_writer_back_fenced_is_demoted_and_its_writes_counted(
    matrix_server: Path, make_config: Callable[..., Config]
) -> None:
    """After a failover, the old writer's Redis restarts fenced holding a write that
    never reached the new writer (async mode): counted in lost_writes, then it follows."""
    config = make_config()
    async with running_redis_pair(config) as (primary, _):
        p, s = _client(config, P), _client(config, S)
        controller = FailoverController(config)
        restarted: EmbeddedRedis | None = None
        try:
            await ensure_epoch(p)
            await controller.tick(HEALTHY)
            await _bids(p, "lot", 3)
            await _synced(p, 3)
            await s.replicaof("NO", "ONE")
            await _bids(p, "lot", 1)  # never replicated
            await primary.stop()
            await controller.tick({P: False, S: True})
            assert controller.writer == S
            restarted = EmbeddedRedis(replace(primary.spec, fenced=True))
            await restarted.start()
            await _tick_until_it_answers(controller, {P: False, S: True})
            status = controller.status()
            assert status["events"][-1]["kind"] == "follow"
            assert "restarted (fenced)" in status["events"][-1]["message"]
            assert status["lost_writes"] == 1
        finally:
            await controller.close()
            await p.aclose()
            await s.aclose()
            if restarted is not None:
                await restarted.stop()


async def test_a_writer_back_empty_with_nobody_else_waits(
    matrix_server: Path, make_config: Callable[..., Config]
) -> None:
    """The writer's Redis is back without its data and no other Redis answers: it is not
    promoted (when the others return it would be their source of a sync)."""
    config = make_config()
    async with running_redis_pair(config) as (primary, replica):
        p = _client(config, P)
        controller = FailoverController(config, state=ControllerState(writer=P, epoch=3))
        restarted: EmbeddedRedis | None = None
        try:
            await replica.stop()
            restarted = await _restart_fenced(primary, wipe=primary.spec.data_dir)
            for _ in range(20):  # until its connection to the restarted Redis is new
                await controller.tick({P: True, S: False})
                if controller.redis[P].reachable:
                    break
            status = controller.status()
            assert status["events"][-1]["kind"] == "wait"
            assert "no other Redis answers" in status["events"][-1]["message"]
            assert (await replication_status(p)).role == "replica"
        finally:
            await controller.close()
            await p.aclose()
            if restarted is not None:
                await restarted.stop()


async def _length_is(client: aioredis.Redis, room: str, count: int) -> bool:
    return await _stream_length(client, room) == count


async def _linked(client: aioredis.Redis) -> bool:
    view = await replication_status(client)
    return view.role == "replica" and view.link == "up"


async def test_the_controller_loads_the_function_library_on_a_writer_without_it(
    matrix_server: Path, make_config: Callable[..., Config]
) -> None:
    """A writer started from data older than the library (an upgrade), or set up by hand
    in external mode, has no rideout functions: the controller loads them (7.0+) before
    the app servers find them missing; after a move, on the new writer too."""
    config = make_config()
    async with running_redis_pair(config) as _:
        p, s = _client(config, P), _client(config, S)
        controller = FailoverController(config)
        try:
            await ensure_epoch(p)
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
        finally:
            await controller.close()
            await p.aclose()
            await s.aclose()
