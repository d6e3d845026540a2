"""What the supervisor keeps running: one :class:`Child` per process, and what it knows
about it (its record in the run state, its restart history, whether it was stopped on
purpose), with the probe that says when a server is ready and the environment every
child starts with."""

from __future__ import annotations

import abc
import asyncio
import contextlib
import os
import signal
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import httpx

from rideout._process import ManagedProcess
from rideout.client.resolve import NameserverResolver, ResolutionError
from rideout.cluster.restarts import RestartHistory
from rideout.cluster.runstate import ProcessRecord
from rideout.config import ENV_NOT_KEYS, ENV_PREFIX, Config, RedisConfig, RegionConfig
from rideout.store.embedded import EmbeddedRedis

__all__ = [
    "Child",
    "Probe",
    "RedisChild",
    "ServerChild",
    "child_env",
    "dns_probe",
    "http_probe",
    "replica_key",
]


def child_env() -> dict[str, str]:
    """Children read the effective config file only, never RIDEOUT_* a second time."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIX) or k in ENV_NOT_KEYS}
    env.pop("RIDEOUT_CONFIG", None)
    env["PYTHONUNBUFFERED"] = "1"
    return env


Probe = Callable[[httpx.AsyncClient], Awaitable[str | None]]
"""Is a server ready? None when it is, else what it answered instead."""


def http_probe(url: str) -> Probe:
    """Ready when `url` answers 200."""

    async def probe(client: httpx.AsyncClient) -> str | None:
        try:
            response = await client.get(url)
        except httpx.HTTPError as exc:
            return type(exc).__name__
        return None if response.status_code == 200 else f"HTTP {response.status_code}"

    return probe


def dns_probe(config: Config) -> Probe:
    """Ready when the DNS server resolves the app domain."""
    cp = config.control_plane
    resolver = NameserverResolver(cp.address, cp.dns_port, timeout=1.0)

    async def probe(client: httpx.AsyncClient) -> str | None:
        try:
            await resolver.resolve(config.app_domain)
        except ResolutionError as exc:
            return str(exc)
        return None

    return probe


def replica_key(region: str) -> str:
    """The supervisor's key for `region`'s in-region replica (its main Redis: the name)."""
    return f"{region}/replica"


@dataclass(eq=False)
class Child(abc.ABC):
    """A process the supervisor keeps running, and what it knows about its restarts."""

    record: ProcessRecord
    history: RestartHistory
    state: str = "starting"  # see runstate.PROCESS_STATES
    note: str | None = None
    held: bool = False  # stopped on purpose: never restarted until restored
    generation: int = 0  # one more per spawn: a keeper looks after one generation
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)  # held while spawning

    @property
    def name(self) -> str:
        return self.record.name

    @property
    @abc.abstractmethod
    def pid(self) -> int | None: ...

    @property
    @abc.abstractmethod
    def running(self) -> bool: ...

    @abc.abstractmethod
    async def wait(self) -> int | None:
        """Until the current process exits; its exit code (None: none was started)."""

    def kill(self) -> bool:
        """SIGKILL the current process; whether one was running."""
        pid = self.pid
        if not self.running or pid is None:
            return False
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        return True


@dataclass(eq=False)
class ServerChild(Child):
    """An app server, canary, control plane or DNS server: one ``rideout`` subcommand."""

    argv: list[str] = field(default_factory=list)
    probe: Probe | None = None
    proc: ManagedProcess | None = None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.running

    async def wait(self) -> int | None:
        if self.proc is None or self.proc.pid is None:
            return None
        return await self.proc.wait()


@dataclass(eq=False)
class RedisChild(Child):
    """A region's redis-server: its main one, or (`in_region`) its in-region replica."""

    region: RegionConfig | None = None
    server: EmbeddedRedis | None = None
    in_region: bool = False

    @property
    def node(self) -> RedisConfig:
        assert self.region is not None
        if self.in_region:
            assert self.region.replica is not None
            return self.region.replica
        return self.region.redis

    @property
    def pid(self) -> int | None:
        return self.server.pid if self.server else None

    @property
    def running(self) -> bool:
        return self.server is not None and self.server.running

    async def wait(self) -> int | None:
        # EmbeddedRedis offers no wait() (store is not this package's); `running` is cheap.
        while self.running:  # noqa: ASYNC110
            await asyncio.sleep(0.1)
        return None
