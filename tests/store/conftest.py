"""One real redis-server per test module, for the store modules that need only one."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from rideout.store.embedded import EmbeddedRedis, RedisSpec
from tests.conftest import free_port, locked_auth


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def redis_server(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[RedisSpec]:
    """A running writer on a fresh port; tests connect with the client they exercise."""
    directory = tmp_path_factory.mktemp("redis")
    address = "127.0.1.100"
    spec = RedisSpec(
        "redis", address, free_port(address), directory, directory / "redis.log",
        auth=locked_auth(directory / "keys"),
    )  # fmt: skip
    async with EmbeddedRedis(spec):
        yield spec
