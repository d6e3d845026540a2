"""`rideout drill region-outage`: a measured game day.

Against a running deployment (``rideout up`` from the same data directory) or one of its
own (a :class:`~rideout.cluster.supervisor.LocalCluster` in a temporary data directory,
stopped on every exit path): start N resilient clients that follow the app domain and
bid, break the primary region through the supervisor, watch the control plane move the
writer and DNS, optionally restore the primary and watch failback, then account for
every acknowledged bid in the final writer's room streams.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import math
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import redis.asyncio as aioredis

from rideout import routes
from rideout.auth.admin import load_or_create_admin_token
from rideout.cluster.chaos import send_command
from rideout.cluster.runstate import EFFECTIVE_CONFIG, read_lock_pid
from rideout.cluster.supervisor import LocalCluster
from rideout.config import PROFILES, Config, load_config
from rideout.drill.analysis import (
    AckRecord,
    StreamEntry,
    account_bids,
    compare_herds,
    herd_stats,
    parse_stream_entry,
    recovery_stats,
)
from rideout.drill.clients import ClientFleet, GroupSpec, Record
from rideout.store.keys import room_stream

__all__ = ["DrillError", "DrillOptions", "run_region_outage"]

FAULTS = ("kill", "freeze", "throttle")
Progress = Callable[[str], None]


class DrillError(RuntimeError):
    """The drill could not run (a refused option, a deployment that never got healthy)."""


@dataclass(frozen=True, slots=True)
class DrillOptions:
    """What `rideout drill region-outage` was asked to do."""

    clients: int = 100
    fault: str = "kill"
    replication: str = "sync"
    profile: str | None = None
    failback: bool = False
    compare_jitter: bool = False
    max_rto: float | None = None
    max_lost: int | None = None
    report_dir: Path | None = None
    config_path: Path | None = None
    rooms: int | None = None
    """Rooms the clients spread over (default: one per 20 clients)."""
    bid_interval: float | None = None
    """Mean seconds between one client's bids (default: 1 s, longer for large N)."""
    clients_per_process: int = 400
    processes: bool | None = None
    """Spawn worker processes for the clients (default: when N > clients_per_process)."""
    warmup: float = 3.0
    settle: float = 2.0
    recovery_timeout: float | None = None
    env: dict[str, str] | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if self.clients < 1:
            raise DrillError("--clients must be at least 1")
        if self.fault not in FAULTS:
            raise DrillError(f"--fault must be one of {', '.join(FAULTS)}, not {self.fault!r}")
        if self.replication not in ("sync", "async"):
            raise DrillError(f"--replication must be sync or async, not {self.replication!r}")
        if self.profile is not None and self.profile not in PROFILES:
            raise DrillError(f"--profile must be one of {', '.join(PROFILES)}")


# ------------------------------------------------------------------ control plane


class _Plane:
    """Polls the control plane's ``/v1/summary`` and keeps the timeline."""

    def __init__(self, config: Config) -> None:
        self.url = routes.control_plane_url(config, routes.SUMMARY)
        self.http = httpx.AsyncClient(trust_env=False, timeout=2.0)
        self.timeline: list[dict[str, Any]] = []
        self.primary = config.primary.name
        self.secondary = config.secondary.name

    async def poll(self) -> dict[str, Any] | None:
        try:
            response = await self.http.get(self.url)
            body: dict[str, Any] = response.json()
        except (httpx.HTTPError, ValueError):
            return None
        alarms = {name: a.get("state") for name, a in body.get("alarms", {}).items()}
        self.timeline.append(
            {
                "t": time.time(),
                "alarms": alarms,
                "dns": body.get("dns", {}).get("region"),
                "writer": body.get("failover", {}).get("writer"),
                "epoch": body.get("failover", {}).get("epoch"),
            }
        )
        return body

    async def until(
        self, check: Callable[[dict[str, Any]], bool], timeout: float, what: str
    ) -> float:
        """Poll every 100 ms until ``check(summary)``; the wall time it first held."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            body = await self.poll()
            if body is not None and check(body):
                return time.time()
            await asyncio.sleep(0.1)
        raise DrillError(f"{what} did not happen within {timeout:g} s")

    def healthy(self, body: dict[str, Any]) -> bool:
        alarms = body.get("alarms", {})
        return (
            all(a.get("state") == "OK" for a in alarms.values())
            and bool(alarms)
            and body["dns"]["region"] == self.primary
            and body["failover"]["writer"] == self.primary
        )

    def first(self, since: float, check: Callable[[dict[str, Any]], bool]) -> float | None:
        for row in self.timeline:
            if row["t"] >= since and check(row):
                return float(row["t"])
        return None

    async def aclose(self) -> None:
        await self.http.aclose()


# ------------------------------------------------------------------ deployment


def _load(options: DrillOptions) -> Config:
    env = dict(options.env if options.env is not None else os.environ)
    config = load_config(options.config_path, env=env)
    return config


def _own_config(config: Config, options: DrillOptions, data_dir: Path) -> Config:
    profile = options.profile or config.profile
    failover = dataclasses.replace(config.failover, replication=options.replication)
    timing = PROFILES[profile] if profile != config.profile else config.timing
    return dataclasses.replace(
        config, data_dir=data_dir, profile=profile, timing=timing, failover=failover
    )


async def _set_zone_mode(config: Config, region: str, mode: str) -> None:
    token = load_or_create_admin_token(config.keys_dir)
    async with httpx.AsyncClient(trust_env=False, timeout=5.0) as http:
        for zone in config.region(region).zones:
            with contextlib.suppress(httpx.HTTPError):
                await http.post(
                    routes.zone_url(config, zone.address, routes.ADMIN_MODE),
                    json={"mode": mode},
                    headers={"Authorization": f"Bearer {token}"},
                )


async def _read_streams(config: Config, region: str, rooms: list[str]) -> list[StreamEntry]:
    redis = config.region(region).redis
    client = aioredis.Redis(host=redis.address, port=redis.port, decode_responses=True)
    entries: list[StreamEntry] = []
    try:
        for room in rooms:
            found: Any = await client.xrange(room_stream(room), "-", "+")
            for entry_id, fields in found or []:
                entry = parse_stream_entry(room, str(entry_id), dict(fields or {}))
                if entry is not None:
                    entries.append(entry)
    finally:
        await client.aclose()
    return entries


# ------------------------------------------------------------------ one pass


def _timeouts(config: Config, options: DrillOptions) -> tuple[float, float]:
    t = config.timing
    failover = (t.failover_datapoints + 4) * t.canary_interval * 3 + t.dns_ttl + 20
    recovery = options.recovery_timeout or max(30.0, failover + 4 * t.backoff_cap)
    return failover, recovery


async def _wait_clients_ready(
    fleet: ClientFleet, region: str, timeout: float, progress: Progress
) -> int:
    deadline = time.monotonic() + timeout
    ready = 0
    while time.monotonic() < deadline:
        ready = len({r[1] for r in fleet.snapshot() if r[0] == "restored" and r[3] == region})
        progress(f"clients ready {ready}/{fleet.clients}")
        if ready >= fleet.clients:
            break
        await asyncio.sleep(0.2)
    return ready


async def _wait_recovered(
    fleet: ClientFleet, since: float, region: str, timeout: float, progress: Progress, label: str
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done = {
            r[1]
            for r in fleet.snapshot()
            if r[0] == "restored" and r[3] == region and r[2] >= since
        }
        progress(f"{label}: {len(done)}/{fleet.clients} clients restored in {region}")
        if len(done) >= fleet.clients:
            return
        await asyncio.sleep(0.2)


def _phase_report(
    plane: _Plane,
    records: list[Record],
    cids: list[int],
    fault_at: float,
    end: float,
    lost_region: str,
    target: str,
    timeout: float,
    *,
    failback: bool = False,
) -> dict[str, Any]:
    def alarm(row: dict[str, Any]) -> bool:
        if failback:  # detection on the way back: the restored region's alarm clears
            return bool(row["alarms"].get(target) == "OK")
        return bool(row["alarms"].get(lost_region) == "ALARM")

    def dns(row: dict[str, Any]) -> bool:
        return bool(row["dns"] == target)

    def writer(row: dict[str, Any]) -> bool:
        return bool(row["writer"] == target)

    detected = plane.first(fault_at, alarm)
    moved = plane.first(fault_at, dns)
    promoted = plane.first(fault_at, writer)
    restores = [(r[1], r[2], r[3]) for r in records if r[0] == "restored"]
    recovery = recovery_stats(restores, cids, fault_at, target, timeout)
    window = (fault_at, max(end, fault_at + 0.1))

    def times(kind: str, field: int = 2) -> list[float]:
        return [r[field] for r in records if r[0] == kind and r[3] == target and r[2] >= fault_at]

    # The herd three ways: as the backoff policy scheduled it (when each attempt toward
    # the target was due), as the clients started it (later by their own process's lag),
    # and as the target absorbed it (connections it accepted). On one shared machine the
    # last two are smeared by CPU: clients and servers take turns on the same cores.
    scheduled = herd_stats(times("attempt", 4), *window)
    herd = herd_stats(times("attempt"), *window)
    accepted = herd_stats(times("connected"), *window)
    return {
        "from": lost_region,
        "to": target,
        "at": fault_at,
        "time_to_detect": None if detected is None else detected - fault_at,
        "time_to_writer": None if promoted is None else promoted - fault_at,
        "time_to_dns": None if moved is None else moved - fault_at,
        **recovery.as_dict(),
        "scheduled": scheduled.as_dict(),
        "reconnects": herd.as_dict(),
        "accepted": accepted.as_dict(),
    }


async def _run_pass(
    config: Config,
    options: DrillOptions,
    jitter: bool,
    name: str,
    progress: Progress,
) -> dict[str, Any]:
    primary, secondary = config.primary.name, config.secondary.name
    failover_timeout, recovery_timeout = _timeouts(config, options)
    n = options.clients
    room_count = options.rooms or max(1, math.ceil(n / 20))
    prefix = f"drill{int(time.time() * 1000) % 10**9:09d}"
    rooms = tuple(f"{prefix}-r{i}" for i in range(room_count))
    bid_interval = options.bid_interval or max(1.0, n / 250)
    per = max(1, options.clients_per_process)
    processes = options.processes if options.processes is not None else n > per
    groups = math.ceil(n / per) if processes else 1
    size = math.ceil(n / groups)
    specs = [
        GroupSpec(
            config,
            first=i * size,
            count=min(size, n - i * size),
            rooms=rooms,
            prefix=prefix,
            jitter=jitter,
            bid_interval=bid_interval,
            # Groups start side by side: together they open ~500 connections per second,
            # which the fast-profile deployment absorbs without turning the start into
            # a reconnect storm of its own (N = 5,000 at 3,000/s never settled).
            ramp=max(1.0, n / 500),
            seed=hash((name, i)) & 0xFFFF,
        )
        for i in range(groups)
        if i * size < n
    ]
    plane = _Plane(config)
    fleet = ClientFleet(specs, processes=processes)
    result: dict[str, Any] = {
        "name": name,
        "backoff": ("full jitter" if jitter else "no jitter"),
        "clients": n,
        "processes": len(specs) if processes else 0,
        "rooms": room_count,
        "bid_interval": bid_interval,
    }
    try:
        progress(f"[{name}] waiting for a healthy deployment")
        body = await plane.poll()
        if body is not None and not plane.healthy(body) and body["failover"]["writer"] != primary:
            progress(f"[{name}] restoring {primary} first")
            await asyncio.to_thread(send_command, config.run_dir, "restore", primary)
        await plane.until(plane.healthy, failover_timeout * 3, "a healthy deployment")
        progress(f"[{name}] starting {n} clients")
        fleet.start()
        started = time.time()
        ready = await _wait_clients_ready(fleet, primary, 30 + n / 100, progress)
        result["ready_clients"] = ready
        result["ready_after"] = time.time() - started
        fleet.bidding.set()
        progress(f"[{name}] bidding ({options.warmup:g} s warm-up)")
        await asyncio.sleep(options.warmup)

        progress(f"[{name}] {options.fault} {primary}")
        fault_at = time.time()
        result["fault_message"] = await asyncio.to_thread(
            send_command, config.run_dir, options.fault, primary
        )
        await plane.until(
            lambda b: b["dns"]["region"] == secondary and b["failover"]["writer"] == secondary,
            failover_timeout,
            f"failover to {secondary}",
        )
        await _wait_recovered(fleet, fault_at, secondary, recovery_timeout, progress, name)
        await asyncio.sleep(options.settle)
        failover_end = time.time()
        cids = list(range(n))
        result["failover"] = _phase_report(
            plane, fleet.snapshot(), cids, fault_at, failover_end, primary, secondary,
            recovery_timeout,
        )  # fmt: skip
        result["failback"] = None
        if options.failback:
            progress(f"[{name}] restore {primary}")
            back_at = time.time()
            await asyncio.to_thread(send_command, config.run_dir, "restore", primary)
            await plane.until(
                lambda b: b["dns"]["region"] == primary and b["failover"]["writer"] == primary,
                failover_timeout * 3,
                f"failback to {primary}",
            )
            # Clients still attached to the old writer's region keep their sockets (its
            # servers answer bids `unavailable`): drain it so they follow DNS at once.
            progress(f"[{name}] draining {secondary}")
            await _set_zone_mode(config, secondary, "draining")
            try:
                await _wait_recovered(fleet, back_at, primary, recovery_timeout, progress, name)
            finally:
                await _set_zone_mode(config, secondary, "serving")
            await asyncio.sleep(options.settle)
            result["failback"] = _phase_report(
                plane, fleet.snapshot(), cids, back_at, time.time(), secondary, primary,
                recovery_timeout, failback=True,
            )  # fmt: skip
        progress(f"[{name}] stopping clients")
        fleet.bidding.clear()
        await asyncio.sleep(min(2.0, options.settle))  # acks in flight
    finally:
        await fleet.stop()
        records = fleet.snapshot()
        await plane.poll()
        await plane.aclose()
    writer = (plane.timeline[-1]["writer"] if plane.timeline else None) or secondary
    progress(f"[{name}] reading the room streams from {writer}")
    entries = await _read_streams(config, writer, list(rooms))
    acks = [AckRecord(r[3], specs[0].bidder(r[1]), r[4], r[5]) for r in records if r[0] == "ack"]
    result["final_writer"] = writer
    result["bids"] = account_bids(acks, entries).as_dict()
    rejected: dict[str, int] = {}
    for r in records:
        if r[0] == "rejected":
            rejected[r[3]] = rejected.get(r[3], 0) + 1
    result["bids"]["rejected"] = rejected
    result["gave_up"] = len({r[1] for r in records if r[0] == "gaveup"})
    result["timeline"] = plane.timeline
    result["series"] = _series(records, config, plane.timeline[0]["t"] if plane.timeline else 0.0)
    return result


def _series(records: list[Record], config: Config, start: float) -> dict[str, Any]:
    """Per-second series for the timeline: connected clients per region, acked bids."""
    if not records:
        return {"start": start, "t": [], "connected": {}, "acks": []}
    end = max(r[2] for r in records)
    start = min(start, min(r[2] for r in records))
    seconds = max(1, math.ceil(end - start) + 1)
    step = 0.5
    buckets = int(seconds / step) + 1
    regions = [r.name for r in config.regions]
    connected = {name: [0] * buckets for name in regions}
    acks = [0] * buckets
    where: dict[int, str | None] = {}
    events = sorted((r for r in records if r[0] in ("connected", "disconnected", "ack")),
                    key=lambda r: r[2])  # fmt: skip
    counts = dict.fromkeys(regions, 0)
    index = 0
    for b in range(buckets):
        edge = start + (b + 1) * step
        while index < len(events) and events[index][2] < edge:
            r = events[index]
            index += 1
            if r[0] == "ack":
                acks[b] += 1
                continue
            old = where.get(r[1])
            if old in counts:
                counts[old] -= 1
            if r[0] == "connected" and r[3] in counts:
                counts[r[3]] += 1
                where[r[1]] = r[3]
            else:
                where[r[1]] = None
        for name in regions:
            connected[name][b] = counts[name]
    return {
        "start": start,
        "step": step,
        "t": [b * step for b in range(buckets)],
        "connected": connected,
        "acks_per_second": [a / step for a in acks],
    }


# ------------------------------------------------------------------ the drill


def _objectives(options: DrillOptions, passes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    for p in passes:
        for phase in ("failover", "failback"):
            data = p.get(phase)
            if not data:
                continue
            if options.max_rto is not None:
                p99 = data["time_to_restored"]["p99"]
                ok = p99 is not None and p99 <= options.max_rto and data["recovered_share"] == 1
                found.append({
                    "name": f"{p['name']} {phase}: p99 time to restored state",
                    "limit": options.max_rto, "value": p99, "ok": ok,
                })  # fmt: skip
        if options.max_lost is not None:
            lost = p["bids"]["lost"]
            found.append({
                "name": f"{p['name']}: acknowledged bids lost",
                "limit": options.max_lost, "value": lost, "ok": lost <= options.max_lost,
            })  # fmt: skip
        # A bid applied twice is a correctness failure whatever the options say.
        duplicates = p["bids"]["duplicates"]
        found.append({
            "name": f"{p['name']}: bids applied more than once",
            "limit": 0, "value": duplicates, "ok": duplicates == 0,
        })  # fmt: skip
    return found


async def run_region_outage(
    options: DrillOptions, progress: Progress | None = None
) -> dict[str, Any]:
    """Run the drill; the report (a JSON-able dict). Raises :class:`DrillError`."""
    say: Progress = progress or (lambda _msg: None)
    config = _load(options)
    running = read_lock_pid(config.run_dir)
    cluster: LocalCluster | None = None
    tmp: Path | None = None
    if running is not None:
        effective = config.run_dir / EFFECTIVE_CONFIG
        if effective.exists():
            config = load_config(effective, env={})
        if config.failover.replication != options.replication:
            raise DrillError(
                f"the running deployment (pid {running}) uses {config.failover.replication} "
                f"replication, not {options.replication}: pass --replication "
                f"{config.failover.replication}, or stop it (`rideout down`) and let the drill "
                "start its own"
            )
        if options.profile is not None and options.profile != config.profile:
            raise DrillError(
                f"the running deployment (pid {running}) uses the {config.profile} profile, "
                f"not {options.profile}"
            )
    report: dict[str, Any] = {
        "drill": "region-outage",
        "started_at": time.time(),
        "options": {
            k: (str(v) if isinstance(v, Path) else v)
            for k, v in dataclasses.asdict(options).items()
            if k != "env"
        },
    }
    passes: list[dict[str, Any]] = []
    modes = (
        [(True, "full-jitter"), (False, "no-jitter")]
        if options.compare_jitter
        else [(True, "full-jitter")]
    )
    try:
        for jitter, name in modes:
            if running is None:
                tmp = Path(tempfile.mkdtemp(prefix="rideout-drill-"))
                own = _own_config(config, options, tmp / "data")
                say(f"[{name}] starting a local deployment ({own.profile} profile)")
                cluster = LocalCluster(own)
                try:
                    await cluster.start()
                    report["deployment"] = _deployment(own, own_cluster=True)
                    passes.append(await _run_pass(own, options, jitter, name, say))
                finally:
                    say(f"[{name}] stopping the local deployment")
                    await cluster.stop()
                    cluster = None
                    shutil.rmtree(tmp, ignore_errors=True)
                    tmp = None
            else:
                report["deployment"] = _deployment(config, own_cluster=False)
                passes.append(await _run_pass(config, options, jitter, name, say))
    finally:
        if cluster is not None:
            await cluster.stop()
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    report["passes"] = passes
    report["finished_at"] = time.time()
    if options.compare_jitter and len(passes) == 2:
        full, none = (p["failover"] for p in passes)
        report["jitter_comparison"] = compare_herds(full, none)
    report["objectives"] = _objectives(options, passes)
    report["ok"] = all(o["ok"] for o in report["objectives"])
    return report


def _deployment(config: Config, *, own_cluster: bool) -> dict[str, Any]:
    return {
        "own_cluster": own_cluster,
        "profile": config.profile,
        "primary": config.primary.name,
        "secondary": config.secondary.name,
        "replication": config.failover.replication,
        "replica_down": config.failover.replica_down,
        "sync_timeout": config.failover.sync_timeout,
        "app_domain": config.app_domain,
    }
