from __future__ import annotations

from collections.abc import Callable

import pytest
import redis.asyncio as aioredis

from rideout.config import Config
from rideout.store import keys
from rideout.store.acl import RedisRole
from rideout.store.client import probe_client
from rideout.store.replication import ensure_epoch, read_epoch, replication_status
from tests.conftest import ADMIN, TEST_ADMIN, as_user, free_port, running_redis_pair


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
            await admin.wait(1, 2000)
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
