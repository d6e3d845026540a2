"""One real redis-server per test module, for the store modules that need only one."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from rideout.store.embedded import RedisSpec
from tests.conftest import free_port, locked_auth, running_redis


def writer_spec(directory: Path, address: str = "127.0.1.100", name: str = "redis") -> RedisSpec:
    """A locked writer on a fresh port of `address`, its files under `directory`."""
    return RedisSpec(
        name, address, free_port(address), directory, directory / "redis.log",
        auth=locked_auth(directory / "keys"),
    )  # fmt: skip


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def redis_server(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[RedisSpec]:
    """A running writer on a fresh port; tests connect with the client they exercise."""
    spec = writer_spec(tmp_path_factory.mktemp("redis"))
    async with running_redis(spec):
        yield spec
