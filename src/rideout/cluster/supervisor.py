"""Start and stop the whole local two-region topology on one machine.

Order matters: the primary's Redis first, then its replica in the secondary region,
then the control plane and every zone's app server together. Stopping goes the other
way: app servers and control plane first (they drain their clients), Redis last (it
flushes its append-only file). Whatever was started is stopped on every exit path:
an error during start, a cancelled start (Ctrl-C), or a normal stop.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import socket
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

import httpx

from rideout._process import LineSink, ManagedProcess
from rideout.auth import SigningKey
from rideout.auth.admin import load_or_create_admin_token
from rideout.cluster.runstate import EFFECTIVE_CONFIG, ProcessRecord, RunLock, RunState
from rideout.config import ENV_NOT_KEYS, ENV_PREFIX, Config, dump_toml
from rideout.store.client import probe_client
from rideout.store.embedded import EmbeddedRedis, RedisSpec
from rideout.store.replication import ensure_epoch

__all__ = ["ClusterError", "LocalCluster", "PortInUse"]


class ClusterError(RuntimeError):
    """The local deployment could not be started."""


class PortInUse(ClusterError):
    """An address the topology needs is taken by another program."""


@dataclass(frozen=True, slots=True)
class _Endpoint:
    name: str
    address: str
    port: int
    udp: bool = False


def _endpoints(config: Config) -> list[_Endpoint]:
    cp = config.control_plane
    found = [_Endpoint("control-plane", cp.address, cp.port)]
    for region in config.regions:
        found.append(_Endpoint(f"redis-{region.name}", region.redis.address, region.redis.port))
        found.extend(_Endpoint(f"app-{z.name}", z.address, config.app_port) for z in region.zones)
    return found


def check_ports_free(config: Config) -> None:
    """Raise PortInUse naming the first endpoint some other program already holds."""
    for ep in _endpoints(config):
        kind = socket.SOCK_DGRAM if ep.udp else socket.SOCK_STREAM
        with socket.socket(socket.AF_INET, kind) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind((ep.address, ep.port))
            except OSError as exc:
                if exc.errno == errno.EADDRINUSE:
                    raise PortInUse(
                        f"{ep.address}:{ep.port}, needed by {ep.name}, is already in use "
                        "(another rideout with a different data_dir? change the port in "
                        "rideout.toml or with RIDEOUT_APP_PORT / RIDEOUT_CONTROL_PLANE__PORT)"
                    ) from None
                raise ClusterError(
                    f"cannot bind {ep.address}:{ep.port} for {ep.name}: {exc}"
                ) from None


def child_env() -> dict[str, str]:
    """Children read the effective config file only, never RIDEOUT_* a second time."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIX) or k in ENV_NOT_KEYS}
    env.pop("RIDEOUT_CONFIG", None)
    env["PYTHONUNBUFFERED"] = "1"
    return env


class LocalCluster:
    """The local deployment described by `config`, supervised by this process."""

    def __init__(
        self, config: Config, *, sink: LineSink | None = None, ready_timeout: float = 30.0
    ):
        self.config = config
        self.ready_timeout = ready_timeout
        self._sink = sink
        self._lock = RunLock(config.run_dir)
        self._redis: list[EmbeddedRedis] = []
        self._servers: list[ManagedProcess] = []
        self._records: list[ProcessRecord] = []
        self._watchers: list[asyncio.Task[None]] = []
        self._stopping = False
        self.started_at = time.time()

    @property
    def config_file(self) -> Path:
        return self.config.run_dir / EFFECTIVE_CONFIG

    def _say(self, line: str) -> None:
        if self._sink is not None:
            self._sink("rideout", line)

    async def start(self) -> None:
        """Start everything and wait until it is ready; on failure stop what started."""
        self._lock.acquire()
        try:
            check_ports_free(self.config)
            for d in (self.config.logs_dir, self.config.run_dir):
                d.mkdir(parents=True, exist_ok=True)
            self.config_file.write_text(dump_toml(self.config), encoding="utf-8")
            # Every region's servers share one signing key and admin token: make them now,
            # so that a damaged key file stops `up` before anything runs.
            SigningKey.load_or_create(self.config.keys_dir)
            load_or_create_admin_token(self.config.keys_dir)
            await self._start_redis()
            await self._start_servers()
        except BaseException:
            await self.stop()
            raise

    def _record(self, record: ProcessRecord) -> None:
        """Note a started process in run/up.json at once, so that `status` and `down`
        see a deployment that is still starting (or failed half-way)."""
        self._records.append(record)
        state = RunState(os.getpid(), self.started_at, str(self.config_file), self._records)
        state.write(self.config.run_dir)

    async def _start_redis(self) -> None:
        primary, secondary = self.config.primary, self.config.secondary
        for region in (primary, secondary):
            replica_of = None if region is primary else (primary.redis.address, primary.redis.port)
            name = f"redis-{region.name}"
            server = EmbeddedRedis(
                RedisSpec(
                    name=name,
                    address=region.redis.address,
                    port=region.redis.port,
                    data_dir=self.config.region_data_dir(region.name),
                    log_file=self.config.logs_dir / f"{name}.log",
                    replica_of=replica_of,
                ),
                sink=self._sink,
            )
            self._redis.append(server)
            self._say(f"starting {name} on {region.redis.address}:{region.redis.port}")
            await server.start(timeout=self.ready_timeout)
            assert server.pid is not None
            self._record(
                ProcessRecord(name, "redis", server.pid, region=region.name,
                              address=region.redis.address, port=region.redis.port,
                              log=str(server.spec.log_file))
            )  # fmt: skip
            if region is primary:
                client = probe_client(region.redis.address, region.redis.port)
                try:
                    await ensure_epoch(client)
                finally:
                    await client.aclose()

    async def _start_servers(self) -> None:
        base = [sys.executable, "-m", "rideout"]
        cp = self.config.control_plane
        plans: list[tuple[ProcessRecord, list[str], str]] = [
            (
                ProcessRecord(
                    "control-plane", "control-plane", 0, address=cp.address, port=cp.port
                ),
                [*base, "control-plane", "--config", str(self.config_file)],
                f"http://{cp.address}:{cp.port}/health",
            )
        ]
        workers = self.config.realtime.workers
        for region in self.config.regions:
            for zone in region.zones:
                for worker in range(workers):
                    name = f"app-{zone.name}" + (f"-w{worker + 1}" if worker else "")
                    plans.append(
                        (
                            ProcessRecord(name, "app", 0, region=region.name, zone=zone.name,
                                          address=zone.address, port=self.config.app_port),
                            [*base, "serve", "--config", str(self.config_file),
                             "--region", region.name, "--zone", zone.name],
                            f"http://{zone.address}:{self.config.app_port}/health",
                        )
                    )  # fmt: skip
        env = child_env()
        started: list[tuple[ManagedProcess, str]] = []
        for record, argv, health_url in plans:
            log = self.config.logs_dir / f"{record.name}.log"
            proc = ManagedProcess(record.name, argv, log_file=log, sink=self._sink, env=env)
            self._servers.append(proc)
            self._say(f"starting {record.name} on {record.address}:{record.port}")
            await proc.start()
            assert proc.pid is not None
            self._record(replace(record, pid=proc.pid, log=str(log)))
            started.append((proc, health_url))
        async with httpx.AsyncClient(timeout=1.0, trust_env=False) as client:
            await asyncio.gather(*(self._await_health(client, p, url) for p, url in started))
        for proc in self._servers:
            self._watchers.append(asyncio.create_task(self._watch(proc)))

    async def _await_health(
        self, client: httpx.AsyncClient, proc: ManagedProcess, url: str
    ) -> None:
        deadline = time.monotonic() + self.ready_timeout
        last = "no answer yet"
        while True:
            if not proc.running:
                await proc.wait()
                tail = "".join(f"\n    {line}" for line in proc.tail()[-8:])
                raise ClusterError(
                    f"{proc.name} exited with code {proc.returncode} while starting; "
                    f"see {proc.log_file}{tail}"
                )
            try:
                response = await client.get(url)
                if response.status_code == 200:
                    return
                last = f"HTTP {response.status_code}"
            except httpx.HTTPError as exc:
                last = type(exc).__name__
            if time.monotonic() >= deadline:
                raise ClusterError(
                    f"{proc.name} did not answer {url} within {self.ready_timeout:g} s ({last}); "
                    f"see {proc.log_file}"
                )
            await asyncio.sleep(0.1)

    async def _watch(self, proc: ManagedProcess) -> None:
        code = await proc.wait()
        if not self._stopping:
            self._say(f"{proc.name} exited unexpectedly with code {code}; see {proc.log_file}")

    async def stop(self, timeout: float = 5.0) -> bool:
        """Stop app servers and control plane, then Redis; release the data directory.

        Returns whether there was anything to stop.
        """
        self._stopping = True
        anything = bool(self._servers or self._redis)
        try:
            if self._servers:
                self._say("stopping app servers and control plane")
                await asyncio.gather(*(p.stop(timeout) for p in self._servers))
            for task in self._watchers:
                task.cancel()
            for server in reversed(self._redis):
                self._say(f"stopping {server.spec.name}")
                await server.stop(timeout)
        finally:
            if self._lock.held:
                with contextlib.suppress(OSError):
                    RunState.remove(self.config.run_dir)
                self._lock.release()
            self._servers.clear()
            self._redis.clear()
            self._watchers.clear()
        return anything
