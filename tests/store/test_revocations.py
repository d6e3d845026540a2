"""The revocation list in a real primary Redis and its replica."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from rideout.config import parse_config
from rideout.store import keys
from rideout.store.acl import RedisRole
from rideout.store.auction import NotWriter
from rideout.store.client import probe_client, state_client
from rideout.store.revocations import RevocationStore
from tests.conftest import TEST_ADMIN, config_data, credentials, replicated, running_redis_pair


@pytest.fixture
async def stores(tmp_path: Path) -> AsyncIterator[tuple[RevocationStore, RevocationStore]]:
    config = parse_config(config_data(tmp_path / ".rideout"))
    async with running_redis_pair(config):
        p, s = config.primary.redis, config.secondary.redis
        writer = state_client(
            p.address, p.port, credentials=credentials(config, RedisRole.CONTROLLER)
        )  # as `rideout token revoke` records it
        reader = state_client(
            s.address, s.port, credentials=credentials(config, RedisRole.CONTROLLER)
        )
        try:
            yield RevocationStore(writer, "us-east-1"), RevocationStore(reader, "us-west-2")
        finally:
            await writer.aclose()
            await reader.aclose()


def now_ms() -> int:
    return int(time.time() * 1000)


async def test_a_revocation_is_recorded_and_read_back_with_a_new_version(
    stores: tuple[RevocationStore, RevocationStore],
) -> None:
    primary, _ = stores
    assert await primary.version() is None
    assert (await primary.load()).entries == {}
    t = now_ms()
    assert (
        await primary.record("sub:alice", until_ms=t, expires_ms=t + 60_000, at_ms=t, now_ms=t) == 1
    )
    first = await primary.version()
    assert first is not None
    records = await primary.load()
    assert records.version == first
    assert json.loads(records.entries["sub:alice"]) == {"until": t, "expires": t + 60_000, "at": t}
    await primary.record("jti:j1", until_ms=t + 5, expires_ms=t + 5_000, at_ms=t, now_ms=t)
    assert await primary.version() not in (None, first)
    assert set((await primary.load()).entries) == {"sub:alice", "jti:j1"}


async def test_an_entry_is_only_ever_extended(
    stores: tuple[RevocationStore, RevocationStore],
) -> None:
    primary, _ = stores
    t = now_ms()
    await primary.record("sub:alice", until_ms=t + 100, expires_ms=t + 90_000, at_ms=t, now_ms=t)
    await primary.record("sub:alice", until_ms=t + 50, expires_ms=t + 60_000, at_ms=t + 1, now_ms=t)
    entry = json.loads((await primary.load()).entries["sub:alice"])
    assert (entry["until"], entry["expires"]) == (t + 100, t + 90_000)
    await primary.record(
        "sub:alice", until_ms=t + 200, expires_ms=t + 95_000, at_ms=t + 2, now_ms=t
    )
    entry = json.loads((await primary.load()).entries["sub:alice"])
    assert (entry["until"], entry["expires"]) == (t + 200, t + 95_000)


async def test_expired_entries_are_dropped_and_the_list_expires_with_its_last(
    stores: tuple[RevocationStore, RevocationStore],
) -> None:
    primary, _ = stores
    t = now_ms()
    await primary.record("jti:old", until_ms=t + 10, expires_ms=t + 10, at_ms=t, now_ms=t)
    await primary.record("jti:new", until_ms=t + 800, expires_ms=t + 800, at_ms=t, now_ms=t + 20)
    assert set((await primary.load()).entries) == {"jti:new"}  # "old" had expired at t + 20
    where = primary.client.connection_pool.connection_kwargs
    admin = probe_client(where["host"], where["port"], credentials=TEST_ADMIN)  # test-only PTTL
    try:
        ttl = await admin.pttl(keys.REVOCATIONS)
        assert 0 < ttl <= 800
        await asyncio.sleep(0.85)  # Redis's own clock expires the key
        assert await admin.exists(keys.REVOCATIONS) == 0
    finally:
        await admin.aclose()
    assert (await primary.load()).entries == {}


async def test_a_revocation_reaches_the_replica_and_is_refused_there(
    stores: tuple[RevocationStore, RevocationStore],
) -> None:
    primary, replica = stores
    t = now_ms()
    await primary.record("sub:bob", until_ms=t, expires_ms=t + 60_000, at_ms=t, now_ms=t)
    await replicated(primary.client)
    records = await replica.load()
    assert records.version == await primary.version()
    assert "sub:bob" in records.entries
    with pytest.raises(NotWriter):
        await replica.record("sub:carol", until_ms=t, expires_ms=t + 1, at_ms=t, now_ms=t)


async def test_bad_times_are_refused_before_anything_is_sent(
    stores: tuple[RevocationStore, RevocationStore],
) -> None:
    primary, _ = stores
    for bad in (-1, 2**53, 1.5, True):
        with pytest.raises(ValueError, match="milliseconds"):
            await primary.record("sub:x", until_ms=bad, expires_ms=1, at_ms=1, now_ms=1)  # type: ignore[arg-type]
    assert await primary.version() is None
