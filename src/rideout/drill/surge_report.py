"""The surge drill's ``report.md``: pure, a report dict in, Markdown out."""

from __future__ import annotations

import time
from typing import Any

from rideout.drill._format import fmt_seconds, objective_lines

__all__ = ["render_surge_markdown", "surge_rows"]


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def surge_rows(report: dict[str, Any]) -> list[tuple[str, str]]:
    """The headline numbers, one (what, value) row each: the CLI table and the md."""
    s = report.get("surge") or {}
    if not s:
        return []
    out, inlet, load = s["outcomes"], s["inlet"], s["load"]
    counters = s["counters"]
    final = s.get("final_counters") or {}
    left = out["left"]
    fault = s.get("fault")
    rows = [
        ("visitors (arrived)", f"{out['visitors']} ({out['arrived']})"),
        ("inlet", f"{inlet['kind']}, every {inlet['period']:g} s, capacity {inlet['capacity']}"
         + (f", {inlet['per_period']} per period" if inlet.get("per_period") else "")),
        ("admitted per period: most (bound)",
         f"{s['admitted_max_per_period']} ({inlet['bound_per_period']})"),
        ("auction sessions at once: most (capacity)",
         f"{s['sessions_max']} ({inlet['capacity']})"),
        ("capacity held, room's count: most", str(counters["held_max"])),
        ("served / sessions opened / refused by /ws",
         f"{out['served']} / {out['sessions_opened']} / {out['refused']}"),
        ("visits: done / abandoned / no-show / expired / lost / gave up / unfinished",
         " / ".join(str(left.get(k, 0)) for k in ("done", "abandoned", "no_show", "expired",
                                                 "lost", "gave_up")) + f" / {out['unfinished']}"),
        ("room: queue = served + waiting + expired + abandoned",
         f"{final.get('queue', '-')} = {final.get('tokens', '-')} + {final.get('waiting', '-')} + "
         f"{final.get('expired', '-')} + {final.get('abandoned', '-')}"),
        ("identity at every sample", f"{'holds' if counters['identity_holds'] else 'BROKEN'} "
         f"({counters['samples']} samples)"),
        ("positions lost", str(len(out["lost"]) + len(s["positions_missing"]))),
        ("counter polls served / reads reaching Redis",
         f"{load['counter_polls_served']:.0f} / {load['counter_reads_reaching_redis']:.0f}"
         if load["counter_polls_served"] is not None else "-"),
        ("Redis reads per poll (without the micro-cache: 1)", _ratio(load["reads_per_poll"])),
        ("requests the visitors sent", str(load["requests_total"])),
    ]  # fmt: skip
    if fault:
        rows.append(
            ("fault", f"kill {fault['from']} with {fault['served_before']} served: writer on "
             f"{fault['to']} after {fmt_seconds(fault['writer_moved_after'])}; "
             f"{out['reconnected']} sessions dropped and reopened")
        )  # fmt: skip
    return rows


def render_surge_markdown(report: dict[str, Any]) -> str:
    """The surge report as Markdown."""
    dep = report.get("deployment", {})
    opts = report.get("options", {})
    s = report.get("surge") or {}
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(report.get("started_at", 0)))
    lines = [
        "# Drill: surge",
        "",
        f"- started {when}; {opts.get('visitors')} visitors over {opts.get('burst')} s "
        f"({s.get('processes') or 'this'} process(es)); room event `{dep.get('event_id')}`; "
        f"{dep.get('profile')} profile, {dep.get('replication')} replication, micro-cache "
        f"{dep.get('micro_cache_ttl')} s; fault: {opts.get('fault') or 'none'}",
        f"- result: **{'PASS' if report.get('ok') else 'FAIL'}**",
        "",
        "| | |",
        "|---|---|",
        *(f"| {what} | {value} |" for what, value in surge_rows(report)),
        "",
    ]
    if s:
        lines += [
            f"Admitted per period: {s['admitted_per_period']}",
            "",
            f"Requests sent, by path: {s['load']['requests_sent']}",
            "",
        ]
        for what, items in (("Lost", s["outcomes"]["lost"]), ("Missing", s["positions_missing"]),
                            ("Identity broken", s["counters"]["identity_broken"]),
                            ("Moved back", s["counters"]["moved_back"])):  # fmt: skip
            if items:
                lines += [f"{what}: {items[:10]}", ""]
    lines += objective_lines(report)
    return "\n".join(lines)
