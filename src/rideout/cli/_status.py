"""`rideout status` (and `rideout up` once ready) as tables: what runs where, whether it
is healthy, and the control plane's summary (the view: :func:`rideout.cluster.status.collect_status`)."""

from __future__ import annotations

import time
from typing import Any

from rich.table import Table
from rich.text import Text

from rideout.cli._console import console

__all__ = ["print_status"]


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


def print_status(view: dict[str, Any], title: str) -> None:
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
            if zh and (zh.get("body") or {}).get("busy"):  # shedding load: healthy
                state.append(", busy (shedding load)", style="bold yellow")
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
        # Refused, timed out or not allowed: the error says which.
        return _state(False, "", f"unreachable: {state.get('error') or 'no answer'}")
    link = f" (link {state['link']})" if state["role"] == "replica" else ""
    ok = state["role"] == "master" or state["link"] == "up"
    server = f"; {state['server']}" if state.get("server") else ""
    return Text(
        f"{state['role']}{link}, epoch {state['epoch']}{server}",
        style="green" if ok else "bold red",
    )
