"""The `rideout` command: a thin layer over the library."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Literal, NoReturn

import typer
from rich.text import Text

from rideout import __version__
from rideout._process import pid_alive
from rideout.auth import KeyFileError
from rideout.auth.admin import AdminTokenError
from rideout.cli._console import console, err
from rideout.cli._help import RideoutGroup
from rideout.cli._options import DrainOption, ListenOption, LogFormatOption
from rideout.cli._status import print_status
from rideout.cli._up import LogPrinter, run_up
from rideout.cluster.errors import ClusterError
from rideout.cluster.runstate import AlreadyRunning, RunState, read_lock_pid
from rideout.config import Config, ConfigError, config_to_dict, dump_toml, load_config
from rideout.store.embedded import EmbeddedRedisError

__all__ = ["ConfigOption", "app", "console", "err", "fail", "load", "setup_errors"]

app = typer.Typer(
    cls=RideoutGroup,
    rich_markup_mode="markdown",
    name="rideout",
    help="Keep live services up through regional outages, zone failures and traffic surges.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
config_app = typer.Typer(
    rich_markup_mode="markdown", help="Inspect the configuration.", no_args_is_help=True
)
app.add_typer(config_app, name="config")
dashboard_app = typer.Typer(
    rich_markup_mode="markdown", help="The operations dashboard.", no_args_is_help=True
)
app.add_typer(dashboard_app, name="dashboard")


ConfigOption = Annotated[
    Path | None,
    typer.Option(
        "--config", "-c",
        help="The rideout.toml to read (default: $RIDEOUT_CONFIG, else ./rideout.toml if present).",
        dir_okay=False,
    ),
]  # fmt: skip


def fail(message: str, code: int = 1) -> NoReturn:
    err.print(Text(f"error: {message}", style="bold red"), soft_wrap=True)
    raise typer.Exit(code)


def load(path: Path | None, profile: str | None = None) -> Config:
    env = dict(os.environ)
    if profile is not None:
        env["RIDEOUT_PROFILE"] = profile
    try:
        return load_config(path, env=env)
    except ConfigError as exc:
        fail(str(exc), 2)


def _version_callback(value: bool) -> None:
    if value:
        console.print(f"rideout {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version_callback, is_eager=True, help="Print the version."
        ),
    ] = False,
) -> None:
    """Keep live services up through regional outages, zone failures and traffic surges."""


# --------------------------------------------------------------------------- up / down


@app.command()
def up(
    config_path: ConfigOption = None,
    profile: Annotated[
        Literal["fast", "seed"] | None,
        typer.Option(help="Timing profile (default: the config's, 'fast')."),
    ] = None,
    quiet: Annotated[
        bool,
        typer.Option("--quiet", "-q", help="Do not stream process logs (they still go to logs/)."),
    ] = False,
    ready_timeout: Annotated[
        float, typer.Option(help="Seconds to wait for every process to become ready.", min=1)
    ] = 30.0,
) -> None:
    """Start the local two-region deployment and run it until Ctrl-C or SIGTERM.

    Starts each region's Redis (the secondary replicating the primary), every zone's app
    server and the control plane; prints what runs where; streams prefixed logs (also
    written to DATA_DIR/logs/). Data survives `down` + `up` (Redis append-only files).
    """
    config = load(config_path, profile)
    running = read_lock_pid(config.run_dir)
    if running is not None:
        fail(str(AlreadyRunning(config.run_dir, running)))
    try:
        code = asyncio.run(run_up(config, LogPrinter(quiet), ready_timeout))
    except AlreadyRunning as exc:
        fail(str(exc))
    except (ClusterError, EmbeddedRedisError, KeyFileError, AdminTokenError) as exc:
        fail(str(exc))
    raise typer.Exit(code)


@app.command()
def down(
    config_path: ConfigOption = None,
    timeout: Annotated[float, typer.Option(help="Seconds to wait before killing.", min=1)] = 20.0,
) -> None:
    """Stop a deployment that `rideout up` started (in another terminal or the background)."""
    config = load(config_path)
    pid = read_lock_pid(config.run_dir)
    if pid is None:
        console.print(f"rideout is not running from {config.data_dir}; nothing to stop.")
        return
    recorded = RunState.read(config.run_dir)
    console.print(f"stopping rideout (pid {pid}) …")
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while read_lock_pid(config.run_dir) is not None and time.monotonic() < deadline:
        time.sleep(0.1)
    if read_lock_pid(config.run_dir) is None:
        console.print("stopped.")
        return
    err.print(f"rideout (pid {pid}) did not stop within {timeout:g} s: killing it and its children")
    for proc in recorded.processes if recorded else []:
        if pid_alive(proc.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    raise typer.Exit(1)


# --------------------------------------------------------------------------- status


@app.command()
def status(
    config_path: ConfigOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the same data as JSON.")] = False,
    timeout: Annotated[
        float | None,
        typer.Option(
            min=0.05,
            help="Seconds each probe (Redis, DNS, HTTP) waits for its answer; a busy "
            "machine or a far region may need more.  [default: 1.0; 0.25 while nothing "
            "runs; 1.5 in external mode]",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Show what runs where and whether it is healthy (exit 1 if nothing is running).

    External mode: every control plane (acting or standing by, and who holds the lease),
    the writer, each region's Redis and each zone's readiness, from the network (exit 1
    if no control plane acts).
    """
    config = load(config_path)
    if config.mode == "external":
        from rideout.cli._external import external_status

        external_status(config, as_json, timeout=timeout)
    from rideout.cluster.status import collect_status

    view = asyncio.run(collect_status(config, timeout=timeout))
    if as_json:
        sys.stdout.write(json.dumps(view, indent=2) + "\n")
    elif view["running"]:
        print_status(view, title=f"rideout (pid {view['supervisor_pid']})")
    else:
        console.print(f"rideout is not running from {config.data_dir}.")
    raise typer.Exit(0 if view["running"] else 1)


# --------------------------------------------------------------------------- config


@config_app.command("show")
def config_show(
    config_path: ConfigOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of TOML.")] = False,
) -> None:
    """Print the effective configuration (defaults, file and RIDEOUT_* applied)."""
    config = load(config_path)
    if as_json:
        sys.stdout.write(json.dumps(config_to_dict(config), indent=2) + "\n")
    else:
        sys.stdout.write(dump_toml(config))


# --------------------------------------------------------------------------- dashboard


@dashboard_app.command("login")
def dashboard_login(config_path: ConfigOption = None) -> None:
    """Print a one-time login link to the running deployment's dashboard.

    Opening it signs the browser in (an HttpOnly session cookie), which the dashboard's
    chaos buttons need. The link works once, within control_plane.login_code_ttl.
    """
    from rideout.controlplane.login import LoginLinkError, request_login_link

    config = load(config_path)
    try:
        link = asyncio.run(request_login_link(config))
    except LoginLinkError as exc:
        fail(str(exc))
    sys.stdout.write(link + "\n")


# --------------------------------------------------------------------------- servers


@app.command()
def serve(
    region: Annotated[str, typer.Option(help="The region this server belongs to.")],
    zone: Annotated[str, typer.Option(help="The zone; its address is where the server listens.")],
    config_path: ConfigOption = None,
    listen: ListenOption = None,
    drain_timeout: DrainOption = 10.0,
    log_format: LogFormatOption = None,
) -> None:
    """Run one zone's app server in the foreground (`rideout up` starts one per zone).

    GET /live and /ready tell an orchestrator whether to restart it and whether to send it
    traffic. In external mode SIGTERM drains (see --drain-timeout), then exits 0.
    Exit 2: bad config or missing secrets.
    """
    from rideout.processes import run_zone
    from rideout.realtime.zone import hold_mode_signals

    hold_mode_signals()  # `chaos` may signal this worker before its zone is up
    config = load(config_path)
    with setup_errors():
        run_zone(
            config, region, zone, listen=listen, drain_timeout=drain_timeout,
            log_format=log_format,
        )  # fmt: skip


@contextlib.contextmanager
def setup_errors() -> Iterator[None]:
    """A process that cannot start (rideout.processes.ProcessSetupError): exit 2."""
    from rideout.processes import ProcessSetupError

    try:
        yield
    except ProcessSetupError as exc:
        fail(str(exc), 2)


@app.command()
def canary(
    region: Annotated[str, typer.Option(help="The region whose zones this canary probes.")],
    config_path: ConfigOption = None,
    listen: Annotated[
        str | None,
        typer.Option(
            "--listen",
            metavar="HOST:PORT",
            help="Also serve /live, /ready and /metrics here (external mode: do).",
        ),
    ] = None,
    log_format: LogFormatOption = None,
) -> None:
    """Probe a region's zones every canary interval and push the results to the control plane
    (to each of `[control_plane] urls`).

    `rideout up` starts one per region, beside the region's servers. With
    aws.publish_metrics the datapoints also go to CloudWatch (PutMetricData). SIGTERM
    stops it (exit 0). Exit 2: bad config or missing secrets.
    """
    from rideout.processes import run_canary

    config = load(config_path)
    with setup_errors():
        run_canary(config, region, listen=listen, log_format=log_format)


@app.command("control-plane")
def control_plane(
    config_path: ConfigOption = None,
    dns: Annotated[
        bool,
        typer.Option(
            "--dns/--no-dns",
            help="Serve DNS (UDP/TCP) in this process, or (--no-dns) publish the DNS view "
            "to DATA_DIR/run/dns-view.json for `rideout dns` to serve (`rideout up` does).",
        ),
    ] = True,
    provider: Annotated[
        Literal["redis", "aws"],
        typer.Option(
            help="How the failover controller moves the writer: redis (REPLICAOF and "
            "FAILOVER on self-managed Redis, as `rideout up` runs) or aws (ElastiCache "
            "Global Datastore: FailoverGlobalReplicationGroup, needs aws.global_datastore).",
        ),
    ] = "redis",
    listen: ListenOption = None,
    instance: Annotated[
        str | None,
        typer.Option(help="This instance's name in the lease (default: HOSTNAME:PID)."),
    ] = None,
    dns_listen: Annotated[
        str | None,
        typer.Option(
            "--dns-listen",
            metavar="HOST:PORT",
            help="Where DNS is served (default: control_plane.address:dns_port).",
        ),
    ] = None,
    log_format: LogFormatOption = None,
) -> None:
    """Run the control plane in the foreground (`rideout up` starts it).

    External mode with `[control_plane] state_redis_url`: any number of instances, one
    acting (holding the lease), the others standing by; GET /ready is 200 only on the
    one acting. SIGTERM saves the state, gives the lease up, and exits 0. Exit 2: bad
    config or missing secrets.
    """
    from rideout.processes import run_control_plane

    config = load(config_path)
    with setup_errors():
        run_control_plane(
            config, dns=dns, provider=provider, listen=listen, instance=instance,
            dns_listen=dns_listen, log_format=log_format,
        )  # fmt: skip


@app.command("dns")
def dns_server(config_path: ConfigOption = None) -> None:
    """Serve the app domain's DNS (UDP and TCP) from the view the control plane publishes.

    Answers from the last view it read while the control plane is down or restarting, so
    name resolution outlives a control-plane crash (`rideout up` starts it; the control
    plane then runs with --no-dns). Its own HTTP port, control_plane.dns_metrics_port,
    serves /metrics and /health.
    """
    from rideout.processes import run_dns

    run_dns(load(config_path))
