"""`rideout drill overload`: load that looks legitimate must be shed, not failed over.

Against a running deployment or one of its own: N ordinary bidders (the region-outage
drill's clients, bidding in their rooms) and M abusers with valid tokens who misbehave
within their caps (:mod:`rideout.drill.abusers`: replay floods, connection floods, bid
floods, slow readers) on the serving region's zones for ``duration`` seconds. Measured:
the ordinary users' bid round trip (p50/p99, from submission to answer), every
acknowledged bid's fate, what each zone shed and why (the deltas of its
``rideout_shed_total``, handshake, message and slow-consumer counters), what each
abuser was refused, the alarms the canaries drove, failovers and evacuations. The
objectives: no failover, no evacuation, the ordinary p99 under ``max_p99``, nothing
acknowledged lost or applied twice, and every abuser refused at least once (shed or
throttled). Writes report.json, report.md and timeline.png.
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import httpx

from rideout.config import Config
from rideout.drill._format import fmt_seconds, objective_lines
from rideout.drill.abusers import BEHAVIOURS, AbuserSpec, behaviour_of, run_abusers
from rideout.drill.analysis import account_bids, percentile
from rideout.drill.clients import ClientFleet
from rideout.drill.deployment import on_a_deployment, read_streams
from rideout.drill.errors import DrillError
from rideout.drill.options import (
    DrillOptions,
    check_at_least_one,
    check_nice,
    check_profile,
    report_head,
    report_tail,
)
from rideout.drill.plane import Plane
from rideout.drill.records import AbuseRecord, AckRecord, DrillRecord, RejectedRecord, of_kind
from rideout.drill.report import write_report_files
from rideout.drill.runner import _plan, _restored
from rideout.drill.timeline import plot_acks

__all__ = [
    "OverloadOptions",
    "abuse_summary",
    "overload_objectives",
    "overload_pass",
    "render_overload_markdown",
    "run_overload",
    "shed_deltas",
    "write_overload_report",
]

Progress = Callable[[str], None]

# What a zone counts when it refuses work, read from its /metrics before and after.
SHED_METRICS: Final = (
    "rideout_shed_total",
    "rideout_ws_handshakes_total",
    "rideout_ws_messages_total",
    "rideout_slow_consumers_total",
    "rideout_ws_closes_total",
)
_SAMPLE = re.compile(r"^(rideout_[a-z_]+)(\{[^}]*\})? (\S+)$", re.M)
ABUSERS_PER_PROCESS: Final = 40


@dataclass(frozen=True, slots=True)
class OverloadOptions:
    """What `rideout drill overload` was asked to do."""

    clients: int = 200
    abusers: int = 60
    duration: float = 60.0
    profile: str | None = None
    max_failovers: int = 0
    max_evacuations: int = 0
    max_p99: float | None = 1.0
    max_lost: int = 0
    behaviours: tuple[str, ...] = BEHAVIOURS
    report_dir: Path | None = None
    config_path: Path | None = None
    warmup: float = 3.0
    client_nice: int = 0
    """The bidders' and abusers' worker processes run this much nicer (os.nice): on one
    machine the load yields the cores to the deployment, as clients on other hosts do."""
    env: dict[str, str] | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        check_at_least_one("--clients", self.clients)
        check_at_least_one("--abusers", self.abusers)
        check_profile(self.profile)
        if not self.duration > 0:
            raise DrillError(f"--duration must be more than 0 seconds, not {self.duration!r}")
        unknown = sorted(set(self.behaviours) - set(BEHAVIOURS))
        check_nice(self.client_nice)
        if unknown or not self.behaviours:
            raise DrillError(
                f"--behaviours must name some of {', '.join(BEHAVIOURS)}, not {unknown or 'none'}"
            )


# ---------------------------------------------------------------------------- pure parts


def scrape(text: str) -> dict[str, float]:
    """The samples of :data:`SHED_METRICS` in a ``/metrics`` text: name{labels} -> value."""
    found: dict[str, float] = {}
    for name, labels, value in _SAMPLE.findall(text):
        if name in SHED_METRICS:
            found[name + labels] = float(value)
    return found


def shed_deltas(
    before: Mapping[str, Mapping[str, float]], after: Mapping[str, Mapping[str, float]]
) -> dict[str, dict[str, float]]:
    """Per zone, what each refusal counter rose by (the samples that rose; a sample new
    since ``before`` counts from 0). Only refusals: outcomes ``ok``/``accepted`` and the
    like are left out by the caller's reading (:func:`refusals`)."""
    out: dict[str, dict[str, float]] = {}
    for zone, samples in after.items():
        old = before.get(zone, {})
        rose = {k: v - old.get(k, 0.0) for k, v in samples.items() if v > old.get(k, 0.0)}
        if rose:
            out[zone] = dict(sorted(rose.items()))
    return out


# What is no refusal: a handshake or message served (a bid's ``rejected`` is the auction's
# answer, too low), a close that asks the client to come back elsewhere or is normal.
_NOT_REFUSED: Final = {
    "rideout_ws_handshakes_total": frozenset({"accepted"}),
    "rideout_ws_messages_total": frozenset({"ok", "accepted", "rejected"}),
    "rideout_ws_closes_total": frozenset({"1000", "1001", "1012"}),
}
_LABEL: Final = re.compile(r'(?:outcome|code)="([^"]*)"')


def refusals(deltas: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    """The deltas summed over zones, refusals only: every shed and slow-consumer sample,
    and the handshake, message and close samples whose outcome or code is no service."""
    total: dict[str, float] = {}
    for samples in deltas.values():
        for key, value in samples.items():
            name = key.split("{", 1)[0]
            label = _LABEL.search(key)
            served = _NOT_REFUSED.get(name)
            if served is None or (label is not None and label[1] not in served):
                total[key] = total.get(key, 0.0) + value
    return dict(sorted(total.items()))


def abuse_summary(
    records: Iterable[AbuseRecord], abusers: int, behaviours: tuple[str, ...]
) -> dict[str, Any]:
    """By behaviour: the outcomes counted, how many abusers it had and how many of them
    were refused at least once (throttled, refused or closed by the server)."""
    outcomes: dict[str, Counter[str]] = {b: Counter() for b in behaviours}
    refused: dict[str, set[int]] = {b: set() for b in behaviours}
    for r in records:
        outcomes.setdefault(r.behaviour, Counter())[r.outcome] += 1
        if r.outcome == "throttled" or r.outcome.startswith(("refused:", "closed:")):
            refused.setdefault(r.behaviour, set()).add(r.client)
    members = Counter(behaviour_of(i, behaviours) for i in range(abusers))
    return {
        b: {"abusers": members[b], "refused": len(refused.get(b, ())),
            "outcomes": dict(sorted(outcomes.get(b, Counter()).items()))}
        for b in behaviours
    }  # fmt: skip


def bid_rtts(records: Iterable[DrillRecord], since: float) -> list[float]:
    """The round trips of the ordinary bids answered at or after ``since``."""
    return [
        r.rtt
        for r in records
        if isinstance(r, AckRecord | RejectedRecord) and r.t >= since and r.rtt is not None
    ]


def overload_objectives(options: OverloadOptions, p: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The drill's objectives, each with its limit, value and whether it held."""
    bids, rtt = p["bids"], p["bid_rtt"]
    # Slow readers are reported, not gated: one that never falls `send_queue` messages
    # behind (the sockets' buffers absorb its room's updates) costs the zone nothing to
    # refuse, and is closed (1013) only once it does.
    gated = [b for name, b in p["abuse"].items() if name != "slow"]
    abusers = sum(b["abusers"] for b in gated)
    refused = sum(b["refused"] for b in gated)
    found = [
        {"name": "regional failovers", "limit": options.max_failovers, "value": p["failovers"],
         "ok": p["failovers"] is not None and p["failovers"] <= options.max_failovers},
        {"name": "zone evacuations", "limit": options.max_evacuations, "value": p["evacuations"],
         "ok": p["evacuations"] <= options.max_evacuations},
        {"name": "acknowledged bids lost", "limit": options.max_lost, "value": bids["lost"],
         "ok": bids["lost"] <= options.max_lost},
        {"name": "bids applied more than once", "limit": 0, "value": bids["duplicates"],
         "ok": bids["duplicates"] == 0},
        {"name": "abusers refused at least once (slow readers aside)", "limit": abusers,
         "value": refused, "ok": refused == abusers},
    ]  # fmt: skip
    if options.max_p99 is not None:
        found.append({"name": "ordinary bid round trip p99 (s)", "limit": options.max_p99,
                      "value": rtt["p99"],
                      "ok": rtt["p99"] is not None and rtt["p99"] <= options.max_p99})  # fmt: skip
    return found


# ---------------------------------------------------------------------------- the pass


class _OverloadPlane(Plane):
    """The control plane's summary, polled, with a timeline of what overload could move."""

    def __init__(self, config: Config) -> None:
        super().__init__(config)
        self.rows: list[dict[str, Any]] = []

    async def poll(self) -> dict[str, Any] | None:
        body = await super().poll()
        if body is not None:
            failover = body.get("failover", {})
            self.rows.append({
                "t": time.time(),
                "alarms": {r: a.get("state") for r, a in body.get("alarms", {}).items()},
                "evacuated": sorted(z["zone"] for z in body.get("zones", []) if z.get("evacuated")),
                "writer": failover.get("writer"), "epoch": failover.get("epoch"),
                "failovers": failover.get("failovers"),
                "evacuations": sum(1 for e in body.get("autoshift", {}).get("events", [])
                                   if e.get("action") == "evacuate" and e.get("result") == "done"),
            })  # fmt: skip
        return body


class _OverloadPass:
    def __init__(self, config: Config, options: OverloadOptions, progress: Progress) -> None:
        self.config = config
        self.options = options
        self.say = progress
        self.region = config.primary.name
        # The bidders run in a worker process even when few: in this process they would
        # share the loop that polls the control plane and times nothing else.
        legacy = DrillOptions(clients=options.clients, replication=config.failover.replication,
                              processes=True, client_nice=options.client_nice)  # fmt: skip
        self.plan = _plan(config, legacy, True, "overload", time.time())
        self.plane = _OverloadPlane(config)
        self.fleet = ClientFleet(
            self.plan.specs, processes=self.plan.processes, nice=self.plan.nice
        )
        t = config.timing
        self.settle_timeout = (t.failover_datapoints + 6) * t.canary_interval * 3 + 20

    def _abusers(self, since: dict[str, Any], history_room: str) -> ClientFleet:
        n = self.options.abusers
        groups = max(1, -(-n // ABUSERS_PER_PROCESS))
        size = -(-n // groups)
        specs = [
            AbuserSpec(self.config, first=i * size, count=min(size, n - i * size),
                       prefix=self.plan.rooms[0].rsplit("-", 1)[0], history_room=history_room,
                       since=since, busy_rooms=self.plan.rooms, behaviours=self.options.behaviours)
            for i in range(groups) if i * size < n
        ]  # fmt: skip
        return ClientFleet(specs, processes=True, runner=run_abusers, nice=self.options.client_nice)

    async def _metrics(self) -> dict[str, dict[str, float]]:
        found: dict[str, dict[str, float]] = {}
        for region in self.config.regions:
            for zone in region.zones:
                url = f"http://{zone.address}:{self.config.app_port}/metrics"
                try:
                    found[zone.name] = scrape((await self.plane.http.get(url)).text)
                except httpx.HTTPError as exc:  # a zone that does not answer: said, skipped
                    self.say(f"no metrics from {zone.name}: {exc!r}")
        return found

    async def run(self) -> dict[str, Any]:
        result: dict[str, Any] = {"region": self.region, **self.plan.header(),
                                  "abusers": self.options.abusers,
                                  "duration": self.options.duration}  # fmt: skip
        self.say("waiting for a healthy deployment with no zone evacuated")
        await self.plane.until(lambda b: self.plane.healthy(b), self.settle_timeout * 3,
                               "a healthy deployment")  # fmt: skip
        history_room = f"{self.plan.rooms[0].rsplit('-', 1)[0]}-history"
        since = await _seed_history(self.config, history_room)
        abusers = self._abusers(since, history_room)
        polling = asyncio.create_task(self.plane.keep_polling(), name="drill-overload-timeline")
        try:
            self.fleet.start()
            abusers.start()
            await self._ready()
            self.fleet.bidding.set()
            await asyncio.sleep(self.options.warmup)
            before = await self._metrics()
            attack_at = time.time()
            self.say(f"{self.options.abusers} abusers for {self.options.duration:g} s")
            abusers.bidding.set()
            end = time.monotonic() + self.options.duration
            while time.monotonic() < end:
                await asyncio.sleep(min(5.0, max(0.0, end - time.monotonic())))
                self.say(f"{int(end - time.monotonic())} s of abuse left")
            abusers.bidding.clear()
            await abusers.stop()
            attack_end = time.time()
            after = await self._metrics()
            self.say("stopping clients")
            self.fleet.bidding.clear()
            await asyncio.sleep(2.0)
        finally:
            await abusers.stop()
            await self.fleet.stop()
            polling.cancel()
            await asyncio.gather(polling, return_exceptions=True)
            await self.plane.poll()
            await self.plane.aclose()
        records = self.fleet.snapshot()
        entries = await read_streams(self.config, self.region, list(self.plan.rooms))
        result["bids"] = account_bids(of_kind(records, AckRecord), entries).as_dict()
        rtts = bid_rtts(records, attack_at)
        result["bid_rtt"] = {"count": len(rtts), "p50": percentile(rtts, 50),
                             "p99": percentile(rtts, 99), "max": max(rtts, default=None)}  # fmt: skip
        result["abuse"] = abuse_summary(
            of_kind(abusers.snapshot(), AbuseRecord), self.options.abusers, self.options.behaviours
        )
        deltas = shed_deltas(before, after)
        result["shed_by_zone"] = deltas
        result["refused"] = refusals(deltas)
        rows = [r for r in self.plane.rows if r.get("failovers") is not None]
        result["failovers"] = (
            int(rows[-1]["failovers"]) - int(rows[0]["failovers"]) if rows else None
        )
        result["writer_stayed"] = all(r["writer"] == self.region for r in rows)
        result["evacuations"] = (rows[-1]["evacuations"] - rows[0]["evacuations"]) if rows else 0
        during = [r for r in rows if attack_at <= r["t"] <= attack_end]
        result["alarm_polls"] = sum(
            1 for r in during if any(s != "OK" for s in r["alarms"].values())
        )
        result["attack_polls"] = len(during)
        result["attack_at"], result["attack_end"] = attack_at, attack_end
        result["timeline"] = self.plane.rows
        result["acks"] = [r.t for r in of_kind(records, AckRecord)]
        return result

    async def _ready(self) -> None:
        n = self.fleet.clients
        deadline = time.monotonic() + 30 + n / 100
        ready = 0
        while time.monotonic() < deadline:
            ready = len(_restored(self.fleet.snapshot(), self.region))
            self.say(f"clients ready {ready}/{n}")
            if ready >= n:
                return
            await asyncio.sleep(0.2)
        raise DrillError(f"only {ready} of {n} clients got their state within the start window")


async def overload_pass(
    config: Config, options: OverloadOptions, progress: Progress | None = None
) -> dict[str, Any]:
    """One pass against the running deployment of `config` (what :func:`run_overload`
    does once it has one): the pass's figures, before the objectives are judged."""
    return await _OverloadPass(config, options, progress or (lambda _msg: None)).run()


async def _seed_history(config: Config, room: str) -> dict[str, Any]:
    """Fill `room`'s history (``realtime.history_size`` updates) in the writer region;
    the position of its oldest update: what a replay flood asks for."""
    from rideout.realtime.app import auction_settings
    from rideout.store import keys
    from rideout.store.acl import RedisRole, credentials_for
    from rideout.store.auction import AuctionStore
    from rideout.store.client import state_client
    from rideout.store.replication import read_epoch

    region = config.primary
    client = state_client(
        region.redis.address, region.redis.port, credentials=credentials_for(config, RedisRole.APP),
        tls=region.redis.tls,
    )  # fmt: skip
    store = AuctionStore(client, auction_settings(config), region.name)
    try:
        epoch = int(await read_epoch(client) or 0)
        size = config.realtime.history_size
        for first in range(0, size, 250):
            await asyncio.gather(*(
                store.bid(room, f"seed-{n % 7}", n + 1, f"seed-{n}", epoch=epoch)
                for n in range(first, min(size, first + 250))
            ))  # fmt: skip
        head = await client.xrange(keys.room_stream(room), count=1)
        if not head:
            raise DrillError(f"the room {room} has no history after seeding it")
        oldest = head[0][0]
    finally:
        await store.close()
        await client.aclose()
    return {"epoch": epoch, "offset": oldest.decode() if isinstance(oldest, bytes) else oldest}


async def run_overload(
    options: OverloadOptions, progress: Progress | None = None
) -> dict[str, Any]:
    """Run the drill; the report (a JSON-able dict). Raises :class:`DrillError`."""
    say: Progress = progress or (lambda _msg: None)
    report = report_head("overload", options)
    result, report["deployment"] = await on_a_deployment(
        dataclasses.replace(DrillOptions(), config_path=options.config_path, env=options.env),
        options.profile, say, lambda config: overload_pass(config, options, say),
    )  # fmt: skip
    return report_tail(report, result, overload_objectives(options, result))


# ---------------------------------------------------------------------------- the report


def render_overload_markdown(report: Mapping[str, Any]) -> str:
    """The report as Markdown (pure)."""
    p = report["pass"]
    rtt = p["bid_rtt"]
    lines = [
        f"# Overload drill: {p['abusers']} abusers beside {p['clients']} bidders ({p['region']})",
        "",
        f"{p['duration']:g} s of abuse, {report['deployment']['profile']} profile"
        + (f", the clients at nice {p['client_nice']}" if p.get("client_nice") else "")
        + ".", "",
        "| measurement | value |", "|---|---|",
        f"| ordinary bid round trip p50 / p99 / max | {fmt_seconds(rtt['p50'])} / "
        f"{fmt_seconds(rtt['p99'])} / {fmt_seconds(rtt['max'])} ({rtt['count']} bids) |",
        f"| acknowledged bids | {p['bids']['acked']} (lost {p['bids']['lost']}, "
        f"duplicated {p['bids']['duplicates']}) |",
        f"| regional failovers | {p['failovers']} |",
        f"| zone evacuations (autoshift) | {p['evacuations']} |",
        f"| control-plane polls during the abuse with an alarm not OK | {p['alarm_polls']} of "
        f"{p['attack_polls']} |",
        "", "## The abusers", "",
        "| behaviour | abusers | refused at least once | outcomes |", "|---|---|---|---|",
    ]  # fmt: skip
    for behaviour, b in p["abuse"].items():
        outcomes = ", ".join(f"{k} {v}" for k, v in b["outcomes"].items()) or "-"
        lines.append(f"| {behaviour} | {b['abusers']} | {b['refused']} | {outcomes} |")
    lines += ["", "## What the zones refused", "", "| counter | rose by |", "|---|---|"]
    lines += [f"| `{k}` | {v:g} |" for k, v in p["refused"].items()] or ["| (nothing) | 0 |"]
    lines += ["", *objective_lines(dict(report))]
    return "\n".join(lines)


def write_overload_report(report: dict[str, Any], directory: Path) -> list[Path]:
    """``report.json``, ``report.md`` and (with matplotlib) ``timeline.png``."""
    return write_report_files(report, directory, render_overload_markdown, _plot)


def _plot(report: Mapping[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    p = report["pass"]
    rows = p["timeline"]
    start = rows[0]["t"] if rows else p["attack_at"]
    fig, (top, low) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    ts = [r["t"] - start for r in rows]
    top.step(ts, [sum(s != "OK" for s in r["alarms"].values()) for r in rows], where="post",
             label="alarms not OK")  # fmt: skip
    top.step(ts, [r["epoch"] or 0 for r in rows], where="post", label="writer epoch")
    top.step(ts, [len(r["evacuated"]) for r in rows], where="post", label="zones evacuated")
    top.legend(loc="best", fontsize="small")
    plot_acks(low, p["acks"], start, "ordinary acked bids")
    for ax in (top, low):
        ax.axvspan(p["attack_at"] - start, p["attack_end"] - start, color="red", alpha=0.1)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
