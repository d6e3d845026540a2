"""What `serve`, `canary` and `control-plane` share when each runs on a host of its own:
the ``--listen`` and ``--log-format`` options, and the secrets check of external mode."""

from __future__ import annotations

import asyncio
import ipaddress
import json
import sys
from pathlib import Path
from typing import Any, NoReturn

import typer
from rich.table import Table

from rideout._logging import LOG_FORMATS, LogFormat, configure_logging, log_format
from rideout.auth.admin import ADMIN_TOKEN_FILENAME
from rideout.auth.canary_keys import canary_key_path
from rideout.auth.keys import KEY_FILENAME
from rideout.cli._core import console, fail
from rideout.config import Config

__all__ = [
    "external_status",
    "parse_listen",
    "require_secrets",
    "setup_logging",
]


def parse_listen(value: str | None, default: tuple[str, int]) -> tuple[str, int]:
    """``HOST:PORT`` (HOST an IP address) as a pair; `default` when not given."""
    if value is None:
        return default
    host, sep, port = value.rpartition(":")
    try:
        ipaddress.ip_address(host)
        number = int(port)
        if not sep or not 0 < number < 65536:
            raise ValueError
    except ValueError:
        fail(f"--listen {value!r}: expected IP:PORT, such as 0.0.0.0:8000", 2)
    return host, number


def setup_logging(flag: str | None) -> LogFormat:
    """Configure logging as `flag` (or the environment) asks; the format chosen."""
    try:
        fmt = log_format(flag)
    except ValueError:
        fail(f"--log-format must be one of {', '.join(LOG_FORMATS)}", 2)
    configure_logging(fmt)
    return fmt


def require_secrets(config: Config, part: str, regions: list[str] | None = None) -> None:
    """External mode: the secrets `part` reads must already be in the keys directory.

    Each host mounts the same directory (`rideout secrets init` fills it once); a file
    made on one host alone would differ from every other host's, so none is created
    here. Exit 2 naming what is missing.
    """
    if config.mode != "external":
        return
    directory = config.keys_dir
    needed: list[Path] = []
    if part in ("serve", "canary", "token"):
        needed.append(directory / KEY_FILENAME)
    if part in ("serve", "control-plane"):
        needed.append(directory / ADMIN_TOKEN_FILENAME)
    if part in ("canary", "control-plane"):
        names = regions if regions is not None else [r.name for r in config.regions]
        needed.extend(canary_key_path(directory, name) for name in names)
    missing = [str(p) for p in needed if not p.is_file()]
    if missing:
        fail(
            f"external mode: {', '.join(missing)} missing; run `rideout secrets init "
            f"--dir {directory}` once and mount that directory on every host "
            "(keys_dir / RIDEOUT_KEYS_DIR)",
            2,
        )


def _answer(probe: dict[str, Any]) -> str:
    body = probe.get("body")
    if isinstance(body, dict):
        return str(body.get("message") or body.get("status") or probe.get("status_code"))
    return str(probe.get("error", "no answer"))


def external_status(config: Config, as_json: bool) -> NoReturn:
    """`rideout status` in external mode: print the network's view, exit 0 if a control
    plane acts, else 1."""
    from rideout.controlplane.inventory import ExternalInventory

    view = asyncio.run(ExternalInventory(config).collect())
    acting = any(cp["up"] for cp in view["control_planes"])
    if as_json:
        sys.stdout.write(json.dumps(view, indent=2) + "\n")
        raise typer.Exit(0 if acting else 1)
    table = Table(title=f"rideout (external) {config.app_domain}")
    for column in ("component", "region / zone", "address", "state"):
        table.add_column(column)
    for cp in view["control_planes"]:
        state = "acting" if cp["up"] else _answer(cp)
        table.add_row("control plane", "global", cp["url"], state)
    for region in view["regions"]:
        redis = region["redis"]
        if redis.get("reachable"):
            state = f"{redis['role']}, epoch {redis.get('epoch')}"
            if redis["role"] == "replica":
                state += f" (link {redis.get('link')})"
        else:
            state = f"unreachable: {redis.get('error')}"
        table.add_row("redis", f"{region['name']} ({region['role']})", redis["address"], state)
        for zone in region["zones"]:
            ready = zone["ready"]
            table.add_row("app server", f"{region['name']} / {zone['name']}", zone["url"],
                          "ready" if ready["up"] else _answer(ready))  # fmt: skip
    console.print(table)
    summary = view["summary"]
    if summary is not None:
        failover, lease = summary["failover"], summary.get("lease") or {}
        console.print(
            f"writer {failover['writer']}, epoch {failover['epoch']}; "
            f"{failover['failovers']} failovers, {failover['failbacks']} failbacks; "
            f"lease: {lease.get('holder', 'none (single control plane)')}"
            + (f" (fence {lease['fence']})" if lease.get("fence") is not None else "")
        )
    raise typer.Exit(0 if acting else 1)
