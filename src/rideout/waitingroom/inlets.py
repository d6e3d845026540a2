"""The room's scheduled work: inlets, the expiry and abandonment sweep, the pre-queue's
release and the metrics events, for every event, in every app server process.

Each process looks at every event every ``interval`` seconds. Work that must happen
once per period across ALL processes (an inlet's step, a metrics event) is claimed per
tick with ``SET NX`` inside the same script that does it, so N workers admit once, not
N times. The sweep and the release are idempotent scripts and simply run. On the
secondary region's read-only replica every change is refused (``RoomNotWriter``) and
skipped: only the writer region moves counters, and after a failover the promoted one
takes over on its next look.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from rideout import _validate
from rideout._tasks import Supervised, TaskSupervisor
from rideout.waitingroom.errors import RoomError, RoomNotWriter, UnknownEvent
from rideout.waitingroom.events import write_metrics
from rideout.waitingroom.metrics import RoomMetrics
from rideout.waitingroom.model import (
    EventSettings,
    InletKind,
    alarm_state_in,
    periodic_increment,
    tick_of,
)
from rideout.waitingroom.store import OUTAGE_AFTER, RoomStore

__all__ = ["AlarmState", "PassReport", "RoomScheduler", "control_plane_alarm_state"]

log = logging.getLogger("rideout.waitingroom")

AlarmState = Callable[[str], Awaitable[str | None]]
"""An alarm's state by name (``OK``, ``ALARM``, ``INSUFFICIENT_DATA``; None: unknown)."""


async def control_plane_alarm_state(client: httpx.AsyncClient, url: str, name: str) -> str | None:
    """The state of rideout alarm `name` from the control plane's summary at `url`
    (a region's alarm is named after the region); None when it cannot be told, which
    an inlet treats as OK (as AWS's treats a missing alarm)."""
    try:
        response = await client.get(url)
        alarms: dict[str, Any] = response.json().get("alarms", {})
        return alarm_state_in(alarms, name)
    except (httpx.HTTPError, ValueError, AttributeError):
        return None


@dataclass
class PassReport:
    """What one look at every event did (for tests and logs)."""

    admitted: dict[str, int] = field(default_factory=dict)  # by event, inlets only
    expired: int = 0
    abandoned: int = 0
    recycled: int = 0
    released: int = 0
    metrics: int = 0
    skipped: int = 0  # events whose changes the replica refused


STOP_TIMEOUT = 2.0
"""Seconds :meth:`RoomScheduler.stop` waits for a pass under way to end."""


class RoomScheduler:
    """Runs the room's scheduled work (see the module docstring) until stopped."""

    def __init__(
        self,
        store: RoomStore,
        *,
        interval: float = 1.0,
        metrics_interval: float = 60.0,
        alarm_state: AlarmState | None = None,
        metrics: RoomMetrics | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.store = store
        self.metrics = metrics
        self.interval = _validate.seconds("interval", interval)
        self.metrics_interval = _validate.seconds("metrics_interval", metrics_interval)
        self.alarm_state = alarm_state
        self._sleep = sleep
        self._last_inlet_tick: dict[str, int] = {}
        self._last_metrics_tick: dict[str, int] = {}
        self._task: Supervised | None = None
        self._stopping = False

    async def run_once(self) -> PassReport:
        """Look at every event once."""
        report = PassReport()
        try:
            events = await self.store.list_events()
        except RoomError as exc:
            log.warning("waiting room: cannot list events: %s", exc)
            return report
        if self.metrics is not None:
            self.metrics.forget_others({event.event_id for event in events})
        for event in events:
            if self._stopping:
                break
            try:
                await self._event(event, report)
            except RoomNotWriter:
                report.skipped += 1
            except UnknownEvent:
                pass  # deleted meanwhile
            except RoomError as exc:
                log.warning("waiting room: event %s: %s", event.event_id, exc)
        return report

    async def _event(self, event: EventSettings, report: PassReport) -> None:
        store, event_id, now = self.store, event.event_id, self.store.clock()
        if event.prequeue_until and now >= event.prequeue_until:
            before = (await store.counters(event_id)).prequeued
            if before:
                left = await store.release_prequeue(event_id)
                report.released += before - left
        if event.expiry > 0 or event.abandon_after > 0:
            swept = await store.sweep(event_id, outage_after=max(OUTAGE_AFTER, 5 * self.interval))
            report.expired += swept.expired
            report.abandoned += swept.abandoned
            report.recycled += swept.incremented
        await self._inlet(event, now, report)
        tick = tick_of(now, self.metrics_interval)
        if self._last_metrics_tick.get(event_id) != tick:
            if await store.claim_tick(event_id, "metrics", tick, self.metrics_interval * 2):
                await write_metrics(store, event_id)
                report.metrics += 1
            self._last_metrics_tick[event_id] = tick
        if self.metrics is not None:
            # One read per pass, last, for the counters' gauges (rideout_room_queue_number,
            # ...); in the replica region a pass usually ends earlier, at a change refused.
            self.metrics.observe(event_id, await store.counters(event_id))

    async def _inlet(self, event: EventSettings, now: float, report: PassReport) -> None:
        inlet = event.inlet
        if inlet.kind is InletKind.NONE:
            return
        tick = tick_of(now, inlet.period)
        if self._last_inlet_tick.get(event.event_id) == tick:
            return
        claim = ("inlet", tick, inlet.period * 2)
        before = await self.store.serving(event.event_id)
        # The cap at the queue and MaxSize's capacity held are applied inside the
        # script, against the counters of that moment (so two ticks never count one
        # slot twice): model.queue_cap, model.max_size_increment.
        if inlet.kind is InletKind.PERIODIC:
            alarm = None
            if inlet.alarm and self.alarm_state is not None:
                alarm = await self.alarm_state(inlet.alarm)
            by = periodic_increment(inlet, now, alarm)
            after = await self.store.admit(event.event_id, by, claim=claim) if by else -1
        else:
            after = await self.store.admit_up_to(event.event_id, inlet.max_size, claim=claim)
        self._last_inlet_tick[event.event_id] = tick
        if after >= 0:
            report.admitted[event.event_id] = max(0, after - before)

    # ------------------------------------------------------------------ the loop

    def start(self, tasks: TaskSupervisor | None = None, *, critical: bool = True) -> None:
        """Run :meth:`run_once` every ``interval`` in a task supervised by `tasks` (the
        process's; None: a supervisor of its own): a death is logged and restarted."""
        if self._task is None:
            self._stopping = False
            self._task = (tasks or TaskSupervisor()).spawn(
                "waitingroom-scheduler", self._loop, critical=critical
            )

    async def _loop(self) -> None:
        # The flag as well as the cancel: a cancel can be lost inside a Redis call (a
        # socket timeout expiring at the same moment turns it into a TimeoutError,
        # which the pass handles as a store error), and the loop must end anyway.
        while not self._stopping:
            started = time.monotonic()
            try:
                await self.run_once()
            except Exception:  # never let one bad pass stop the room's inlets
                log.exception("waiting room: scheduled pass failed")
            await self._sleep(max(0.0, self.interval - (time.monotonic() - started)))

    async def stop(self) -> None:
        """Stop the loop (a pass under way is cancelled: every step is atomic)."""
        task, self._task = self._task, None
        if task is not None:
            self._stopping = True
            # Bounded: a pass stuck in a Redis call that ignores the cancellation must not
            # keep the process from exiting (an app server that could not bind hung here).
            await task.stop(STOP_TIMEOUT)
