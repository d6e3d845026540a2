"""The drill on a terminal: rich progress while it runs, a summary table, the exit code."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from rich.console import Console
from rich.table import Table
from rich.text import Text

from rideout.config import ConfigError, load_config
from rideout.drill.analysis import HERDS
from rideout.drill.report import HEADERS, default_report_dir, summary_rows, write_report
from rideout.drill.runner import DrillError, DrillOptions, run_region_outage

__all__ = ["main_region_outage"]

log = logging.getLogger("rideout.drill")


def main_region_outage(options: DrillOptions, console: Console | None = None) -> int:
    """Run the drill, write the report, print the summary; 0 when every objective holds,
    1 when one failed, 2 when the drill could not run."""
    out = console or Console(highlight=False, soft_wrap=True)
    # Thousands of clients each warn on every disconnect: the report says it better.
    logging.getLogger("rideout.client.ws").setLevel(logging.ERROR)
    try:
        config = load_config(options.config_path)
    except ConfigError as exc:
        out.print(Text(f"error: {exc}", style="bold red"))
        return 2
    directory = options.report_dir or default_report_dir(config.data_dir)
    try:
        with out.status("drill: starting", spinner="dots") as status:

            def progress(message: str) -> None:
                status.update(f"drill: {message}")

            report = asyncio.run(run_region_outage(options, progress))
    except DrillError as exc:
        out.print(Text(f"error: {exc}", style="bold red"))
        return 2
    except Exception as exc:  # a chaos step refused, a deployment that broke: no traceback
        log.debug("the drill could not run", exc_info=True)
        out.print(
            Text(f"error: the drill could not run: {type(exc).__name__}: {exc}", style="bold red")
        )
        return 2
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
    for objective in report["objectives"]:
        style = "green" if objective["ok"] else "bold red"
        verdict = "ok" if objective["ok"] else "FAILED"
        out.print(
            f"[{style}]{verdict}[/] {objective['name']}: {objective['value']} "
            f"(limit {objective['limit']})"
        )
    out.print(f"report: {', '.join(str(f) for f in files)}")
    return 0 if report["ok"] else 1
