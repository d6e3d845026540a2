"""`rideout drill surge`: proof that the waiting room protects the site.

On a deployment of its own (a :class:`~rideout.cluster.supervisor.LocalCluster` in a
temporary data directory, stopped on every exit path), with the room's event ``surge``
guarding the auction: N visitors (:mod:`~rideout.drill.visitors`, many per process)
arrive in a burst, an inlet (MaxSize or Periodic) admits them, each admitted visitor
takes a token and holds an auction session on ``/ws``. Meanwhile the drill samples the
room's counters and capacity held from the writer region (private API), scrapes every
zone's micro-cache counters, and with ``--fault kill`` kills the primary region in the
middle of the surge. At the end every position handed out is looked up in the final
writer's Redis.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from rideout import _http, routes
from rideout.auth.admin import load_or_create_admin_token
from rideout.cluster.chaos import send_command
from rideout.cluster.supervisor import LocalCluster
from rideout.config import Config
from rideout.drill.clients import ClientFleet
from rideout.drill.deployment import drill_config, own_config, timeouts
from rideout.drill.errors import DrillError
from rideout.drill.options import (
    DrillOptions,
    Progress,
    check_at_least_one,
    check_choice,
    check_profile,
    report_head,
)
from rideout.drill.plane import Plane, serves_from
from rideout.drill.surge_analysis import (
    admitted_per_period,
    check_samples,
    concurrency,
    load_summary,
    outcomes,
    surge_series,
)
from rideout.drill.visitors import (
    ArrivedRecord,
    LeftRecord,
    ServedRecord,
    VisitorRecord,
    VisitorSpec,
    run_visitors,
)
from rideout.errors import RideoutError
from rideout.store.acl import RedisRole, credentials_for
from rideout.store.client import state_client
from rideout.waitingroom.errors import RoomError
from rideout.waitingroom.model import PositionState
from rideout.waitingroom.store import RoomStore

__all__ = ["EVENT_ID", "INLETS", "SurgeOptions", "run_surge"]

EVENT_ID = "surge"
INLETS = ("maxsize", "periodic")
_INLET_KIND = {"maxsize": "max_size", "periodic": "periodic"}


@dataclass(frozen=True, slots=True)
class SurgeOptions:
    """What `rideout drill surge` was asked to do."""

    visitors: int = 1000
    inlet: str = "maxsize"
    capacity: int = 100
    """Auction sessions the site takes at once (MaxSize's ``max_size``)."""
    period: float = 1.0
    """Seconds between the inlet's steps."""
    increment_by: int | None = None
    """Periodic: positions admitted per period (default: what keeps ``capacity``)."""
    fault: str | None = None
    profile: str | None = "fast"
    hold: float = 1.5
    poll_interval: float = 2.0
    burst: float = 2.0
    abandon_share: float = 0.05
    noshow_share: float = 0.05
    expiry: float = 30.0
    abandon_after: float = 20.0
    visitors_per_process: int = 250
    processes: bool | None = None
    max_lost: int = 0
    max_refused: int = 0
    max_gave_up: int | None = 0
    report_dir: Path | None = None
    config_path: Path | None = None
    env: dict[str, str] | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        check_at_least_one("--visitors", self.visitors)
        check_choice("--inlet", self.inlet, INLETS)
        check_at_least_one("--capacity", self.capacity)
        if self.fault not in (None, "kill"):
            raise DrillError(f"--fault must be kill (or absent), not {self.fault!r}")
        check_profile(self.profile)
        for name in ("period", "hold", "poll_interval", "burst"):
            if not getattr(self, name) > 0:
                raise DrillError(f"--{name.replace('_', '-')} must be above 0")
        for name in ("abandon_share", "noshow_share"):
            if not 0 <= getattr(self, name) <= 1:
                raise DrillError(f"--{name.replace('_', '-')} must be between 0 and 1")
        if self.abandon_share + self.noshow_share > 1:
            raise DrillError("--abandon-share and --noshow-share add up to more than 1")

    @property
    def per_period(self) -> int:
        """Periodic's increment: sessions last ``hold`` plus about a poll to start, so
        this many per period keeps about ``capacity`` open at once."""
        if self.increment_by is not None:
            return self.increment_by
        lasts = self.hold + self.poll_interval + self.period
        return max(1, math.floor(self.capacity * self.period / lasts))


def surge_config(config: Config, options: SurgeOptions, data_dir: Path) -> Config:
    """The drill's own deployment: ``config`` in ``data_dir``, the room's ``surge`` event
    with the options' inlet, expiry and abandonment, accepted by ``/ws``."""
    base = own_config(
        config,
        DrillOptions(replication=config.failover.replication, profile=options.profile),
        data_dir,
    )
    room = dataclasses.replace(
        base.waitingroom,
        enabled=True,
        events=(EVENT_ID,),
        expiry=options.expiry,
        abandon_after=options.abandon_after,
        incr_on_expiry=False,
        inlet=_INLET_KIND[options.inlet],
        inlet_period=options.period,
        inlet_max_size=options.capacity,
        inlet_increment_by=options.per_period,
        inlet_alarm=(),
        tick_interval=min(base.waitingroom.tick_interval, options.period / 4),
    )
    auth = dataclasses.replace(base.auth, room_events=(EVENT_ID,))
    return dataclasses.replace(base, waitingroom=room, auth=auth)


def _metric_sum(text: str, name: str) -> float:
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and line[len(name) : len(name) + 1] in ("{", " "):
            try:
                total += float(line.rsplit(" ", 1)[1])
            except ValueError:
                continue
    return total


class _Sampler:
    """Every ``interval``: the control plane's summary, the room's counters and capacity
    held (from the writer region's zones), and each zone's micro-cache counters."""

    def __init__(self, config: Config, plane: Plane, interval: float = 0.5) -> None:
        self.config = config
        self.plane = plane
        self.interval = interval
        self.samples: list[dict[str, Any]] = []
        self.metrics: dict[str, tuple[float, float]] = {}  # zone -> (polls, loads), last seen
        self.http = _http.async_client(timeout=2.0)
        token = load_or_create_admin_token(config.keys_dir)
        self.headers = {"Authorization": f"Bearer {token}"}

    async def run(self) -> None:
        while True:
            await self.sample()
            await asyncio.sleep(self.interval)

    async def sample(self) -> None:
        body = await self.plane.poll()
        writer = ((body or {}).get("failover") or {}).get("writer") or self.config.primary.name
        path = routes.ROOM_PRIVATE_EVENT.format(event_id=EVENT_ID)
        for zone in self.config.region(writer).zones:
            try:
                response = await self.http.get(
                    routes.zone_url(self.config, zone.address, path), headers=self.headers
                )
                if response.status_code != 200:
                    continue
                data = response.json()
            except (httpx.HTTPError, ValueError):
                continue
            self.samples.append(
                {"t": time.time(), "region": writer, "zone": zone.name,
                 "counters": data["counters"], "holding": data["holding"]}
            )  # fmt: skip
            break
        await asyncio.gather(
            *(self._scrape(z.name, z.address) for r in self.config.regions for z in r.zones)
        )

    async def _scrape(self, zone: str, address: str) -> None:
        try:
            response = await self.http.get(routes.zone_url(self.config, address, routes.METRICS))
        except httpx.HTTPError:
            return
        text = response.text
        polls = _metric_sum(text, "rideout_room_counter_polls_total")
        loads = _metric_sum(text, "rideout_room_counter_loads_total")
        self.metrics[zone] = (polls, loads)

    def totals(self) -> tuple[float, float]:
        """Polls and Redis loads summed over every zone's last scrape (a killed zone's
        last figures before it died)."""
        return (
            sum(p for p, _ in self.metrics.values()),
            sum(lo for _, lo in self.metrics.values()),
        )

    async def aclose(self) -> None:
        await self.http.aclose()


def _specs(
    config: Config, options: SurgeOptions, start_at: float
) -> tuple[list[VisitorSpec], bool]:
    n = options.visitors
    per = max(1, options.visitors_per_process)
    # Visitors run in worker processes unless there are few: the drill's own loop
    # must keep time for its samples.
    processes = options.processes if options.processes is not None else n > 100
    groups = math.ceil(n / per) if processes else 1
    size = math.ceil(n / groups)
    # Long enough for every visitor to get its turn at the inlet's pace, with room for
    # a failover: a visitor still waiting after it gives up (reported).
    pace = (
        options.per_period / options.period
        if options.inlet == "periodic"
        else (options.capacity / (options.hold + options.poll_interval + options.period))
    )
    deadline = options.burst + 1.5 * n / max(pace, 0.1) + 60
    specs = [
        VisitorSpec(
            config,
            first=i * size,
            count=min(size, n - i * size),
            event_id=EVENT_ID,
            start_at=start_at,
            burst=options.burst,
            poll_interval=options.poll_interval,
            hold=options.hold,
            abandon_share=options.abandon_share,
            # Polls naming the request id, well within the room's abandonment hold.
            touch_interval=options.abandon_after / 3 if options.abandon_after else 5.0,
            noshow_share=options.noshow_share,
            deadline=deadline,
            seed=i + 1,
        )
        for i in range(groups)
        if i * size < n
    ]
    return specs, processes


class _Surge:
    """One surge: visitors, samples, the fault, the accounting."""

    def __init__(self, config: Config, options: SurgeOptions, progress: Progress) -> None:
        self.config = config
        self.options = options
        self.say = progress
        self.plane = Plane(config)
        self.sampler = _Sampler(config, self.plane)
        self.failover_timeout, _ = timeouts(config, DrillOptions())

    def records(self, fleet: ClientFleet) -> list[VisitorRecord]:
        return fleet.snapshot()  # type: ignore[return-value]

    async def run(self) -> dict[str, Any]:
        o, plane = self.options, self.plane
        self.say("waiting for a healthy deployment")
        await plane.until(plane.healthy, self.failover_timeout * 3, "a healthy deployment")
        await self._wait_room()
        start_at = time.time() + (5.0 if o.visitors > 100 else 1.0)
        specs, processes = _specs(self.config, o, start_at)
        deadline = start_at + specs[0].deadline + 30
        fleet = ClientFleet(specs, processes=processes, runner=run_visitors)
        sampling = asyncio.create_task(self.sampler.run())
        fault: dict[str, Any] | None = None
        try:
            self.say(f"{o.visitors} visitors arrive over {o.burst:g} s")
            fleet.start()
            if o.fault:
                fault = await self._fault(fleet, start_at)
            await self._wait_left(fleet, deadline)
            await self._settle()
        finally:
            await fleet.stop()
            sampling.cancel()
            await asyncio.gather(sampling, return_exceptions=True)
            await self.sampler.sample()
            await self.sampler.aclose()
            await plane.aclose()
        records = self.records(fleet)
        return await self._account(records, start_at, fault, processes, len(specs))

    async def _wait_room(self) -> None:
        """Until the writer's zones answer the room's event (the servers create it)."""
        until = time.monotonic() + 30
        while time.monotonic() < until:
            await self.sampler.sample()
            if self.sampler.samples:
                self.sampler.samples.clear()
                return
            await asyncio.sleep(0.2)
        raise DrillError(f"the room's event {EVENT_ID!r} never answered on the writer")

    async def _fault(self, fleet: ClientFleet, start_at: float) -> dict[str, Any]:
        """Kill the primary once the burst has arrived and some visitors are served."""
        o = self.options
        while True:
            records = self.records(fleet)
            served = sum(1 for r in records if isinstance(r, ServedRecord))
            # In the middle of the surge: some sessions served, most visitors waiting
            # (or, on a machine too slow for that, 30 s after the burst anyway).
            late = time.time() >= start_at + o.burst + 30
            if time.time() >= start_at + o.burst + 1 and (
                served >= min(o.capacity, o.visitors) // 2 or late
            ):
                break
            await asyncio.sleep(0.2)
        primary, secondary = self.config.primary.name, self.config.secondary.name
        waiting = self.sampler.samples[-1]["counters"]["waiting"] if self.sampler.samples else None
        self.say(f"kill {primary} ({served} served, {waiting} waiting)")
        at = time.time()
        message = await asyncio.to_thread(send_command, self.config.run_dir, "kill", primary)
        moved = await self.plane.until(
            serves_from(secondary), self.failover_timeout, f"failover to {secondary}"
        )
        return {"at": at, "message": message, "from": primary, "to": secondary,
                "served_before": served,
                "waiting_before": waiting, "writer_moved_after": moved - at}  # fmt: skip

    async def _wait_left(self, fleet: ClientFleet, deadline: float) -> None:
        n = self.options.visitors
        while time.time() < deadline:
            left = sum(1 for r in self.records(fleet) if isinstance(r, LeftRecord))
            self.say(f"{left}/{n} visits over")
            if left >= n:
                return
            await asyncio.sleep(0.3)

    async def _settle(self) -> None:
        """Until the room has swept what the no-shows and abandoners left (nothing waits
        and nothing is admitted but untaken), at most expiry + abandonment + 10 s."""
        o = self.options
        until = time.monotonic() + o.expiry + o.abandon_after + 10
        while time.monotonic() < until:
            await asyncio.sleep(0.5)
            if self.sampler.samples:
                c = self.sampler.samples[-1]["counters"]
                if c["waiting"] == 0 and self.sampler.samples[-1]["holding"] == 0:
                    return

    async def _verify_positions(
        self, region: str, arrivals: list[ArrivedRecord], served: set[int]
    ) -> tuple[list[tuple[float, int]], list[dict[str, Any]]]:
        """The serving counter's moves, and every handed-out position missing from (or
        renumbered in) ``region``'s Redis."""
        redis = self.config.region(region).redis
        client = state_client(
            redis.address, redis.port,
            credentials=credentials_for(self.config, RedisRole.APP), timeout=10.0,
        )  # fmt: skip
        store = RoomStore(client, region=region)
        missing: list[dict[str, Any]] = []
        try:
            history = await store.serving_history(EVENT_ID, limit=1_000_000)
            for a in arrivals:
                try:
                    found = await store.position(EVENT_ID, a.request_id)
                except RoomError as exc:
                    missing.append({"request_id": a.request_id, "detail": str(exc)})
                    continue
                if a.visitor in served and found.status != PositionState.SERVED:
                    missing.append({"request_id": a.request_id,
                                    "detail": f"took a token, now {found.status}"})  # fmt: skip
                elif found.queue_number != a.queue_number:
                    missing.append({"request_id": a.request_id,
                                    "detail": f"number {found.queue_number}, was {a.queue_number}"})  # fmt: skip
        finally:
            await client.aclose()
        return history, missing

    async def _account(
        self,
        records: list[VisitorRecord],
        start_at: float,
        fault: dict[str, Any] | None,
        processes: bool,
        groups: int,
    ) -> dict[str, Any]:
        o = self.options
        timeline = self.plane.timeline
        writer = (timeline[-1]["writer"] if timeline else None) or self.config.primary.name
        self.say(f"checking every position in {writer}")
        arrivals = [r for r in records if isinstance(r, ArrivedRecord)]
        served = {r.visitor for r in records if isinstance(r, ServedRecord)}
        history, missing = await self._verify_positions(writer, arrivals, served)
        per_period = admitted_per_period(history, o.period, since=start_at - o.period)
        bound = o.per_period if o.inlet == "periodic" else o.capacity
        peak, peak_at = concurrency(records)
        samples = self.sampler.samples
        polls, loads = self.sampler.totals()
        final = samples[-1]["counters"] if samples else None
        return {
            "visitors": o.visitors,
            "processes": groups if processes else 0,
            "inlet": {
                "kind": o.inlet,
                "period": o.period,
                "capacity": o.capacity,
                "per_period": o.per_period if o.inlet == "periodic" else None,
                "bound_per_period": bound,
            },
            "outcomes": outcomes(records, o.visitors),
            "admitted_per_period": per_period,
            "admitted_max_per_period": max(per_period, default=0),
            "sessions_max": peak,
            "sessions_max_at": None if peak_at is None else peak_at - start_at,
            "counters": check_samples(samples, o.capacity if o.inlet == "maxsize" else None),
            "final_counters": final,
            "positions_missing": missing,
            "load": load_summary(records, polls, loads),
            "fault": fault,
            "final_writer": writer,
            "writer_moves": self.plane.moves(),
            "timeline": timeline,
            "series": surge_series(records, samples, start_at),
        }


def _objectives(options: SurgeOptions, result: dict[str, Any]) -> list[dict[str, Any]]:
    out = result["outcomes"]
    counters = result["counters"]
    lost = len(out["lost"]) + len(result["positions_missing"])
    found: list[dict[str, Any]] = [
        {"name": "concurrent auction sessions within capacity", "limit": options.capacity,
         "value": result["sessions_max"], "ok": result["sessions_max"] <= options.capacity},
        {"name": "admitted per period within the inlet's bound",
         "limit": result["inlet"]["bound_per_period"], "value": result["admitted_max_per_period"],
         "ok": result["admitted_max_per_period"] <= result["inlet"]["bound_per_period"]},
        {"name": "queue = served + waiting + expired + abandoned at every sample",
         "limit": "every sample", "value": f"{len(counters['identity_broken'])} broken of "
         f"{counters['samples']}", "ok": counters["identity_holds"] and counters["samples"] > 0},
        {"name": "no counter moved back (failover included)", "limit": 0,
         "value": len(counters["moved_back"]), "ok": not counters["moved_back"]},
        {"name": "admitted tokens refused by /ws", "limit": options.max_refused,
         "value": out["refused"], "ok": out["refused"] <= options.max_refused},
        {"name": "positions lost", "limit": options.max_lost, "value": lost,
         "ok": lost <= options.max_lost},
        {"name": "every position handed out once", "limit": 0, "value": out["shared_positions"],
         "ok": out["shared_positions"] == 0},
    ]  # fmt: skip
    if options.inlet == "maxsize":
        found.append({"name": "capacity held (room's count) within capacity",
                      "limit": options.capacity, "value": counters["held_max"],
                      "ok": counters["held_within_capacity"]})  # fmt: skip
    if options.max_gave_up is not None:
        gave_up = out["left"].get("gave_up", 0) + out["unfinished"]
        found.append({"name": "visitors that gave up or never finished",
                      "limit": options.max_gave_up, "value": gave_up,
                      "ok": gave_up <= options.max_gave_up})  # fmt: skip
    if options.fault:
        fault = result.get("fault") or {}
        moved = fault.get("to") is not None and result["final_writer"] == fault.get("to")
        found.append({"name": "the room failed over with the writer (kill)",
                      "limit": "writer on the secondary", "value": result["final_writer"],
                      "ok": moved})  # fmt: skip
    return found


async def run_surge(options: SurgeOptions, progress: Progress | None = None) -> dict[str, Any]:
    """Run the surge on a deployment of its own; the report (a JSON-able dict). Raises
    :class:`~rideout.drill.errors.DrillError` when it cannot run."""
    say: Progress = progress or (lambda _msg: None)
    config = drill_config(DrillOptions(config_path=options.config_path, env=options.env))
    tmp = Path(tempfile.mkdtemp(prefix="rideout-surge-"))
    own = surge_config(config, options, tmp / "data")
    report = report_head("surge", options)
    report["deployment"] = {
        "own_cluster": True,
        "profile": own.profile,
        "primary": own.primary.name,
        "secondary": own.secondary.name,
        "replication": own.failover.replication,
        "micro_cache_ttl": own.waitingroom.micro_cache_ttl,
        "event_id": EVENT_ID,
    }
    cluster = LocalCluster(own)
    try:
        say(f"starting a local deployment ({own.profile} profile)")
        try:
            await cluster.start()
        except RideoutError as exc:
            raise DrillError(f"the drill's deployment did not start: {exc}") from exc
        report["surge"] = await _Surge(own, options, say).run()
    finally:
        say("stopping the local deployment")
        await cluster.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    report["finished_at"] = time.time()
    report["objectives"] = _objectives(options, report["surge"])
    report["ok"] = all(o["ok"] for o in report["objectives"])
    return report
