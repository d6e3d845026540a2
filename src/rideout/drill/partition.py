"""``rideout drill partition``: one partition scenario on a network lab of its own.

It builds the lab and runs ``rideout lab up``'s deployment in it
(:func:`rideout.lab.run.run_deployment`: torn down on every exit path), then, in the
lab's hosts (:mod:`rideout.drill.partition_agent`): a control-plane poller on
``state-redis`` (global), and a process of bidding clients on each region's canary host
(``canary-use1``, ``canary-usw2``: on the region's side of every cut). After the warm-up
it makes the scenario's cuts in the router, holds them, heals, lets the clients bid on,
stops them (each finishes the bid it waits for), waits for every Redis to hold what the
writer holds (up to :data:`CATCH_UP` s), reads every Redis's histories as the monitor
user over TLS from ``state-redis``, and judges: the checker
(:mod:`rideout.drill.partition_check`) and the scenario's expectations
(:mod:`rideout.drill.partition_scenarios`). The report (``report.json``,
``report.md``, and the raw records) goes to ``--report``; exit 0 only if every check
passed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rideout._process import ManagedProcess
from rideout.drill.analysis import parse_stream_entry
from rideout.drill.errors import DrillError
from rideout.drill.partition_agent import BID_TIMEOUT
from rideout.drill.partition_check import BidAttempt, HistoryEntry, check, fence_times
from rideout.drill.partition_scenarios import (
    SCENARIOS,
    Scenario,
    at_rest,
    events_seen,
    expectations,
    recovery,
    reported_lost,
    write_latency,
)
from rideout.lab.deployment import CONTROL_PLANE_PORT, DNS_PORT, REGIONS, LabDeployment

if TYPE_CHECKING:
    from rideout.lab.run import LabParts

__all__ = ["CATCH_UP", "PartitionOptions", "histories_of", "render_markdown", "run_partition"]

Say = Callable[[str], None]
CATCH_UP = 30.0
"""Seconds after the clients stop that every Redis may take to hold what the writer holds."""
_POLLER_HOST = "state-redis"
_CLIENT_HOSTS = {"us-east-1": "canary-use1", "us-west-2": "canary-usw2"}
_AGENT = ("-m", "rideout.drill.partition_agent")


@dataclass(frozen=True)
class PartitionOptions:
    """What ``rideout drill partition`` was asked (checked here: DrillError, exit 2)."""

    scenario: str
    clients: int = 8
    max_lost: int = 0
    lab_id: str = "part"
    state_dir: Path = Path("/run/rideout-lab")
    report_dir: Path | None = None
    ready_timeout: float = 90.0
    replication: str = "async"

    def __post_init__(self) -> None:
        if self.replication not in ("async", "sync"):
            raise DrillError(f"--replication {self.replication!r}: 'async' or 'sync'")
        if self.scenario not in SCENARIOS:
            raise DrillError(
                f"--scenario {self.scenario!r}: one of {', '.join(SCENARIOS)} is needed"
            )
        if self.clients < 2:
            raise DrillError(f"--clients {self.clients}: at least 2 (one per region)")
        if self.max_lost < 0:
            raise DrillError(f"--max-lost {self.max_lost}: must be 0 or more")

    @property
    def plan(self) -> Scenario:
        return SCENARIOS[self.scenario]


def histories_of(read: Mapping[str, Any]) -> dict[str, list[HistoryEntry]]:
    """The agent's ``read`` document as the checker's histories (readable servers only)."""
    out: dict[str, list[HistoryEntry]] = {}
    for name, view in read.items():
        if view.get("error") or "entries" not in view:
            continue
        entries = []
        for room, entry_id, fields in view["entries"]:
            parsed = parse_stream_entry(room, entry_id, fields)
            if parsed is None:
                continue
            epoch = fields.get("epoch")
            entries.append(
                HistoryEntry(
                    room,
                    entry_id,
                    parsed.bidder,
                    parsed.amount,
                    int(epoch) if str(epoch).isdigit() else None,
                )
            )
        out[name] = entries
    return out


def _caught_up(read: Mapping[str, Any], writer: str | None) -> bool:
    histories = histories_of(read)
    if writer not in histories or len(histories) != len(read):
        return False
    mine = {(e.room, e.id) for e in histories[writer]}
    return all({(e.room, e.id) for e in h} == mine for h in histories.values())


def _jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        with contextlib.suppress(ValueError):
            rows.append(json.loads(line))
    return rows


class _Run:
    """One drill on a lab that is up: the agents, the fault, the reads."""

    def __init__(self, lab: Any, deployment: LabDeployment, options: PartitionOptions,
                 say: Say, parts: LabParts) -> None:  # fmt: skip
        self.lab = lab
        self.parts = parts
        self.deployment = deployment
        self.options = options
        self.say = say
        self.work = deployment.paths.work / "partition"
        shutil.rmtree(self.work, ignore_errors=True)
        self.work.mkdir(parents=True, mode=0o700)
        self.agents: list[ManagedProcess] = []

    async def _start(self, host: str, name: str, *args: str) -> ManagedProcess:
        from rideout.lab.netns import start_in

        process = await start_in(self.lab, host, name, [sys.executable, *_AGENT, *args],
                                 log_file=self.work / f"{name}.log")  # fmt: skip
        self.agents.append(process)
        return process

    def _writer_node(self, rows: list[dict[str, Any]], read: Mapping[str, Any]) -> str | None:
        named = [
            r.get("writer_redis")
            for r in rows
            if r.get("status") == 200 and r.get("acting") is not False
        ]
        named = [n for n in named if n]
        if named:
            return str(named[-1])
        masters = [k for k, v in read.items() if v.get("role") == "master"]
        return masters[0] if len(masters) == 1 else None

    async def _delay(self, seconds: float) -> None:
        """`seconds` each way on every WAN link, through the running lab's control socket."""
        from rideout.lab.relay import send_control

        path = self.deployment.paths.control_socket
        for name in await send_control(path, {"op": "show"}):  # LabError if it cannot
            await send_control(path, {"op": "set", "link": name, "direction": "both",
                                      "toxics": {"latency": seconds}})  # fmt: skip

    async def read(self, rooms: list[str], n: int) -> dict[str, Any]:
        out = self.work / f"read-{n}.json"
        process = await self._start(_POLLER_HOST, f"read-{n}", "read", "--config",
                                    str(self.deployment.paths.config), "--rooms",
                                    ",".join(rooms), "--out", str(out))  # fmt: skip
        code = await asyncio.wait_for(process.wait(), 60)
        if code != 0 or not out.exists():
            raise DrillError(f"reading the Redis servers failed ({code}): "
                             f"{' | '.join(process.tail()[-5:])}")  # fmt: skip
        data: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))
        return data

    async def _first_acks(self, clients: int, timeout: float = 60.0) -> int:
        """Wait until every client had a bid acknowledged (they start slowly on a loaded
        machine: a warm-up that began before would hold none of their bids); how many did."""
        deadline = time.monotonic() + timeout
        while True:
            rows = _jsonl(self.work / "bids.jsonl")
            ready = len({r["client"] for r in rows if r.get("accepted")})
            if ready >= clients or time.monotonic() > deadline:
                return ready
            await asyncio.sleep(0.5)

    async def _steady(self, timeline: Path, hold: float = 3.0, timeout: float = 90.0) -> bool:
        """Wait until the acting control plane shows the deployment at rest
        (:func:`~rideout.drill.partition_scenarios.at_rest`): on a loaded machine the lab
        may start with a move (a canary late under load), and a fault on top of one would
        be judged for what the start-up did. Whether it got there."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            rows = [
                r
                for r in _jsonl(timeline)
                if r.get("status") == 200 and r.get("acting") is not False
            ]
            if at_rest(rows, REGIONS[0], hold=hold):
                return True
            await asyncio.sleep(0.5)
        return False

    async def run(self) -> dict[str, Any]:
        plan, d, say = self.options.plan, self.deployment, self.say
        config = str(d.paths.config)
        urls = ",".join(f"http://{d.address(cp)}:{CONTROL_PLANE_PORT}" for cp in ("cp-1", "cp-2"))
        timeline = self.work / "timeline.jsonl"
        poller = await self._start(_POLLER_HOST, "poller", "poll", "--urls", urls,
                                   "--out", str(timeline))  # fmt: skip
        per_region = max(1, self.options.clients // 2)
        bidders = []
        for region in REGIONS:
            host = _CLIENT_HOSTS[region]
            bidders.append(await self._start(
                host, f"bidders-{host}", "bid", "--config", config, "--dns", d.address("cp-1"),
                "--dns-port", str(DNS_PORT), "--clients", str(per_region),
                "--prefix", f"c{host.rsplit('-', 1)[1]}", "--out", str(self.work / "bids.jsonl"),
                "--restores", str(self.work / "restores.jsonl"),
            ))  # fmt: skip
        say(f"{per_region} bidding clients on each of {', '.join(_CLIENT_HOSTS.values())}")
        steady = await self._steady(timeline)
        say("at rest: the primary holds the writer and DNS, every alarm OK" if steady else
            "the deployment did not settle in 90 s (the report says so)")  # fmt: skip
        ready = await self._first_acks(per_region * len(REGIONS))
        say(f"{ready} of {per_region * len(REGIONS)} clients had a bid acknowledged; "
            f"warming up {plan.warmup:g} s")  # fmt: skip
        started = time.time()
        await asyncio.sleep(plan.warmup)
        windows: dict[str, tuple[float, float]] = {}
        if plan.latency:
            windows["baseline"] = (started, time.time())
            await self._delay(plan.latency)
            say(f"the WAN link delayed {plan.latency * 1000:g} ms each way; "
                f"bidding {plan.warmup:g} s more")  # fmt: skip
            delayed = time.time()
            await asyncio.sleep(plan.warmup)
            windows["delayed"] = (delayed, time.time())
        fault_at = time.time()
        try:
            if plan.kill:
                await self.parts.kill(plan.kill)
            for a, b in plan.cuts:
                self.lab.partition(a, b, plan.direction)
            say(f"{'' if plan.kill else 'cut '}{plan.describe_fault()} for {plan.fault:g} s")
            await asyncio.sleep(plan.fault)
        finally:
            self.lab.heal_all()
        if plan.kill:  # not on the way out of an error or Ctrl-C: teardown stops all
            await self.parts.restart(plan.kill)
        healed_at = time.time()
        say(f"healed at +{healed_at - started:.1f} s; bidding {plan.after:g} s more")
        await asyncio.sleep(plan.after)
        await asyncio.gather(*(p.stop(BID_TIMEOUT + 4) for p in bidders))
        stopped = time.time()
        attempts = [BidAttempt.from_dict(r) for r in _jsonl(self.work / "bids.jsonl")]
        rooms = sorted({a.room for a in attempts})
        n, read = 0, await self.read(rooms, 0)
        while time.time() - stopped < CATCH_UP:
            if _caught_up(read, self._writer_node(_jsonl(timeline), read)):
                break
            await asyncio.sleep(1.0)
            n += 1
            read = await self.read(rooms, n)
        caught_up_in = time.time() - stopped
        await poller.stop(5)
        rows = _jsonl(timeline)
        report = self._judge(attempts, read, rows, (fault_at, healed_at), started, caught_up_in)
        if plan.latency:
            report["write_latency"] = write_latency(
                attempts, baseline=windows["baseline"], delayed=windows["delayed"],
                rtt=2 * plan.latency)  # fmt: skip
        if plan.kill:
            report["recovery"] = recovery(attempts, _jsonl(self.work / "restores.jsonl"),
                                          fault_at=fault_at, region=REGIONS[1])  # fmt: skip
        if not steady:
            report["problems"].append("the deployment was not steady before the fault")
            report["ok"] = False
        report["steady_before_fault"] = steady
        return report

    def _judge(self, attempts: list[BidAttempt], read: dict[str, Any],
               rows: list[dict[str, Any]], fault: tuple[float, float], started: float,
               caught_up_in: float) -> dict[str, Any]:  # fmt: skip
        plan, options = self.options.plan, self.options
        histories = histories_of(read)
        writer = self._writer_node(rows, read)
        replication = next((str(r["replication"]) for r in rows if r.get("replication")),
                           "async")  # fmt: skip
        # Judged from the warm-up on: what start-up did is not the fault's doing.
        rows = [r for r in rows if r["t"] >= started]
        observed, problems = expectations(plan, rows, read, primary=REGIONS[0],
                                          secondary=REGIONS[1], fault=fault)  # fmt: skip
        verdict = None
        if writer is None or writer not in histories:
            problems.append(f"the final writer ({writer}) could not be read")
        else:
            verdict = check(
                attempts, histories, writer=writer, replication=replication,
                reported_lost=reported_lost(rows), max_lost=options.max_lost,
                promoted=fence_times((r["t"], int(r["epoch"])) for r in rows
                                     if r.get("status") == 200 and r.get("epoch") is not None),
            )  # fmt: skip
            problems = verdict.problems + problems
        during: dict[str, dict[str, int]] = {}
        for a in attempts:
            if fault[0] <= a.sent <= fault[1]:
                side = during.setdefault(a.client.rsplit("-", 1)[0], {})
                side[a.outcome] = side.get(a.outcome, 0) + 1
        acked_by: dict[str, int] = {}
        for a in attempts:
            if a.accepted:
                key = f"{a.region} epoch {a.epoch}"
                acked_by[key] = acked_by.get(key, 0) + 1
        return {
            "drill": "partition",
            "scenario": plan.name,
            "what": plan.what,
            "ok": not problems,
            "problems": problems,
            "options": {
                "clients": options.clients,
                "max_lost": options.max_lost,
                "lab_id": options.lab_id,
            },
            "replication": replication,
            "fault": {
                "cuts": [list(c) for c in plan.cuts],
                "kill": list(plan.kill),
                "latency": plan.latency,
                "direction": plan.direction,
                "described": plan.describe_fault(),
                "at": fault[0] - started,
                "healed": fault[1] - started,
                "seconds": fault[1] - fault[0],
                "warmup": plan.warmup,
                "after": plan.after,
            },
            "fault_wall": list(fault),
            "bids_sent_during_fault": dict(sorted(during.items())),
            "caught_up_in": caught_up_in,
            "acknowledged_by": dict(sorted(acked_by.items())),
            "verdict": verdict.as_dict() if verdict else None,
            "control_plane": observed,
            "servers": {
                k: {x: v.get(x) for x in ("address", "role", "master", "epoch", "error")}
                | {"entries": len(v.get("entries") or [])}
                for k, v in sorted(read.items())
            },
            "events": events_seen(rows),
        }

    async def stop_agents(self) -> None:
        await asyncio.gather(*(p.stop(5) for p in self.agents), return_exceptions=True)


async def run_partition(
    options: PartitionOptions, deployment: LabDeployment, say: Say
) -> dict[str, Any]:
    """Build the lab, run `options`' scenario on it, tear it all down; the report.
    DrillError (or LabError) if the lab or the drill could not run."""
    from rideout.lab.netns import Lab
    from rideout.lab.run import LabParts, run_deployment

    stop, up, parts = asyncio.Event(), asyncio.Event(), LabParts()
    deploy = asyncio.ensure_future(run_deployment(
        deployment, options.state_dir, python=sys.executable, stop=stop, say=say,
        ready_timeout=options.ready_timeout, up=up, parts=parts,
    ))  # fmt: skip
    waiting = asyncio.ensure_future(up.wait())
    drill: _Run | None = None
    try:
        await asyncio.wait({deploy, waiting}, return_when=asyncio.FIRST_COMPLETED)
        if not up.is_set():
            if await deploy:  # it ended without being up: its error is raised here
                raise DrillError("the lab stopped before it was up")
            raise DrillError("interrupted while the lab was starting")
        lab = Lab.load(options.state_dir, options.lab_id)
        drill = _Run(lab, deployment, options, say, parts)
        return await drill.run()
    finally:
        waiting.cancel()
        if drill is not None:
            await drill.stop_agents()
        stop.set()
        with contextlib.suppress(Exception):
            await deploy


def render_markdown(report: Mapping[str, Any]) -> str:
    """The report as a page: the verdict first, then what the control plane did."""
    v = report.get("verdict") or {}
    cp = report.get("control_plane") or {}
    f = report["fault"]
    lines = [
        f"# Partition drill: {report['scenario']}",
        "",
        f"{report['what']}. {'Killed' if f.get('kill') else 'Cut'} at +{f['at']:.1f} s "
        f"for {f['seconds']:.1f} s ({f['described']}), then "
        f"{'started again' if f.get('kill') else 'healed'}; replication "
        f"{report['replication']}.",
        "",
        f"**{'PASSED' if report['ok'] else 'FAILED'}**",
        "",
    ]
    lines += [f"- {p}" for p in report["problems"]] + ([""] if report["problems"] else [])
    lines += [
        "| figure | value |",
        "|---|---|",
        f"| bid attempts | {v.get('attempts', '?')} |",
        f"| acknowledged | {v.get('acknowledged', '?')} "
        f"({', '.join(f'{k}: {n}' for k, n in report['acknowledged_by'].items())}) |",
        f"| refused / outcome unknown (applied after all) | {v.get('refused', '?')} / "
        f"{v.get('indeterminate', '?')} ({v.get('indeterminate_applied', '?')}) |",
        f"| acknowledged bids lost (allowed) | {v.get('lost', '?')} ({v.get('max_lost', '?')}) |",
        f"| writes lost reported by the control plane (of which may be writes never "
        f"acknowledged, at most) | {v.get('reported_lost')} ({v.get('unacked_discards', '?')}) |",
        f"| split-brain windows | {len(v.get('split_brain_windows') or [])} |",
        f"| writer moves (failovers / failbacks) | {cp.get('failovers')} / {cp.get('failbacks')} |",
        f"| writers seen / DNS answers seen | {', '.join(cp.get('writers_seen') or [])} / "
        f"{', '.join(cp.get('dns_seen') or [])} |",
        f"| zones evacuated | {', '.join(cp.get('evacuated_seen') or []) or 'none'} |",
        "| bids sent during the fault, by the clients' host | "
        + "; ".join(
            f"{k}: " + ", ".join(f"{n} {o}" for o, n in sorted(c.items()))
            for k, c in report["bids_sent_during_fault"].items()
        )
        + " |",
        f"| every Redis caught up in | {report['caught_up_in']:.1f} s after the clients stopped |",
        *_wan_rows(report),
        "",
    ]
    for w in v.get("split_brain_windows") or []:
        lines.append(f"- window: epoch {w['old_epoch']} acknowledged {w['acks']} bids over "
                     f"{w['seconds']:.2f} s after epoch {w['new_epoch']} was fenced in "
                     f"({', '.join(w['regions'])})")  # fmt: skip
    missing = v.get("missing") or []
    if missing:
        lines += ["", "Acknowledged bids lost:", ""]
        lines += [f"- {m['room']} {m['amount']} by {m['bidder']} (epoch {m['epoch']}, "
                  f"{m['region']}, offset {m['offset']})" for m in missing]  # fmt: skip
    if report.get("events"):
        lines += ["", "Control plane events:", ""] + [f"- {e}" for e in report["events"]]
    return "\n".join(lines) + "\n"


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.1f} ms"


def _s(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds:.2f} s"


def _wan_rows(report: Mapping[str, Any]) -> list[str]:
    """The ``wan`` scenario's figures: write latency against the RTT, and recovery."""
    rows = []
    w = report.get("write_latency")
    if w:
        b, d, a = w["baseline"], w["delayed"], w["added"]
        rows.append(
            f"| write latency p50 / p99: no delay ({b['count']} bids); {_ms(w['rtt'] / 2)} each way "
            f"({d['count']} bids); added (RTT {_ms(w['rtt'])}) | {_ms(b['p50'])} / {_ms(b['p99'])}; "
            f"{_ms(d['p50'])} / {_ms(d['p99'])}; {_ms(a['p50'])} / {_ms(a['p99'])} |"
        )
    r = report.get("recovery")
    if r:
        for key, label in (("restored", "state restored"), ("write_rto", "write RTO")):
            x = r[key]
            rows.append(f"| {label} after the kill, p50 / p99 / max ({x['count']} of "
                        f"{r['clients']} clients) | {_s(x['p50'])} / {_s(x['p99'])} / "
                        f"{_s(x['max'])} |")  # fmt: skip
    return rows


def write_partition_report(report: Mapping[str, Any], directory: Path, work: Path) -> None:
    """report.json, report.md, and the raw records (the clients' bids, the control
    plane's timeline, the last read of every Redis) beside them."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "report.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    (directory / "report.md").write_text(render_markdown(report), encoding="utf-8")
    for name in ("bids.jsonl", "timeline.jsonl"):
        if (work / name).exists():
            shutil.copyfile(work / name, directory / name)
    reads = sorted(work.glob("read-*.json"), key=lambda p: int(p.stem.split("-")[1]))
    if reads:
        shutil.copyfile(reads[-1], directory / "servers.json")


def main_partition(options: PartitionOptions, out: Any, *, redis_server: str | None = None) -> int:
    """``rideout drill partition`` on a terminal: 0 when every check passed, 1 when one
    failed or the drill could not run (said in one line)."""
    import signal

    from rideout.errors import InvalidArgument
    from rideout.lab.deployment import plan_deployment
    from rideout.lab.errors import LabError
    from rideout.lab.netns import require_root
    from rideout.store.embedded import EmbeddedRedisError, server_info, tls_redis_server

    def say(line: str) -> None:
        out.print(line, highlight=False, markup=False)

    try:
        require_root(os.geteuid)  # looked up now: a test replaces it to see the refusal
        binary = redis_server or tls_redis_server()
        if binary is None:
            raise DrillError("no redis-server that serves TLS found (the lab needs one: "
                             "Debian's, or $REDIS_TLS_SERVER_BINARY)")  # fmt: skip
        deployment = plan_deployment(options.lab_id, options.state_dir,
                                     redis_server=server_info(binary), python=sys.executable,
                                     replication=options.replication)  # fmt: skip
    except (LabError, DrillError, EmbeddedRedisError, InvalidArgument) as exc:
        say(f"error: {exc}")
        return 1

    async def main() -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            loop.add_signal_handler(signum, task.cancel)
        return await run_partition(options, deployment, say)

    try:
        report = asyncio.run(main())
    except asyncio.CancelledError:
        say("interrupted: lab removed")
        return 130
    except (LabError, DrillError, OSError) as exc:
        say(f"error: the drill could not run: {exc}")
        return 1
    directory = options.report_dir or (
        deployment.paths.work
        / "drills"
        / f"partition-{options.scenario}-{time.strftime('%Y%m%d-%H%M%S')}"
    )
    write_partition_report(report, directory, deployment.paths.work / "partition")
    say(render_markdown(report))
    say(f"report: {directory}")
    return 0 if report["ok"] else 1
