"""Fault injection in the supervisor (`rideout chaos`), and the control socket it listens
on: ``run/control.sock`` takes one JSON line (``{"op": "kill", "region": "us-east-1"}``),
runs it, and answers one JSON line (the client side and the ops' table: :mod:`.chaos`).

:class:`ChaosControl` is the part of :class:`~rideout.cluster.supervisor.LocalCluster`
that breaks and mends regions and zones: it works on the supervisor's children and
leaves restarting them (:meth:`ChaosControl._revive`) to the supervisor.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import json
import os
import signal
from pathlib import Path
from typing import Any

import httpx

from rideout import _http
from rideout._control_socket import serve_json_lines
from rideout.cluster.children import Child, RedisChild, ServerChild, replica_key
from rideout.cluster.errors import ClusterError
from rideout.cluster.runstate import CONTROL_SOCKET
from rideout.config import Config, RegionConfig
from rideout.realtime.zone import DEGRADE_SIGNAL, SERVE_SIGNAL

__all__ = ["ChaosControl"]


class ChaosControl(abc.ABC):
    """kill, kill-redis, freeze, throttle and restore of a region (or of one zone's app
    servers), by signals to the supervisor's children, and the socket that runs them."""

    config: Config
    _redis: dict[str, RedisChild]
    _servers: dict[str, ServerChild]

    def __init__(self) -> None:
        self._frozen: set[str] = set()  # regions stopped by SIGSTOP, until restored
        self._control: asyncio.Server | None = None

    @property
    def control_socket(self) -> Path:
        return self.config.run_dir / CONTROL_SOCKET

    # What the supervisor provides.

    @abc.abstractmethod
    def _say(self, line: str) -> None: ...

    @abc.abstractmethod
    def _write_state(self) -> None: ...

    @abc.abstractmethod
    async def _revive(self, child: Child) -> bool:
        """Restart `child` on purpose if it does not run; whether it did."""

    @abc.abstractmethod
    async def _await_ready(self, client: httpx.AsyncClient, server: ServerChild) -> None: ...

    # ------------------------------------------------------------------ what a fault hits

    def _region(self, name: str) -> RegionConfig:
        try:
            return self.config.region(name)
        except KeyError as exc:
            raise ClusterError(str(exc.args[0])) from None

    def _region_servers(self, region: str, kind: str | None = None) -> list[ServerChild]:
        return [
            s for s in self._servers.values()
            if s.record.region == region and (kind is None or s.record.kind == kind)
        ]  # fmt: skip

    def _region_children(self, region: str) -> list[Child]:
        """What dies with `region` (kill, freeze): its app servers, its Redis servers and,
        placed in the region, its canary (see ``failover.canary_placement``)."""
        outside = self.config.failover.canary_placement == "outside"
        children: list[Child] = [
            s for s in self._region_servers(region) if not (outside and s.record.kind == "canary")
        ]
        for key in (region, replica_key(region)):
            if key in self._redis:
                children.append(self._redis[key])
        return children

    def _region_pids(self, region: str) -> list[int]:
        return [c.pid for c in self._region_children(region) if c.running and c.pid]

    def _zone_servers(self, region: str, zone: str) -> list[ServerChild]:
        try:
            self.config.zone(region, zone)
        except KeyError as exc:
            raise ClusterError(str(exc.args[0])) from None
        return [s for s in self._region_servers(region, "app") if s.record.zone == zone]

    def _hold(self, children: list[Child], why: str) -> None:
        """Stopped on purpose: no keeper restarts these until they are restored."""
        for child in children:
            child.held = True
            child.state, child.note = "stopped", why
        self._write_state()

    def _resume(self, region: str) -> None:
        """SIGCONT every process of `region` (frozen; a stopped process cannot handle
        SIGTERM either)."""
        for pid in self._region_pids(region):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)

    # ------------------------------------------------------------------ the faults

    async def kill(self, region: str, zone: str | None = None) -> str:
        """SIGKILL every process of `region` (:meth:`_region_children`), Redis included:
        the region is gone. With `zone`, only that zone's app servers (a zone outage)."""
        self._region(region)
        if zone is not None:
            servers = self._zone_servers(region, zone)
            self._hold(list(servers), "stopped by `rideout chaos kill --zone`")
            killed = sum(server.kill() for server in servers)
            return f"killed zone {zone} of {region}: {killed} app servers (SIGKILL)"
        self._frozen.discard(region)
        children = self._region_children(region)
        self._hold(children, "stopped by `rideout chaos kill`")
        killed = sum(child.kill() for child in children)
        return f"killed {region}: {killed} processes (SIGKILL), Redis included"

    async def kill_redis(self, region: str) -> str:
        """SIGKILL only the region's Redis: servers stay up with their state store gone."""
        self._region(region)
        redis = self._redis.get(region)
        if redis is None:
            return f"redis-{region} is not running"
        pid = redis.pid
        self._hold([redis], "stopped by `rideout chaos kill-redis`")
        if not redis.kill():
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
            self._resume(region)
            self._frozen.discard(region)
            done.append("resumed (SIGCONT)")
        for key in (region, replica_key(region)):  # the main Redis first: the replica follows it
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
        dead: list[ServerChild] = []
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

    # ------------------------------------------------------------------ the socket

    async def _serve_control_socket(self) -> None:
        self._control = await serve_json_lines(self.control_socket, self.command)

    def _close_control_socket(self) -> None:
        if self._control is not None:
            self._control.close()
            with contextlib.suppress(FileNotFoundError):
                self.control_socket.unlink()

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
