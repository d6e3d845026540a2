"""`rideout aws plan|apply|destroy`: Route 53, CloudWatch and ElastiCache from rideout.toml."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table
from rich.text import Text

from rideout.cli._core import ConfigOption, app, console, err, fail, load
from rideout.config import Config

if TYPE_CHECKING:
    from rideout.aws import AwsSession, Change, Plan

__all__ = ["EXIT_AWS_ERROR", "EXIT_CHANGES", "EXIT_CONFIG", "EXIT_OK", "aws_app"]

EXIT_OK = 0
EXIT_AWS_ERROR = 1
EXIT_CONFIG = 2
EXIT_CHANGES = 3

_CODES = f"""

Exit codes: {EXIT_OK} done (plan: nothing to change); {EXIT_AWS_ERROR} AWS refused or could
not be reached, no credentials, or you declined (what was done is printed);
{EXIT_CONFIG} bad configuration or usage; {EXIT_CHANGES} (plan only) changes are pending,
like `terraform plan -detailed-exitcode`'s 2, which rideout uses for a bad config.
"""

aws_app = typer.Typer(
    rich_markup_mode="markdown",
    help="Keep the deployment's AWS resources (Route 53 failover records and health "
    "checks, CloudWatch canary alarms, the ElastiCache Global Datastore) as rideout.toml "
    "describes them. Credentials and region endpoints come from boto3's usual sources "
    "(AWS_PROFILE, AWS_* variables, an instance or task role; AWS_ENDPOINT_URL).",
    no_args_is_help=True,
)
app.add_typer(aws_app, name="aws")

JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
YesOption = Annotated[bool, typer.Option("--yes", "-y", help="Do not ask before deleting.")]

_STYLE = {"create": "green", "update": "yellow", "delete": "red"}


def _session() -> AwsSession:
    try:
        from rideout.aws import AwsSession
    except ImportError as exc:  # boto3 is the aws extra
        fail(f"{exc}: install the aws extra (pip install 'rideout[aws]')", EXIT_CONFIG)
    return AwsSession()


def _value(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, tuple | list):
        return ", ".join(map(str, value))
    return str(value)


def _print_plan(plan: Plan, title: str) -> None:
    if plan.empty:
        console.print("No changes: AWS matches the configuration.")
        return
    table = Table(title=title, title_justify="left")
    # Never an ellipsis in a name: on a narrow terminal the fields column gives way first.
    table.add_column("action", no_wrap=True)
    table.add_column("resource", no_wrap=True, min_width=max(len(c.kind) for c in plan.changes))
    for column in ("name", "region", "fields"):
        table.add_column(column, overflow="fold")
    for change in plan.changes:
        lines = []
        for f in change.fields:
            if change.action == "update":
                lines.append(f"{f.field}: {_value(f.old)} → {_value(f.new)}")
            else:
                lines.append(f"{f.field}: {_value(f.new if f.old is None else f.old)}")
        table.add_row(
            Text(change.action, style=_STYLE[change.action]),
            change.kind,
            change.name,
            change.region,
            "\n".join(lines),
        )
    console.print(table)
    counts = plan.counts()
    console.print(
        f"{counts['create']} to create, {counts['update']} to update, {counts['delete']} to delete."
    )


def _run(work: Any) -> Any:
    from rideout.aws import AwsError

    try:
        return work()
    except AwsError as exc:
        fail(str(exc), EXIT_AWS_ERROR)


def _apply(config: Config, session: AwsSession, plan: Plan, as_json: bool) -> None:
    from rideout.aws import apply_plan

    def progress(change: Change) -> None:
        if not as_json:
            err.print(f"{change.action} {change.kind} {change.name} ({change.region}): done")

    result = apply_plan(session, config, plan, on_change=progress)
    if as_json:
        out = {
            "plan": plan.to_dict(),
            "done": [c.to_dict() for c in result.done],
            "error": str(result.error) if result.error else None,
        }
        sys.stdout.write(json.dumps(out, indent=2) + "\n")
    if result.error is not None:
        left = len(plan.changes) - len(result.done)
        fail(f"{result.error} ({len(result.done)} changes made, {left} not)", EXIT_AWS_ERROR)
    if not as_json:
        console.print(f"Applied {len(result.done)} changes.")


def _confirm(plan: Plan, yes: bool, what: str) -> None:
    if yes or not plan.counts()["delete"]:
        return
    if not sys.stdin.isatty():
        fail(f"{what} deletes resources: pass --yes to confirm (stdin is not a terminal)")
    if not typer.confirm(f"{what} deletes {plan.counts()['delete']} resources. Go on?"):
        fail("declined: nothing changed")


@aws_app.command("plan", help="Show what `rideout aws apply` would change." + _CODES)
def aws_plan(config_path: ConfigOption = None, as_json: JsonOption = False) -> None:
    from rideout.aws import make_plan

    config = load(config_path)
    session = _session()
    plan: Plan = _run(lambda: make_plan(session, config))
    if as_json:
        sys.stdout.write(json.dumps(plan.to_dict(), indent=2) + "\n")
    else:
        _print_plan(plan, f"rideout aws plan ({config.aws.deployment})")
    raise typer.Exit(EXIT_OK if plan.empty else EXIT_CHANGES)


def _change(config_path: Path | None, as_json: bool, yes: bool, what: str) -> None:
    """Plan (`what`: apply, or destroy's plan of deletions), show, confirm, apply."""
    from rideout.aws import destroy_plan, make_plan

    config = load(config_path)
    session = _session()
    planner = destroy_plan if what == "destroy" else make_plan
    plan: Plan = _run(lambda: planner(session, config))
    if not as_json:
        _print_plan(plan, f"rideout aws {what} ({config.aws.deployment})")
    _confirm(plan, yes, what)
    _apply(config, session, plan, as_json)


@aws_app.command(
    "apply",
    help="Make AWS match the configuration (idempotent: a second apply changes nothing). "
    "Asks before deleting anything unless --yes." + _CODES,
)
def aws_apply(
    config_path: ConfigOption = None, as_json: JsonOption = False, yes: YesOption = False
) -> None:
    _change(config_path, as_json, yes, "apply")


@aws_app.command(
    "destroy",
    help="Delete what rideout created for this deployment (found by its "
    "rideout:deployment tag) and nothing else. Asks first unless --yes." + _CODES,
)
def aws_destroy(
    config_path: ConfigOption = None, as_json: JsonOption = False, yes: YesOption = False
) -> None:
    _change(config_path, as_json, yes, "destroy")
