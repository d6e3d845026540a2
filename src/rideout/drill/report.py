"""Render and write a drill's report: ``report.json``, ``report.md`` and ``timeline.png``.

:func:`render_markdown` is pure (a report dict in, text out); :func:`write_report`
writes the files; the PNG needs the ``drill`` extra (matplotlib) and is skipped, with
a note in the report, without it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rideout.drill._format import fmt_seconds, objective_lines
from rideout.drill.analysis import HERDS, hold_spans
from rideout.failover import repeats_note

__all__ = [
    "default_report_dir",
    "fmt_seconds",
    "machine_line",
    "move_lines",
    "objective_lines",
    "render_markdown",
    "summary_rows",
    "write_report",
    "write_report_files",
]


def default_report_dir(data_dir: Path, now: float | None = None) -> Path:
    """``DATA_DIR/drills/<timestamp>/``."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(time.time() if now is None else now))
    return data_dir / "drills" / stamp


def _drained(failback: dict[str, Any]) -> str:
    if failback.get("drained_by_drill"):
        return " (**the drill had to drain the old region**: the deployment did not move them)"
    return " (the control plane drained the old region gradually: close 1012, reconnect at once)"


_MOVES = {
    "fail-over", "fail-back", "promote-in-region", "demote", "follow", "dataset-lost", "behind",
    "error", "wait",
}  # fmt: skip


def move_lines(p: dict[str, Any]) -> list[str]:
    """What the control plane did during pass `p`, in time order: its writer moves (and
    their reasons), its alarms' changes and the holds that kept the writer where the
    health checks alone would have moved it, each at seconds since the fault."""
    history = p.get("control_plane") or {}
    found: list[tuple[float, str]] = []
    for e in history.get("events", []):
        if e.get("kind") in _MOVES:
            found.append((e["at"], f"{e['kind']}: {e.get('message', '')}{repeats_note(e)}"))
    for region, changes in (history.get("alarms") or {}).items():
        for c in changes:
            found.append(
                (c["timestamp"], f"alarm {region} {c['old']} -> {c['new']}: {c.get('reason', '')}")
            )
    spans = hold_spans(p.get("timeline") or [])
    if not found and not spans:
        return []
    zero = (p.get("failover") or {}).get("at")
    origin: float = (
        zero if zero is not None else min([t for t, _ in found] + [s.start for s in spans])
    )
    for span in spans:
        until = "the end" if span.end is None else f"{span.end - origin:+.2f} s"
        found.append(
            (span.start, f"holding the writer in {span.writer} ({span.rule}) until {until}")
        )
    return [f"{t - origin:+8.2f} s  {text}" for t, text in sorted(found)]


def peak(herd: dict[str, Any]) -> int:
    """The most reconnects within any 100 ms (reports before that was measured: the
    fullest fixed 100 ms bucket)."""
    return int(herd.get("peak_in_window", herd["peak_per_bucket"]))


# A report from before write RTO was measured.
_NO_WRITE: dict[str, Any] = {
    "clients": 0, "written": 0, "written_share": 0.0,
    "time_to_write": {"p50": None, "p90": None, "p99": None},
}  # fmt: skip


def summary_rows(report: dict[str, Any]) -> list[tuple[str, ...]]:
    """One row per pass and phase: the headline numbers (shared by the CLI table and md)."""
    rows: list[tuple[str, ...]] = []
    for p in report.get("passes", []):
        for phase in ("failover", "failback"):
            d = p.get(phase)
            if not d:
                continue
            rto = d["time_to_restored"]
            write = d.get("write") or _NO_WRITE
            wrto = write["time_to_write"]
            herd = d["reconnects"]
            bids = p["bids"]
            rows.append(
                (
                    p["name"],
                    f"{phase} {d['from']} → {d['to']}",
                    fmt_seconds(d["time_to_detect"]),
                    fmt_seconds(d["time_to_dns"]),
                    fmt_seconds(rto["p50"]),
                    fmt_seconds(rto["p90"]),
                    fmt_seconds(rto["p99"]),
                    fmt_seconds(rto["max"]),
                    f"{d['recovered']}/{d['clients']} ({100 * d['recovered_share']:.1f}%)",
                    fmt_seconds(wrto["p50"]),
                    fmt_seconds(wrto["p90"]),
                    fmt_seconds(wrto["p99"]),
                    f"{write['written']}/{write['clients']} ({100 * write['written_share']:.1f}%)",
                    _count(write.get("outbid_before_write"), "p99"),
                    _share((d.get("machine") or {}).get("busy")),
                    str(peak(herd)),
                    str(bids["acked"]) if phase == "failover" else "″",
                    str(bids["lost"]) if phase == "failover" else "″",
                    str(bids["duplicates"]) if phase == "failover" else "″",
                )
            )
    return rows


def _count(summary: dict[str, Any] | None, key: str) -> str:
    """A count's percentile from :func:`~rideout.drill.analysis.summarize`, or "-"."""
    value = (summary or {}).get(key)
    return "-" if value is None else f"{round(value, 1):g}"


def _share(value: float | None) -> str:
    """A fraction as a whole percentage, or "-"."""
    return "-" if value is None else f"{value:.0%}"


def _outbid(phase: dict[str, Any]) -> str:
    """How often the clients were outbid before their first accepted bid there (the room
    races in write RTO); nothing for a report without the figure."""
    counts = phase.get("write", {}).get("outbid_before_write")
    if not counts or not counts.get("count"):
        return ""
    p50, p99, most = (_count(counts, k) for k in ("p50", "p99", "max"))
    return (
        "; times a client was outbid there before its first accepted bid: "
        f"median {p50}, p99 {p99}, most {most}"
    )


def machine_line(p: dict[str, Any]) -> str | None:
    """How busy the machine's cores were in the pass (:mod:`rideout.drill.machine`), as
    one line; None for a report without the figures (older, or not Linux)."""
    spans = [
        (label, view)
        for label, view in (
            ("in the warm-up before the fault", p.get("machine")),
            ("in the failover", (p.get("failover") or {}).get("machine")),
            ("in the failback", (p.get("failback") or {}).get("machine")),
        )
        if view
    ]
    speed = (p.get("core_speed") or {}).get("token_issues_per_second")
    fast = (
        f"; one core issues {speed:,} access tokens per second of CPU (bench.tokens' "
        "`issue`: compare machines by it, not by how busy they were)"
        if speed
        else ""
    )
    if not spans:
        return f"- the machine{fast}" if fast else None
    cores = spans[0][1]["cores"]
    said = ", ".join(f"{_share(view['busy'])} busy {label}" for label, view in spans)
    return (
        f"- the machine's {cores} cores (the deployment and the clients share them): {said}{fast}"
    )


HEADERS = (
    "pass",
    "phase",
    "detect (alarm)",
    "DNS moved",
    "restored p50",
    "p90",
    "p99",
    "max",
    "recovered",
    "write RTO p50",
    "p90",
    "p99",
    "wrote",
    "outbid before writing p99",
    "cores busy",
    "peak reconnects within 100 ms",
    "acked bids",
    "lost",
    "duplicates",
)


def render_markdown(report: dict[str, Any]) -> str:
    """The report as Markdown."""
    dep = report.get("deployment", {})
    opts = report.get("options", {})
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(report.get("started_at", 0)))
    lines = [
        "# Drill: region outage",
        "",
        f"- started {when}; {opts.get('clients')} clients; fault `{opts.get('fault')}` of "
        f"{dep.get('primary')}; {dep.get('replication')} replication "
        f"(replica_down = {dep.get('replica_down')}); {dep.get('profile')} profile; "
        + ("a deployment of its own" if dep.get("own_cluster") else "the running deployment"),
        f"- result: **{'PASS' if report.get('ok') else 'FAIL'}**",
        "",
        "",
        "Restored: fault → the client's state restored from the new region. Write RTO: "
        "fault → the client's first bid the new region took (a client bids as soon as "
        "it is restored and again each time it is outbid: this includes the races it "
        "lost in its room, not its own pacing).",
        "",
        "| " + " | ".join(HEADERS) + " |",
        "|" + "---|" * len(HEADERS),
    ]
    lines += ["| " + " | ".join(row) + " |" for row in summary_rows(report)]
    lines.append("")
    for p in report.get("passes", []):
        bids = p["bids"]
        niced = f" at nice {p['client_nice']}" if p.get("client_nice") else ""
        lines += [
            f"## {p['name']} ({p['backoff']})",
            "",
            f"- {p['clients']} clients in {p['processes'] or 'this'} process(es){niced}, "
            f"{p['rooms']} rooms, a bid every ~{p['bid_interval']:g} s per client; "
            f"{p.get('ready_clients')} ready after {fmt_seconds(p.get('ready_after'))}",
            f"- fault: {p.get('fault_message', '-')}",
            f"- bids: {bids['acked']} acknowledged, {bids['found']} found in the final "
            f"writer's ({p['final_writer']}) streams, **{bids['lost']} lost**, "
            f"**{bids['duplicates']} duplicates**, {bids['unverifiable']} unverifiable "
            f"(history trimmed); rejected: {bids.get('rejected') or {}}",
            f"- clients that gave up: {p.get('gave_up', 0)}",
        ]
        for error, count in p.get("failed_clients", ()):
            lines.append(f"- **{count} clients' connection loop failed**: {error}")
        for phase in ("failover", "failback"):
            d = p.get(phase)
            if not d:
                continue
            herd = d["reconnects"]
            lines.append(
                f"- {phase}: alarm after {fmt_seconds(d['time_to_detect'])}, writer moved after "
                f"{fmt_seconds(d['time_to_writer'])}, DNS after {fmt_seconds(d['time_to_dns'])}; "
                f"{herd['total']} reconnect attempts went to {d['to']}, peak "
                f"{peak(herd)} started within 100 ms"
                + (
                    f"; {d['to']} accepted {d['accepted']['total']} connections, peak "
                    f"{peak(d['accepted'])} within 100 ms"
                    if "accepted" in d
                    else ""
                )
                + (_drained(d) if phase == "failback" else "")
                + _outbid(d)
            )
        busy = machine_line(p)
        if busy:
            lines.append(busy)
        moves = p.get("writer_moves")
        if moves and moves.get("failovers") is not None:
            lines.append(
                f"- the writer moved {moves['failovers']} time(s) to the secondary and "
                f"{moves['failbacks']} time(s) back during the pass"
            )
        done = move_lines(p)
        if done:
            lines += [
                "",
                "What the control plane did (seconds from the fault):",
                "",
                "```",
                *done,
                "```",
            ]
        lines.append("")
    cmp = report.get("jitter_comparison")
    if cmp:
        ratio = cmp["ratio"]

        def times(r: float | None) -> str:
            return "-" if r is None else f"{r:.1f}×"

        def row(prefix: str, label: str) -> str:
            return (
                f"| {label} | {cmp.get(f'{prefix}peak_full_jitter_per_100ms', '-')} "
                f"| {cmp.get(f'{prefix}peak_no_jitter_per_100ms', '-')} "
                f"| {times(cmp.get(f'{prefix}ratio'))} |"
            )

        lines += [
            "## Full jitter vs no jitter",
            "",
            "Reconnects toward the secondary after the fault, the most within any 100 ms: as "
            "the backoff policy scheduled them, as the clients started them, and as the secondary "
            "accepted them. Where clients and servers share a machine's cores, the last two "
            "are smeared by CPU contention.",
            "",
            "| reconnects | full jitter | no jitter | ratio |",
            "|---|---|---|---|",
            *(row(prefix, label) for _, prefix, label in HERDS),
            "",
            f"No jitter's peak of attempts started is **{ratio:.1f}×** full jitter's."
            if ratio is not None
            else "No reconnects were seen with full jitter.",
            "",
        ]
    lines += objective_lines(report)
    return "\n".join(lines)


def write_report(report: dict[str, Any], directory: Path, *, png: bool = True) -> list[Path]:
    """Write ``report.json``, ``report.md`` (and ``timeline.png``) into ``directory``:
    a region-outage report, or a surge's (``report["drill"] == "surge"``)."""
    directory.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    surge = report.get("drill") == "surge"
    if png:
        try:
            from rideout.drill.timeline import plot_surge, plot_timeline
        except ImportError:  # pragma: no cover - the drill extra is not installed
            report["timeline_note"] = "no timeline.png: install rideout[drill] (matplotlib)"
        else:
            path = directory / "timeline.png"
            (plot_surge if surge else plot_timeline)(report, path)
            report["timeline_png"] = path.name
            written.append(path)
    json_path = directory / "report.json"
    json_path.write_text(json.dumps(report, indent=2, default=str) + "\n", encoding="utf-8")
    md_path = directory / "report.md"
    if surge:
        from rideout.drill.surge_report import render_surge_markdown

        md_path.write_text(render_surge_markdown(report), encoding="utf-8")
    else:
        md_path.write_text(render_markdown(report), encoding="utf-8")
    return [json_path, md_path, *written]


def write_report_files(
    report: dict[str, Any],
    directory: Path,
    markdown: Callable[[dict[str, Any]], str],
    plot: Callable[[dict[str, Any], Path], None],
) -> list[Path]:
    """``report.json``, ``report.md`` (``markdown``) and, with matplotlib, ``timeline.png``
    (``plot``), written into ``directory``: the zone-outage and overload drills' files."""
    directory.mkdir(parents=True, exist_ok=True)
    written = [directory / "report.json", directory / "report.md"]
    try:
        plot(report, directory / "timeline.png")
        written.append(directory / "timeline.png")
        report["timeline_png"] = "timeline.png"
    except ImportError:
        report["timeline_note"] = "no timeline.png: install rideout[drill] (matplotlib)"
    written[0].write_text(json.dumps(report, indent=2, default=str) + "\n", encoding="utf-8")
    written[1].write_text(markdown(report), encoding="utf-8")
    return written
