"""A running primary/replica pair for the controller's tests."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import pytest_asyncio
import redis.asyncio as aioredis

from rideout.config import Config
from rideout.store import keys
from rideout.store.embedded import EmbeddedRedis
from rideout.store.replication import ensure_epoch
from tests.conftest import ADMIN, running_redis_pair, until


@dataclass
class Pair:
    config: Config
    primary: EmbeddedRedis
    p: aioredis.Redis
    s: aioredis.Redis
    replica: EmbeddedRedis


@pytest_asyncio.fixture
async def pair(make_config: Callable[..., Config]) -> AsyncIterator[Pair]:
    """A running primary/replica and a client to each (decoded responses); the replica
    already holds the primary's epoch, so a test starts from a pair in sync."""
    config = make_config()
    async with running_redis_pair(config) as (primary, replica):
        # The test's own moves (a detached replica, writes) need more than any rideout user.
        p = aioredis.Redis(
            host=config.primary.redis.address,
            port=config.primary.redis.port,
            decode_responses=True,
            **ADMIN,
        )
        s = aioredis.Redis(
            host=config.secondary.redis.address,
            port=config.secondary.redis.port,
            decode_responses=True,
            **ADMIN,
        )
        try:
            await ensure_epoch(p)
            # Without this wait a test's first tick could see the replica still without
            # the epoch: "came back without its data", and the writer moves (CI saw it).
            await until(lambda: s.get(keys.EPOCH), message="the replica holds the epoch")
            yield Pair(config, primary, p, s, replica)
        finally:
            await p.aclose()
            await s.aclose()
