"""`rideout drill region-outage`: a measured game day.

Against a running deployment (``rideout up`` from the same data directory) or one of its
own (a :class:`~rideout.cluster.supervisor.LocalCluster` in a temporary data directory,
stopped on every exit path): start N resilient clients that follow the app domain and
bid, break the primary region through the supervisor, watch the control plane move the
writer and DNS, optionally restore the primary and watch failback (the control plane
drains the secondary's zones itself; the drill does so only as a reported fallback),
then account for every acknowledged bid in the final writer's room streams and for
every move of the writer.

Its options are in :mod:`.options`, its view of the control plane in :mod:`.plane`, and
what it knows of the deployment (configuration, timeouts, streams) in :mod:`.deployment`.
"""

from __future__ import annotations

import asyncio
import math
import shutil
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rideout.cluster.chaos import send_command
from rideout.cluster.runstate import EFFECTIVE_CONFIG, read_lock_pid
from rideout.cluster.supervisor import LocalCluster
from rideout.config import Config, load_config
from rideout.drill.analysis import (
    account_bids,
    compare_herds,
    phase_summary,
    timeline_series,
    write_stats,
)
from rideout.drill.clients import ClientFleet, GroupSpec
from rideout.drill.deployment import (
    describe_deployment,
    drill_config,
    own_config,
    read_streams,
    set_zone_mode,
    timeouts,
)
from rideout.drill.errors import DrillError
from rideout.drill.machine import core_speed, read_cpu_times, usage
from rideout.drill.options import DrillOptions, Progress, report_head
from rideout.drill.plane import Plane, serves_from, writes_refused
from rideout.drill.records import (
    AckRecord,
    DrillRecord,
    FailedRecord,
    GaveUpRecord,
    RejectedRecord,
    RestoredRecord,
    of_kind,
)
from rideout.realtime.zone import ZoneMode
from rideout.store.client import cancel_and_wait

__all__ = ["run_region_outage"]


# ------------------------------------------------------------------ one pass


@dataclass(frozen=True, slots=True)
class _Plan:
    """One pass's clients: how many, their rooms and bidders, their groups."""

    name: str
    jitter: bool
    clients: int
    rooms: tuple[str, ...]
    bid_interval: float
    processes: bool
    specs: tuple[GroupSpec, ...]
    nice: int = 0
    """The client workers' niceness (DrillOptions.client_nice)."""

    def header(self) -> dict[str, Any]:
        """The pass's first lines in the report."""
        return {
            "name": self.name,
            "backoff": ("full jitter" if self.jitter else "no jitter"),
            "clients": self.clients,
            "processes": len(self.specs) if self.processes else 0,
            "rooms": len(self.rooms),
            "bid_interval": self.bid_interval,
            "client_nice": self.nice,
        }


def _plan(config: Config, options: DrillOptions, jitter: bool, name: str, now: float) -> _Plan:
    n = options.clients
    room_count = options.rooms or max(1, math.ceil(n / 20))
    prefix = f"drill{int(now * 1000) % 10**9:09d}"
    rooms = tuple(f"{prefix}-r{i}" for i in range(room_count))
    bid_interval = options.bid_interval or max(1.0, n / 250)
    per = max(1, options.clients_per_process)
    nice = options.client_nice
    processes = options.processes if options.processes is not None else n > per or nice > 0
    groups = math.ceil(n / per) if processes else 1
    size = math.ceil(n / groups)
    specs = tuple(
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
    )
    return _Plan(name, jitter, n, rooms, bid_interval, processes, specs, nice)


def _restored(records: list[DrillRecord], region: str, since: float = 0.0) -> set[int]:
    """The clients with a state restored from `region` at or after `since`."""
    return {
        r.client for r in of_kind(records, RestoredRecord) if r.region == region and r.t >= since
    }


class _Pass:
    """One pass: start the clients on a healthy deployment, break the primary (and
    restore it, for a failback), stop the clients, account for every bid."""

    def __init__(
        self, config: Config, options: DrillOptions, plan: _Plan, progress: Progress
    ) -> None:
        self.config = config
        self.options = options
        self.plan = plan
        self.primary, self.secondary = config.primary.name, config.secondary.name
        self.failover_timeout, self.recovery_timeout = timeouts(config, options)
        self.plane = Plane(config)
        self.fleet = ClientFleet(plan.specs, processes=plan.processes, nice=plan.nice)
        self._progress = progress

    def say(self, message: str) -> None:
        self._progress(f"[{self.plan.name}] {message}")

    async def run(self) -> dict[str, Any]:
        result = self.plan.header()
        started = time.time()
        polling = asyncio.create_task(self.plane.keep_polling(), name="drill-timeline")
        try:
            await self._healthy_deployment()
            result.update(await self._start_clients())
            result.update(await self._fail_over())
            result["failback"] = await self._fail_back() if self.options.failback else None
            await self._stop_bidding()
        finally:
            await cancel_and_wait(polling)
            await self.fleet.stop()
            await self.plane.poll()
            await self.plane.aclose()
        result.update(await self._account(self.fleet.snapshot()))
        result["writer_moves"] = self.plane.moves()
        result["control_plane"] = self.plane.history(started)
        return result

    async def _healthy_deployment(self) -> None:
        plane, primary = self.plane, self.primary
        self.say("waiting for a healthy deployment")
        body = await plane.poll()
        if body is not None and not plane.healthy(body) and body["failover"]["writer"] != primary:
            self.say(f"restoring {primary} first")
            await asyncio.to_thread(send_command, self.config.run_dir, "restore", primary)
        await plane.until(plane.healthy, self.failover_timeout * 3, "a healthy deployment")

    async def _start_clients(self) -> dict[str, Any]:
        fleet, n = self.fleet, self.plan.clients
        # Before any client loads the cores: CPU time, so a busy machine reads the same.
        speed = core_speed()
        self.say(f"one core issues {speed['token_issues_per_second']:,} tokens/s")
        self.say(f"starting {n} clients")
        fleet.start()
        started = time.time()
        deadline = time.monotonic() + 30 + n / 100
        ready = 0
        while time.monotonic() < deadline:
            ready = len(_restored(fleet.snapshot(), self.primary))
            self._progress(f"clients ready {ready}/{fleet.clients}")
            if ready >= fleet.clients:
                break
            await asyncio.sleep(0.2)
        result: dict[str, Any] = {
            "ready_clients": ready, "ready_after": time.time() - started, "core_speed": speed,
        }  # fmt: skip
        fleet.bidding.set()
        self.say(f"bidding ({self.options.warmup:g} s warm-up)")
        cpu = read_cpu_times()
        await asyncio.sleep(self.options.warmup)
        result["machine"] = usage(cpu, read_cpu_times())  # the steady state before the fault
        return result

    async def _fail_over(self) -> dict[str, Any]:
        primary, secondary, fault = self.primary, self.secondary, self.options.fault
        self.say(f"{fault} {primary}")
        fault_at, cpu = time.time(), read_cpu_times()
        message = await asyncio.to_thread(send_command, self.config.run_dir, fault, primary)
        await self.plane.until(
            serves_from(secondary), self.failover_timeout, f"failover to {secondary}"
        )
        await self._wait_recovered(fault_at, secondary)
        await self._wait_written(fault_at, secondary)
        await asyncio.sleep(self.options.settle)
        phase = self._phase(fault_at, primary, secondary)
        phase["machine"] = usage(cpu, read_cpu_times())
        return {"fault_message": message, "failover": phase}

    async def _fail_back(self) -> dict[str, Any]:
        primary, secondary = self.primary, self.secondary
        self.say(f"restore {primary}")
        back_at, cpu = time.time(), read_cpu_times()
        await asyncio.to_thread(send_command, self.config.run_dir, "restore", primary)
        await self.plane.until(
            serves_from(primary), self.failover_timeout * 3, f"failback to {primary}"
        )
        # The control plane drains the secondary's zones, gradually, so that the clients
        # still there follow DNS: the drill only watches. If they are still there when
        # the recovery window ends, it drains them itself and says so in the report.
        drained_by_drill = False
        if not await self._wait_recovered(back_at, primary):
            drained_by_drill = True
            self.say(f"clients are still on {secondary}: the drill drains it (fallback)")
            await set_zone_mode(self.config, secondary, ZoneMode.DRAINING)
            try:
                await self._wait_recovered(back_at, primary)
            finally:
                await set_zone_mode(self.config, secondary, ZoneMode.SERVING)
        await self._wait_written(back_at, primary)
        await asyncio.sleep(self.options.settle)
        phase = self._phase(back_at, secondary, primary, failback=True)
        phase["drained_by_drill"] = drained_by_drill
        phase["machine"] = usage(cpu, read_cpu_times())
        return phase

    async def _wait_recovered(self, since: float, region: str) -> bool:
        """Wait until every client has restored its state in `region`; whether it did."""
        deadline = time.monotonic() + self.recovery_timeout
        while time.monotonic() < deadline:
            done = _restored(self.fleet.snapshot(), region, since)
            self._progress(
                f"{self.plan.name}: {len(done)}/{self.fleet.clients} clients restored in {region}"
            )
            if len(done) >= self.fleet.clients:
                return True
            await self.plane.poll()  # the timeline keeps every move of the writer
            await asyncio.sleep(0.2)
        return False

    async def _wait_written(self, since: float, region: str) -> bool:
        """Once the clients restored their state: wait until every client has had a bid
        accepted by `region` since `since`, for a bid interval per client of a room at
        most (ten at least; never past the recovery window); whether they did. (In sync mode with ``replica_down =
        "reject"`` the new writer, with no replica, accepts nothing until the other region
        is back: the wait runs out, and the report's write RTO says so.)"""
        # A bid that lost the race to a higher one (too_low) is no accepted write, and a
        # room's last client to win one may lose to each of the others first: a bid
        # interval per client of the room, and at least ten. (Ten alone ran out on a slow
        # machine, 2 of 200 clients short.) The wait ends as soon as every client wrote.
        per_room = math.ceil(self.plan.clients / max(1, len(self.plan.rooms)))
        grace = max(5.0, max(10, per_room) * self.plan.bid_interval)
        end = min(since + self.recovery_timeout, time.time() + grace)
        deadline = time.monotonic() + max(0.0, end - time.time())
        while True:
            done = write_stats(
                self.fleet.snapshot(), range(self.plan.clients), since, region,
                self.recovery_timeout,
            )  # fmt: skip
            self._progress(
                f"{self.plan.name}: {done.recovered}/{self.fleet.clients} clients wrote to {region}"
            )
            if done.recovered >= self.fleet.clients:
                return True
            if time.monotonic() >= deadline:
                self.say(f"not every client had a bid accepted by {region} in the window")
                return False
            if done.recovered == 0 and writes_refused(self.config, self.plane.last):
                # Nothing to wait for: the report's write RTO says none wrote.
                self.say(f"{region} acknowledges no bid: sync replication, no replica up")
                return False
            await self.plane.poll()
            await asyncio.sleep(0.2)

    def _phase(
        self, since: float, lost: str, target: str, *, failback: bool = False
    ) -> dict[str, Any]:
        """The phase that began at `since`, from `lost` to `target`, as of now."""
        end = time.time()
        return phase_summary(
            self.plane.timeline, self.fleet.snapshot(), range(self.plan.clients), since, end,
            lost, target, self.recovery_timeout, failback=failback,
        )  # fmt: skip

    async def _stop_bidding(self) -> None:
        self.say("stopping clients")
        self.fleet.bidding.clear()
        await asyncio.sleep(min(2.0, self.options.settle))  # acks in flight

    async def _account(self, records: list[DrillRecord]) -> dict[str, Any]:
        """Every acknowledged bid against the final writer's room streams."""
        timeline = self.plane.timeline
        writer = (timeline[-1]["writer"] if timeline else None) or self.secondary
        self.say(f"reading the room streams from {writer}")
        entries = await read_streams(self.config, writer, list(self.plan.rooms))
        bids = account_bids(of_kind(records, AckRecord), entries).as_dict()
        bids["rejected"] = dict(Counter(r.reason for r in of_kind(records, RejectedRecord)))
        regions = [r.name for r in self.config.regions]
        return {
            "final_writer": writer,
            "bids": bids,
            "gave_up": len({r.client for r in of_kind(records, GaveUpRecord)}),
            "failed_clients": sorted(
                Counter(r.error for r in of_kind(records, FailedRecord)).items(),
                key=lambda item: -item[1],
            ),
            "timeline": timeline,
            "series": timeline_series(records, regions, timeline[0]["t"] if timeline else 0.0),
        }


async def _run_pass(
    config: Config, options: DrillOptions, jitter: bool, name: str, progress: Progress
) -> dict[str, Any]:
    plan = _plan(config, options, jitter, name, time.time())
    return await _Pass(config, options, plan, progress).run()


# ------------------------------------------------------------------ the drill


def _objectives(options: DrillOptions, passes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    limits = {
        "failover": (options.max_rto, options.max_write_rto),
        "failback": (options.max_failback_rto, options.max_failback_write_rto),
    }
    for p in passes:
        for phase, (max_rto, max_write_rto) in limits.items():
            data = p.get(phase)
            if not data:
                continue
            if max_rto is not None:
                p99 = data["time_to_restored"]["p99"]
                ok = p99 is not None and p99 <= max_rto and data["recovered_share"] == 1
                found.append({
                    "name": f"{p['name']} {phase}: p99 time to restored state",
                    "limit": max_rto, "value": p99, "ok": ok,
                })  # fmt: skip
            if max_write_rto is not None:
                write = data["write"]
                p99 = write["time_to_write"]["p99"]
                ok = p99 is not None and p99 <= max_write_rto and write["written_share"] == 1
                found.append({
                    "name": f"{p['name']} {phase}: p99 write RTO (first accepted bid)",
                    "limit": max_write_rto, "value": p99, "ok": ok,
                })  # fmt: skip
        if options.max_lost is not None:
            lost = p["bids"]["lost"]
            found.append({
                "name": f"{p['name']}: acknowledged bids lost",
                "limit": options.max_lost, "value": lost, "ok": lost <= options.max_lost,
            })  # fmt: skip
        failback = p.get("failback")
        if failback:
            # The deployment must move its clients back by itself, once, without flapping.
            moves = p.get("writer_moves") or {}
            found.append({
                "name": f"{p['name']}: the writer moved once each way (no flapping)",
                "limit": "1 failover, 1 failback",
                "value": f"{moves.get('failovers')} failovers, {moves.get('failbacks')} failbacks",
                "ok": moves.get("failovers") == 1 and moves.get("failbacks") == 1,
            })  # fmt: skip
            found.append({
                "name": f"{p['name']} failback: clients moved without the drill draining",
                "limit": "no drill drain", "value": failback.get("drained_by_drill"),
                "ok": failback.get("drained_by_drill") is False,
            })  # fmt: skip
        # A client whose loop died is a bug in the client, whatever the options say.
        failed = sum(n for _, n in p.get("failed_clients", ()))
        found.append({
            "name": f"{p['name']}: clients whose connection loop failed",
            "limit": 0, "value": failed, "ok": failed == 0,
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
    config = drill_config(options)
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
    report = report_head("region-outage", options)
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
                own = own_config(config, options, tmp / "data")
                say(f"[{name}] starting a local deployment ({own.profile} profile)")
                cluster = LocalCluster(own)
                try:
                    await cluster.start()
                    report["deployment"] = describe_deployment(own, own_cluster=True)
                    passes.append(await _run_pass(own, options, jitter, name, say))
                finally:
                    say(f"[{name}] stopping the local deployment")
                    await cluster.stop()
                    cluster = None
                    shutil.rmtree(tmp, ignore_errors=True)
                    tmp = None
            else:
                report["deployment"] = describe_deployment(config, own_cluster=False)
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
