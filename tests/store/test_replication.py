from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest
import redis.asyncio as aioredis
from redis.exceptions import ReadOnlyError

from rideout.config import AuthConfig, Config
from rideout.realtime.demo import claim_name
from rideout.store import functions, keys
from rideout.store.acl import RedisRole
from rideout.store.client import probe_client
from rideout.store.embedded import EmbeddedRedis
from rideout.store.replication import (
    ReplicationError,
    StillLoading,
    bump_epoch,
    count_unreplicated,
    ensure_epoch,
    follow,
    promote,
    read_epoch,
    replication_status,
)
from tests.conftest import (
    ADMIN,
    TEST_ADMIN,
    as_user,
    fill_for_a_slow_load,
    free_port,
    loading_redis,
    replicated,
    running_redis_pair,
    until,
)
from tests.store.conftest import writer_spec

# Replication, failover and restarts: on every server of the supported matrix (issue #27).
pytestmark = pytest.mark.usefixtures("matrix_server")


async def test_a_routine_that_writes_on_a_replica_is_refused_as_read_only(
    make_config: Callable[..., Config],
) -> None:
    """Through FCALL (7.0+) or EVALSHA (6.2), a routine's write on a replica raises what a
    replica says of any write, ReadOnlyError. On 6.2 the script's error wraps the
    replica's READONLY, and was passed on as it was: the demo sign-in on the standby
    region answered 503 "unavailable" to a name's holder instead of checking its claim."""
    config = make_config()
    async with running_redis_pair(config):
        s = config.secondary.redis
        app = aioredis.Redis(host=s.address, port=s.port, **as_user(config, RedisRole.APP))
        try:
            with pytest.raises(ReadOnlyError):
                await claim_name(app, "zed", "h", 60, address="a", auth=AuthConfig())
            claim = functions.StoreFunction(app, functions.IDEMPOTENCY_CLAIM)
            with pytest.raises(ReadOnlyError):
                await claim(keys=[keys.idempotency("t", "k")], args=["in-flight", 60_000])
        finally:
            await app.aclose()


async def test_roles_links_and_epoch(make_config: Callable[..., Config]) -> None:
    config = make_config()
    async with running_redis_pair(config):
        p, s = config.primary.redis, config.secondary.redis
        # The controller moves the epoch; the monitor reads it and the roles.
        writer = aioredis.Redis(
            host=p.address, port=p.port, **as_user(config, RedisRole.CONTROLLER)
        )
        reader = aioredis.Redis(host=s.address, port=s.port, **as_user(config, RedisRole.MONITOR))
        admin = aioredis.Redis(host=p.address, port=p.port, **ADMIN)
        try:
            assert await read_epoch(writer) is None
            assert await ensure_epoch(writer) == 1
            await writer.set(keys.EPOCH, 7)
            assert await ensure_epoch(writer) == 7  # an existing epoch is kept
            await replicated(admin)
            assert await read_epoch(reader) == 7

            master = await replication_status(writer)
            assert (master.reachable, master.role, master.link) == (True, "master", "n/a")
            assert master.connected_replicas == 1
            assert master.replica_online  # WAIT returned: the writer counts it online
            assert (master.offset or 0) > 0
            replica = await replication_status(reader)
            assert (replica.role, replica.link) == ("replica", "up")
            assert replica.master == f"{p.address}:{p.port}"
            assert replica.to_dict()["role"] == "replica"
            assert not replica.replica_online  # a replica has no replica of its own

            # On a replica (a restarted writer the controller demoted at once): nothing.
            on_replica = aioredis.Redis(
                host=s.address, port=s.port, **as_user(config, RedisRole.CONTROLLER)
            )
            try:
                assert await ensure_epoch(on_replica) is None
            finally:
                await on_replica.aclose()

            await writer.set(keys.EPOCH, "garbage")
            with pytest.raises(ValueError, match="not an integer"):
                await ensure_epoch(writer)
        finally:
            await writer.aclose()
            await reader.aclose()
            await admin.aclose()


async def test_unreachable_server_is_reported_not_raised() -> None:
    client = probe_client(
        "127.0.1.100", free_port("127.0.1.100"), credentials=TEST_ADMIN, timeout=0.5
    )
    try:
        status = await replication_status(client)
        assert not status.reachable
        assert status.role == "unknown"
        assert status.error
        assert await read_epoch(client) is None
    finally:
        await client.aclose()


async def test_a_redis_still_loading_its_data_is_reported_as_still_loading(
    tmp_path: Path,
) -> None:
    """A restarted Redis answers INFO before its data is loaded and refuses the rest with
    LOADING: each role change says StillLoading (a step to take again once it has
    loaded), which the controller records as a wait, not as an error."""
    spec = writer_spec(tmp_path)
    async with EmbeddedRedis(spec):
        admin = aioredis.Redis(host=spec.address, port=spec.port, **ADMIN)
        try:
            await fill_for_a_slow_load(admin, 20_000)
        finally:
            await admin.aclose()
    async with loading_redis(spec, 250):  # 20,000 keys at 0.25 ms: loading for ~5 s
        # One try, as every client rideout makes (redis-py's default retries LOADING,
        # a ConnectionError to it, with a backoff of seconds).
        client = probe_client(spec.address, spec.port, credentials=TEST_ADMIN, timeout=3.0)
        try:
            await until(lambda: _reachable(client), message="INFO answered while loading")
            status = await replication_status(client)
            assert (status.role, status.link) == ("master", "n/a")
            # Side by side: each refused command costs its connection (LOADING is a
            # ConnectionError to redis-py), and a loading Redis answers only between
            # batches of keys, so one after another they could outlast the load.
            refusals = await asyncio.gather(
                promote(client),
                follow(client, spec.address, free_port(spec.address)),
                bump_epoch(client, 1),
                count_unreplicated(client, client),
                return_exceptions=True,
            )
            for step, refusal in zip(STEPS, refusals, strict=True):
                assert isinstance(refusal, StillLoading), (step, refusal)
                assert "loading the dataset" in str(refusal), (step, refusal)
        finally:
            await client.aclose()
    # A refusal for any other reason stays a plain ReplicationError.
    gone = probe_client(spec.address, free_port(spec.address), credentials=TEST_ADMIN, timeout=0.5)
    try:
        with pytest.raises(ReplicationError) as refused:
            await promote(gone)
        assert not isinstance(refused.value, StillLoading)
    finally:
        await gone.aclose()


STEPS = ("promote", "follow", "bump_epoch", "count_unreplicated")


async def _reachable(client: aioredis.Redis) -> bool:
    return (await replication_status(client)).reachable


async def test_every_acknowledged_change_the_new_writer_lacks_is_counted(
    make_config: Callable[..., Config],
) -> None:
    """A split: the replica is promoted, then each side takes writes the other never
    sees. What the stale writer holds alone is counted in every room, also in a room the
    new writer has since written to (ids past the stale's); the count once stopped at
    the new writer's newest entry and missed those (the partition drill's split-brain)."""
    config = make_config()
    async with running_redis_pair(config):
        p, s = config.primary.redis, config.secondary.redis
        stale = aioredis.Redis(host=p.address, port=p.port, **ADMIN)
        writer = aioredis.Redis(host=s.address, port=s.port, **ADMIN)
        counter = aioredis.Redis(
            host=p.address, port=p.port, **as_user(config, RedisRole.CONTROLLER)
        )
        on_writer = aioredis.Redis(
            host=s.address, port=s.port, **as_user(config, RedisRole.CONTROLLER)
        )
        shared, written, alone, clash = (
            keys.room_stream(r) for r in ("shared", "written", "alone", "clash")
        )
        try:
            for key in (shared, written, alone, clash):
                for n in (1, 2, 3):
                    await stale.xadd(key, {"bid": str(n)}, id=f"{n}-0")
            await replicated(stale)
            await writer.replicaof("NO", "ONE")
            for key in (shared, written, alone):
                for n in (4, 5):
                    await stale.xadd(key, {"bid": str(n)}, id=f"{n}-0")  # acknowledged, alone
            await writer.xadd(written, {"bid": "new"}, id="9-0")  # past every id of the stale's
            await stale.xadd(clash, {"bid": "stale"}, id="4-0")  # one id, two bids
            await writer.xadd(clash, {"bid": "writer"}, id="4-0")
            for n in range(1, 6):  # the writer's copy of "shared" ends as the stale's does
                if n > 3:
                    await writer.xadd(shared, {"bid": str(n)}, id=f"{n}-0")

            assert (
                await count_unreplicated(counter, on_writer) == 2 + 2 + 1
            )  # written, alone, clash
            # The other way: what the new writer holds alone.
            assert (
                await count_unreplicated(on_writer, counter) == 1 + 1
            )  # written's 9-0, clash's 4-0
        finally:
            for client in (stale, writer, counter, on_writer):
                await client.aclose()


async def test_what_the_new_writer_trimmed_cannot_be_told_and_is_not_counted(
    make_config: Callable[..., Config],
) -> None:
    """A room's history is capped: an entry older than the writer's oldest may be a
    shared one it trimmed or one it never had, and nothing in the streams tells which. It
    is not counted: the limit of the count, reached only when the new writer took more
    bids in a room than its history keeps while the old one was away."""
    config = make_config()
    async with running_redis_pair(config):
        p, s = config.primary.redis, config.secondary.redis
        stale = aioredis.Redis(host=p.address, port=p.port, **ADMIN)
        writer = aioredis.Redis(host=s.address, port=s.port, **ADMIN)
        room = keys.room_stream("capped")
        try:
            for n in range(1, 11):
                await stale.xadd(room, {"bid": str(n)}, id=f"{n}-0")
            await replicated(stale)
            await writer.replicaof("NO", "ONE")
            await stale.xadd(room, {"bid": "lost"}, id="11-0")
            await stale.xadd(room, {"bid": "lost too"}, id="13-0")
            await writer.xtrim(room, maxlen=2, approximate=False)  # keeps 9-0 and 10-0
            assert await count_unreplicated(stale, writer) == 2  # 11-0 and 13-0; 10-0 shared
            for n in (12, 14, 15):
                await writer.xadd(room, {"bid": str(n)}, id=f"{n}-0")
            await writer.xtrim(room, maxlen=3, approximate=False)  # 12-0, 14-0, 15-0
            assert await count_unreplicated(stale, writer) == 1  # 13-0; 11-0 cannot be told
        finally:
            for client in (stale, writer):
                await client.aclose()
