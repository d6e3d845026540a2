"""The drill on a terminal: rich progress while it runs, a summary table, the exit code."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from rideout.config import ConfigError, load_config
from rideout.drill.analysis import HERDS
from rideout.drill.errors import DrillError
from rideout.drill.options import DrillOptions
from rideout.drill.overload import (
    OverloadOptions,
    render_overload_markdown,
    run_overload,
    write_overload_report,
)
from rideout.drill.report import HEADERS, default_report_dir, move_lines, summary_rows, write_report
from rideout.drill.runner import run_region_outage
from rideout.drill.surge import SurgeOptions, run_surge
from rideout.drill.surge_report import surge_rows
from rideout.drill.zone import (
    ZoneDrillOptions,
    render_zone_markdown,
    run_zone_outage,
    write_zone_report,
)

__all__ = ["main_overload", "main_region_outage", "main_surge", "main_zone_outage"]

log = logging.getLogger("rideout.drill")


def _run_drill(
    out: Console,
    config_path: Path | None,
    report_dir: Path | None,
    run: Callable[[Callable[[str], None]], Coroutine[Any, Any, dict[str, Any]]],
) -> tuple[dict[str, Any], Path] | None:
    """Run a drill under a spinner: its report and folder, or None (the error printed)."""
    # Thousands of clients each warn on every disconnect: the report says it better.
    logging.getLogger("rideout.client.ws").setLevel(logging.ERROR)
    try:
        config = load_config(config_path)
    except ConfigError as exc:
        out.print(Text(f"error: {exc}", style="bold red"))
        return None
    directory = report_dir or default_report_dir(config.data_dir)
    try:
        with out.status("drill: starting", spinner="dots") as status:

            def progress(message: str) -> None:
                status.update(f"drill: {message}")

            report = asyncio.run(run(progress))
    except DrillError as exc:
        out.print(Text(f"error: {exc}", style="bold red"))
        return None
    except Exception as exc:  # a chaos step refused, a deployment that broke: no traceback
        log.debug("the drill could not run", exc_info=True)
        out.print(
            Text(f"error: the drill could not run: {type(exc).__name__}: {exc}", style="bold red")
        )
        return None
    return report, Path(directory)


def main_region_outage(options: DrillOptions, console: Console | None = None) -> int:
    """Run the drill, write the report, print the summary; 0 when every objective holds,
    1 when one failed, 2 when the drill could not run."""
    out = console or Console(highlight=False, soft_wrap=True)
    done = _run_drill(out, options.config_path, options.report_dir,
                      lambda progress: run_region_outage(options, progress))  # fmt: skip
    if done is None:
        return 2
    report, directory = done
    files = write_report(report, Path(directory))
    # One column per pass and phase, one row per measurement: fits a terminal.
    rows = summary_rows(report)
    table = Table(title="region outage drill", title_justify="left")
    table.add_column("")
    for row in rows:
        table.add_column(f"{row[0]}\n{row[1]}", justify="right")
    for i, header in enumerate(HEADERS[2:], start=2):
        table.add_row(header, *(row[i] for row in rows))
    out.print(table)
    cmp = report.get("jitter_comparison")
    if cmp and cmp.get("ratio") is not None:
        for _, prefix, label in HERDS:
            ratio = cmp.get(f"{prefix}ratio")
            if ratio is None:
                continue
            out.print(
                f"reconnects {label}, most within 100 ms: full jitter "
                f"{cmp[f'{prefix}peak_full_jitter_per_100ms']}, no jitter "
                f"{cmp[f'{prefix}peak_no_jitter_per_100ms']} ([bold]{ratio:.1f}×[/])"
            )
    _print_moves(out, report)
    _print_objectives(out, report, files)
    return 0 if report["ok"] else 1


def _print_moves(out: Console, report: dict[str, Any]) -> None:
    """What the control plane did during each pass, and why: its writer moves and alarm
    changes in time order, seconds from the pass's fault (so that a flap explains itself)."""
    for p in report["passes"]:
        lines = move_lines(p)
        if lines:
            out.print(f"{p['name']}: what the control plane did")
            for line in lines:
                out.print(f"  {line}", markup=False)


def _print_objectives(out: Console, report: dict[str, Any], files: list[Path]) -> None:
    for objective in report["objectives"]:
        style = "green" if objective["ok"] else "bold red"
        verdict = "ok" if objective["ok"] else "FAILED"
        out.print(
            f"[{style}]{verdict}[/] {objective['name']}: {objective['value']} "
            f"(limit {objective['limit']})"
        )
    out.print(f"report: {', '.join(str(f) for f in files)}")


def _main_drill(
    out: Console,
    options: ZoneDrillOptions | OverloadOptions,
    run: Callable[[Callable[[str], None]], Coroutine[Any, Any, dict[str, Any]]],
    write: Callable[[dict[str, Any], Path], list[Path]],
    render: Callable[[dict[str, Any]], str],
) -> int:
    """Run a drill whose summary is its Markdown report, write the report, print it; 0
    when every objective holds, 1 when one failed, 2 when the drill could not run."""
    done = _run_drill(out, options.config_path, options.report_dir, run)
    if done is None:
        return 2
    report, directory = done
    files = write(report, directory)
    out.print(render(report), markup=False)
    _print_objectives(out, report, files)
    return 0 if report["ok"] else 1


def main_zone_outage(options: ZoneDrillOptions, console: Console | None = None) -> int:
    """Run the zone-outage drill, write the report, print the summary; 0 when every
    objective holds, 1 when one failed, 2 when the drill could not run."""
    out = console or Console(highlight=False, soft_wrap=True)
    return _main_drill(out, options, lambda progress: run_zone_outage(options, progress),
                       write_zone_report, render_zone_markdown)  # fmt: skip


def main_overload(options: OverloadOptions, console: Console | None = None) -> int:
    """Run the overload drill, write the report, print the summary; 0 when every
    objective holds, 1 when one failed, 2 when the drill could not run."""
    out = console or Console(highlight=False, soft_wrap=True)
    return _main_drill(out, options, lambda progress: run_overload(options, progress),
                       write_overload_report, render_overload_markdown)  # fmt: skip


def main_surge(options: SurgeOptions, console: Console | None = None) -> int:
    """Run the surge drill, write the report, print the summary; 0 when every objective
    holds, 1 when one failed, 2 when the drill could not run."""
    out = console or Console(highlight=False, soft_wrap=True)
    done = _run_drill(out, options.config_path, options.report_dir,
                      lambda progress: run_surge(options, progress))  # fmt: skip
    if done is None:
        return 2
    report, directory = done
    files = write_report(report, directory)
    table = Table(title="surge drill", title_justify="left")
    table.add_column("")
    table.add_column("", justify="right")
    for what, value in surge_rows(report):
        table.add_row(what, value)
    out.print(table)
    _print_objectives(out, report, files)
    return 0 if report["ok"] else 1
