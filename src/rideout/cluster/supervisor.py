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
is the writer is the failover controller's to choose, after comparing what each holds
(:mod:`.redis_servers` starts them).

Fault injection (`rideout chaos`) goes through the supervisor, which owns the processes:
it listens on ``run/control.sock`` for one-line JSON commands (:mod:`.control`; the
client side is :mod:`.chaos`). What it keeps running is in :mod:`.children`; the check
that every address is free before anything starts, in :mod:`.preflight`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path

import httpx

from rideout import _http, routes
from rideout._process import LineSink, ManagedProcess
from rideout.auth import SigningKey
from rideout.auth.admin import load_or_create_admin_token
from rideout.cluster.children import (
    Child,
    Probe,
    RedisChild,
    ServerChild,
    child_env,
    dns_probe,
    http_probe,
    replica_key,
)
from rideout.cluster.control import ChaosControl
from rideout.cluster.errors import ClusterError
from rideout.cluster.preflight import check_ports_free
from rideout.cluster.redis_servers import RedisLauncher
from rideout.cluster.restarts import RestartHistory, RestartPolicy
from rideout.cluster.runstate import EFFECTIVE_CONFIG, ProcessRecord, RunLock, RunState
from rideout.config import Config, dump_toml

__all__ = ["ClusterError", "LocalCluster", "RestartPolicy"]


class LocalCluster(ChaosControl):
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
        super().__init__()
        self.config = config
        self.ready_timeout = ready_timeout
        self.restart_policy = restart_policy or RestartPolicy()
        self._clock = clock
        self._sink = sink
        self._lock = RunLock(config.run_dir)
        self._redis: dict[str, RedisChild] = {}
        self._servers: dict[str, ServerChild] = {}
        self._launcher = RedisLauncher(config, say=self._say, sink=sink)
        self._keepers: set[asyncio.Task[None]] = set()
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

    def _say(self, line: str) -> None:
        if self._sink is not None:
            self._sink("rideout", line)

    def _children(self) -> list[Child]:
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
            self._launcher.prepare()  # the Redis users, their ACL file, the server binary
            for region in (self.config.primary, self.config.secondary):
                redis = RedisChild(
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
                replica = RedisChild(
                    ProcessRecord(name, "redis", 0, region=region.name, zone=zone,
                                  address=region.replica.address, port=region.replica.port,
                                  log=str(self.config.logs_dir / f"{name}.log")),
                    self._history(), region=region, in_region=True,
                )  # fmt: skip
                self._redis[replica_key(region.name)] = replica
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
            self._servers[record.name] = ServerChild(
                replace(record, log=log), self._history(), argv=argv, probe=probe
            )

        server(
            ProcessRecord("control-plane", "control-plane", 0, address=cp.address, port=cp.port),
            [*base, "control-plane", *config, "--no-dns"],
            http_probe(routes.control_plane_url(self.config, routes.HEALTH)),
        )
        server(
            ProcessRecord("dns", "dns", 0, address=cp.address, port=cp.dns_port),
            [*base, "dns", *config],
            dns_probe(self.config),
        )
        for region in self.config.regions:
            for zone in region.zones:
                for worker in range(self.config.realtime.workers):
                    name = f"app-{zone.name}" + (f"-w{worker + 1}" if worker else "")
                    server(
                        ProcessRecord(name, "app", 0, region=region.name, zone=zone.name,
                                      address=zone.address, port=self.config.app_port),
                        [*base, "serve", *config, "--region", region.name, "--zone", zone.name],
                        http_probe(routes.zone_url(self.config, zone.address, routes.HEALTH)),
                    )  # fmt: skip
            server(
                ProcessRecord(f"canary-{region.name}", "canary", 0, region=region.name),
                [*base, "canary", *config, "--region", region.name],
                None,
            )

    async def _start_servers(self, servers: list[ServerChild]) -> None:
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

    async def _spawn(self, child: Child) -> None:
        """Start one process for `child` (a Redis is also waited for until ready)."""
        note = None
        if isinstance(child, RedisChild):
            note = await self._launcher.start(
                child,
                started=self._started,
                timeout=self.ready_timeout,
                after_start=self.after_redis_start,
            )
        else:
            assert isinstance(child, ServerChild)
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

    async def _await_ready(self, client: httpx.AsyncClient, server: ServerChild) -> None:
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

    def _keep(self, child: Child) -> None:
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

    def _wanted(self, child: Child, generation: int) -> bool:
        """Whether the keeper of `generation` still looks after `child`."""
        return not (self._stopping or child.held or child.generation != generation)

    async def _keeper(self, child: Child) -> None:
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
                    child.kill()

    async def _revive(self, child: Child) -> bool:
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

    # ------------------------------------------------------------------ stop

    async def stop(self, timeout: float = 5.0) -> bool:
        """Stop servers, control plane and DNS, then Redis; release the data directory.

        Returns whether there was anything to stop.
        """
        self._stopping = True
        anything = any(c.pid is not None for c in self._children())
        try:
            self._close_control_socket()
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
                self._resume(region)
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
