"""Route 53 health checks: one that follows a CloudWatch alarm, and calculated ones.

A ``CLOUDWATCH_METRIC`` check (:class:`HealthCheck`) is healthy when its alarm is
``OK`` and unhealthy when it is in ``ALARM``. While the alarm has insufficient data the
check takes ``insufficient_data_health_status``: ``Healthy``, ``Unhealthy`` or
``LastKnownStatus`` (a check with no last known status counts as healthy). The seed
sets ``Unhealthy``; Route 53's default is ``LastKnownStatus``.

``inverted`` flips the status derived from the alarm. *Interpretation:* the
insufficient-data setting is "the status you want Route 53 to assign to the health
check", so ``Healthy``/``Unhealthy`` are final and not inverted, and
``LastKnownStatus`` repeats the check's last reported (already inverted) status.

A :class:`CalculatedHealthCheck` is healthy when at least ``healthy_threshold`` of its
children are (AND: all of them, OR: one), then ``inverted`` if asked.

The decisions are pure functions; :class:`HealthCheckState` remembers the last known
status of a metric check and serialises, so a restart keeps it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal, Self, get_args

from rideout.health.alarm import ALARM_STATES, AlarmState

__all__ = [
    "INSUFFICIENT_DATA_HEALTH_STATUSES",
    "CalculatedHealthCheck",
    "HealthCheck",
    "HealthCheckState",
    "InsufficientDataHealthStatus",
]

InsufficientDataHealthStatus = Literal["Healthy", "Unhealthy", "LastKnownStatus"]
INSUFFICIENT_DATA_HEALTH_STATUSES: Final[tuple[InsufficientDataHealthStatus, ...]] = get_args(
    InsufficientDataHealthStatus
)
_MAX_CHILDREN: Final = 256  # Route 53's limit


def _check_id(what: str, value: object) -> str:
    if not isinstance(value, str) or not 0 < len(value) <= 255 or not value.isprintable():
        raise ValueError(f"{what} must be 1 to 255 printable characters, not {value!r}")
    return value


@dataclass(frozen=True, slots=True)
class HealthCheck:
    """A ``CLOUDWATCH_METRIC`` health check `id` that follows the alarm `alarm_name`."""

    id: str
    alarm_name: str
    insufficient_data_health_status: InsufficientDataHealthStatus = "LastKnownStatus"
    inverted: bool = False

    def __post_init__(self) -> None:
        _check_id("health check id", self.id)
        _check_id("alarm name", self.alarm_name)
        if self.insufficient_data_health_status not in INSUFFICIENT_DATA_HEALTH_STATUSES:
            raise ValueError(
                "insufficient_data_health_status must be one of "
                f"{', '.join(INSUFFICIENT_DATA_HEALTH_STATUSES)}; "
                f"got {self.insufficient_data_health_status!r}"
            )
        if not isinstance(self.inverted, bool):
            raise ValueError(f"inverted must be a bool, not {self.inverted!r}")

    def status(self, alarm_state: AlarmState, last_known: bool | None = None) -> bool:
        """Healthy (True) or not, given the alarm's state and the check's last status."""
        if alarm_state == "OK":
            return not self.inverted
        if alarm_state == "ALARM":
            return self.inverted
        if alarm_state != "INSUFFICIENT_DATA":
            raise ValueError(f"alarm state must be one of {', '.join(ALARM_STATES)}")
        setting = self.insufficient_data_health_status
        if setting == "Healthy":
            return True
        if setting == "Unhealthy":
            return False
        return True if last_known is None else last_known


@dataclass(frozen=True, slots=True)
class CalculatedHealthCheck:
    """Healthy when at least `healthy_threshold` of `children` (health check ids) are."""

    id: str
    children: tuple[str, ...]
    healthy_threshold: int
    inverted: bool = False

    def __post_init__(self) -> None:
        _check_id("health check id", self.id)
        children = tuple(self.children)
        if len(children) > _MAX_CHILDREN:
            raise ValueError(f"at most {_MAX_CHILDREN} children, got {len(children)}")
        for child in children:
            _check_id("child health check id", child)
        if len(set(children)) != len(children):
            raise ValueError(f"children must be distinct: {children}")
        if self.id in children:
            raise ValueError(f"health check {self.id!r} cannot be its own child")
        object.__setattr__(self, "children", children)
        t = self.healthy_threshold
        if isinstance(t, bool) or not isinstance(t, int) or not 0 <= t <= len(children):
            raise ValueError(
                f"healthy_threshold must be an integer from 0 to {len(children)}, not {t!r}"
            )
        if not isinstance(self.inverted, bool):
            raise ValueError(f"inverted must be a bool, not {self.inverted!r}")

    @classmethod
    def all_of(cls, id: str, children: Sequence[str], *, inverted: bool = False) -> Self:
        """AND: healthy when every child is."""
        return cls(id, tuple(children), len(children), inverted)

    @classmethod
    def any_of(cls, id: str, children: Sequence[str], *, inverted: bool = False) -> Self:
        """OR: healthy when at least one child is (no children: threshold 0, always healthy)."""
        return cls(id, tuple(children), min(1, len(children)), inverted)

    def status(self, child_status: Mapping[str, bool]) -> bool:
        """Healthy or not given every child's status; ValueError naming a missing child."""
        missing = [c for c in self.children if c not in child_status]
        if missing:
            raise ValueError(f"no status for child health checks {missing} of {self.id!r}")
        healthy = sum(1 for c in self.children if child_status[c])
        return (healthy >= self.healthy_threshold) != self.inverted


class HealthCheckState:
    """A metric health check with its last known status, updated from alarm states."""

    def __init__(self, check: HealthCheck) -> None:
        if not isinstance(check, HealthCheck):
            raise TypeError(f"check must be a HealthCheck, not {type(check).__name__}")
        self.check = check
        self.last_known: bool | None = None
        self.changed_at: float | None = None

    def __repr__(self) -> str:
        return f"<HealthCheckState {self.check.id} healthy={self.healthy}>"

    @property
    def healthy(self) -> bool:
        """The current status (True before the first observation, like a new check)."""
        return True if self.last_known is None else self.last_known

    def observe(self, alarm_state: AlarmState, now: float) -> bool:
        """Take the alarm's state at `now`; returns the (new) status."""
        status = self.check.status(alarm_state, self.last_known)
        if status != self.last_known:
            self.changed_at = now
        self.last_known = status
        return status

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready state: the check and its last known status."""
        return {
            "id": self.check.id,
            "alarm_name": self.check.alarm_name,
            "insufficient_data_health_status": self.check.insufficient_data_health_status,
            "inverted": self.check.inverted,
            "last_known": self.last_known,
            "changed_at": self.changed_at,
        }

    @classmethod
    def from_dict(
        cls, data: Mapping[str, Any], *, check: HealthCheck | None = None
    ) -> HealthCheckState:
        """Restore a state saved by :meth:`to_dict` (onto `check` if given)."""
        if not isinstance(data, Mapping):
            raise ValueError(f"a saved health check is an object, not {type(data).__name__}")
        try:
            if check is None:
                check = HealthCheck(
                    data["id"],
                    data["alarm_name"],
                    data["insufficient_data_health_status"],
                    data["inverted"],
                )
            last_known = data["last_known"]
            changed_at = data["changed_at"]
        except KeyError as e:
            raise ValueError(f"saved health check has no {e}") from None
        if last_known is not None and not isinstance(last_known, bool):
            raise ValueError(f"last_known must be true, false or null, not {last_known!r}")
        if changed_at is not None and (
            isinstance(changed_at, bool)
            or not isinstance(changed_at, int | float)
            or not math.isfinite(changed_at)
        ):
            raise ValueError(f"changed_at must be a finite number or null, not {changed_at!r}")
        state = cls(check)
        state.last_known = last_known
        state.changed_at = None if changed_at is None else float(changed_at)
        return state
