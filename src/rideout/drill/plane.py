"""The drill's view of the control plane: :class:`Plane` polls ``/v1/summary`` and keeps
the timeline (alarms, DNS answer, writer and epoch at each poll); checks on a summary
(:func:`serves_from`, :func:`writes_refused`) say what the drill waits for."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import httpx

from rideout import _http, routes
from rideout.config import Config
from rideout.drill.errors import DrillError

__all__ = ["POLL_INTERVAL", "Plane", "serves_from", "writes_refused"]


POLL_INTERVAL = 0.2
"""Seconds between the drill's polls of the control plane's summary (its timeline)."""


class Plane:
    """Polls the control plane's ``/v1/summary`` and keeps the timeline."""

    def __init__(self, config: Config) -> None:
        self.url = routes.control_plane_url(config, routes.SUMMARY)
        self.http = _http.async_client(timeout=2.0)
        self.timeline: list[dict[str, Any]] = []
        self.last: dict[str, Any] | None = None
        self.polled_at = 0.0  # monotonic: the latest poll's start
        self.primary = config.primary.name
        self.secondary = config.secondary.name

    async def poll(self) -> dict[str, Any] | None:
        self.polled_at = time.monotonic()
        try:
            response = await self.http.get(self.url)
            body: dict[str, Any] = response.json()
        except (httpx.HTTPError, ValueError):
            return None
        self.last = body
        alarms = {name: a.get("state") for name, a in body.get("alarms", {}).items()}
        failover = body.get("failover", {})
        self.timeline.append(
            {
                "t": time.time(),  # when the answer came
                "alarms": alarms,
                "dns": body.get("dns", {}).get("region"),
                "writer": failover.get("writer"),
                "epoch": failover.get("epoch"),
                "failovers": failover.get("failovers"),
                "failbacks": failover.get("failbacks"),
                "held": (failover.get("decision") or {}).get("held"),
            }
        )
        return body

    def history(self, since: float) -> dict[str, Any]:
        """What the control plane said happened since `since`: its failover events and
        alarm changes (why the writer moved, each time), and the latest failback drain."""
        body = self.last or {}
        failover = body.get("failover", {})
        return {
            "events": [e for e in failover.get("events", []) if e.get("at", 0) >= since],
            "alarms": {
                name: [c for c in a.get("history", []) if c.get("timestamp", 0) >= since]
                for name, a in body.get("alarms", {}).items()
            },
            "drain": failover.get("drain"),
        }

    def moves(self) -> dict[str, int | None]:
        """Writer moves between the first and the latest poll, by kind."""
        rows = [r for r in self.timeline if r.get("failovers") is not None]
        if not rows:
            return {"failovers": None, "failbacks": None}
        first, last = rows[0], rows[-1]
        return {k: int(last[k]) - int(first[k]) for k in ("failovers", "failbacks")}

    async def keep_polling(self, interval: float = POLL_INTERVAL) -> None:
        """Poll whenever no one else has for `interval` s (until cancelled): a wait
        polls as it checks, but the drill also blocks for seconds at a time (a restore
        command), and a timeline with a gap there would put the end of a hold, or an
        alarm's change, seconds late."""
        while True:
            await asyncio.sleep(max(0.0, self.polled_at + interval - time.monotonic()))
            if time.monotonic() - self.polled_at >= interval:
                await self.poll()

    async def until(
        self, check: Callable[[dict[str, Any]], bool], timeout: float, what: str
    ) -> float:
        """Poll every 100 ms until ``check(summary)``; the wall time it first held."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            body = await self.poll()
            if body is not None and check(body):
                return time.time()
            await asyncio.sleep(0.1)
        raise DrillError(f"{what} did not happen within {timeout:g} s")

    def healthy(self, body: dict[str, Any]) -> bool:
        alarms = body.get("alarms", {})
        return (
            all(a.get("state") == "OK" for a in alarms.values())
            and bool(alarms)
            and serves_from(self.primary)(body)
        )

    async def aclose(self) -> None:
        await self.http.aclose()


def serves_from(region: str) -> Callable[[dict[str, Any]], bool]:
    """A check on a summary: DNS answers with ``region`` and it holds the writer."""
    return lambda b: bool(b["dns"]["region"] == region and b["failover"]["writer"] == region)


def writes_refused(config: Config, summary: dict[str, Any] | None) -> bool:
    """Whether the control plane's `summary` shows that no bid can be acknowledged now:
    sync replication with ``replica_down = "reject"`` and no replica following the
    writer (the writer's own region lost its replica, and the other region is down)."""
    failover = config.failover
    if summary is None or failover.replication != "sync" or failover.replica_down != "reject":
        return False
    rows = summary.get("failover", {}).get("topology") or []
    writer = next((r for r in rows if r.get("part") == "writer"), None)
    if writer is None:
        return False
    return not any(
        r.get("reachable") and r.get("role") == "replica" and r.get("link") == "up"
        and r.get("master") == writer.get("endpoint")
        for r in rows
    )  # fmt: skip
