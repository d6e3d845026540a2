"""What every drill report shares: how seconds are written, the objectives table."""

from __future__ import annotations

from typing import Any

__all__ = ["fmt_seconds", "objective_lines"]


def fmt_seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} s"


def objective_lines(report: dict[str, Any]) -> list[str]:
    """The report's objectives (a Markdown table) and its timeline image, or the note
    saying why there is none."""
    lines: list[str] = []
    if report.get("objectives"):
        lines += ["## Objectives", "", "| objective | limit | measured | |", "|---|---|---|---|"]
        for o in report["objectives"]:
            value = o["value"]
            shown = (
                "-"
                if value is None
                else (f"{value:.2f}" if isinstance(value, float) else str(value))
            )
            lines.append(
                f"| {o['name']} | {o['limit']} | {shown} | {'ok' if o['ok'] else '**FAILED**'} |"
            )
        lines.append("")
    if report.get("timeline_png"):
        lines += [f"![timeline]({report['timeline_png']})", ""]
    elif report.get("timeline_note"):
        lines += [f"_{report['timeline_note']}_", ""]
    return lines
