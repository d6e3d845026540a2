"""`rideout drill ...`: measured game days against a local deployment."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Literal, NoReturn, TypeVar

import typer
from rich.console import Console

from rideout.cli._core import ConfigOption, app, console, fail
from rideout.errors import InvalidArgument

__all__ = ["drill_app"]

_Options = TypeVar("_Options")

# The choices, as --help shows them (tests/cli/test_help.py checks each against the
# drill's own list: rideout.drill.options.FAULTS, surge.INLETS, config.PROFILES).
Fault = Literal["kill", "freeze", "throttle"]
Replication = Literal["sync", "async"]
Inlet = Literal["maxsize", "periodic"]
Profile = Literal["fast", "seed"]
SurgeFault = Literal["kill"]

# Options the drills share (each command keeps its own default).
ClientsOption = Annotated[int, typer.Option(help="Resilient clients to run.", min=1)]
ProfileOption = Annotated[
    Profile | None, typer.Option(help="Timing profile of its own deployment.")
]
ClientNiceOption = Annotated[
    int,
    typer.Option(
        help="Run the clients' worker processes this much nicer (0-19), so that on one "
        "machine they yield the cores to the deployment, as clients on other hosts would.",
        min=0,
        max=19,
    ),
]
ReportOption = Annotated[
    Path | None, typer.Option(help="Report folder (default DATA_DIR/drills/<time>).")
]

drill_app = typer.Typer(
    rich_markup_mode="markdown",
    help="Measured game days against a local deployment.",
    no_args_is_help=True,
)
app.add_typer(drill_app, name="drill")


def _run(options: Callable[[], _Options], main: Callable[[_Options, Console], int]) -> NoReturn:
    """Build the drill's options (a refused one: exit 2) and run it; exit with its code."""
    from rideout.drill import DrillError

    try:
        built = options()
    except DrillError as exc:
        fail(str(exc), 2)
    raise typer.Exit(main(built, console))


@drill_app.command("region-outage")
def drill_region_outage(
    clients: ClientsOption = 100,
    fault: Annotated[Fault, typer.Option(help="What happens to the primary.")] = "kill",
    replication: Annotated[
        Replication, typer.Option(help="Replication mode (must match a running one).")
    ] = "sync",
    profile: ProfileOption = None,
    failback: Annotated[
        bool, typer.Option("--failback", help="Restore the primary and measure failback.")
    ] = False,
    compare_jitter: Annotated[
        bool, typer.Option("--compare-jitter", help="Run with full jitter and with none.")
    ] = False,
    max_rto: Annotated[
        float | None,
        typer.Option(help="Objective: p99 seconds from the fault to restored state."),
    ] = None,
    max_write_rto: Annotated[
        float | None,
        typer.Option(
            help="Objective: p99 write RTO, seconds from the fault to each client's first "
            "bid accepted by the new region."
        ),
    ] = None,
    max_failback_rto: Annotated[
        float | None,
        typer.Option(
            "--failback-rto",
            help="Objective for the failback (needs --failback): p99 seconds from the "
            "restore to restored state in the primary. Six good canary periods, the "
            "damping hold and the drain are in it by design.",
        ),
    ] = None,
    max_failback_write_rto: Annotated[
        float | None,
        typer.Option(
            "--failback-write-rto",
            help="Objective for the failback: p99 seconds from the restore to each "
            "client's first bid accepted by the primary.",
        ),
    ] = None,
    max_lost: Annotated[int | None, typer.Option(help="Objective: acknowledged bids lost.")] = None,
    bid_interval: Annotated[
        float | None,
        typer.Option(
            help="Mean seconds between one client's bids (default: 1, or N/250 when larger).",
            min=0.05,
        ),
    ] = None,
    rooms: Annotated[
        int | None,
        typer.Option(
            help="Rooms the clients spread over (default: one per 20 clients). With as "
            "many rooms as clients no bid races another, and an update goes to one client.",
            min=1,
        ),
    ] = None,
    client_nice: ClientNiceOption = 0,
    report: ReportOption = None,
    config_path: ConfigOption = None,
) -> None:
    """Break the primary region under N bidding clients and measure the failover (exit 1
    when an objective fails, 2 when the drill cannot run)."""
    from rideout.drill import DrillOptions, main_region_outage

    _run(
        lambda: DrillOptions(
            clients=clients, fault=fault, replication=replication, profile=profile,
            failback=failback, compare_jitter=compare_jitter, max_rto=max_rto,
            max_write_rto=max_write_rto, max_failback_rto=max_failback_rto,
            max_failback_write_rto=max_failback_write_rto, max_lost=max_lost,
            report_dir=report, config_path=config_path,
            bid_interval=bid_interval, rooms=rooms, client_nice=client_nice,
        ),
        main_region_outage,
    )  # fmt: skip


@drill_app.command("zone-outage")
def drill_zone_outage(
    clients: ClientsOption = 50,
    fault: Annotated[Fault, typer.Option(help="What happens to the zone's app servers.")] = "kill",
    zone_id: Annotated[
        str | None,
        typer.Option(
            "--zone-id",
            help="The zone to break (default: the serving region's first, where DNS sends clients first).",
        ),
    ] = None,
    profile: ProfileOption = None,
    mend: Annotated[bool, typer.Option(help="Mend the zone and measure its recovery.")] = True,
    max_rto: Annotated[
        float | None, typer.Option(help="Objective: p99 seconds to restored state.")
    ] = None,
    max_lost: Annotated[int, typer.Option(help="Objective: acknowledged bids lost.")] = 0,
    report: ReportOption = None,
    config_path: ConfigOption = None,
) -> None:
    """Break one zone under N bidding clients and measure zonal autoshift: time to
    evacuation, per-client time to restored state in the region's other zone, lost and
    duplicated bids, and that the region did not fail over (exit 1 when an objective
    fails, 2 when the drill cannot run)."""
    from rideout.drill.console import main_zone_outage
    from rideout.drill.zone import ZoneDrillOptions

    _run(
        lambda: ZoneDrillOptions(
            clients=clients, fault=fault, zone_id=zone_id, profile=profile, mend=mend,
            max_rto=max_rto, max_lost=max_lost, report_dir=report, config_path=config_path,
        ),
        main_zone_outage,
    )  # fmt: skip


@drill_app.command("overload")
def drill_overload(
    clients: Annotated[int, typer.Option(help="Ordinary bidders to run.", min=1)] = 200,
    abusers: Annotated[
        int, typer.Option(help="Users with valid tokens who misbehave within their caps.", min=1)
    ] = 60,
    duration: Annotated[float, typer.Option(help="Seconds the abuse lasts.", min=1)] = 60.0,
    behaviours: Annotated[
        str,
        typer.Option(
            help="What the abusers do, each in turn: some of replay, connect, bid, slow, "
            "comma-separated."
        ),
    ] = "replay,connect,bid,slow",
    profile: ProfileOption = None,
    max_failovers: Annotated[int, typer.Option(help="Objective: regional failovers.")] = 0,
    max_evacuations: Annotated[int, typer.Option(help="Objective: zones evacuated.")] = 0,
    max_p99: Annotated[
        float, typer.Option(help="Objective: the ordinary bidders' p99 bid round trip (s).")
    ] = 1.0,
    max_lost: Annotated[int, typer.Option(help="Objective: acknowledged bids lost.")] = 0,
    client_nice: ClientNiceOption = 0,
    report: ReportOption = None,
    config_path: ConfigOption = None,
) -> None:
    """Run ordinary bidders beside abusers with valid tokens (replay floods, connection
    floods, bid floods, slow readers) on the serving region, and measure that it sheds
    instead of failing over: the ordinary bid round trip, what each zone refused and why,
    what each abuser was refused, alarms, failovers and evacuations (exit 1 when an
    objective fails, 2 when the drill cannot run)."""
    from rideout.drill.console import main_overload
    from rideout.drill.overload import OverloadOptions

    _run(
        lambda: OverloadOptions(
            clients=clients, abusers=abusers, duration=duration,
            behaviours=tuple(b.strip() for b in behaviours.split(",") if b.strip()),
            profile=profile, max_failovers=max_failovers, max_evacuations=max_evacuations,
            max_p99=max_p99, max_lost=max_lost, report_dir=report, config_path=config_path,
            client_nice=client_nice,
        ),
        main_overload,
    )  # fmt: skip


@drill_app.command("surge")
def drill_surge(
    visitors: Annotated[int, typer.Option(help="Visitors arriving in the burst.", min=1)] = 1000,
    inlet: Annotated[Inlet, typer.Option(help="How the room lets visitors in.")] = "maxsize",
    capacity: Annotated[
        int, typer.Option(help="Auction sessions the site takes at once (MaxSize's size).", min=1)
    ] = 100,
    period: Annotated[float, typer.Option(help="Seconds between the inlet's steps.")] = 1.0,
    increment_by: Annotated[
        int | None,
        typer.Option(help="Periodic: admitted per period (default: what keeps --capacity)."),
    ] = None,
    fault: Annotated[
        SurgeFault | None, typer.Option(help="Kill the primary region in the middle.")
    ] = None,
    profile: Annotated[Profile, typer.Option(help="Timing profile of its deployment.")] = "fast",
    hold: Annotated[float, typer.Option(help="Seconds each visitor holds its session.")] = 1.5,
    poll_interval: Annotated[float, typer.Option(help="Seconds between a visitor's polls.")] = 2.0,
    burst: Annotated[float, typer.Option(help="Seconds the arrivals spread over.")] = 2.0,
    abandon_share: Annotated[
        float, typer.Option(help="Share of visitors that leave while waiting.")
    ] = 0.05,
    noshow_share: Annotated[
        float, typer.Option(help="Share of visitors served that never take their token.")
    ] = 0.05,
    expiry: Annotated[float, typer.Option(help="The room's queue-position expiry (s).")] = 30.0,
    abandon_after: Annotated[
        float, typer.Option(help="The room's abandonment hold (s without a poll).")
    ] = 20.0,
    visitors_per_process: Annotated[
        int, typer.Option(help="Visitors per worker process.", min=1)
    ] = 250,
    max_lost: Annotated[int, typer.Option(help="Objective: positions lost.")] = 0,
    max_refused: Annotated[int, typer.Option(help="Objective: admitted tokens /ws refused.")] = 0,
    max_gave_up: Annotated[
        int, typer.Option(help="Objective: visitors that gave up or never finished.")
    ] = 0,
    report: ReportOption = None,
    config_path: ConfigOption = None,
) -> None:
    """Send N visitors through the waiting room guarding the auction, on a deployment of
    its own: sessions never above --capacity, every admitted token accepted by /ws, the
    room's counters consistent at every sample, no position lost (with --fault kill,
    across a region failover). Writes report.json/md and timeline.png. Exit 0 when every
    objective holds, 1 when one failed, 2 when the drill cannot run."""
    from rideout.drill import SurgeOptions, main_surge

    _run(
        lambda: SurgeOptions(
            visitors=visitors, inlet=inlet, capacity=capacity, period=period,
            increment_by=increment_by, fault=fault, profile=profile, hold=hold,
            poll_interval=poll_interval, burst=burst, abandon_share=abandon_share,
            noshow_share=noshow_share, expiry=expiry, abandon_after=abandon_after,
            visitors_per_process=visitors_per_process, max_lost=max_lost,
            max_refused=max_refused, max_gave_up=max_gave_up, report_dir=report,
            config_path=config_path,
        ),
        main_surge,
    )  # fmt: skip


# The choices, as --help shows them (tests/drill/test_partition_cli.py checks them against
# rideout.drill.partition_scenarios.SCENARIOS).
PartitionScenario = Literal[
    "replication-cut", "split-brain", "zone-store-cut", "control-plane-isolated", "one-way", "wan"
]


@drill_app.command("partition")
def drill_partition(
    scenario: Annotated[
        PartitionScenario,
        typer.Option(help="What the network does (docs/drill.md, Partition)."),
    ],
    clients: Annotated[
        int, typer.Option(help="Bidding clients, half in each region's lab host.", min=2)
    ] = 8,
    max_lost: Annotated[int, typer.Option(help="Objective: acknowledged bids lost.", min=0)] = 0,
    replication: Annotated[
        Replication, typer.Option(help="The lab deployment's replication mode.")
    ] = "async",
    lab_id: Annotated[
        str, typer.Option("--id", help="The lab's id (its namespaces are rdo-ID-HOST).")
    ] = "part",
    directory: Annotated[
        Path,
        typer.Option(
            "--dir", help="Where the lab is recorded, its files in DIR/ID/.", file_okay=False
        ),
    ] = Path("/run/rideout-lab"),
    redis_server: Annotated[
        str | None,
        typer.Option("--redis-server", metavar="BINARY", help="A redis-server built with TLS."),
    ] = None,
    report: Annotated[
        Path | None, typer.Option(help="Report folder (default DIR/ID/drills/, one per run).")
    ] = None,
) -> None:
    """Run one partition scenario on a network lab of its own (root): bidding clients in
    both regions' hosts, the cut and the heal (`wan`: 35 ms each way, then the writer
    region killed and started again), then a Jepsen-style check of every acknowledged
    bid against every Redis's history, of split-brain windows and of the control
    plane's moves. Exit 0 when every check passed, 1 when one failed or the lab
    could not run, 2 for bad input."""
    from rideout.drill.partition import PartitionOptions, main_partition
    from rideout.lab.topology import netns_prefix

    try:
        netns_prefix(lab_id)
    except InvalidArgument as exc:
        fail(f"--id: {exc}", 2)
    _run(
        lambda: PartitionOptions(
            scenario=scenario, clients=clients, max_lost=max_lost, lab_id=lab_id,
            state_dir=directory, report_dir=report, replication=replication,
        ),
        lambda options, out: main_partition(options, out, redis_server=redis_server),
    )  # fmt: skip
