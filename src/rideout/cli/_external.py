"""`rideout status` in external mode: the network's view of a deployment spread over hosts."""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any, NoReturn

import typer
from rich.table import Table

from rideout.cli._console import console
from rideout.config import Config

__all__ = ["external_status"]


def _answer(probe: dict[str, Any]) -> str:
    body = probe.get("body")
    if isinstance(body, dict):
        return str(body.get("message") or body.get("status") or probe.get("status_code"))
    return str(probe.get("error", "no answer"))


def external_status(config: Config, as_json: bool, *, timeout: float | None = None) -> NoReturn:
    """`rideout status` in external mode: print the network's view, exit 0 if a control
    plane acts, else 1. Each probe waits `timeout` seconds (None: the inventory's own)."""
    from rideout.controlplane.inventory import ExternalInventory

    inventory = (
        ExternalInventory(config) if timeout is None else ExternalInventory(config, timeout=timeout)
    )
    view = asyncio.run(inventory.collect())
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
            if redis.get("server"):
                state += f"; {redis['server']}"
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
