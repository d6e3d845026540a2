"""Start and stop the whole local two-region topology on one machine, and break it on
purpose.

Order matters: the primary's Redis first, then its replica in the secondary region,
then the control plane, every zone's app servers and each region's canary together.
Stopping goes the other way: servers first (they drain their clients), Redis last (it
flushes its append-only file). Whatever was started is stopped on every exit path: an
error during start, a cancelled start (Ctrl-C), or a normal stop.

Fault injection (`rideout chaos`) goes through the supervisor, which owns the processes:
it listens on ``run/control.sock`` for one-line JSON commands (see :mod:`.chaos`).
A region that is restored comes back with its configured Redis role; the failover
controller then reconciles which Redis is the writer.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import os
import signal
import socket
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import httpx

from rideout import routes
from rideout._process import LineSink, ManagedProcess
from rideout.auth import SigningKey
from rideout.auth.admin import load_or_create_admin_token
from rideout.cluster.errors import ClusterError
from rideout.cluster.runstate import (
    CONTROL_SOCKET,
    EFFECTIVE_CONFIG,
    ProcessRecord,
    RunLock,
    RunState,
)
from rideout.config import ENV_NOT_KEYS, ENV_PREFIX, Config, RegionConfig, dump_toml
from rideout.realtime.zone import DEGRADE_SIGNAL, SERVE_SIGNAL
from rideout.store.acl import (
    RedisRole,
    ServerAuth,
    StoreAuthError,
    credentials_for,
    prepare_server_auth,
)
from rideout.store.client import probe_client
from rideout.store.embedded import EmbeddedRedis, RedisSpec
from rideout.store.replication import ensure_epoch

__all__ = ["ClusterError", "LocalCluster", "PortInUse"]


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
        _Endpoint("the DNS server", cp.address, cp.dns_port),
        _Endpoint("the DNS server", cp.address, cp.dns_port, udp=True),
    ]
    for region in config.regions:
        found.append(_Endpoint(f"redis-{region.name}", region.redis.address, region.redis.port))
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


@dataclass
class _Server:
    """A server process the supervisor can (re)start: app server, canary, control plane."""

    record: ProcessRecord
    argv: list[str]
    health_url: str | None
    proc: ManagedProcess | None = None


class LocalCluster:
    """The local deployment described by `config`, supervised by this process."""

    def __init__(
        self, config: Config, *, sink: LineSink | None = None, ready_timeout: float = 30.0
    ):
        self.config = config
        self.ready_timeout = ready_timeout
        self._sink = sink
        self._lock = RunLock(config.run_dir)
        self._redis: dict[str, EmbeddedRedis] = {}
        self._redis_auth: ServerAuth | None = None
        self._servers: dict[str, _Server] = {}
        self._frozen: set[str] = set()
        self._watchers: list[asyncio.Task[None]] = []
        self._control: asyncio.Server | None = None
        self._stopping = False
        self.started_at = time.time()

    @property
    def config_file(self) -> Path:
        return self.config.run_dir / EFFECTIVE_CONFIG

    @property
    def control_socket(self) -> Path:
        return self.config.run_dir / CONTROL_SOCKET

    def _say(self, line: str) -> None:
        if self._sink is not None:
            self._sink("rideout", line)

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
            except StoreAuthError as exc:
                raise ClusterError(str(exc)) from exc
            for region in (self.config.primary, self.config.secondary):
                await self._start_redis(region)
            self._plan_servers()
            # Canaries last: probing zones that are still starting would look like an outage.
            servers = list(self._servers.values())
            await self._start_servers([s for s in servers if s.record.kind != "canary"])
            await self._start_servers([s for s in servers if s.record.kind == "canary"])
            await self._serve_control_socket()
        except BaseException:
            await self.stop()
            raise

    def _write_state(self) -> None:
        """run/up.json, rewritten whenever a process starts: `status` and `down` see a
        deployment that is still starting (or failed half-way)."""
        records = [
            ProcessRecord(f"redis-{name}", "redis", r.pid, region=name, address=r.spec.address,
                          port=r.spec.port, log=str(r.spec.log_file))
            for name, r in self._redis.items() if r.pid is not None
        ]  # fmt: skip
        records += [
            replace(s.record, pid=s.proc.pid)
            for s in self._servers.values()
            if s.proc is not None and s.proc.pid is not None
        ]
        RunState(os.getpid(), self.started_at, str(self.config_file), records).write(
            self.config.run_dir
        )

    async def _start_redis(self, region: RegionConfig) -> None:
        primary = self.config.primary
        replica_of = None if region is primary else (primary.redis.address, primary.redis.port)
        name = f"redis-{region.name}"
        assert self._redis_auth is not None, "start() prepares the Redis credentials"
        server = EmbeddedRedis(
            RedisSpec(
                name=name,
                address=region.redis.address,
                port=region.redis.port,
                data_dir=self.config.region_data_dir(region.name),
                log_file=self.config.logs_dir / f"{name}.log",
                replica_of=replica_of,
                auth=self._redis_auth,
            ),
            sink=self._sink,
        )
        self._redis[region.name] = server
        self._say(f"starting {name} on {region.redis.address}:{region.redis.port}")
        await server.start(timeout=self.ready_timeout)
        self._write_state()
        if replica_of is None:
            controller = credentials_for(self.config, RedisRole.CONTROLLER)
            client = probe_client(region.redis.address, region.redis.port, credentials=controller)
            try:
                await ensure_epoch(client)
            finally:
                await client.aclose()

    def _plan_servers(self) -> None:
        base = [sys.executable, "-m", "rideout"]
        config = ["--config", str(self.config_file)]
        cp = self.config.control_plane
        self._servers["control-plane"] = _Server(
            ProcessRecord("control-plane", "control-plane", 0, address=cp.address, port=cp.port),
            [*base, "control-plane", *config],
            routes.control_plane_url(self.config, routes.HEALTH),
        )
        for region in self.config.regions:
            for zone in region.zones:
                for worker in range(self.config.realtime.workers):
                    name = f"app-{zone.name}" + (f"-w{worker + 1}" if worker else "")
                    self._servers[name] = _Server(
                        ProcessRecord(name, "app", 0, region=region.name, zone=zone.name,
                                      address=zone.address, port=self.config.app_port),
                        [*base, "serve", *config, "--region", region.name, "--zone", zone.name],
                        routes.zone_url(self.config, zone.address, routes.HEALTH),
                    )  # fmt: skip
            name = f"canary-{region.name}"
            self._servers[name] = _Server(
                ProcessRecord(name, "canary", 0, region=region.name),
                [*base, "canary", *config, "--region", region.name],
                None,
            )

    async def _start_servers(self, servers: list[_Server]) -> None:
        env = child_env()
        for server in servers:
            log = self.config.logs_dir / f"{server.record.name}.log"
            server.record = replace(server.record, log=str(log))
            server.proc = ManagedProcess(
                server.record.name, server.argv, log_file=log, sink=self._sink, env=env
            )
            where = (
                f" on {server.record.address}:{server.record.port}" if server.record.address else ""
            )
            self._say(f"starting {server.record.name}{where}")
            await server.proc.start()
            self._write_state()
        async with httpx.AsyncClient(timeout=1.0, trust_env=False) as client:
            await asyncio.gather(*(self._await_health(client, s) for s in servers))
        for server in servers:
            assert server.proc is not None
            self._watchers.append(asyncio.create_task(self._watch(server.proc)))

    async def _await_health(self, client: httpx.AsyncClient, server: _Server) -> None:
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
            if server.health_url is None:
                return  # nothing to ask; it runs
            try:
                response = await client.get(server.health_url)
                if response.status_code == 200:
                    return
                last = f"HTTP {response.status_code}"
            except httpx.HTTPError as exc:
                last = type(exc).__name__
            if time.monotonic() >= deadline:
                raise ClusterError(
                    f"{proc.name} did not answer {server.health_url} within {self.ready_timeout:g} s "
                    f"({last}); see {proc.log_file}"
                )
            await asyncio.sleep(0.1)

    async def _watch(self, proc: ManagedProcess) -> None:
        code = await proc.wait()
        if not self._stopping:
            self._say(f"{proc.name} exited with code {code}; see {proc.log_file}")

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

    def _region_pids(self, region: str) -> list[int]:
        pids = [
            s.proc.pid
            for s in self._region_servers(region)
            if s.proc and s.proc.running and s.proc.pid
        ]
        redis = self._redis.get(region)
        if redis is not None and redis.running and redis.pid is not None:
            pids.append(redis.pid)
        return pids

    async def kill(self, region: str) -> str:
        """SIGKILL every process of `region`, Redis included: the region is gone."""
        self._region(region)
        self._frozen.discard(region)
        pids = self._region_pids(region)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        return f"killed {region}: {len(pids)} processes (SIGKILL), Redis included"

    async def kill_redis(self, region: str) -> str:
        """SIGKILL only the region's Redis: servers stay up with their state store gone."""
        self._region(region)
        redis = self._redis.get(region)
        if redis is None or not redis.running or redis.pid is None:
            return f"redis-{region} is not running"
        os.kill(redis.pid, signal.SIGKILL)
        return f"killed redis-{region} (pid {redis.pid})"

    async def freeze(self, region: str) -> str:
        """SIGSTOP every process of `region`: connections hang, like a network blackhole."""
        self._region(region)
        pids = self._region_pids(region)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)
        self._frozen.add(region)
        return f"froze {region}: {len(pids)} processes (SIGSTOP); connections now hang"

    async def throttle(self, region: str) -> str:
        """Every app server of `region` answers every message with error/unavailable."""
        self._region(region)
        apps = [s for s in self._region_servers(region, "app") if s.proc and s.proc.running]
        for server in apps:
            assert server.proc is not None
            server.proc.signal(DEGRADE_SIGNAL)
        return f"throttled {region}: {len(apps)} app servers answer error/unavailable, connections stay open"

    async def restore(self, region: str) -> str:
        """Undo kill, kill-redis, freeze and throttle: the region comes back."""
        self._region(region)
        done: list[str] = []
        if region in self._frozen:
            for pid in self._region_pids(region):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)
            self._frozen.discard(region)
            done.append("resumed (SIGCONT)")
        redis = self._redis.get(region)
        if redis is None or not redis.running:
            await self._start_redis(self._region(region))
            done.append(f"restarted redis-{region}")
        dead = [s for s in self._region_servers(region) if s.proc is None or not s.proc.running]
        if dead:
            await self._start_servers(dead)
            done.append(f"restarted {len(dead)} servers")
        for server in self._region_servers(region, "app"):
            if server.proc is not None:
                server.proc.signal(SERVE_SIGNAL)
        done.append("app servers serving")
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
        """Run one control command (``{"op": "kill", "region": "us-east-1"}``)."""
        ops = {
            "kill": self.kill,
            "kill-redis": self.kill_redis,
            "freeze": self.freeze,
            "throttle": self.throttle,
            "restore": self.restore,
        }
        try:
            request = json.loads(line)
            op, region = request["op"], request["region"]
            if op not in ops or not isinstance(region, str):
                raise ValueError
        except (ValueError, KeyError, TypeError):
            return {
                "ok": False,
                "error": f'expected {{"op": one of {sorted(ops)}, "region": NAME}}',
            }
        try:
            message = await ops[op](region)
        except ClusterError as exc:
            return {"ok": False, "error": str(exc)}
        except Exception as exc:  # report, never take the supervisor down
            return {"ok": False, "error": f"{op} {region} failed: {exc}"}
        self._say(message)
        return {"ok": True, "message": message}

    # ------------------------------------------------------------------ stop

    async def stop(self, timeout: float = 5.0) -> bool:
        """Stop servers and control plane, then Redis; release the data directory.

        Returns whether there was anything to stop.
        """
        self._stopping = True
        procs = [s.proc for s in self._servers.values() if s.proc is not None]
        anything = bool(procs or self._redis)
        try:
            if self._control is not None:
                self._control.close()
                with contextlib.suppress(FileNotFoundError):
                    self.control_socket.unlink()
            for region in list(self._frozen):  # a stopped process cannot handle SIGTERM
                for pid in self._region_pids(region):
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGCONT)
            if procs:
                self._say("stopping app servers, canaries and control plane")
                await asyncio.gather(*(p.stop(timeout) for p in procs))
            for task in self._watchers:
                task.cancel()
            for name in reversed(list(self._redis)):
                self._say(f"stopping redis-{name}")
                await self._redis[name].stop(timeout)
        finally:
            if self._lock.held:
                with contextlib.suppress(OSError):
                    RunState.remove(self.config.run_dir)
                self._lock.release()
            self._servers.clear()
            self._redis.clear()
            self._watchers.clear()
            self._frozen.clear()
        return anything
