"""`rideout drill zone-outage`: a zone fails under N clients; zonal autoshift answers.

Against a running deployment or one of its own (as the region-outage drill): start N
resilient clients, break one zone of the serving region (``--fault kill|freeze|throttle``
on that zone's app servers only), and measure the time until the control plane has
evacuated the zone (autoshift), each disconnected client's time to its state restored
in the region's other zone, every acknowledged bid's fate (lost and duplicated: goal 0)
and that the region did **not** fail over; then mend the zone and measure the time
until autoshift brings it back. Writes report.json, report.md and timeline.png.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rideout.cluster.chaos import send_command
from rideout.config import Config
from rideout.drill._format import fmt_seconds, objective_lines
from rideout.drill.analysis import account_bids, recovery_stats
from rideout.drill.clients import ClientFleet
from rideout.drill.deployment import on_a_deployment, read_streams
from rideout.drill.errors import DrillError
from rideout.drill.options import DrillOptions, check_options, report_head, report_tail
from rideout.drill.plane import Plane
from rideout.drill.records import AckRecord, DisconnectedRecord, RestoredRecord, of_kind
from rideout.drill.report import write_report_files
from rideout.drill.runner import _plan, _restored
from rideout.drill.timeline import plot_acks

__all__ = [
    "ZoneDrillOptions",
    "render_zone_markdown",
    "run_zone_outage",
    "write_zone_report",
]

Progress = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class ZoneDrillOptions:
    """What `rideout drill zone-outage` was asked to do."""

    clients: int = 50
    fault: str = "kill"
    zone_id: str | None = None  # default: the serving region's first zone
    profile: str | None = None
    mend: bool = True
    max_rto: float | None = None
    max_lost: int = 0
    report_dir: Path | None = None
    config_path: Path | None = None
    warmup: float = 3.0
    settle: float = 2.0
    recovery_timeout: float | None = None
    env: dict[str, str] | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        check_options(self.clients, self.fault, self.profile)


def _zones(body: dict[str, Any]) -> set[str]:
    return {z["zone"] for z in body.get("zones", []) if z.get("evacuated")}


class _ZonePlane(Plane):
    """The control plane's summary, polled, with a timeline of the zones too."""

    def __init__(self, config: Config) -> None:
        super().__init__(config)
        self.zone_timeline: list[dict[str, Any]] = []

    async def poll(self) -> dict[str, Any] | None:
        body = await super().poll()
        if body is not None:
            failover = body.get("failover", {})
            self.zone_timeline.append({
                "t": time.time(), "evacuated": sorted(_zones(body)),
                "dns": body.get("dns", {}).get("addresses"), "writer": failover.get("writer"),
                "failovers": failover.get("failovers"),
            })  # fmt: skip
        return body


class _ZonePass:
    def __init__(self, config: Config, options: ZoneDrillOptions, progress: Progress) -> None:
        self.config = config
        self.options = options
        self.say = progress
        self.region = config.primary.name
        zones = [z.name for z in config.primary.zones]
        # Clients take DNS's answer in order: most are on the region's first zone.
        self.zone = options.zone_id or zones[0]
        if self.zone not in zones:
            raise DrillError(
                f"--zone-id must be a zone of {self.region}, the region DNS serves "
                f"({', '.join(zones)}), not {self.zone!r}"
            )
        t = config.timing
        self.detect_timeout = (t.failover_datapoints + 6) * t.canary_interval * 3 + 20
        self.recovery_timeout = options.recovery_timeout or max(30.0, 4 * t.backoff_cap + 20)
        self.mend_timeout = config.evacuate.autoshift_recover_after * 3 + self.detect_timeout
        legacy = DrillOptions(clients=options.clients, replication=config.failover.replication)
        self.plan = _plan(config, legacy, True, "zone-outage", time.time())
        self.plane = _ZonePlane(config)
        self.fleet = ClientFleet(self.plan.specs, processes=self.plan.processes)

    async def run(self) -> dict[str, Any]:
        result: dict[str, Any] = {"zone": self.zone, "region": self.region, "fault": self.options.fault,
                                  **self.plan.header()}  # fmt: skip
        try:
            self.say("waiting for a healthy deployment with no zone evacuated")
            await self.plane.until(lambda b: self.plane.healthy(b) and not _zones(b),
                              self.detect_timeout * 3, "a healthy deployment")  # fmt: skip
            self.fleet.start()
            await self._ready()
            self.fleet.bidding.set()
            await asyncio.sleep(self.options.warmup)
            result.update(await self._break())
            if self.options.mend:
                result["mend"] = await self._mend()
            self.say("stopping clients")
            self.fleet.bidding.clear()
            await asyncio.sleep(min(2.0, self.options.settle))
        finally:
            await self.fleet.stop()
            await self.plane.poll()
            await self.plane.aclose()
        records = self.fleet.snapshot()
        entries = await read_streams(self.config, self.region, list(self.plan.rooms))
        result["bids"] = account_bids(of_kind(records, AckRecord), entries).as_dict()
        rows = [r for r in self.plane.zone_timeline if r.get("failovers") is not None]
        result["failovers"] = (
            int(rows[-1]["failovers"]) - int(rows[0]["failovers"]) if rows else None
        )
        result["writer_stayed"] = all(r["writer"] == self.region for r in rows)
        result["timeline"] = self.plane.zone_timeline
        result["acks"] = [r.t for r in of_kind(records, AckRecord)]
        return result

    async def _ready(self) -> None:
        n = self.fleet.clients
        deadline = time.monotonic() + 30 + n / 100
        while time.monotonic() < deadline:
            ready = len(_restored(self.fleet.snapshot(), self.region))
            self.say(f"clients ready {ready}/{n}")
            if ready >= n:
                return
            await asyncio.sleep(0.2)
        raise DrillError(f"only {ready} of {n} clients got their state within the start window")

    async def _break(self) -> dict[str, Any]:
        run_dir, fault = self.config.run_dir, self.options.fault
        self.say(f"{fault} zone {self.zone}")
        fault_at = time.time()
        message = await asyncio.to_thread(send_command, run_dir, fault, self.region, zone=self.zone)
        evacuated_at = await self.plane.until(lambda b: self.zone in _zones(b), self.detect_timeout,
                                         f"autoshift of {self.zone}")  # fmt: skip
        deadline = time.monotonic() + self.recovery_timeout
        while time.monotonic() < deadline:
            records = self.fleet.snapshot()
            hit = {r.client for r in of_kind(records, DisconnectedRecord) if r.t >= fault_at}
            done = _restored(records, self.region, fault_at) & hit
            self.say(f"{len(done)}/{len(hit)} disconnected clients restored")
            if hit and done >= hit and time.time() > evacuated_at + self.config.timing.dns_ttl:
                break
            await self.plane.poll()
            await asyncio.sleep(0.2)
        await asyncio.sleep(self.options.settle)
        records = self.fleet.snapshot()
        hit = {r.client for r in of_kind(records, DisconnectedRecord) if r.t >= fault_at}
        restores = [(r.client, r.t, r.region) for r in of_kind(records, RestoredRecord)]
        stats = recovery_stats(restores, hit, fault_at, self.region, self.recovery_timeout)
        recovery = stats.as_dict()
        del recovery["clients"]  # the disconnected ones, counted below
        return {
            "fault_message": message,
            "fault_at": fault_at,
            "time_to_evacuation": evacuated_at - fault_at,
            "disconnected_clients": len(hit),
            **recovery,
        }

    async def _mend(self) -> dict[str, Any]:
        self.say(f"restore zone {self.zone}")
        mend_at = time.time()
        await asyncio.to_thread(send_command, self.config.run_dir, "restore", self.region)
        back = await self.plane.until(lambda b: self.zone not in _zones(b), self.mend_timeout,
                                 f"recovery of {self.zone}")  # fmt: skip
        return {"at": mend_at, "time_to_recovery": back - mend_at}


def _objectives(options: ZoneDrillOptions, p: dict[str, Any]) -> list[dict[str, Any]]:
    bids = p["bids"]
    found = [
        {"name": "acknowledged bids lost", "limit": options.max_lost, "value": bids["lost"],
         "ok": bids["lost"] <= options.max_lost},
        {"name": "bids applied more than once", "limit": 0, "value": bids["duplicates"],
         "ok": bids["duplicates"] == 0},
        {"name": "the region did not fail over", "limit": 0, "value": p["failovers"],
         "ok": p["failovers"] == 0 and p["writer_stayed"]},
        {"name": "disconnected clients restored in the region", "limit": 1.0,
         "value": p["recovered_share"], "ok": p["recovered_share"] == 1},
    ]  # fmt: skip
    if options.max_rto is not None:
        p99 = p["time_to_restored"]["p99"]
        found.append({"name": "p99 time to restored state", "limit": options.max_rto,
                      "value": p99, "ok": p99 is not None and p99 <= options.max_rto})  # fmt: skip
    return found


async def run_zone_outage(
    options: ZoneDrillOptions, progress: Progress | None = None
) -> dict[str, Any]:
    """Run the drill; the report (a JSON-able dict). Raises :class:`DrillError`."""
    say: Progress = progress or (lambda _msg: None)

    def check(config: Config) -> None:
        if not config.evacuate.autoshift:
            raise DrillError(
                "zonal autoshift is off ([evacuate] autoshift = false): nothing would "
                "evacuate the zone"
            )

    report = report_head("zone-outage", options)
    result, report["deployment"] = await on_a_deployment(
        dataclasses.replace(DrillOptions(), config_path=options.config_path, env=options.env),
        options.profile, say, lambda config: _ZonePass(config, options, say).run(), check,
    )  # fmt: skip
    return report_tail(report, result, _objectives(options, result))


def render_zone_markdown(report: dict[str, Any]) -> str:
    """The report as Markdown (pure)."""
    p = report["pass"]
    rto = p["time_to_restored"]
    lines = [
        f"# Zone-outage drill: {p['fault']} {p['zone']} ({p['region']})", "",
        f"{p['clients']} clients, {report['deployment']['profile']} profile; "
        f"{p['disconnected_clients']} were on the broken zone.", "",
        "| measurement | value |", "|---|---|",
        f"| time to evacuation (autoshift) | {fmt_seconds(p['time_to_evacuation'])} |",
        f"| time to restored state p50 / p90 / p99 / max | {fmt_seconds(rto['p50'])} / "
        f"{fmt_seconds(rto['p90'])} / {fmt_seconds(rto['p99'])} / {fmt_seconds(rto['max'])} |",
        f"| disconnected clients restored | {p['recovered']} of {p['disconnected_clients']} |",
        f"| acknowledged bids | {p['bids']['acked']} (lost {p['bids']['lost']}, duplicated {p['bids']['duplicates']}) |",
        f"| regional failovers | {p['failovers']} |",
    ]  # fmt: skip
    if p.get("mend"):
        lines.append(
            f"| time to recovery after mending | {fmt_seconds(p['mend']['time_to_recovery'])} |"
        )
    lines += ["", *objective_lines(dict(report))]
    return "\n".join(lines)


def write_zone_report(report: dict[str, Any], directory: Path) -> list[Path]:
    """``report.json``, ``report.md`` and (with matplotlib) ``timeline.png``."""
    return write_report_files(report, directory, render_zone_markdown, _plot)


def _plot(report: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    p = report["pass"]
    start = p["timeline"][0]["t"] if p["timeline"] else p["fault_at"]
    fig, (top, low) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    ts = [r["t"] - start for r in p["timeline"]]
    top.step(ts, [1 if p["zone"] in r["evacuated"] else 0 for r in p["timeline"]], where="post",
             label=f"{p['zone']} evacuated")  # fmt: skip
    top.step(ts, [len(r["dns"] or []) for r in p["timeline"]], where="post", label="DNS addresses")
    top.legend(loc="best", fontsize="small")
    plot_acks(low, p["acks"], start, "acked bids")
    for ax in (top, low):
        ax.axvline(p["fault_at"] - start, color="red", linestyle="--", linewidth=1)
        if p.get("mend"):
            ax.axvline(p["mend"]["at"] - start, color="green", linestyle="--", linewidth=1)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
