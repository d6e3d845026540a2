"""`rideout lab`: a two-region external deployment in a network lab on this machine
(root only), with partitions and a WAN link to break (docs/lab.md).

`up` runs in the foreground; the other commands act on it from another terminal: `down`
from the lab's record, `partition` and `heal` on the router's rules (the record says
which lab), `latency` and `loss` through the running `up`'s control socket.
Exit codes: 0 done, 1 it failed at run time (no lab, not root, a command failed), 2 bad
input.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal

import typer

from rideout.cli._core import app, console, err, fail
from rideout.errors import InvalidArgument
from rideout.lab.errors import LabError

__all__: list[str] = []

DEFAULT_DIR = Path("/run/rideout-lab")

lab_app = typer.Typer(
    rich_markup_mode="markdown",
    help="A two-region deployment in a network lab on this machine (root): partitions, "
    "WAN latency and loss (docs/lab.md).",
    no_args_is_help=True,
)
app.add_typer(lab_app, name="lab")

_euid: Callable[[], int] = os.geteuid  # tests replace it to check the refusal

IdOption = Annotated[
    str,
    typer.Option("--id", help="The lab's id: 1 to 8 of a-z and 0-9 (its namespaces are "
                 "rdo-ID-HOST)."),
]  # fmt: skip
DirOption = Annotated[
    Path,
    typer.Option("--dir", help="Where labs are recorded, each with its files in DIR/ID/.",
                 file_okay=False),
]  # fmt: skip


def _root() -> None:
    from rideout.lab.netns import require_root

    try:
        require_root(_euid)
    except LabError as exc:
        fail(str(exc))


def _check_id(lab_id: str) -> None:
    from rideout.lab.topology import netns_prefix

    try:
        netns_prefix(lab_id)
    except InvalidArgument as exc:
        fail(f"--id: {exc}", 2)


def _load(directory: Path, lab_id: str) -> Any:
    from rideout.lab.netns import Lab

    try:
        return Lab.load(directory, lab_id)
    except LabError as exc:
        fail(f"{exc} (is `rideout lab up --id {lab_id}` running? see `--dir`)")


def _change_cuts(change: Callable[[], list[Any]]) -> list[Any]:
    """Make or undo cuts in the router; a bad host or group exits 2, a failed command 1."""
    try:
        return change()
    except InvalidArgument as exc:
        fail(str(exc), 2)
    except LabError as exc:
        fail(str(exc))


@lab_app.command("up")
def lab_up(
    lab_id: IdOption = "lab",
    directory: DirOption = DEFAULT_DIR,
    redis_server: Annotated[
        str | None,
        typer.Option(
            "--redis-server",
            metavar="BINARY",
            help="A redis-server built with TLS (default: $REDIS_TLS_SERVER_BINARY, the "
            "venv's redis-tls/, redis-server on PATH, /usr/bin/redis-server).",
        ),
    ] = None,
    ready_timeout: Annotated[
        float, typer.Option(help="Seconds each stage may take to become ready.", min=1)
    ] = 60.0,
) -> None:
    """Build the lab and run a two-region external deployment in it until Ctrl-C,
    SIGTERM or SIGHUP, then remove everything.

    13 hosts: per region its Redis, an in-region replica, two zones' app servers and a
    canary; two control planes (serving DNS) and the state Redis. Made as docs/external.md
    says: `rideout secrets init`, TLS and ACL users, the control planes sharing a lease.
    Every TCP connection from one region to the other's Redis (replication) crosses the
    WAN link. Prints what runs where, then `lab ID is up`. Exit 1 if it cannot start
    (what failed is named; everything started is stopped and the lab removed).
    """
    _root()
    _check_id(lab_id)
    from rideout.lab.deployment import plan_deployment
    from rideout.lab.run import run_until_signal
    from rideout.store.embedded import EmbeddedRedisError, server_info, supports_tls
    from rideout.store.embedded import tls_redis_server as find_tls_server

    if redis_server is not None:
        if not supports_tls(redis_server):
            fail(f"--redis-server {redis_server}: not a redis-server that serves TLS", 2)
        binary: str | None = redis_server
    else:
        binary = find_tls_server()
    if binary is None:
        fail(
            "no redis-server that serves TLS found (the lab's Redis servers require TLS, as "
            "external mode's do): install Debian's (`apt-get install redis-server`), or name "
            "one with --redis-server or $REDIS_TLS_SERVER_BINARY"
        )
    try:
        deployment = plan_deployment(
            lab_id, directory, redis_server=server_info(binary), python=sys.executable
        )
    except (EmbeddedRedisError, InvalidArgument) as exc:
        fail(str(exc))

    def say(line: str) -> None:
        console.print(line, highlight=False, markup=False)

    try:
        code = asyncio.run(
            run_until_signal(
                deployment, directory, python=sys.executable, say=say, ready_timeout=ready_timeout
            )
        )
    except (LabError, InvalidArgument, OSError) as exc:
        hint = f" (left by an `up` that was killed? `rideout lab down --id {lab_id}`)"
        fail(f"lab {lab_id} did not start: {exc}{hint if 'already' in str(exc) else ''}")
    raise typer.Exit(code)


@lab_app.command("down")
def lab_down(lab_id: IdOption = "lab", directory: DirOption = DEFAULT_DIR) -> None:
    """Remove a lab whose `up` died (SIGKILL): from its record, or by its namespaces'
    prefix (rdo-ID-) if there is none. Says what was removed."""
    _root()
    _check_id(lab_id)
    from rideout.lab.netns import Lab, lab_namespaces, sweep
    from rideout.lab.topology import netns_prefix

    try:
        recorded = Lab.load(directory, lab_id)
    except LabError:
        recorded = None
    try:
        if recorded is not None:
            present = set(lab_namespaces(netns_prefix(lab_id)))
            removed = [ns for ns in recorded.topology.namespaces if ns in present]
            recorded.destroy()
            removed += sweep(lab_id)  # anything of the id the record did not name
        else:
            removed = sweep(lab_id)
    except LabError as exc:
        fail(str(exc))
    if removed:
        console.print(f"removed lab {lab_id}: {len(removed)} namespaces ({', '.join(removed)})")
    else:
        console.print(f"no lab {lab_id} here: nothing to remove")


def _control(directory: Path, lab_id: str, request: dict[str, Any]) -> Any:
    from rideout.lab.deployment import LabPaths
    from rideout.lab.relay import send_control

    socket_path = LabPaths(directory / lab_id).control_socket
    if not socket_path.exists():
        raise LabError(f"`rideout lab up --id {lab_id}` is not running (no {socket_path})")
    return asyncio.run(send_control(socket_path, request))


def _show_links(links: dict[str, dict[str, dict[str, Any]]]) -> None:
    for name, directions in links.items():
        shown = []
        for direction, toxics in directions.items():
            active = [
                f"{key} {_fmt(key, value)}"
                for key, value in toxics.items()
                if value and not (key == "loss_mode" and not toxics["loss"])
            ]
            shown.append(f"{direction}: {', '.join(active) or 'clear'}")
        console.print(f"  {name}  {'; '.join(shown)}", markup=False)


def _fmt(key: str, value: Any) -> str:
    if key in ("latency", "jitter"):
        return f"{value * 1000:g} ms"
    if key == "loss":
        return f"{value:g}"
    return str(value)


@lab_app.command("status")
def lab_status(
    lab_id: IdOption = "lab",
    directory: DirOption = DEFAULT_DIR,
    deployment_status: Annotated[
        bool,
        typer.Option(
            "--deployment/--no-deployment",
            help="Also run `rideout status` on the lab's config from inside host cp-1.",
        ),
    ] = True,
) -> None:
    """The lab's hosts with their addresses, the partitions in force, the WAN link's
    toxics (asked of the running `up`), and `rideout status` run from inside the lab."""
    _root()
    _check_id(lab_id)
    from rideout.lab.deployment import LabPaths
    from rideout.lab.faults import describe

    lab = _load(directory, lab_id)
    console.print(f"lab {lab_id} (record {lab.state_file})", markup=False)
    for group, prefix in lab.topology.groups:
        hosts = [f"{h.name} {h.address}" for h in lab.topology.hosts if h.group == group]
        console.print(f"  {group} {prefix}: {', '.join(hosts)}", markup=False)
    cuts = describe(lab.cuts)
    console.print(f"partitions: {', '.join(cuts) if cuts else 'none'}", markup=False)
    try:
        links = _control(directory, lab_id, {"op": "show"})
    except LabError as exc:
        console.print(f"WAN link: unknown: {exc}", markup=False)
        raise typer.Exit(1) from None
    console.print("WAN link:")
    _show_links(links)
    if not deployment_status:
        return
    config = LabPaths(directory / lab_id).config
    host = "cp-1"
    try:
        argv = [*lab.exec_argv(host), sys.executable, "-m", "rideout", "status",
                "--config", str(config)]  # fmt: skip
    except InvalidArgument as exc:
        fail(str(exc))
    env = {k: v for k, v in os.environ.items() if not k.startswith("RIDEOUT_")}
    console.print(f"rideout status (from {host}):")
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=60, check=False,
            env={**env, "COLUMNS": "200"},
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        fail("`rideout status` did not answer within 60 s")
    sys.stdout.write(done.stdout)
    if done.stderr.strip():
        err.print(done.stderr.rstrip(), markup=False)
    if done.returncode != 0:
        raise typer.Exit(1)


A = Annotated[
    str, typer.Argument(metavar="A", help="A host (cp-1, redis-usw2, ...) or a group "
                        "(us-east-1, us-west-2, global).")
]  # fmt: skip
B = Annotated[str, typer.Argument(metavar="B", help="Another host or group.")]
Direction = Literal["both", "a->b", "b->a"]


@lab_app.command("partition")
def lab_partition(
    a: A,
    b: B,
    direction: Annotated[
        Direction,
        typer.Option(
            help="both: nothing passes; a->b: what A sends to B is dropped (B's packets "
            "still reach A); b->a: the reverse."
        ),
    ] = "both",
    lab_id: IdOption = "lab",
    directory: DirOption = DEFAULT_DIR,
) -> None:
    """Cut A from B (each a host or a group: us-east-1, us-west-2, global): the router
    drops their packets silently, as a real partition does (a connect times out)."""
    _root()
    _check_id(lab_id)
    lab = _load(directory, lab_id)
    added = _change_cuts(lambda: lab.partition(a, b, direction))
    what = ", ".join(str(c) for c in added) if added else "already in force"
    console.print(f"partitioned: {what}", markup=False)


@lab_app.command("heal")
def lab_heal(
    a: Annotated[str | None, typer.Argument(metavar="A", help="A host or group.")] = None,
    b: Annotated[str | None, typer.Argument(metavar="B", help="The other one.")] = None,
    heal_all: Annotated[bool, typer.Option("--all", help="Undo every partition.")] = False,
    lab_id: IdOption = "lab",
    directory: DirOption = DEFAULT_DIR,
) -> None:
    """Undo the partition of A and B (both directions), or every partition (--all)."""
    _root()
    _check_id(lab_id)
    if heal_all == (a is not None or b is not None) or (a is None) != (b is None):
        fail("give A and B, or --all", 2)
    lab = _load(directory, lab_id)
    removed = _change_cuts(lambda: lab.heal_all() if heal_all else lab.heal(a, b))
    what = ", ".join(str(c) for c in removed) if removed else "nothing was cut"
    console.print(f"healed: {what}", markup=False)


LinkDirection = Literal["up", "down", "both"]
LinkOption = Annotated[
    list[str] | None,
    typer.Option("--link", help="Only this link (repeat; default: every link). "
                 "`rideout lab status` lists them."),
]  # fmt: skip
DirectionOption = Annotated[
    LinkDirection,
    typer.Option(help="up: toward the Redis being connected to; down: back; both."),
]


def _set_toxics(
    directory: Path, lab_id: str, names: list[str] | None, direction: str, toxics: dict[str, Any]
) -> None:
    try:
        links = _control(directory, lab_id, {"op": "show"})
        unknown = sorted(set(names or ()) - set(links))
        if unknown:
            fail(f"--link: no link {', '.join(unknown)} (links: {', '.join(links)})", 2)
        for name in names or list(links):
            links = _control(
                directory, lab_id,
                {"op": "set", "link": name, "direction": direction, "toxics": toxics},
            )  # fmt: skip
    except LabError as exc:
        fail(str(exc))
    console.print("WAN link:")
    _show_links({name: links[name] for name in names or list(links)})


@lab_app.command("latency")
def lab_latency(
    ms: Annotated[
        float,
        typer.Argument(metavar="MS", help="Milliseconds added to each chunk (0: none).", min=0),
    ],
    jitter: Annotated[float, typer.Option(help="Up to this many ms more, at random.", min=0)] = 0.0,
    direction: DirectionOption = "both",
    link: LinkOption = None,
    lab_id: IdOption = "lab",
    directory: DirOption = DEFAULT_DIR,
) -> None:
    """Delay the WAN link (replication between the regions) by MS, on live
    connections, in the given direction (`both`: MS each way)."""
    _root()
    _check_id(lab_id)
    _set_toxics(directory, lab_id, link, direction,
                {"latency": ms / 1000, "jitter": jitter / 1000})  # fmt: skip


@lab_app.command("loss")
def lab_loss(
    p: Annotated[
        float,
        typer.Argument(
            help="The probability, per chunk, that the connection is lost: 0 to 1 (0: none).",
            min=0,
            max=1,
        ),
    ],
    mode: Annotated[
        Literal["timeout", "reset"],
        typer.Option(
            help="timeout: the connection stalls (silence); reset: both ends get a TCP reset."
        ),
    ] = "timeout",
    direction: DirectionOption = "both",
    link: LinkOption = None,
    lab_id: IdOption = "lab",
    directory: DirOption = DEFAULT_DIR,
) -> None:
    """Lose connections on the WAN link with probability P per chunk read (a connection
    lost stalls or is reset; Redis reconnects its replication)."""
    _root()
    _check_id(lab_id)
    _set_toxics(directory, lab_id, link, direction, {"loss": p, "loss_mode": mode})
