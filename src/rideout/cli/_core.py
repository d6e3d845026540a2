"""The `rideout` command: a thin layer over the library."""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import re
import signal
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, NoReturn

import typer
from rich.table import Table
from rich.text import Text

from rideout import __version__
from rideout._process import pid_alive
from rideout.auth import KeyFileError
from rideout.auth.admin import AdminTokenError
from rideout.cli._console import console, err
from rideout.cli._help import RideoutGroup
from rideout.cli._options import DrainOption, ListenOption, LogFormatOption
from rideout.cluster.errors import ClusterError
from rideout.cluster.runstate import AlreadyRunning, RunState, read_lock_pid
from rideout.config import Config, ConfigError, config_to_dict, dump_toml, load_config
from rideout.store.client import cancel_and_wait
from rideout.store.embedded import EmbeddedRedisError

if TYPE_CHECKING:
    pass

__all__ = ["ConfigOption", "app", "console", "err", "fail", "load"]

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
token_app = typer.Typer(
    rich_markup_mode="markdown",
    help="Mint and revoke access tokens with the deployment's signing key.",
    no_args_is_help=True,
)
app.add_typer(token_app, name="token")
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


_PALETTE = [
    "cyan",
    "magenta",
    "green",
    "yellow",
    "blue",
    "bright_cyan",
    "bright_magenta",
    "bright_green",
]


class _LogPrinter:
    """Prefixes each process's lines with its name, one colour per process."""

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet
        self._styles: dict[str, str] = {"rideout": "bold white"}

    def __call__(self, name: str, line: str) -> None:
        if self.quiet and name != "rideout":
            return
        style = self._styles.setdefault(name, _PALETTE[len(self._styles) % len(_PALETTE)])
        console.print(Text.assemble((f"{name:>16} │ ", style), line), soft_wrap=True)


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
        code = asyncio.run(_up(config, _LogPrinter(quiet), ready_timeout))
    except AlreadyRunning as exc:
        fail(str(exc))
    except (ClusterError, EmbeddedRedisError, KeyFileError, AdminTokenError) as exc:
        fail(str(exc))
    raise typer.Exit(code)


async def _up(config: Config, printer: _LogPrinter, ready_timeout: float) -> int:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    received: list[str] = []

    def on_signal(signum: int) -> None:
        received.append(signal.Signals(signum).name)
        stop.set()

    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        loop.add_signal_handler(signum, on_signal, signum)
    from rideout.cluster.supervisor import LocalCluster

    cluster = LocalCluster(config, sink=printer, ready_timeout=ready_timeout)
    started = time.monotonic()
    try:
        starting = asyncio.create_task(cluster.start())
        stopping = asyncio.create_task(stop.wait())
        await asyncio.wait({starting, stopping}, return_when=asyncio.FIRST_COMPLETED)
        if not starting.done():
            # Its clean-up stops every process started so far.
            await cancel_and_wait(starting, timeout=60.0)
            printer("rideout", f"{received[0]} during start-up: stopped everything")
            return 130
        stopping.cancel()
        starting.result()  # raises what start raised (after it cleaned up)
        printer("rideout", f"ready in {time.monotonic() - started:.1f} s")
        from rideout.cluster.status import collect_status

        _print_status(await collect_status(config), title="rideout is up")
        await _print_login_link(config)
        console.print("Press Ctrl-C to stop (or run `rideout down` elsewhere).\n")
        await stop.wait()
        printer("rideout", f"{received[0] if received else 'stop'} received: shutting down")
        return 0
    finally:
        t0 = time.monotonic()
        if await cluster.stop():
            printer("rideout", f"stopped in {time.monotonic() - t0:.1f} s")
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            loop.remove_signal_handler(signum)


async def _print_login_link(config: Config) -> None:
    from rideout.controlplane.login import LoginLinkError, request_login_link

    try:
        link = await request_login_link(config)
    except LoginLinkError as exc:
        err.print(f"no dashboard login link: {exc}")
        return
    minutes = config.control_plane.login_code_ttl / 60
    console.print(
        f"dashboard login (one use, within {minutes:g} min; `rideout dashboard login` "
        f"prints a new one): {link}",
        soft_wrap=True,
    )


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


def _state(ok: bool | None, good: str, bad: str) -> Text:
    if ok is None:
        return Text("-", style="dim")
    return Text(good, style="green") if ok else Text(bad, style="bold red")


def _supervised(process: dict[str, Any], state: Text) -> Text:
    """`state`, unless the supervisor says why the process does not run; with the
    number of restarts once there were any."""
    supervision, note = process.get("supervision"), process.get("note")
    if supervision in ("restarting", "starting"):
        return Text(note or supervision, style="yellow")
    if supervision in ("gave-up", "stopped"):
        return Text(note or supervision, style="bold red")
    restarts = process.get("restarts", 0)
    if restarts:
        state = state.copy()
        state.append(f" ({restarts} restart{'' if restarts == 1 else 's'})", style="yellow")
    return state


def _dns_state(answer: dict[str, Any] | None) -> Text:
    if not answer:
        return _state(None, "", "")
    if not answer["up"]:
        return _state(False, "", "not answering")
    return Text(f"answering {answer['region'] or ', '.join(answer['addresses'])}", style="green")


def _dns_process_line(dns: dict[str, Any]) -> str | None:
    """The DNS process's metrics URL and the age of the view it answers from."""
    if not dns.get("metrics"):
        return None
    line = f"DNS metrics {dns['metrics']}"
    health = dns.get("health") or {}
    view = (health.get("body") or {}).get("view") if health.get("up") else None
    if view and isinstance(view.get("age"), int | float):
        line += f"  ·  view serial {view['serial']}, published {view['age']:.0f} s ago"
    return line


def _print_status(view: dict[str, Any], title: str) -> None:
    table = Table(title=title, title_justify="left")
    table.add_column("component")
    table.add_column("region / zone")
    table.add_column("address", no_wrap=True)
    table.add_column("pid", justify="right")
    table.add_column("state")

    def row(what: str, where: str, address: str, process: dict[str, Any], state: Text) -> None:
        table.add_row(what, where, address, str(process.get("pid") or "-"),
                      _supervised(process, state))  # fmt: skip

    cp = view["control_plane"]
    health = cp.get("health", {})
    row("control plane", "global", f"{cp['url']}/status", cp,
        _state(health.get("up") if health else None, "up", "down"))  # fmt: skip
    dns = view.get("dns")
    if dns is not None:
        row("dns", "global", f"{dns['address']} (UDP/TCP)", dns, _dns_state(dns.get("answer")))
    for region in view["regions"]:
        redis = region["redis"]
        row("redis", f"{region['name']} ({region['role']})", redis["address"], redis,
            _redis_state(redis.get("state")))  # fmt: skip
        replica = region.get("replica")
        if replica is not None:
            row("redis (in-region replica)", f"{region['name']} / its second zone",
                replica["address"], replica, _redis_state(replica.get("state")))  # fmt: skip
        canary = region["canary"]
        where = "outside" if canary.get("placement") == "outside" else "inside"
        row("canary", region["name"], f"probes its zones from {where}", canary,
            _state(canary["alive"] if canary["pid"] else None, "running", "stopped"))  # fmt: skip
        for zone in region["zones"]:
            zh = zone.get("health")
            state = _state(zh.get("up") if zh else None, "healthy", "down")
            if zh and (zh.get("body") or {}).get("full"):  # at its connection cap: healthy
                state.append(", full", style="bold yellow")
            evacuation = zone.get("evacuation")
            if evacuation:
                state.append(f", evacuated ({evacuation.get('reason')}, by "
                             f"{evacuation.get('operator')})", style="bold yellow")  # fmt: skip
            row("app server", f"{region['name']} / {zone['name']}", f"{zone['url']}/health",
                zone, state)  # fmt: skip
    console.print(table)
    probe = cp.get("summary") or {}
    if probe.get("up"):
        _print_control_plane(probe["body"], view["app_domain"])
    if dns is not None and (line := _dns_process_line(dns)):
        console.print(line)
    console.print(
        f"app domain [bold]{view['app_domain']}[/]  ·  "
        f"profile [bold]{view['profile']}[/]  ·  data in {view['data_dir']}"
    )


def _print_control_plane(summary: dict[str, Any], app_domain: str) -> None:
    from rideout.failover import repeats_note

    dns, failover = summary["dns"], summary["failover"]
    alarms = "  ".join(
        f"{region} [{'green' if a['state'] == 'OK' else 'bold red'}]{a['state']}[/]"
        + (" (recovering)" if a.get("recovering") else "")
        for region, a in summary["alarms"].items()
    )
    lag = failover.get("lag_bytes")
    console.print(
        f"DNS [bold]{dns['server']}[/] (UDP/TCP; DoH {dns['doh']}): {app_domain} -> "
        f"[bold]{dns['region']}[/] {', '.join(dns['addresses'])}, TTL {dns['ttl']} s ({dns['reason']})"
    )
    console.print(
        f"writer [bold]{failover['writer']}[/], epoch {failover['epoch']}, "
        f"{failover['replication']} replication, lag {'-' if lag is None else f'{lag} B'}; "
        f"{failover['failovers']} failovers, {failover['failbacks']} failbacks, "
        f"{failover['lost_writes']} writes lost{_datasets_lost(failover)}  ·  alarms: {alarms}"
    )
    for node in failover.get("topology") or []:
        if len(failover["topology"]) <= len(summary["alarms"]):
            break  # one Redis per region: the line above says it all
        link = "" if node["part"] == "writer" else f", link {node['link']}"
        lag = "" if node["lag_bytes"] is None else f", lag {node['lag_bytes']} B"
        up = "" if node["reachable"] else " [bold red]unreachable[/]"
        console.print(
            f"  redis {node['redis']} ({node['zone']}): {node['part']}{link}{lag}{up}",
            highlight=False,
        )
    damping = _damping_line(failover.get("damping"))
    if damping:
        console.print(damping, highlight=False)
    grace = failover.get("move_grace_seconds") or 0
    if grace > 0:
        console.print(f"  grace after the move: {grace:.0f} s more in which a failing "
                      f"{failover.get('writer')} whose Redis answers keeps the writer (the "
                      "clients sent to it are arriving)", highlight=False)  # fmt: skip
    drain = failover.get("drain")
    if drain and drain.get("notes"):
        console.print(f"  drain of {drain['region']} ({drain['state']}): "
                      f"{drain['notes'][-1]['message']}", highlight=False)  # fmt: skip
    for event in failover["events"][-3:]:
        when = time.strftime("%H:%M:%S", time.localtime(event["at"]))
        console.print(f"  [dim]{when}[/] {event['kind']}: {event['message']}{repeats_note(event)}",
                      highlight=False)  # fmt: skip


def _damping_line(damping: dict[str, Any] | None) -> str | None:
    """Flap damping in one line, when it has something to say."""
    if not damping or (not damping["penalty"] and not damping["hold_seconds"]):
        return None
    moves = f"{damping['moves']} move{'' if damping['moves'] == 1 else 's'}"
    detail = f"penalty {damping['penalty']:.1f}, {moves} in {damping['window']:g} s"
    if damping["holding"]:
        return f"[bold yellow]failback held {damping['hold_seconds']:.0f} s more[/] ({detail})"
    if damping["hold_seconds"] > 0:
        return (
            f"flap damping: a failback now would be held {damping['hold_seconds']:.0f} s ({detail})"
        )
    return f"flap damping: failback not held ({detail})"


def _datasets_lost(failover: dict[str, Any]) -> str:
    """', [bold red]1 Redis came back without its data[/]' once one did (never silent)."""
    lost = failover.get("datasets_lost") or 0
    if not lost:
        return ""
    return f", [bold red]{lost} Redis restart{'s' if lost > 1 else ''} came back without all its data[/]"


def _redis_state(state: dict[str, Any] | None) -> Text:
    if state is None:
        return _state(None, "", "")
    if not state["reachable"]:
        return _state(False, "", "unreachable")
    link = f" (link {state['link']})" if state["role"] == "replica" else ""
    ok = state["role"] == "master" or state["link"] == "up"
    server = f"; {state['server']}" if state.get("server") else ""
    return Text(
        f"{state['role']}{link}, epoch {state['epoch']}{server}",
        style="green" if ok else "bold red",
    )


@app.command()
def status(
    config_path: ConfigOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the same data as JSON.")] = False,
) -> None:
    """Show what runs where and whether it is healthy (exit 1 if nothing is running).

    External mode: every control plane (acting or standing by, and who holds the lease),
    the writer, each region's Redis and each zone's readiness, from the network (exit 1
    if no control plane acts).
    """
    config = load(config_path)
    if config.mode == "external":
        from rideout.cli._external import external_status

        external_status(config, as_json)
    from rideout.cluster.status import collect_status

    view = asyncio.run(collect_status(config))
    if as_json:
        sys.stdout.write(json.dumps(view, indent=2) + "\n")
    elif view["running"]:
        _print_status(view, title=f"rideout (pid {view['supervisor_pid']})")
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


# --------------------------------------------------------------------------- tokens


@token_app.command("issue")
def token_issue(
    sub: Annotated[str, typer.Option(help="The user the token is for (its `sub` claim).")],
    ttl: Annotated[
        float | None,
        typer.Option(
            help="Seconds the token is valid (default: auth.token_ttl; at most auth.max_token_ttl).",
            min=1,
        ),
    ] = None,
    config_path: ConfigOption = None,
) -> None:
    """Print an access token for SUB that every region's WebSocket API accepts.

    Signed with the deployment's Ed25519 key (DATA_DIR/keys/signing-key.pem, created on
    first use). Connect with ws://ZONE:PORT/ws?token=TOKEN.
    """
    from rideout.auth import SigningKey, TokenIssuer
    from rideout.processes import require_secrets

    config = load(config_path)
    with _setup_errors():  # external mode: the deployment's key, never a new one
        require_secrets(config, "token")
    try:
        key = SigningKey.load_or_create(config.keys_dir)
    except KeyFileError as exc:
        fail(str(exc))
    auth = config.auth
    issuer = TokenIssuer(
        key, auth.issuer, auth.audience, auth.token_ttl, max_ttl=auth.max_token_ttl
    )
    try:
        token = issuer.issue(sub, ttl=ttl)
    except ValueError as exc:
        fail(f"cannot issue a token for {sub!r}: {exc}", 2)
    sys.stdout.write(token + "\n")


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


_DURATION = re.compile(r"([0-9]+(?:\.[0-9]+)?)([smhd]?)")
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def _parse_until(text: str, now: float) -> float:
    """``--until``: a duration from now (``90``, ``15m``, ``2h``, ``7d``) or an ISO 8601
    time with a zone (``2026-12-01T18:00:00Z``)."""
    duration = _DURATION.fullmatch(text.strip())
    if duration:
        return now + float(duration[1]) * _UNITS[duration[2]]
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        raise typer.BadParameter(
            f"{text!r} is neither a duration (90, 15m, 2h, 7d) nor an ISO 8601 time"
        ) from None
    if when.tzinfo is None:
        raise typer.BadParameter(f"{text!r} has no time zone: add Z or an offset like +01:00")
    return when.timestamp()


def _utc(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="seconds")


@token_app.command("revoke")
def token_revoke(
    sub: Annotated[
        str | None, typer.Option(help="Revoke every token of this user issued until now.")
    ] = None,
    jti: Annotated[str | None, typer.Option(help="Revoke the one token with this `jti`.")] = None,
    until: Annotated[
        str | None,
        typer.Option(
            help="With --sub: refuse the user's tokens issued before this time (a lock-out "
            "until then). With --jti: refuse the token until then (default: until it has "
            "expired). A duration from now (15m, 2h, 7d) or an ISO 8601 time with a zone."
        ),
    ] = None,
    config_path: ConfigOption = None,
) -> None:
    """Revoke access tokens in every region: open connections close with 1008, new
    handshakes get 403 token_revoked, within about auth.revocation_interval.

    Recorded in the writer region's Redis (replicated to the other region) and kept
    until every token it refuses has expired. Needs the deployment's signing key on
    disk (DATA_DIR/keys/), as `rideout token issue` does.
    """
    from rideout.auth import KEY_FILENAME, SigningKey
    from rideout.auth.revocation import revoke_subject, revoke_token

    if (sub is None) == (jti is None):
        fail("give exactly one of --sub NAME and --jti ID", 2)
    config = load(config_path)
    key_file = config.keys_dir / KEY_FILENAME
    try:
        SigningKey.from_pem(key_file.read_bytes())  # proof of access to the deployment
    except (OSError, ValueError) as exc:
        fail(f"cannot use the deployment's signing key {key_file}: {exc}", 2)
    auth, now = config.auth, time.time()
    try:
        limit = None if until is None else _parse_until(until, now)
        build = revoke_subject if sub is not None else revoke_token
        revocation = build(
            sub or jti or "", now=now, max_ttl=auth.max_token_ttl, leeway=auth.leeway, until=limit
        )
    except (typer.BadParameter, ValueError) as exc:
        fail(f"cannot revoke: {exc}", 2)
    from rideout.store.revocations import NoWriter, record_on_writer

    record = revocation.record()
    try:
        region, epoch, replicas = asyncio.run(
            record_on_writer(
                config, revocation.field, until_ms=record["until"],
                expires_ms=record["expires"], at_ms=record["at"],
                now_ms=math.floor(revocation.at * 1000),
            )
        )  # fmt: skip
    except NoWriter as exc:
        fail(str(exc))
    what = (
        f"tokens of {revocation.value!r} issued before {_utc(revocation.until)}"
        if revocation.kind == "sub"
        else f"the token {revocation.value!r} until {_utc(revocation.until)}"
    )
    console.print(
        f"revoked {what}; recorded in {region} (writer, epoch {epoch}), kept until "
        f"{_utc(revocation.expires)}; app servers apply it within "
        f"{auth.revocation_interval:g} s"
    )
    if replicas < 1:
        err.print(
            Text(
                "warning: the other region's replica has not confirmed it yet: a failover "
                "right now could lose it (run the command again to be sure)",
                style="yellow",
            )
        )


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
    with _setup_errors():
        run_zone(
            config, region, zone, listen=listen, drain_timeout=drain_timeout,
            log_format=log_format,
        )  # fmt: skip


@contextlib.contextmanager
def _setup_errors() -> Iterator[None]:
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
    with _setup_errors():
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
    with _setup_errors():
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
