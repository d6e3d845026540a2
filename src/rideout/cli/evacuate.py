"""`rideout evacuate ...` and `rideout recover`: zone evacuation through the control plane."""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from collections.abc import Callable
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from rideout.cli._core import ConfigOption, app, console, err, fail, load
from rideout.config import Config
from rideout.errors import InvalidArgument
from rideout.evacuate.engine import EXIT_PARTIAL, EXIT_REFUSED, Engine, Options, Outcome, Progress
from rideout.evacuate.errors import EvacuationError
from rideout.evacuate.model import Ledger, Plan, Provider, Step

__all__ = ["evacuate_app"]

_T = TypeVar("_T")

_EXITS = (
    "Exit status: 0 done (skips included), 1 partial (some resources failed: run the same "
    "command again to finish), 2 refused (locked, unknown zone, every change unsafe) or bad usage."
)

evacuate_app = typer.Typer(
    rich_markup_mode="markdown",
    help="Evacuate an availability zone: take it out of every resource's network "
    "configuration, recorded in a ledger so that `rideout recover` restores exactly what "
    "was removed. " + _EXITS,
    invoke_without_command=True,
)
app.add_typer(evacuate_app, name="evacuate")

ZoneIdOption = Annotated[
    str | None,
    typer.Option("--zone-id", help="The AZ id (use1-az2, not a zone name such as us-east-1b)."),
]
ProviderOption = Annotated[
    Literal["local", "aws"],
    typer.Option("--provider", help="local: this deployment's zones; aws: through boto3."),
]
TypeOption = Annotated[
    str | None,
    typer.Option(
        "--type", help="Resource types, comma-separated (asg,ecs,lambda,eks,local; default all)."
    ),
]
DryRunOption = Annotated[
    bool, typer.Option("--dry-run", help="Print the plan as a table; change nothing.")
]
BatchOption = Annotated[
    int | None,
    typer.Option("--batch-size", help="Resources per batch (default: config evacuate.batch_size)."),
]
PauseOption = Annotated[
    float | None,
    typer.Option("--pause", help="Seconds between batches (default: config evacuate.pause)."),
]
OperatorOption = Annotated[
    str | None, typer.Option("--operator", help="Who to record in the ledger (default: $USER).")
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print the outcome as JSON.")]


# --------------------------------------------------------------------------- wiring


def _open(
    config: Config,
    provider: str,
    operator: str,
    *,
    reason: str = "manual",
    expires_in: float | None = None,
    create: bool = True,
) -> tuple[Provider, Ledger]:
    """The provider and its ledger (local: the control plane and DATA_DIR's SQLite file;
    ``create=False``: the ledger is only read, never created)."""
    if provider == "local":
        from rideout.evacuate.ledger import SqliteLedger
        from rideout.evacuate.local import local_provider

        return (
            local_provider(config, operator=operator, reason=reason, expires_in=expires_in),
            SqliteLedger.in_data_dir(config.data_dir, create=create),
        )
    if provider == "aws":
        # Imported here: boto3 is the `aws` extra, needed only by this provider.
        try:
            from rideout.evacuate.aws import open_aws
        except ImportError as exc:
            fail(f"the aws provider is not available ({exc}): pip install 'rideout[aws]'", 2)
        return open_aws(config, operator=operator, create=create)
    fail(f"--provider must be local or aws, not {provider!r}", 2)


def _options(
    config: Config,
    *,
    types: str | None,
    dry_run: bool,
    batch_size: int | None,
    pause: float | None,
    min_healthy_zones: int | None,
    operator: str | None,
    to_recorded: bool = False,
) -> Options:
    e = config.evacuate
    kinds = tuple(t.strip() for t in types.split(",") if t.strip()) if types else None
    try:
        options = Options(
            kinds=kinds or None,
            dry_run=dry_run,
            batch_size=batch_size if batch_size is not None else e.batch_size,
            pause=pause if pause is not None else e.pause,
            min_healthy_zones=(
                min_healthy_zones if min_healthy_zones is not None else e.min_healthy_zones
            ),
            lock_ttl=e.lock_ttl,
            to_recorded=to_recorded,
        )
        return dataclasses.replace(options, operator=operator) if operator else options
    except InvalidArgument as exc:
        fail(str(exc), 2)


# --------------------------------------------------------------------------- output


def _subnets(values: tuple[str, ...]) -> str:
    return ", ".join(values) or "-"


def _print_table(table: Table) -> None:
    """A table as wide as its content when stdout is not a terminal (a pipe, a file, a
    CI log: nothing is cut, an ARN stays whole), else as the terminal allows."""
    if console.is_terminal:
        console.print(table)
        return
    wide = Console(file=console.file, width=100_000, highlight=False)
    width = wide.measure(table).maximum
    Console(file=console.file, width=width, highlight=False).print(table)


def _plan_table(plan: Plan, title: str) -> Table:
    table = Table(title=title, title_justify="left")
    for column in ("zone", "type", "resource", "action", "now", "after", "changes", "note"):
        table.add_column(column)
    for s in plan.steps:
        action = {"remove": "remove", "restore": "merge back", "skip": "skip"}[s.action]
        style = "yellow" if s.action == "skip" else ""
        table.add_row(
            s.zone_id, s.kind, s.resource, Text(action, style=style), _subnets(s.before),
            _subnets(s.after), _subnets(s.changed), s.reason,
        )  # fmt: skip
    return table


def _printer(as_json: bool) -> Callable[[Progress], None]:
    def show(p: Progress) -> None:
        if as_json or p.event == "planned":
            return
        if p.event == "pause":
            err.print(Text(f"  … {p.message}", style="dim"))
            return
        step = p.step
        assert step is not None
        mark = {"start": "→", "done": "✓", "failed": "✗", "skipped": "·", "replanned": "↻"}[p.event]
        style = {"done": "green", "failed": "red", "skipped": "yellow", "replanned": "cyan"}.get(
            p.event, ""
        )
        what = f"{step.kind} {step.resource}"
        if p.event == "start":
            verb = "removing" if step.action == "remove" else "merging back"
            line = f"{what}: {verb} {_subnets(step.changed)}"
        else:
            line = f"{what}: {p.message}"
        counter = f" ({p.done}/{p.total})" if p.event in ("done", "failed") else ""
        err.print(Text(f"  {mark} {line}{counter}", style=style))

    return show


def _step_json(step: Step) -> dict[str, Any]:
    return asdict(step)


def _outcome_json(outcome: Outcome) -> dict[str, Any]:
    return {
        "operation": outcome.plan.operation,
        "zone_id": outcome.plan.zone_id,
        "dry_run": outcome.dry_run,
        "exit_code": outcome.exit_code,
        "plan": [_step_json(s) for s in outcome.plan.steps],
        "changed": [_step_json(s) for s in outcome.changed],
        "skipped": [_step_json(s) for s in outcome.skipped],
        "replanned": [_step_json(s) for s in outcome.replanned],
        "failed": [{"step": _step_json(f.step), "error": f.error} for f in outcome.failed],
        "refused": outcome.refused,
        "aborted": outcome.aborted,
        "resume": outcome.resume,
    }


def _report(outcome: Outcome, as_json: bool) -> None:
    if as_json:
        sys.stdout.write(json.dumps(_outcome_json(outcome), indent=2) + "\n")
        raise typer.Exit(outcome.exit_code)
    plan = outcome.plan
    verb = "evacuate" if plan.operation == "evacuate" else "recover"
    where = plan.zone_id or "every zone in the ledger"
    if outcome.dry_run:
        _print_table(_plan_table(plan, f"plan: {verb} {where} (dry run: nothing changed)"))
    if outcome.refused is not None:
        if plan.steps and not outcome.dry_run:
            _print_table(_plan_table(plan, f"plan: {verb} {where}"))
        err.print(Text(f"refused: {outcome.refused}", style="bold red"))
        raise typer.Exit(EXIT_REFUSED)
    if not outcome.dry_run:
        console.print(
            f"{verb} {where}: {len(outcome.changed)} changed, {len(outcome.skipped)} "
            f"skipped, {len(outcome.failed)} failed"
            + (f", {len(outcome.replanned)} re-planned" if outcome.replanned else "")
        )
    for s in outcome.skipped:
        console.print(Text(f"  skipped {s.kind} {s.resource}: {s.reason}", style="yellow"))
    for f in outcome.failed:
        err.print(Text(f"  failed {f.step.kind} {f.step.resource}: {f.error}", style="red"))
    if outcome.aborted is not None:
        err.print(Text(outcome.aborted, style="bold red"))
    if outcome.resume is not None:
        err.print(Text(f"to resume: {outcome.resume}", style="bold"))
    raise typer.Exit(outcome.exit_code)


def _run(action: Callable[[], _T]) -> _T:
    try:
        return action()
    except InvalidArgument as exc:
        fail(str(exc), 2)
    except EvacuationError as exc:  # the ledger or the provider before any change
        fail(str(exc), EXIT_PARTIAL)


def _with_engine(
    config_path: Path | None,
    provider: str,
    as_json: bool,
    action: Callable[[Engine, Options], Outcome],
    **flags: Any,
) -> None:
    """Load the config, build the options and the engine, run ``action``, report, exit."""
    config = load(config_path)
    options = _options(config, **flags)
    # A dry run writes nothing anywhere: not even the ledger's table or file.
    prov, ledger = _run(
        lambda: _open(config, provider, options.operator, create=not options.dry_run)
    )
    engine = Engine(prov, ledger, hooks=[_printer(as_json)])
    _report(_run(lambda: action(engine, options)), as_json)


# --------------------------------------------------------------------------- commands


@evacuate_app.callback()
def evacuate(
    ctx: typer.Context,
    zone_id: ZoneIdOption = None,
    provider: ProviderOption = "local",
    types: TypeOption = None,
    dry_run: DryRunOption = False,
    batch_size: BatchOption = None,
    pause: PauseOption = None,
    min_healthy_zones: Annotated[
        int | None,
        typer.Option(
            "--min-healthy-zones",
            help="Skip a resource that would keep fewer zones (default: config evacuate.min_healthy_zones).",
        ),
    ] = None,
    operator: OperatorOption = None,
    as_json: JsonOption = False,
    config_path: ConfigOption = None,
) -> None:
    """Evacuate the zone --zone-id from every resource of the provider (local: stop
    answering its address in DNS and drain its app servers to the region's other zone).
    A resource is never left with no subnet; one evacuation of a zone runs at a time.
    Re-running is safe. Exit status: 0 done, 1 partial (run it again to finish),
    2 refused or bad usage."""
    if ctx.invoked_subcommand is not None:
        return
    if zone_id is None:
        console.print(ctx.get_help())
        fail("--zone-id is required (or a subcommand: list, practice)", 2)
    _with_engine(
        config_path, provider, as_json, lambda engine, options: engine.evacuate(zone_id, options),
        types=types, dry_run=dry_run, batch_size=batch_size, pause=pause,
        min_healthy_zones=min_healthy_zones, operator=operator,
    )  # fmt: skip


@app.command()
def recover(
    zone_id: Annotated[
        str | None,
        typer.Option("--zone-id", help="The AZ id to recover (default: every zone in the ledger)."),
    ] = None,
    provider: ProviderOption = "local",
    types: TypeOption = None,
    dry_run: DryRunOption = False,
    batch_size: BatchOption = None,
    pause: PauseOption = None,
    operator: OperatorOption = None,
    to_recorded: Annotated[
        bool,
        typer.Option(
            "--to-recorded",
            help="Give each resource exactly the subnets its ledger rows saw before the "
            "evacuation, instead of merging the removed ones into its subnets now (an "
            "operator's change made since is then undone).",
        ),
    ] = False,
    as_json: JsonOption = False,
    config_path: ConfigOption = None,
) -> None:
    """Merge back what the ledger records as removed (for --zone-id, or every zone): one
    update per resource with all of its rows, each row deleted once that update is
    confirmed. Re-running is safe. Exit status: 0 done, 1 partial (run it again to
    finish), 2 refused (unknown zone, locked) or bad usage."""
    _with_engine(
        config_path, provider, as_json, lambda engine, options: engine.recover(zone_id, options),
        types=types, dry_run=dry_run, batch_size=batch_size, pause=pause,
        min_healthy_zones=None, operator=operator, to_recorded=to_recorded,
    )  # fmt: skip


@evacuate_app.command("list")
def evacuate_list(
    zone_id: Annotated[str | None, typer.Option("--zone-id", help="Only this zone.")] = None,
    types: Annotated[str | None, typer.Option("--type", help="Only this resource type.")] = None,
    provider: ProviderOption = "local",
    as_json: JsonOption = False,
    config_path: ConfigOption = None,
) -> None:
    """The ledger: every resource a zone was removed from and not yet recovered."""
    config = load(config_path)
    if provider == "local":
        from rideout.evacuate.ledger import SqliteLedger

        ledger: Ledger = _run(lambda: SqliteLedger.in_data_dir(config.data_dir, create=False))
    else:
        _, ledger = _run(lambda: _open(config, provider, "list", create=False))
    try:
        rows = ledger.records(kind=types, zone_id=zone_id)
    except EvacuationError as exc:
        fail(str(exc))
    if as_json:
        found = [{**asdict(r), "seen": dict(r.seen)} for r in rows]
        sys.stdout.write(json.dumps(found, indent=2) + "\n")
        return
    if not rows:
        console.print("the ledger is empty: no zone is evacuated")
        return
    table = Table(title="evacuation ledger", title_justify="left")
    for column in (
        "zone id",
        "type",
        "resource",
        "removed",
        "before",
        "since",
        "operator",
        "outcome",
    ):
        table.add_column(column)
    for r in rows:
        at = datetime.fromtimestamp(r.at, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        table.add_row(r.zone_id, r.kind, r.resource, _subnets(r.removed), _subnets(r.before),
                      at, r.operator, r.outcome or "-")  # fmt: skip
    _print_table(table)


@evacuate_app.command("practice")
def evacuate_practice(
    zone_id: Annotated[str, typer.Option("--zone-id", help="The zone to shift away from.")],
    duration: Annotated[
        float, typer.Option("--duration", help="Seconds the practice shift lasts.", min=0.1)
    ],
    alarm: Annotated[
        str | None,
        typer.Option(
            "--alarm",
            help="Cancel the practice if this alarm goes into ALARM (default: the zone's "
            "region's canary alarm, which then speaks for the zones left).",
        ),
    ] = None,
    operator: OperatorOption = None,
    config_path: ConfigOption = None,
) -> None:
    """A practice zonal shift of this deployment (as ARC's practice runs): evacuate the
    zone for --duration seconds, cancelled early if --alarm goes into ALARM, then
    recover. Exit status: 0 succeeded, 1 interrupted by the alarm (or failed), 2 refused."""
    from rideout.evacuate.practice import PracticeRun, watch_alarm

    config = load(config_path)
    options = _options(
        config, types=None, dry_run=False, batch_size=None, pause=None,
        min_healthy_zones=None, operator=operator,
    )  # fmt: skip
    # The control plane ends the shift by itself a little after the practice should
    # have, should this command die before it recovers.
    prov, ledger = _run(
        lambda: _open(
            config,
            "local",
            options.operator,
            reason="practice",
            expires_in=duration + max(5.0, 4 * config.timing.canary_interval),
        )
    )
    run = PracticeRun(
        Engine(prov, ledger, hooks=[_printer(False)]), zone_id, duration, options,
        alarm_state=watch_alarm(config, alarm, zone_id),
        interval=config.timing.canary_interval, clock=time.monotonic, sleep=time.sleep,
    )  # fmt: skip
    try:
        result = run.run()
    except KeyboardInterrupt:
        result = run.cancel("interrupted by the operator")
    except InvalidArgument as exc:
        fail(str(exc), 2)
    style = "green" if result.outcome == "succeeded" else "bold red"
    console.print(Text(f"practice {result.outcome}: {result.message}", style=style))
    raise typer.Exit(result.exit_code)
