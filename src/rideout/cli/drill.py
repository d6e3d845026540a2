"""`rideout drill ...`: measured game days against a local deployment."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from rideout.cli._core import ConfigOption, app, console, fail

__all__ = ["drill_app"]

drill_app = typer.Typer(help="Measured game days against a local deployment.", no_args_is_help=True)
app.add_typer(drill_app, name="drill")


@drill_app.command("region-outage")
def drill_region_outage(
    clients: Annotated[int, typer.Option(help="Resilient clients to run.", min=1)] = 100,
    fault: Annotated[str, typer.Option(help="kill, freeze or throttle the primary.")] = "kill",
    replication: Annotated[
        str, typer.Option(help="sync or async (must match a running one).")
    ] = "sync",
    profile: Annotated[
        str | None, typer.Option(help="Timing profile of its own deployment.")
    ] = None,
    failback: Annotated[
        bool, typer.Option(help="Restore the primary and measure failback.")
    ] = False,
    compare_jitter: Annotated[
        bool, typer.Option(help="Run with full jitter and with none.")
    ] = False,
    max_rto: Annotated[
        float | None,
        typer.Option(help="Objective: p99 seconds from the fault to restored state."),
    ] = None,
    max_write_rto: Annotated[
        float | None,
        typer.Option(
            help="Objective: p99 write RTO, seconds from the fault to each client's first "
            "bid accepted by the new region (failover and failback)."
        ),
    ] = None,
    max_lost: Annotated[int | None, typer.Option(help="Objective: acknowledged bids lost.")] = None,
    report: Annotated[
        Path | None, typer.Option(help="Report folder (default DATA_DIR/drills/<time>).")
    ] = None,
    config_path: ConfigOption = None,
) -> None:
    """Break the primary region under N bidding clients and measure the failover (exit 1
    when an objective fails, 2 when the drill cannot run)."""
    from rideout.drill import DrillError, DrillOptions, main_region_outage

    try:
        options = DrillOptions(
            clients=clients, fault=fault, replication=replication, profile=profile,
            failback=failback, compare_jitter=compare_jitter, max_rto=max_rto,
            max_write_rto=max_write_rto, max_lost=max_lost, report_dir=report, config_path=config_path,
        )  # fmt: skip
    except DrillError as exc:
        fail(str(exc), 2)
    raise typer.Exit(main_region_outage(options, console))
