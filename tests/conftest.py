"""Shared fixtures: every test deployment gets its own ports and data directory."""

from __future__ import annotations

import random
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from rideout.config import Config, parse_config
from rideout.store.acl import load_or_create_users

ZONE_ADDRESSES = ("127.0.1.1", "127.0.1.2", "127.0.2.1", "127.0.2.2")


def free_port(*addresses: str, udp: bool = False) -> int:
    """A port that is free on every one of `addresses` right now."""
    rng = random.Random()
    for _ in range(200):
        port = rng.randrange(20000, 40000)
        try:
            for address in addresses:
                for kind in (
                    (socket.SOCK_STREAM, socket.SOCK_DGRAM) if udp else (socket.SOCK_STREAM,)
                ):
                    with socket.socket(socket.AF_INET, kind) as sock:
                        sock.bind((address, port))
        except OSError:
            continue
        return port
    raise RuntimeError(f"no free port on {addresses}")


def config_data(data_dir: Path, **overrides: Any) -> dict[str, Any]:
    """TOML-shaped config for the default topology on fresh ports under `data_dir`."""
    redis_port = free_port("127.0.1.100", "127.0.2.100")
    data: dict[str, Any] = {
        "data_dir": str(data_dir),
        "app_port": free_port(*ZONE_ADDRESSES),
        "control_plane": {
            "port": free_port("127.0.0.1"),
            "dns_port": free_port("127.0.0.1", udp=True),
        },
        "regions": [
            {
                "name": "us-east-1",
                "role": "primary",
                "redis": {"address": "127.0.1.100", "port": redis_port},
                "zones": [
                    {"name": "use1-az1", "address": "127.0.1.1"},
                    {"name": "use1-az2", "address": "127.0.1.2"},
                ],
            },
            {
                "name": "us-west-2",
                "role": "secondary",
                "redis": {"address": "127.0.2.100", "port": redis_port},
                "zones": [
                    {"name": "usw2-az1", "address": "127.0.2.1"},
                    {"name": "usw2-az2", "address": "127.0.2.2"},
                ],
            },
        ],
    }
    data.update(overrides)
    return data


@pytest.fixture
def make_config(tmp_path: Path) -> Callable[..., Config]:
    """Build a Config on fresh ports with its data under the test's tmp_path, and the
    deployment's Redis credentials in its keys directory (as `rideout up` leaves them:
    the failover controller and the app servers need them to start)."""

    def make(**overrides: Any) -> Config:
        config = parse_config(config_data(tmp_path / ".rideout", **overrides))
        load_or_create_users(config.keys_dir)
        return config

    return make


# --------------------------------------------------------------------------- real servers

import asyncio  # noqa: E402
import contextlib  # noqa: E402
import secrets  # noqa: E402
from collections.abc import AsyncIterator  # noqa: E402

import uvicorn  # noqa: E402
from starlette.types import ASGIApp  # noqa: E402

from rideout._serve import uvicorn_config  # noqa: E402
from rideout.store.acl import (  # noqa: E402
    RedisCredentials,
    RedisRole,
    ServerAuth,
    UserRules,
    load_credentials,
    prepare_server_auth,
)
from rideout.store.embedded import EmbeddedRedis, RedisSpec  # noqa: E402

# A superuser only the tests' servers know, for what no rideout user may do (FLUSHALL,
# SCRIPT FLUSH, CONFIG SET, keys outside rideout's, corrupting data on purpose).
# `rideout up` never has it: its ACL file holds rideout's four users only.
TEST_ADMIN = RedisCredentials("rideout-test-admin", secrets.token_hex(32), "tests/conftest.py")
ADMIN = {"username": TEST_ADMIN.username, "password": TEST_ADMIN.password}
"""Keyword arguments that make a raw redis-py client the test superuser."""


def locked_auth(keys_dir: Path) -> ServerAuth:
    """A deployment's Redis users (as `rideout up` makes them) plus :data:`TEST_ADMIN`."""
    superuser = UserRules(commands=("@all",), keys=("*",))
    return prepare_server_auth(keys_dir, extra_users=[(TEST_ADMIN, superuser)])


def credentials(config: Config, role: RedisRole = RedisRole.APP) -> RedisCredentials:
    """The credentials rideout's `role` uses in `config`'s deployment."""
    return load_credentials(config.keys_dir, role)


def as_user(config: Config, role: RedisRole) -> dict[str, str]:
    """Keyword arguments that make a raw redis-py client one of rideout's users."""
    found = credentials(config, role)
    return {"username": found.username, "password": found.password}


@contextlib.asynccontextmanager
async def running_redis_pair(config: Config) -> AsyncIterator[tuple[EmbeddedRedis, EmbeddedRedis]]:
    """The config's primary Redis and its replica in the secondary region, both ready
    and locked as `rideout up` locks them (with :data:`TEST_ADMIN` besides)."""
    p, s = config.primary, config.secondary
    auth = locked_auth(config.keys_dir)
    primary = EmbeddedRedis(
        RedisSpec("redis-" + p.name, p.redis.address, p.redis.port,
                  config.region_data_dir(p.name), config.logs_dir / f"redis-{p.name}.log",
                  auth=auth)
    )  # fmt: skip
    replica = EmbeddedRedis(
        RedisSpec("redis-" + s.name, s.redis.address, s.redis.port,
                  config.region_data_dir(s.name), config.logs_dir / f"redis-{s.name}.log",
                  replica_of=(p.redis.address, p.redis.port), auth=auth)
    )  # fmt: skip
    async with primary, replica:
        yield primary, replica


@contextlib.asynccontextmanager
async def serving(app: ASGIApp, host: str, port: int) -> AsyncIterator[uvicorn.Server]:
    """`app` on a real socket, in this event loop, with its lifespan run."""
    server = uvicorn.Server(uvicorn_config(app, host, port, log_level="warning"))
    server.config.setup_event_loop = lambda: None  # type: ignore[method-assign]
    task = asyncio.create_task(server.serve())
    try:
        while not server.started:
            if task.done():
                task.result()
                raise RuntimeError("uvicorn exited before it started")
            await asyncio.sleep(0.01)
        yield server
    finally:
        server.should_exit = True
        await task


# --------------------------------------------------------------------------- no leftovers


def _descendants(pid: int) -> list[int]:
    found: list[int] = []
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return found
    for child in map(int, children):
        found.append(child)
        found.extend(_descendants(child))
    return found


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fail the run if any test left a process behind (servers must be stopped)."""
    import os
    import time

    from rideout._process import pid_alive

    deadline = time.monotonic() + 5
    while (
        left := [p for p in _descendants(os.getpid()) if pid_alive(p)]
    ) and time.monotonic() < deadline:
        time.sleep(0.1)
    if left:
        cmdlines = []
        for pid in left:
            try:
                cmdlines.append(
                    Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
                )
            except OSError:
                cmdlines.append("?")
        print(f"\nprocesses left behind by the tests: {list(zip(left, cmdlines, strict=True))}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
