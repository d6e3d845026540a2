"""After the writer moves to another region, the clients still on the one it left move too.

Once the writer has moved (a failback to the primary, or a failover from a region that
still serves) and DNS answers its region, clients connected to the old writer's region
stay there (their sockets are fine) and every bid they send is refused. The control
plane moves them: it asks each of that region's zones to close its connections with
1012 at random moments over ``failback_drain_seconds`` (``POST /admin/mode``
``{"mode": "serving", "drain_over": S}``, the admin token as the credential), so that
the clients reconnect through DNS to the writer at a rate it can take, instead of as
the herd that overloads it into the next failover. Given the writer's region
(``toward``) and a way to tell that it fails its canary (``strained``), the drain
pauses while it does (:meth:`FailbackDrain._paced`). :meth:`FailbackDrain.ends_at` says
when its clients will all have been sent (the failover controller's grace after the move
runs from then).

The zones stay in ``serving`` mode meanwhile: they are still the standby, their region's
canary keeps succeeding (a zone refusing handshakes would raise its region's alarm, and a
primary failing then would find no healthy region to fail over to), and nothing is left
to undo if this control plane dies mid-drain. A later move of the writer stops a drain
(``{"mode": "serving"}``): the region taking over keeps its clients.

A zone evacuation (:mod:`rideout.controlplane.zones`) drains the evacuated zone the same
way, with its own instance (``zones=``, ``destination=``): its clients follow DNS to the
region's other zones.

Zones in another mode (an operator's ``degraded`` or ``draining``) are left alone. The
zones' admin routes exist in local mode only (``rideout up``): elsewhere the drain is
skipped and says so. With ``[realtime] workers`` above 1, a request reaches one worker
of a zone, so only that worker's clients are drained.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import httpx

from rideout import _http, routes
from rideout._tasks import Supervised, TaskSupervisor
from rideout.auth.admin import load_or_create_admin_token
from rideout.auth.errors import CredentialError
from rideout.config import Config, ZoneConfig

__all__ = ["PAUSE_LIMIT", "FailbackDrain"]

log = logging.getLogger("rideout.controlplane.drain")

PAUSE_LIMIT = 3.0
"""A paced drain pauses for at most this many spreads in all, then finishes."""

_SETTLE = 0.5  # seconds after the spread before the connections left are counted


class FailbackDrain:
    """Drains one region's zones after the writer left it, gradually; see the module
    docstring."""

    def __init__(
        self,
        config: Config,
        *,
        token: Callable[[], str] | None = None,
        clock: Callable[[], float] = time.time,
        spread: float | None = None,
        destination: str = "the writer",
        strained: Callable[[str], bool] | None = None,
        tasks: TaskSupervisor | None = None,
        name: str = "drain",
    ) -> None:
        self.config = config
        # A drain that dies is restarted (it tells its zones again); not critical for
        # /health: the control plane still decides, and a restarted drain finishes.
        self._tasks = tasks or TaskSupervisor()
        self.name = name
        self.spread = config.failover.failback_drain_seconds if spread is None else spread
        self.destination = destination
        # Whether a region's latest canary datapoint failed (see start's `toward`).
        self._strained = strained
        self.period = config.timing.canary_interval
        self._token = token or (lambda: load_or_create_admin_token(config.keys_dir))
        self._clock = clock
        self._task: Supervised | None = None
        self._draining: list[ZoneConfig] = []  # zones told to drain, to stop if cancelled
        self._ends_at: float | None = None
        self.last: dict[str, Any] | None = None
        self.notes: deque[dict[str, Any]] = deque(maxlen=10)

    def status(self) -> dict[str, Any] | None:
        """The latest drain (region, zones and their connections, when, how it stands)
        and its steps; None before the first."""
        if self.last is None:
            return None
        return {**self.last, "notes": list(self.notes)}

    def _note(self, message: str) -> None:
        log.info("%s", message)
        self.notes.append({"at": self._clock(), "message": message})

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def ends_at(self) -> float | None:
        """When the latest drain ended or, while one runs, when it will end if it pauses
        no more (a pause moves it on, period by period); None before the first."""
        return self._ends_at

    def start(
        self,
        region: str,
        *,
        zones: Sequence[str] | None = None,
        delay: float = 0.0,
        toward: str | None = None,
    ) -> None:
        """Drain `region`'s zones (only `zones`, if given) in the background, after
        `delay` seconds, ending any drain still running. With `toward` (the region the
        clients go to), the drain pauses while that region's canary fails a probe."""
        previous = self._task.task if self._task is not None else None
        self.cancel()
        self._ends_at = self._clock() + delay + self.spread + _SETTLE
        if self.config.mode != "local":
            self._note(
                f"clients on {region} are not drained from here: in external mode each "
                "app server drains itself once it reads that the writer left its region",
            )
            return  # each zone drains over the same spread: ends_at stands
        self._task = self._tasks.spawn(
            self.name,
            lambda: self._drain(region, previous, zones, delay, toward),
            critical=False,
        )
        self._task.task.add_done_callback(self._ended)

    def _ended(self, task: asyncio.Task[None]) -> None:
        if self._task is not None and task is self._task.task:  # not one a newer one ended
            self._ends_at = self._clock()

    def cancel(self) -> None:
        """Stop a running drain (the task tells its zones as it ends)."""
        if self._task is not None and not self._task.done():
            self._task.cancel()

    async def stop(self) -> None:
        if self._task is not None:
            await self._task.stop()
            self._task = None

    # ------------------------------------------------------------------ the drain

    async def _drain(
        self,
        region: str,
        previous: asyncio.Task[None] | None,
        only: Sequence[str] | None,
        delay: float,
        toward: str | None,
    ) -> None:
        if previous is not None:  # its zones must have been told before we look
            await asyncio.wait({previous})
        if delay:
            await asyncio.sleep(delay)
        self.last = {"region": region, "state": "draining", "started_at": self._clock(),
                     "spread": self.spread, "zones": {}, "pauses": 0,
                     "paused_seconds": 0.0}  # fmt: skip
        try:
            auth = {"Authorization": f"Bearer {self._token()}"}
        except CredentialError as exc:
            self.last["state"] = "skipped"
            self._note(f"clients on {region} are not drained: {exc}")
            return
        async with _http.async_client(timeout=2.0) as http:
            try:
                await self._run(http, region, auth, only, toward)
            except asyncio.CancelledError:
                self.last["state"] = "cancelled"
                raise
            finally:
                await self._stop_zones(http, auth)

    async def _run(
        self,
        http: httpx.AsyncClient,
        region: str,
        auth: dict[str, str],
        only: Sequence[str] | None,
        toward: str | None,
    ) -> None:
        assert self.last is not None
        zones = [z for z in self.config.region(region).zones if only is None or z.name in only]
        body = {"mode": "serving", "drain_over": self.spread}
        answers = await asyncio.gather(*(self._switch(http, z, body, auth) for z in zones))
        closing = {z.name: n for z, n in zip(zones, answers, strict=True) if n is not None}
        self.last["zones"] = closing
        if not closing:
            self.last["state"] = "skipped"
            self._note(f"no zone of {region} could be drained")
            return
        shown = ", ".join(f"{name} ({n} connections)" for name, n in closing.items())
        self._note(
            f"draining {region}'s zones {shown}: closing them with 1012 over "
            f"{self.spread:g} s so that their clients follow DNS to {self.destination}",
        )
        if toward is None or self._strained is None:
            await asyncio.sleep(self.spread)
        else:
            await self._paced(http, [z for z in zones if z.name in closing], auth, toward)
        await asyncio.sleep(_SETTLE)
        left = await asyncio.gather(*(self._connections(http, z, auth) for z in zones))
        self.last["left"] = sum(n or 0 for n in left)
        self.last["state"] = "done"
        self._note(
            f"drained {region}: {sum(closing.values())} connections closed over "
            f"{self.spread:g} s{_paused(self.last)}, {self.last['left']} connected now",
        )

    async def _paced(
        self, http: httpx.AsyncClient, zones: list[ZoneConfig], auth: dict[str, str], toward: str
    ) -> None:
        """Let the zones drain over the spread, checked every canary period; while
        `toward` fails a probe, pause them (the clients already sent are what strains it),
        and resume with the spread that was left once it has passed two in a row, or
        after ``PAUSE_LIMIT`` spreads of pausing in all (a drain that never ends strands
        its clients as surely as none). A region that really fails meanwhile is failed
        over, which ends this drain."""
        assert self.last is not None
        assert self._strained is not None
        loop = asyncio.get_running_loop()
        left, paused, step = self.spread, 0.0, self.period
        while left > 0:
            await asyncio.sleep(min(step, left))
            left -= step
            if left <= 0 or not self._strained(toward) or paused >= PAUSE_LIMIT * self.spread:
                continue
            stop = {"mode": "serving"}
            await asyncio.gather(*(self._post(http, z, stop, auth) for z in zones))
            self.last["pauses"] += 1
            self._note(f"paused: {toward} failed a canary probe, {left:.1f} s of the drain left")
            began, calm = loop.time(), 0
            while calm < 2 and paused + (loop.time() - began) < PAUSE_LIMIT * self.spread:
                self._ends_at = self._clock() + step + left + _SETTLE
                await asyncio.sleep(step)
                calm = 0 if self._strained(toward) else calm + 1
            paused += loop.time() - began
            self.last["paused_seconds"] = round(paused, 3)
            resume = {"mode": "serving", "drain_over": left}
            await asyncio.gather(*(self._post(http, z, resume, auth) for z in zones))
            self._note(f"resumed after {loop.time() - began:.1f} s: {left:.1f} s of the drain left")

    async def _post(
        self, http: httpx.AsyncClient, zone: ZoneConfig, body: dict[str, Any], auth: dict[str, str]
    ) -> None:
        url = routes.zone_url(self.config, zone.address, routes.ADMIN_MODE)
        try:
            (await http.post(url, json=body, headers=auth)).raise_for_status()
        except httpx.HTTPError as exc:
            self._note(f"cannot switch {zone.name}: {exc or type(exc).__name__}")

    async def _switch(
        self, http: httpx.AsyncClient, zone: ZoneConfig, body: dict[str, Any], auth: dict[str, str]
    ) -> int | None:
        """Start the zone's drain if it is serving; its connections then, or None."""
        url = routes.zone_url(self.config, zone.address, routes.ADMIN_MODE)
        try:
            current = (await http.get(url, headers=auth)).json()
            if current.get("mode") != "serving":
                self._note(f"{zone.name} is {current.get('mode')!r}: left alone")
                return None
            # Counted as told before it is: a cancel that lands while the request is out
            # (the zone may already drain) must still tell it to stop.
            self._draining.append(zone)
            answer = await http.post(url, json=body, headers=auth)
            answer.raise_for_status()
        except (httpx.HTTPError, ValueError, AttributeError) as exc:
            self._note(f"cannot drain {zone.name}: {exc or type(exc).__name__}")
            return None
        return int(current.get("connections", 0))

    async def _connections(
        self, http: httpx.AsyncClient, zone: ZoneConfig, auth: dict[str, str]
    ) -> int | None:
        url = routes.zone_url(self.config, zone.address, routes.ADMIN_MODE)
        try:
            return int((await http.get(url, headers=auth)).json()["connections"])
        except (httpx.HTTPError, ValueError, KeyError, TypeError):
            return None

    async def _stop_zones(self, http: httpx.AsyncClient, auth: dict[str, str]) -> None:
        """Tell the zones told to drain to stop, if they still are (best effort)."""
        zones, self._draining = self._draining, []
        if self.last is None or self.last["state"] == "done":
            return  # they have finished by themselves
        for zone in zones:
            url = routes.zone_url(self.config, zone.address, routes.ADMIN_MODE)
            with contextlib.suppress(httpx.HTTPError):
                await http.post(url, json={"mode": "serving"}, headers=auth)


def _paused(last: dict[str, Any]) -> str:
    if not last["pauses"]:
        return ""
    times = "once" if last["pauses"] == 1 else f"{last['pauses']} times"
    return f" (paused {times}, {last['paused_seconds']:.1f} s in all)"
