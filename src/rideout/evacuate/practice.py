"""Practice zonal shifts (as ARC's practice runs): evacuate a zone for a while through the
engine, watching an outcome alarm; cancel (recover at once) when it goes into ALARM.

An alarm already in ALARM blocks the practice (ARC's blocking alarms); the outcome is
``succeeded`` (the whole duration passed and the zone is back), ``interrupted`` (the
alarm fired, or the operator stopped it: the zone is back), ``refused`` (nothing was
changed) or ``failed`` (the evacuation or the recovery did not complete: the message
says what to run).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import httpx

from rideout import _http, _validate, routes
from rideout.config import Config
from rideout.errors import InvalidArgument
from rideout.evacuate.engine import EXIT_OK, Engine, Options

__all__ = ["PracticeResult", "PracticeRun", "watch_alarm"]

Outcome = Literal["succeeded", "interrupted", "refused", "failed"]
_EXIT = {"succeeded": 0, "interrupted": 1, "failed": 1, "refused": 2}


@dataclass(frozen=True, slots=True)
class PracticeResult:
    outcome: Outcome
    message: str

    @property
    def exit_code(self) -> int:
        return _EXIT[self.outcome]


class PracticeRun:
    """One practice shift of ``zone_id`` for ``duration`` seconds (see the module doc).
    ``alarm_state`` returns the outcome alarm's state (None: unknown right now)."""

    def __init__(
        self,
        engine: Engine,
        zone_id: str,
        duration: float,
        options: Options,
        *,
        alarm_state: Callable[[], str | None],
        interval: float,
        clock: Callable[[], float],
        sleep: Callable[[float], None],
    ) -> None:
        self.engine = engine
        self.zone_id = _validate.text("zone_id", zone_id)
        self.duration = _validate.seconds("duration", duration)
        self.options = options
        self._alarm = alarm_state
        self.interval = _validate.seconds("interval", interval)
        self._clock = clock
        self._sleep = sleep
        self._shifted = False

    def run(self) -> PracticeResult:
        if self._alarm() == "ALARM":
            return PracticeResult(
                "refused", "the outcome alarm is in ALARM already: no practice now"
            )
        started = self.engine.evacuate(self.zone_id, self.options)
        if started.refused is not None:
            return PracticeResult("refused", started.refused)
        self._shifted = True
        if started.exit_code != EXIT_OK:
            return self._end("failed", "the evacuation did not complete")
        deadline = self._clock() + self.duration
        while (left := deadline - self._clock()) > 0:
            self._sleep(min(self.interval, left))
            if self._alarm() == "ALARM":
                return self._end("interrupted", "the outcome alarm went into ALARM")
        return self._end("succeeded", f"{self.zone_id} was evacuated for {self.duration:g} s")

    def cancel(self, why: str) -> PracticeResult:
        """End the practice now (the operator's Ctrl-C)."""
        if not self._shifted:
            return PracticeResult("interrupted", f"{why}; nothing was changed")
        return self._end("interrupted", why)

    def _end(self, outcome: Outcome, why: str) -> PracticeResult:
        back = self.engine.recover(self.zone_id, self.options)
        self._shifted = False
        if back.exit_code != EXIT_OK:
            detail = back.refused or back.aborted or "; ".join(f.error for f in back.failed)
            return PracticeResult(
                "failed",
                f"{why}, and recovering {self.zone_id} failed ({detail}): run "
                f"`rideout recover --zone-id {self.zone_id}`",
            )
        return PracticeResult(outcome, f"{why}; {self.zone_id} recovered")


def watch_alarm(config: Config, name: str | None, zone_id: str) -> Callable[[], str | None]:
    """The state of alarm ``name`` (default: the canary alarm of ``zone_id``'s region)
    from the control plane's summary; None while it cannot be read."""
    region = next((r for r in config.regions if any(z.name == zone_id for z in r.zones)), None)
    if name is None:
        if region is None:
            raise InvalidArgument(f"no zone {zone_id!r} in this deployment")
        name = f"{region.name}-websocket-health"
    url = routes.control_plane_url(config, routes.SUMMARY)

    def state() -> str | None:
        try:
            with _http.sync_client(timeout=2.0) as http:
                alarms = http.get(url).json()["alarms"]
        except (httpx.HTTPError, ValueError, KeyError, TypeError):
            return None
        states = {a["name"]: a["state"] for a in alarms.values()}
        if name not in states:
            raise InvalidArgument(f"no alarm {name!r} (known: {', '.join(sorted(states))})")
        return str(states[name])

    return state
