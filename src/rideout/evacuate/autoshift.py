"""Zonal autoshift: when to evacuate a zone automatically, and when to bring it back.
Pure: the control plane feeds it each zone's canary health per period and carries the
decisions out through the evacuation engine (so the ledger records them like manual
ones, with operator ``autoshift``).

Rules, per round:

- **evacuate** a zone whose canary failed ``min_failing`` complete periods in a row (the
  control plane passes its alarms' ``failover_datapoints`` and decides before it
  evaluates them, so a zone is shifted in the very round its failures would otherwise
  raise the region's alarm, and one failed probe moves nothing) while another zone of
  its region, not evacuated, passes: a zone failure is handled in the region and must
  not fail the region over (an evacuated zone's canary no longer counts in the region's
  alarm). Only the periods it failed *while* that zone passed count: when a region comes
  back from an outage, its zones come back one after the other, and the one still
  starting had failed through the whole outage with its sibling (seen in the partition
  drill's ``wan`` scenario: the zone evacuated for 5 s as the region restarted). One
  zone per region per round; a region whose every zone fails is left to regional
  failover; no data (a silent canary) is no evidence about a zone.
- **hold**, instead of evacuate, in a region named in ``held`` (the control plane holds
  every region for ``autoshift_holddown`` seconds after the writer moves): a failover's
  herd slows the zones it lands on, one of them first, and evacuating that one moves the
  herd onto the other, whose canary then fails in turn (measured at N = 1,000: the
  writer region's zones drained in waves for 40 s after a failover). Recoveries and
  extensions go on.
- **recover** a zone it evacuated once its canary has passed for ``recover_after``
  seconds in a row.
- **extend** an automatic shift whose expiry has passed while the zone is not yet
  healthy long enough (AWS's zonal shifts expire after ``expiresIn``; here the shift is
  re-evaluated and renewed rather than dropped onto a zone still failing).
- a **practice** shift whose expiry has passed is recovered (its command normally does
  that itself; this covers it dying). Manual evacuations are never touched.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from rideout import _validate

__all__ = ["OPERATOR", "Decision", "HealthTracker", "ZoneView", "decide"]

OPERATOR = "autoshift"
_KEPT = 64  # failed periods remembered per zone: far more than any min_failing


@dataclass(frozen=True, slots=True)
class ZoneView:
    """One zone as autoshift sees it."""

    zone: str
    region: str
    healthy: bool | None  # its latest complete canary period with data (None: none yet)
    healthy_since: float | None  # start of its current run of passing periods
    failing: int = 0  # complete periods failed in a row
    shift: str | None = None  # None, or the evacuation's reason: manual|autoshift|practice
    expires_at: float | None = None
    # When each of the last failed periods began (oldest first; at most _KEPT of them).
    # Empty: not known, and every one of the `failing` periods counts.
    failing_periods: tuple[float, ...] = ()

    def failed_since(self, start: float | None) -> int:
        """How many of its periods in a row failed that began at or after `start`."""
        if not self.failing_periods or start is None:
            return self.failing
        return sum(1 for p in self.failing_periods if p >= start)


@dataclass(frozen=True, slots=True)
class Decision:
    action: Literal["evacuate", "recover", "extend", "hold"]
    zone: str
    region: str
    why: str


def decide(
    zones: Sequence[ZoneView],
    now: float,
    *,
    recover_after: float,
    min_failing: int = 1,
    held: Mapping[str, str] | None = None,
) -> list[Decision]:
    """This round's decisions (see the module docstring)."""
    recover_after = _validate.seconds("recover_after", recover_after, zero_ok=True)
    min_failing = _validate.count("min_failing", min_failing, low=1)
    decisions: list[Decision] = []
    for view in zones:
        if view.shift == "practice" and view.expires_at is not None and view.expires_at <= now:
            decisions.append(Decision("recover", view.zone, view.region, "practice shift expired"))
        if view.shift != OPERATOR:
            continue
        healthy_for = now - view.healthy_since if view.healthy and view.healthy_since else 0.0
        if view.healthy and healthy_for >= recover_after:
            why = f"canary healthy for {healthy_for:.1f} s"
            decisions.append(Decision("recover", view.zone, view.region, why))
        elif view.expires_at is not None and view.expires_at <= now:
            why = "shift expired; the zone is still " + (
                "recovering" if view.healthy else "failing"
            )
            decisions.append(Decision("extend", view.zone, view.region, why))
    shifted: set[str] = set()
    for view in zones:
        if view.shift is not None or view.failing < min_failing or view.region in shifted:
            continue
        others = [z for z in zones if z.region == view.region and z.zone != view.zone]
        passing = [z for z in others if z.shift is None and z.healthy]
        if not passing:
            continue
        # The periods it failed while one of them passed (the one passing longest).
        failed = max(view.failed_since(z.healthy_since) for z in passing)
        if failed < min_failing:
            continue
        shifted.add(view.region)
        why = (
            f"canary failed {failed} periods in a row while "
            f"{', '.join(z.zone for z in passing)} passes"
        )
        hold = (held or {}).get(view.region)
        if hold is not None:
            decisions.append(Decision("hold", view.zone, view.region, f"{why}; held: {hold}"))
        else:
            decisions.append(Decision("evacuate", view.zone, view.region, why))
    return decisions


class HealthTracker:
    """Each zone's canary verdicts, period by period: the latest, how many failed in a
    row, and since when it has been passing."""

    def __init__(self) -> None:
        self._healthy: dict[str, bool] = {}
        self._since: dict[str, float | None] = {}
        self._failing: dict[str, int] = {}
        self._failed: dict[str, deque[float]] = {}
        self._period: dict[str, float] = {}

    def observe(self, zone: str, period_start: float, healthy: bool | None) -> None:
        """The verdict of the period starting at ``period_start``. A period is counted
        once, in order (an older one, or one without data, is ignored), so a caller may
        pass the last few complete periods every round: data that arrives late counts."""
        if healthy is None or period_start <= self._period.get(zone, float("-inf")):
            return
        self._period[zone] = period_start
        self._healthy[zone] = healthy
        failed = self._failed.setdefault(zone, deque(maxlen=_KEPT))
        if healthy:
            self._failing[zone] = 0
            failed.clear()
            if self._since.get(zone) is None:
                self._since[zone] = period_start
        else:
            self._failing[zone] = self._failing.get(zone, 0) + 1
            failed.append(period_start)
            self._since[zone] = None

    def views(
        self, zones: Iterable[tuple[str, str]], shifts: dict[str, tuple[str, float | None]]
    ) -> list[ZoneView]:
        """A :class:`ZoneView` per (zone, region), with ``shifts``: zone -> (reason,
        expires_at) of the evacuated ones."""
        result = []
        for zone, region in zones:
            reason, expires = shifts.get(zone, (None, None))
            view = ZoneView(zone, region, self._healthy.get(zone), self._since.get(zone),
                            self._failing.get(zone, 0), reason, expires,
                            tuple(self._failed.get(zone, ())))  # fmt: skip
            result.append(view)
        return result
