"""Zonal autoshift in the control plane: each round, the zones' canary verdicts go to
:func:`rideout.evacuate.autoshift.decide`, and its decisions are carried out through the
evacuation engine with the local provider over an in-process switch (so they are
locked and recorded in the deployment's ledger exactly as ``rideout evacuate`` records
a manual one, with operator ``autoshift``).

The engine is synchronous (its ledger is SQLite): it runs in a worker thread, and its
provider's calls come back to the event loop (:class:`InProcessSwitch`). The round waits
for it, so a zone shifted in a round is already out of its region's alarm when that
round evaluates the alarm. ``[evacuate] autoshift = false`` turns it off.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections import deque
from collections.abc import Callable, Coroutine
from typing import Any, Protocol, TypeVar

from rideout.config import Config
from rideout.controlplane.zones import ZoneRefused, ZoneState
from rideout.evacuate.autoshift import OPERATOR, Decision, HealthTracker, decide
from rideout.evacuate.engine import Engine, Options, Outcome
from rideout.evacuate.errors import EvacuationError, ProviderError
from rideout.evacuate.ledger import SqliteLedger
from rideout.evacuate.local import KIND, LocalProvider, ZoneInfo
from rideout.failover.controller import FailoverController
from rideout.health.metrics import MetricStore, aggregate
from rideout.health.names import METRIC_NAME, NAMESPACE, REGION_DIMENSION, ZONE_DIMENSION

__all__ = ["Autoshift", "InProcessSwitch", "Plane", "run_engine"]

log = logging.getLogger("rideout.controlplane.autoshift")

_T = TypeVar("_T")
_CALL_TIMEOUT = 30.0  # seconds a switch call from the engine's thread may take


class Plane(Protocol):
    """What autoshift needs of the control plane it runs in
    (:class:`rideout.controlplane.runtime.ControlPlane`, which holds an Autoshift)."""

    config: Config
    period: float
    store: MetricStore
    zones: ZoneState
    controller: FailoverController

    def now(self) -> float: ...

    async def evacuate_zone(
        self,
        zone: str,
        *,
        operator: str,
        reason: str = ...,
        expires_in: float | None = None,
    ) -> dict[str, Any]: ...

    async def recover_zone(self, zone: str) -> dict[str, Any]: ...


class InProcessSwitch:
    """A :class:`~rideout.evacuate.local.ZoneSwitch` onto this control plane, for the
    engine running in a worker thread (each call runs on the plane's event loop)."""

    def __init__(
        self,
        plane: Plane,
        loop: asyncio.AbstractEventLoop,
        *,
        reason: str,
        expires_in: float | None,
        operator: str = OPERATOR,
    ) -> None:
        self.plane = plane
        self.loop = loop
        self.reason = reason
        self.expires_in = expires_in
        self.operator = operator

    def _call(self, factory: Callable[[], Coroutine[Any, Any, _T]]) -> _T:
        return asyncio.run_coroutine_threadsafe(factory(), self.loop).result(_CALL_TIMEOUT)

    def zones(self) -> list[ZoneInfo]:
        async def read() -> list[ZoneInfo]:
            return [
                ZoneInfo(z["zone"], z["region"], z["evacuated"]) for z in self.plane.zones.status()
            ]

        return self._call(read)

    def set_evacuated(self, zone: str, evacuated: bool) -> None:
        try:
            if evacuated:
                self._call(lambda: self.plane.evacuate_zone(
                    zone, operator=self.operator, reason=self.reason, expires_in=self.expires_in
                ))  # fmt: skip
            else:
                self._call(lambda: self.plane.recover_zone(zone))
        except ZoneRefused as exc:
            raise ProviderError(str(exc)) from exc


async def run_engine(
    plane: Plane,
    action: str,
    zone: str,
    ledger: SqliteLedger,
    *,
    operator: str,
    reason: str,
    expires_in: float | None,
    owner: str,
) -> Outcome:
    """Evacuate or recover (`action`) `zone` of this control plane through the engine
    and the local provider over an :class:`InProcessSwitch`, locked and recorded in
    `ledger` as ``rideout evacuate`` records it; the engine runs in a worker thread.
    Autoshift's path, and the dashboard's buttons'."""
    switch = InProcessSwitch(plane, asyncio.get_running_loop(), reason=reason,
                             expires_in=expires_in, operator=operator)  # fmt: skip
    engine = Engine(LocalProvider(switch), ledger, owner=owner)
    options = Options(kinds=(KIND,), operator=operator, lock_ttl=plane.config.evacuate.lock_ttl)
    run = engine.evacuate if action == "evacuate" else engine.recover
    return await asyncio.to_thread(run, zone, options)


class Autoshift:
    """The control plane's autoshift: :meth:`round` once per evaluation round."""

    def __init__(self, plane: Plane) -> None:
        self.plane = plane
        config = plane.config
        self.settings = config.evacuate
        self.tracker = HealthTracker()
        self.zones = [(z.name, r.name) for r in config.regions for z in r.zones]
        self.ledger: SqliteLedger | None = None
        self.events: deque[dict[str, Any]] = deque(maxlen=20)
        self.busy = False
        self._held: tuple[float | None, set[str]] = (None, set())  # a move, its zones held

    def status(self) -> dict[str, Any]:
        return {"enabled": True, "events": list(self.events)}

    def observe(self, now: float, may_evaluate: Callable[[str], bool]) -> None:
        """Feed the tracker the last two complete periods of every zone's canary (the
        later one may have been incomplete when the previous round looked)."""
        period = self.plane.period
        end = math.floor(now / period) * period
        start = end - 2 * period
        for zone, region in self.zones:
            if not may_evaluate(region):
                continue
            points = self.plane.store.datapoints_matching(
                NAMESPACE, METRIC_NAME, {REGION_DIMENSION: region, ZONE_DIMENSION: zone}, start, end
            )
            for i, value in enumerate(aggregate(points, period, start, "Minimum", periods=2)):
                self.tracker.observe(
                    zone, start + i * period, None if value is None else value >= 1
                )

    async def round(self, now: float, may_evaluate: Callable[[str], bool]) -> None:
        """Observe, decide, act."""
        self.observe(now, may_evaluate)
        shifts = {e.zone: (e.reason, e.expires_at) for e in self.plane.zones.evacuations.values()}
        moved = self.last_move()
        holddown = self.settings.autoshift_holddown
        held: dict[str, str] = {}
        if moved is not None and now - moved < holddown:
            why = f"the writer moved {now - moved:.1f} s ago (hold-down {holddown:g} s)"
            held = {region: why for _, region in self.zones}
        decisions = decide(
            self.tracker.views(self.zones, shifts), now,
            recover_after=self.settings.autoshift_recover_after,
            min_failing=self.plane.config.timing.failover_datapoints,
            held=held,
        )  # fmt: skip
        for decision in decisions:
            if decision.action == "hold":
                assert moved is not None
                if self._held[0] != moved:  # a new move: its holds are recorded afresh
                    self._held = (moved, set())
                if decision.zone not in self._held[1]:  # once per zone and move
                    self._held[1].add(decision.zone)
                    self._event(decision, "held")
                continue
            await self._carry_out(decision)

    def last_move(self) -> float | None:
        """When the writer last moved between regions (a failover or failback), if ever."""
        state = self.plane.controller.state
        if state is None:
            return None
        moves = [e.at for e in state.events if e.kind in ("fail-over", "fail-back")]
        return max(moves, default=None)

    async def _carry_out(self, d: Decision) -> None:
        expiry = self.settings.autoshift_expiry
        if d.action == "extend":
            await self.plane.evacuate_zone(d.zone, operator=OPERATOR, reason=OPERATOR,
                                           expires_in=expiry)  # fmt: skip
            self._event(d, "extended")
            return
        reason = self.plane.zones.evacuations[d.zone].reason if d.action == "recover" else OPERATOR
        self.busy = True
        try:
            outcome = await run_engine(
                self.plane, d.action, d.zone, self._ledger(), operator=OPERATOR,
                reason=reason, expires_in=expiry, owner=f"{OPERATOR}:{id(self)}",
            )  # fmt: skip
        except EvacuationError as exc:
            self._event(d, f"failed: {exc}")
            return
        finally:
            self.busy = False
        if outcome.exit_code == 0:
            self._event(d, "done")
        else:
            detail = (
                outcome.refused or outcome.aborted or "; ".join(f.error for f in outcome.failed)
            )
            self._event(d, f"not done: {detail}")

    def _ledger(self) -> SqliteLedger:
        if self.ledger is None:
            self.ledger = SqliteLedger.in_data_dir(self.plane.config.data_dir)
        return self.ledger

    def _event(self, d: Decision, result: str) -> None:
        log.info("autoshift %s %s (%s): %s", d.action, d.zone, d.why, result)
        self.events.append({"at": self.plane.now(), "action": d.action, "zone": d.zone,
                            "region": d.region, "why": d.why, "result": result})  # fmt: skip
