"""Start and stop the whole local two-region topology on one machine, keep it running,
and break it on purpose.

Order matters: the primary's Redis first, then its replica in the secondary region,
then the control plane, the DNS server and every zone's app servers together, then
each region's canary. Stopping goes the other way: servers first (they drain their
clients), Redis last (it flushes its append-only file). Whatever was started is stopped
on every exit path: an error during start, a cancelled start (Ctrl-C), or a normal stop.

Every child that dies on its own is restarted, after a backoff and within a limit
(:mod:`rideout.cluster.restarts`): past the limit it stays down and ``status`` says
it is crash-looping. A child stopped on purpose (``rideout chaos kill``/``kill-redis``,
``down``, Ctrl-C) is never restarted; ``rideout chaos restore`` brings it back and
forgets its restart history. A Redis that restarts, or starts on data it kept, comes
back fenced (a read-only replica of itself, which no replica can sync from): which Redis
is the writer is the failover controller's to choose, after comparing what each holds.

Fault injection (`rideout chaos`) goes through the supervisor, which owns the processes:
it listens on ``run/control.sock`` for one-line JSON commands (see :mod:`.chaos`).
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import errno
import json
import os
import signal
import socket
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import httpx
from redis.exceptions import RedisError

from rideout import _http, routes
from rideout._process import LineSink, ManagedProcess
from rideout.auth import SigningKey
from rideout.auth.admin import load_or_create_admin_token
from rideout.client.resolve import NameserverResolver, ResolutionError
from rideout.cluster.errors import ClusterError
from rideout.cluster.restarts import RestartHistory, RestartPolicy
from rideout.cluster.runstate import (
    CONTROL_SOCKET,
    EFFECTIVE_CONFIG,
    ProcessRecord,
    RunLock,
    RunState,
)
from rideout.config import ENV_NOT_KEYS, ENV_PREFIX, Config, RedisConfig, RegionConfig, dump_toml
from rideout.realtime.zone import DEGRADE_SIGNAL, SERVE_SIGNAL
from rideout.store.acl import (
    RedisRole,
    ServerAuth,
    StoreAuthError,
    credentials_for,
    prepare_server_auth,
)
from rideout.store.client import probe_client
from rideout.store.embedded import (
    EmbeddedRedis,
    EmbeddedRedisError,
    RedisSpec,
    find_redis_server,
    server_info,
)
from rideout.store.functions import ensure_library
from rideout.store.replication import ensure_epoch

__all__ = ["ClusterError", "LocalCluster", "PortInUse", "RestartPolicy"]


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
    found = [
        _Endpoint("control-plane", cp.address, cp.port),
        _Endpoint("dns", cp.address, cp.dns_port),
        _Endpoint("dns", cp.address, cp.dns_port, udp=True),
        _Endpoint("dns", cp.address, cp.dns_metrics_port),
    ]
    for region in config.regions:
        found.append(_Endpoint(f"redis-{region.name}", region.redis.address, region.redis.port))
        if region.replica is not None:
            found.append(
                _Endpoint(
                    f"redis-{region.name}-replica", region.replica.address, region.replica.port
                )
            )
        found.extend(_Endpoint(f"app-{z.name}", z.address, config.app_port) for z in region.zones)
    return found


def check_ports_free(config: Config) -> None:
    """Raise PortInUse naming the first endpoint some other program already holds."""
    for ep in _endpoints(config):
        with socket.socket(
            socket.AF_INET, socket.SOCK_DGRAM if ep.udp else socket.SOCK_STREAM
        ) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind((ep.address, ep.port))
            except OSError as exc:
                if exc.errno == errno.EADDRINUSE:
                    raise PortInUse(
                        f"{ep.address}:{ep.port}{'/udp' if ep.udp else ''}, needed by {ep.name}, is already in use "
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


Probe = Callable[[httpx.AsyncClient], Awaitable[str | None]]
"""Is a server ready? None when it is, else what it answered instead."""


def _http_probe(url: str) -> Probe:
    async def probe(client: httpx.AsyncClient) -> str | None:
        try:
            response = await client.get(url)
        except httpx.HTTPError as exc:
            return type(exc).__name__
        return None if response.status_code == 200 else f"HTTP {response.status_code}"

    return probe


def _dns_probe(config: Config) -> Probe:
    cp = config.control_plane
    resolver = NameserverResolver(cp.address, cp.dns_port, timeout=1.0)

    async def probe(client: httpx.AsyncClient) -> str | None:
        try:
            await resolver.resolve(config.app_domain)
        except ResolutionError as exc:
            return str(exc)
        return None

    return probe


@dataclass(eq=False)
class _Child(abc.ABC):
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


@dataclass(eq=False)
class _Server(_Child):
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
class _Redis(_Child):
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


def _replica_key(region: str) -> str:
    return f"{region}/replica"


class LocalCluster:
    """The local deployment described by `config`, supervised by this process.

    `restart_policy` decides when a child that died is restarted (see
    :mod:`rideout.cluster.restarts`); `clock` is what its window is measured on.
    """

    def __init__(
        self,
        config: Config,
        *,
        sink: LineSink | None = None,
        ready_timeout: float = 30.0,
        restart_policy: RestartPolicy | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.config = config
        self.ready_timeout = ready_timeout
        self.restart_policy = restart_policy or RestartPolicy()
        self._clock = clock
        self._sink = sink
        self._lock = RunLock(config.run_dir)
        self._redis: dict[str, _Redis] = {}
        self._redis_auth: ServerAuth | None = None
        self._redis_binary: Path | None = None
        self._servers: dict[str, _Server] = {}
        self._frozen: set[str] = set()
        self._keepers: set[asyncio.Task[None]] = set()
        self._control: asyncio.Server | None = None
        self._stopping = False
        self._started = False  # start() finished: from now on the controller owns epochs
        self.started_at = time.time()
        # Awaited with the region's name once a restarted Redis answers, before the epoch
        # step: tests run a real controller step there to force the interleaving of
        # issue #11's finding 1 (the controller demotes it first).
        self.after_redis_start: Callable[[str], Awaitable[None]] | None = None

    @property
    def config_file(self) -> Path:
        return self.config.run_dir / EFFECTIVE_CONFIG

    @property
    def control_socket(self) -> Path:
        return self.config.run_dir / CONTROL_SOCKET

    def _say(self, line: str) -> None:
        if self._sink is not None:
            self._sink("rideout", line)

    def _children(self) -> list[_Child]:
        return [*self._redis.values(), *self._servers.values()]

    def _history(self) -> RestartHistory:
        return RestartHistory(self.restart_policy, clock=self._clock)

    # ------------------------------------------------------------------ start

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
            try:  # the Redis users' credentials (made once), their ACL file, masterauth
                self._redis_auth = prepare_server_auth(self.config.keys_dir)
                self._redis_binary = find_redis_server(self.config.redis_server)
            except (StoreAuthError, EmbeddedRedisError) as exc:
                raise ClusterError(str(exc)) from exc
            self._say(
                f"redis servers: {server_info(self._redis_binary).label} ({self._redis_binary})"
            )
            for region in (self.config.primary, self.config.secondary):
                redis = _Redis(
                    ProcessRecord(f"redis-{region.name}", "redis", 0, region=region.name,
                                  zone=region.zones[0].name, address=region.redis.address, port=region.redis.port,
                                  log=str(self.config.logs_dir / f"redis-{region.name}.log")),
                    self._history(), region=region,
                )  # fmt: skip
                self._redis[region.name] = redis
                await self._spawn(redis)
                self._keep(redis)
            for region in (self.config.primary, self.config.secondary):
                if region.replica is None:
                    continue
                name = f"redis-{region.name}-replica"
                zone = region.zones[1].name
                replica = _Redis(
                    ProcessRecord(name, "redis", 0, region=region.name, zone=zone,
                                  address=region.replica.address, port=region.replica.port,
                                  log=str(self.config.logs_dir / f"{name}.log")),
                    self._history(), region=region, in_region=True,
                )  # fmt: skip
                self._redis[_replica_key(region.name)] = replica
                await self._spawn(replica)
                self._keep(replica)
            self._plan_servers()
            # Canaries last: probing zones that are still starting would look like an outage.
            servers = list(self._servers.values())
            await self._start_servers([s for s in servers if s.record.kind != "canary"])
            await self._start_servers([s for s in servers if s.record.kind == "canary"])
            await self._serve_control_socket()
            self._started = True
        except BaseException:
            await self.stop()
            raise

    def _write_state(self) -> None:
        """run/up.json, rewritten whenever a process starts, dies or changes state:
        `status` and `down` see a deployment that is still starting (or failed half-way)."""
        records = [
            replace(
                child.record,
                pid=(child.pid or 0) if child.running else 0,
                state=child.state,
                restarts=child.history.total,
                note=child.note,
            )
            for child in self._children()
        ]
        RunState(os.getpid(), self.started_at, str(self.config_file), records).write(
            self.config.run_dir
        )

    def _plan_servers(self) -> None:
        # The processes without the CLI (rideout.processes): ~0.3 s of CPU less each.
        base = [sys.executable, "-m", "rideout.processes"]
        config = ["--config", str(self.config_file)]
        cp = self.config.control_plane

        def server(record: ProcessRecord, argv: list[str], probe: Probe | None) -> None:
            log = str(self.config.logs_dir / f"{record.name}.log")
            self._servers[record.name] = _Server(
                replace(record, log=log), self._history(), argv=argv, probe=probe
            )

        server(
            ProcessRecord("control-plane", "control-plane", 0, address=cp.address, port=cp.port),
            [*base, "control-plane", *config, "--no-dns"],
            _http_probe(routes.control_plane_url(self.config, routes.HEALTH)),
        )
        server(
            ProcessRecord("dns", "dns", 0, address=cp.address, port=cp.dns_port),
            [*base, "dns", *config],
            _dns_probe(self.config),
        )
        for region in self.config.regions:
            for zone in region.zones:
                for worker in range(self.config.realtime.workers):
                    name = f"app-{zone.name}" + (f"-w{worker + 1}" if worker else "")
                    server(
                        ProcessRecord(name, "app", 0, region=region.name, zone=zone.name,
                                      address=zone.address, port=self.config.app_port),
                        [*base, "serve", *config, "--region", region.name, "--zone", zone.name],
                        _http_probe(routes.zone_url(self.config, zone.address, routes.HEALTH)),
                    )  # fmt: skip
            server(
                ProcessRecord(f"canary-{region.name}", "canary", 0, region=region.name),
                [*base, "canary", *config, "--region", region.name],
                None,
            )

    async def _start_servers(self, servers: list[_Server]) -> None:
        """Spawn `servers`, wait until each is ready, then keep them running."""
        for server in servers:
            await self._spawn(server)
        async with _http.async_client(timeout=1.0) as client:
            waits = [asyncio.create_task(self._await_ready(client, s)) for s in servers]
            try:
                await asyncio.gather(*waits)
            except BaseException:
                # One failed (or we were cancelled): the others stop probing before their
                # client closes, instead of running on with it (and its sockets) orphaned.
                for wait in waits:
                    wait.cancel()
                await asyncio.gather(*waits, return_exceptions=True)
                raise
        for server in servers:
            self._keep(server)

    async def _spawn(self, child: _Child) -> None:
        """Start one process for `child` (a Redis is also waited for until ready)."""
        note = None
        if isinstance(child, _Redis):
            note = await self._spawn_redis(child)
        else:
            assert isinstance(child, _Server)
            record = child.record
            assert record.log is not None
            proc = ManagedProcess(
                record.name, child.argv, log_file=Path(record.log), sink=self._sink,
                env=child_env(),
            )  # fmt: skip
            where = f" on {record.address}:{record.port}" if record.address else ""
            self._say(f"starting {record.name}{where}")
            child.proc = proc
            await proc.start()
        child.generation += 1
        child.state, child.note = "running", note
        self._write_state()

    async def _spawn_redis(self, child: _Redis) -> str | None:
        region = child.region
        assert region is not None
        primary = self.config.primary
        node = child.node
        replica_of = None if region is primary else (primary.redis.address, primary.redis.port)
        data_dir = self.config.region_data_dir(region.name)
        if child.in_region:
            # It follows its region's main Redis (chained when that one is a replica
            # itself); the controller re-points it when the writer moves elsewhere.
            replica_of = (region.redis.address, region.redis.port)
            data_dir = data_dir / "replica"
        assert self._redis_auth is not None, "start() prepares the Redis credentials"
        spec = RedisSpec(
            name=child.name,
            address=node.address,
            port=node.port,
            data_dir=data_dir,
            log_file=self.config.logs_dir / f"{child.name}.log",
            replica_of=replica_of,
            auth=self._redis_auth,
        )
        # Only a first start on no data takes its configured role at once. A restart, or
        # a start on data kept from before, comes back fenced: what it holds may be less
        # than the others hold (a lost or truncated AOF, fsync's last second), and as a
        # writer it would be their source of a full sync. The controller compares the
        # datasets and chooses (failover.controller, "restarted Redis").
        fenced = self._started or spec.has_data
        server = EmbeddedRedis(
            replace(spec, fenced=fenced), sink=self._sink, binary=self._redis_binary
        )
        child.server = server
        self._say(
            f"starting {child.name} on {node.address}:{node.port}"
            + (" (fenced until the controller chooses its role)" if fenced else "")
        )
        await server.start(timeout=self.ready_timeout)
        if self._started and self.after_redis_start is not None and not child.in_region:
            await self.after_redis_start(region.name)
        if fenced:
            return None  # its epoch is in its data, or it is the controller's to give
        return await self._first_epoch(region) if replica_of is None else None

    async def _first_epoch(self, region: RegionConfig) -> str | None:
        """Give a new writer epoch 1 (SET NX: an existing epoch is kept).

        At start, before any controller runs, a failure stops ``up``. Later (a restart,
        ``chaos restore``) the controller owns roles and epochs and may have demoted this
        Redis already, or be syncing it: the step is best effort, and what it could not
        do is returned for ``restore`` to report, never raised.
        """
        controller = credentials_for(self.config, RedisRole.CONTROLLER)
        client = probe_client(region.redis.address, region.redis.port, credentials=controller)
        try:
            if await ensure_epoch(client) is None:
                return "epoch left to the controller (a replica by now)"
            await ensure_library(client)  # the app's functions (7.0+), before any app server
        except (RedisError, OSError, ValueError) as exc:
            if not self._started:
                raise ClusterError(
                    f"cannot set the first epoch on redis-{region.name}: {exc}"
                ) from exc
            return f"epoch left to the controller ({type(exc).__name__}: {exc})"
        finally:
            await client.aclose()
        return None

    async def _await_ready(self, client: httpx.AsyncClient, server: _Server) -> None:
        proc = server.proc
        assert proc is not None
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
            if server.probe is None:
                return  # nothing to ask; it runs
            why = await server.probe(client)
            if why is None:
                return
            last = why
            if time.monotonic() >= deadline:
                raise ClusterError(
                    f"{proc.name} was not ready within {self.ready_timeout:g} s ({last}); "
                    f"see {proc.log_file}"
                )
            await asyncio.sleep(0.1)

    # ------------------------------------------------------------------ restarts

    def _keep(self, child: _Child) -> None:
        task = asyncio.create_task(self._keeper(child), name=f"rideout-keep-{child.name}")
        self._keepers.add(task)

        def done(task: asyncio.Task[None]) -> None:
            self._keepers.discard(task)
            if not task.cancelled() and task.exception() is not None:
                # Never silently: a child nobody looks after any more must say so.
                child.note = f"no longer restarted: the supervisor failed ({task.exception()!r})"
                self._say(f"{child.name}: {child.note}")
                with contextlib.suppress(OSError):
                    self._write_state()

        task.add_done_callback(done)

    def _wanted(self, child: _Child, generation: int) -> bool:
        """Whether the keeper of `generation` still looks after `child`."""
        return not (self._stopping or child.held or child.generation != generation)

    async def _keeper(self, child: _Child) -> None:
        """Restart `child` whenever it dies on its own, as long as its history allows."""
        while True:
            generation = child.generation
            code = await child.wait()
            exited = "exited" if code is None else f"exited with code {code}"
            if not self._wanted(child, generation):
                if child.held and not self._stopping:
                    self._say(f"{child.name} {exited}; stopped on purpose")
                    self._write_state()
                return
            verdict = child.history.died()
            if not verdict.restart:
                child.state, child.note = "gave-up", verdict.reason
                region = child.record.region or self.config.primary.name
                self._say(
                    f"{child.name} {exited}: {verdict.reason}; see "
                    f"{child.record.log}; `rideout chaos restore {region}` starts it again"
                )
                self._write_state()
                return
            child.state = "restarting"
            child.note = f"restarting ({exited}; {verdict.reason})"
            self._say(
                f"{child.name} {exited}; restarting in {verdict.delay:.1f} s ({verdict.reason})"
            )
            self._write_state()
            await asyncio.sleep(verdict.delay)
            async with child.lock:
                if not self._wanted(child, generation):
                    return
                try:
                    await self._spawn(child)
                except Exception as exc:  # a failed start is one more death, not the end
                    self._say(f"cannot restart {child.name}: {exc}")
                    child.generation += 1  # the next wait returns at once: another death
                    continue
                if child.held:  # `chaos kill` came while it was starting
                    self._kill(child)

    def _kill(self, child: _Child) -> bool:
        pid = child.pid
        if not child.running or pid is None:
            return False
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        return True

    def _hold(self, children: list[_Child], why: str) -> None:
        """Stopped on purpose: no keeper restarts these until they are restored."""
        for child in children:
            child.held = True
            child.state, child.note = "stopped", why
        self._write_state()

    async def _revive(self, child: _Child) -> bool:
        """Restart `child` on purpose if it does not run (restore); whether it did."""
        child.held = False
        child.history.reset()
        async with child.lock:
            if child.running:
                if child.state != "running":
                    child.state, child.note = "running", None
                return False
            try:
                await self._spawn(child)
            finally:  # if it did not start, its keeper retries as after any death
                self._keep(child)
        return True

    # ------------------------------------------------------------------ chaos

    def _region(self, name: str) -> RegionConfig:
        try:
            return self.config.region(name)
        except KeyError as exc:
            raise ClusterError(str(exc.args[0])) from None

    def _region_servers(self, region: str, kind: str | None = None) -> list[_Server]:
        return [
            s for s in self._servers.values()
            if s.record.region == region and (kind is None or s.record.kind == kind)
        ]  # fmt: skip

    def _region_children(self, region: str) -> list[_Child]:
        """What dies with `region` (kill, freeze): its app servers, its Redis servers and,
        placed in the region, its canary (see ``failover.canary_placement``)."""
        outside = self.config.failover.canary_placement == "outside"
        children: list[_Child] = [
            s for s in self._region_servers(region) if not (outside and s.record.kind == "canary")
        ]
        for key in (region, _replica_key(region)):
            if key in self._redis:
                children.append(self._redis[key])
        return children

    def _region_pids(self, region: str) -> list[int]:
        return [c.pid for c in self._region_children(region) if c.running and c.pid]

    def _zone_servers(self, region: str, zone: str) -> list[_Server]:
        try:
            self.config.zone(region, zone)
        except KeyError as exc:
            raise ClusterError(str(exc.args[0])) from None
        return [s for s in self._region_servers(region, "app") if s.record.zone == zone]

    async def kill(self, region: str, zone: str | None = None) -> str:
        """SIGKILL every process of `region` (:meth:`_region_children`), Redis included:
        the region is gone. With `zone`, only that zone's app servers (a zone outage)."""
        self._region(region)
        if zone is not None:
            servers = self._zone_servers(region, zone)
            self._hold(list(servers), "stopped by `rideout chaos kill --zone`")
            killed = sum(self._kill(server) for server in servers)
            return f"killed zone {zone} of {region}: {killed} app servers (SIGKILL)"
        self._frozen.discard(region)
        children = self._region_children(region)
        self._hold(children, "stopped by `rideout chaos kill`")
        killed = sum(self._kill(child) for child in children)
        return f"killed {region}: {killed} processes (SIGKILL), Redis included"

    async def kill_redis(self, region: str) -> str:
        """SIGKILL only the region's Redis: servers stay up with their state store gone."""
        self._region(region)
        redis = self._redis.get(region)
        if redis is None:
            return f"redis-{region} is not running"
        pid = redis.pid
        self._hold([redis], "stopped by `rideout chaos kill-redis`")
        if not self._kill(redis):
            return f"redis-{region} is not running"
        return f"killed redis-{region} (pid {pid})"

    async def freeze(self, region: str, zone: str | None = None) -> str:
        """SIGSTOP every process of `region` (:meth:`_region_children`; with `zone`: that
        zone's app servers): connections hang, like a network blackhole."""
        self._region(region)
        if zone is not None:
            pids = [s.pid for s in self._zone_servers(region, zone) if s.running and s.pid]
        else:
            pids = self._region_pids(region)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)
        self._frozen.add(region)  # restore (and stop) resume every process of the region
        what = f"zone {zone} of {region}" if zone is not None else region
        return f"froze {what}: {len(pids)} processes (SIGSTOP); connections now hang"

    async def throttle(self, region: str, zone: str | None = None) -> str:
        """Every app server of `region` (with `zone`: of that zone) answers every message
        with error/unavailable."""
        self._region(region)
        servers = (
            self._zone_servers(region, zone) if zone is not None
            else self._region_servers(region, "app")
        )  # fmt: skip
        apps = [s for s in servers if s.proc and s.proc.running]
        for server in apps:
            assert server.proc is not None
            server.proc.signal(DEGRADE_SIGNAL)
        what = f"zone {zone} of {region}" if zone is not None else region
        return f"throttled {what}: {len(apps)} app servers answer error/unavailable, connections stay open"

    async def restore(self, region: str, zone: str | None = None) -> str:
        """Undo kill, kill-redis, freeze and throttle: the region comes back.

        Also brings back the global processes (control plane, DNS) if they are down,
        and forgets the restart history of everything it restores. Every step is tried
        whatever the others did (the controller may demote the Redis meanwhile: roles
        and epochs are its business); if one fails, this raises :class:`ClusterError`
        naming what was done and what failed, never leaving a region half-up silently.
        """
        self._region(region)
        done: list[str] = []
        failed: list[str] = []
        if region in self._frozen:
            for pid in self._region_pids(region):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)
            self._frozen.discard(region)
            done.append("resumed (SIGCONT)")
        for key in (region, _replica_key(region)):  # the main Redis first: the replica follows it
            redis = self._redis.get(key)
            if redis is None:
                continue
            try:
                if await self._revive(redis):
                    done.append(f"restarted {redis.name}")
                    if redis.note:
                        done.append(redis.note)
            except Exception as exc:
                failed.append(f"{redis.name} ({exc})")
        candidates = [
            *(s for s in self._servers.values() if s.record.region is None),
            *self._region_servers(region),
        ]
        dead: list[_Server] = []
        for server in candidates:
            try:
                if await self._revive(server):
                    dead.append(server)
            except Exception as exc:
                failed.append(f"{server.name} ({exc})")
        if dead:
            async with _http.async_client(timeout=1.0) as client:
                ready = await asyncio.gather(
                    *(self._await_ready(client, s) for s in dead), return_exceptions=True
                )
            for server, outcome in zip(dead, ready, strict=True):
                if isinstance(outcome, BaseException):
                    failed.append(f"{server.name} ({outcome})")
            up = len(dead) - sum(isinstance(o, BaseException) for o in ready)
            done.append(f"restarted {up} servers")
        for server in self._region_servers(region, "app"):
            if server.proc is not None and server.proc.running:
                server.proc.signal(SERVE_SIGNAL)
        done.append("app servers serving")
        self._write_state()
        if failed:
            raise ClusterError(
                f"restore {region} is incomplete: done: {', '.join(done)}; "
                f"failed: {'; '.join(failed)} (what is not running is retried by its "
                "keeper; see `rideout status`)"
            )
        return f"restored {region}: " + ", ".join(done)

    async def _serve_control_socket(self) -> None:
        path = self.control_socket
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        self._control = await asyncio.start_unix_server(self._handle_control, path=str(path))
        path.chmod(0o600)

    async def _handle_control(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        try:
            line = await asyncio.wait_for(reader.readline(), 5)
            reply = await self.command(line)
            writer.write(json.dumps(reply).encode() + b"\n")
            await writer.drain()
        except (TimeoutError, ConnectionError):
            pass
        finally:
            writer.close()

    async def command(self, line: bytes) -> dict[str, Any]:
        """Run one control command (``{"op": "kill", "region": "us-east-1"}``; kill,
        freeze and throttle take ``"zone"`` too, for one zone's app servers)."""
        ops = {
            "kill": self.kill,
            "kill-redis": self.kill_redis,
            "freeze": self.freeze,
            "throttle": self.throttle,
            "restore": self.restore,
        }
        try:
            request = json.loads(line)
            op, region, zone = request["op"], request["region"], request.get("zone")
            if op not in ops or not isinstance(region, str):
                raise ValueError
            if zone is not None and (not isinstance(zone, str) or op == "kill-redis"):
                raise ValueError
        except (ValueError, KeyError, TypeError, AttributeError):
            return {
                "ok": False,
                "error": f'expected {{"op": one of {sorted(ops)}, "region": NAME, "zone"?: '
                "NAME (not with kill-redis)}",
            }
        try:
            if zone is None:
                message = await ops[op](region)
            else:
                zoned = {"kill": self.kill, "freeze": self.freeze,
                         "throttle": self.throttle, "restore": self.restore}  # fmt: skip
                message = await zoned[op](region, zone)
        except ClusterError as exc:
            return {"ok": False, "error": str(exc)}
        except Exception as exc:  # report, never take the supervisor down
            return {"ok": False, "error": f"{op} {region} failed: {exc}"}
        self._say(message)
        return {"ok": True, "message": message}

    # ------------------------------------------------------------------ stop

    async def stop(self, timeout: float = 5.0) -> bool:
        """Stop servers, control plane and DNS, then Redis; release the data directory.

        Returns whether there was anything to stop.
        """
        self._stopping = True
        anything = any(c.pid is not None for c in self._children())
        try:
            if self._control is not None:
                self._control.close()
                with contextlib.suppress(FileNotFoundError):
                    self.control_socket.unlink()
            # No keeper may start anything now: let a spawn under way finish (its process
            # is stopped below), then end every keeper.
            for child in self._children():
                async with child.lock:
                    pass
            keepers = list(self._keepers)
            for task in keepers:
                task.cancel()
            await asyncio.gather(*keepers, return_exceptions=True)
            for region in list(self._frozen):  # a stopped process cannot handle SIGTERM
                for pid in self._region_pids(region):
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGCONT)
            procs = [s.proc for s in self._servers.values() if s.proc is not None]
            if procs:
                self._say("stopping app servers, canaries, DNS and control plane")
                await asyncio.gather(*(p.stop(timeout) for p in procs))
            for child in reversed(list(self._redis.values())):
                server = child.server
                if server is not None:
                    self._say(f"stopping {child.name}")
                    await server.stop(timeout)
        finally:
            if self._lock.held:
                with contextlib.suppress(OSError):
                    RunState.remove(self.config.run_dir)
                self._lock.release()
            self._servers.clear()
            self._redis.clear()
            self._keepers.clear()
            self._frozen.clear()
        return anything
