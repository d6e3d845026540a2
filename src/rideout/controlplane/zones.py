"""Which of the deployment's zones are evacuated: the control plane's zone state.

An evacuated zone's address leaves its region's DNS answer (the control plane passes
the set of evacuated zone names to DNS as data: :class:`rideout.dns.feed.DnsView`) and
its clients are drained to the region's other zones. The state is the control plane's,
saved with the rest of it (``state.json``), so a restart keeps every evacuation; the
ledger of ``rideout evacuate`` records the same changes for recovery
(:mod:`rideout.evacuate.local`).

It also keeps which zones are **full** (issue #29): at their connection cap, as the
canary's latest datapoint of the zone said (:data:`rideout.health.names.FULL_METRIC_NAME`),
within the last three canary periods. Full is not unhealthy: a full zone stays in its
region, healthy; DNS prefers the region's zones with room (:mod:`rideout.dns.records`),
and nothing is evacuated or failed over for it. And which are **busy**, the same way
(:data:`~rideout.health.names.BUSY_METRIC_NAME`): shedding load, healthy, shown to
operators, acted on by nothing. Neither is saved: they are the canary's to say again.

Pure: no I/O, an injected clock. The one safety rule it enforces itself, whoever asks:
a region keeps at least one zone that is not evacuated.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from rideout import _validate
from rideout.config import Config
from rideout.controlplane.errors import ControlPlaneError

__all__ = ["Evacuation", "ZoneRefused", "ZoneState"]


class ZoneRefused(ControlPlaneError):
    """A zone change that cannot be made; ``status`` is the HTTP status it answers with
    (404 an unknown zone, 409 the last serving zone of its region)."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True, slots=True)
class Evacuation:
    """One evacuated zone: since when, by whom, why, and (for an automatic or practice
    shift) when it ends or is re-evaluated."""

    zone: str
    region: str
    since: float
    operator: str
    reason: str = "manual"  # "manual" | "autoshift" | "practice"
    expires_at: float | None = None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Evacuation:
        expires = data.get("expires_at")
        return cls(
            zone=str(data["zone"]),
            region=str(data["region"]),
            since=float(data["since"]),
            operator=str(data["operator"]),
            reason=str(data.get("reason", "manual")),
            expires_at=None if expires is None else float(expires),
        )


class ZoneState:
    """The evacuated zones of one deployment (see the module docstring)."""

    def __init__(self, config: Config, *, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self.regions = {z.name: r.name for r in config.regions for z in r.zones}
        self._order = [z.name for r in config.regions for z in r.zones]
        self.evacuations: dict[str, Evacuation] = {}
        # A report of fullness (or busyness) counts for three canary periods (a silent
        # canary's last word does not keep a zone out of the answer for ever).
        self.full_for = 3 * config.timing.canary_interval
        # condition ("full", "busy"): zone: (timestamp, the canary's word)
        self._reports: dict[str, dict[str, tuple[float, bool]]] = {"full": {}, "busy": {}}

    @property
    def evacuated(self) -> frozenset[str]:
        return frozenset(self.evacuations)

    def note(self, condition: str, zone: str, value: bool, at: float) -> bool:
        """The canary's word on `zone`'s `condition` ("full" or "busy") at time `at` (an
        unknown zone, or a report older than the last one, is ignored); whether the set
        of zones in that condition changed."""
        reports = self._reports[condition]
        if zone not in self.regions:
            return False
        last = reports.get(zone)
        if last is not None and last[0] > at:
            return False
        before = self._having(condition)
        reports[zone] = (at, value)
        return self._having(condition) != before

    def note_full(self, zone: str, full: bool, at: float) -> bool:
        """:meth:`note` of fullness; whether :meth:`full` changed."""
        return self.note("full", zone, full, at)

    def _having(self, condition: str) -> frozenset[str]:
        horizon = self._clock() - self.full_for
        reports = self._reports[condition]
        return frozenset(z for z, (at, value) in reports.items() if value and at >= horizon)

    def full(self) -> frozenset[str]:
        """The zones whose latest fresh report says they are at their connection cap."""
        return self._having("full")

    def busy(self) -> frozenset[str]:
        """The zones whose latest fresh report says they are shedding load."""
        return self._having("busy")

    def _region_of(self, zone: str) -> str:
        region = self.regions.get(zone)
        if region is None:
            known = ", ".join(self._order)
            raise ZoneRefused(f"no zone {zone!r} in this deployment (known: {known})", 404)
        return region

    def evacuate(
        self,
        zone: str,
        *,
        operator: str,
        reason: str = "manual",
        expires_in: float | None = None,
    ) -> tuple[Evacuation, bool]:
        """Evacuate ``zone``; the evacuation and whether it is new. Evacuating a zone
        again keeps its start and takes the new operator, reason and expiry."""
        region = self._region_of(zone)
        _validate.text("operator", operator)
        _validate.choice("reason", reason, ("manual", "autoshift", "practice"))
        now = self._clock()
        expires_at = None
        if expires_in is not None:
            expires_at = now + _validate.seconds("expires_in", expires_in)
        current = self.evacuations.get(zone)
        if current is None:
            serving = [
                z for z, r in self.regions.items() if r == region and z not in self.evacuations
            ]
            if serving == [zone]:
                raise ZoneRefused(
                    f"{zone} is the last zone of {region} not evacuated: evacuating it "
                    f"would leave {region} nothing to serve (recover another zone first, or "
                    "let the region fail over)",
                    409,
                )
        evacuation = Evacuation(zone, region, current.since if current else now, operator,
                                reason, expires_at)  # fmt: skip
        self.evacuations[zone] = evacuation
        return evacuation, current is None

    def recover(self, zone: str) -> Evacuation | None:
        """Put ``zone`` back; the evacuation it ends (None: it was not evacuated)."""
        self._region_of(zone)
        return self.evacuations.pop(zone, None)

    def expired(self) -> list[Evacuation]:
        """Evacuations whose expiry has passed (the caller re-evaluates them)."""
        now = self._clock()
        return [
            e for e in self.evacuations.values() if e.expires_at is not None and e.expires_at <= now
        ]

    def status(self) -> list[dict[str, Any]]:
        """Every zone, in configuration order, with its evacuation (or None) and whether
        it is full and busy."""
        full, busy = self.full(), self.busy()
        return [
            {
                "zone": zone,
                "region": self.regions[zone],
                "evacuated": zone in self.evacuations,
                "full": zone in full,
                "busy": zone in busy,
                "evacuation": asdict(self.evacuations[zone]) if zone in self.evacuations else None,
            }
            for zone in self._order
        ]

    def to_dict(self) -> dict[str, Any]:
        return {zone: asdict(e) for zone, e in self.evacuations.items()}

    def restore(self, data: Mapping[str, Any]) -> None:
        """Take the saved evacuations (zones no longer configured are dropped; a region
        is never left with every zone evacuated)."""
        restored: dict[str, Evacuation] = {}
        for zone, saved in data.items():
            if zone in self.regions:
                restored[zone] = Evacuation.from_dict(saved)
        for region in set(self.regions.values()):
            zones = [z for z, r in self.regions.items() if r == region]
            if all(z in restored for z in zones):
                del restored[zones[-1]]
        self.evacuations = restored
