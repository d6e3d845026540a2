"""Route 53 health checks: following an alarm, last known status, calculated checks."""

from __future__ import annotations

import json

import pytest

from rideout.health.alarm import Alarm, AlarmState, canary_alarm
from rideout.health.check import (
    CalculatedHealthCheck,
    HealthCheck,
    HealthCheckState,
    InsufficientDataHealthStatus,
)

# (setting, last_known, expected status with INSUFFICIENT_DATA)
INSUFFICIENT = [
    ("Healthy", None, True),
    ("Healthy", False, True),
    ("Unhealthy", None, False),
    ("Unhealthy", True, False),
    ("LastKnownStatus", None, True),  # a new check counts as healthy
    ("LastKnownStatus", True, True),
    ("LastKnownStatus", False, False),
]


@pytest.mark.parametrize(("setting", "last_known", "expected"), INSUFFICIENT)
@pytest.mark.parametrize("inverted", [False, True])
def test_insufficient_data(
    setting: InsufficientDataHealthStatus, last_known: bool | None, expected: bool, inverted: bool
) -> None:
    # the setting is the status assigned to the check: not inverted
    check = HealthCheck("hc", "alarm", setting, inverted)
    assert check.status("INSUFFICIENT_DATA", last_known) is expected


@pytest.mark.parametrize("setting", ["Healthy", "Unhealthy", "LastKnownStatus"])
@pytest.mark.parametrize("last_known", [None, True, False])
def test_ok_and_alarm_follow_the_alarm(
    setting: InsufficientDataHealthStatus, last_known: bool | None
) -> None:
    check = HealthCheck("hc", "alarm", setting)
    assert check.status("OK", last_known) is True
    assert check.status("ALARM", last_known) is False
    inverted = HealthCheck("hc", "alarm", setting, inverted=True)
    assert inverted.status("OK", last_known) is False
    assert inverted.status("ALARM", last_known) is True


def test_validation() -> None:
    with pytest.raises(ValueError, match="insufficient_data_health_status"):
        HealthCheck("hc", "alarm", "Maybe")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="health check id"):
        HealthCheck("", "alarm")
    with pytest.raises(ValueError, match="alarm state"):
        HealthCheck("hc", "alarm").status("BROKEN")  # type: ignore[arg-type]


def test_state_remembers_last_known() -> None:
    state = HealthCheckState(HealthCheck("hc", "alarm", "LastKnownStatus"))
    assert state.healthy is True
    assert state.last_known is None
    assert state.observe("INSUFFICIENT_DATA", 1.0) is True  # new: healthy
    assert state.observe("ALARM", 2.0) is False
    assert state.changed_at == 2.0
    assert state.observe("INSUFFICIENT_DATA", 3.0) is False  # last known: unhealthy
    assert state.changed_at == 2.0
    assert state.observe("OK", 4.0) is True
    assert state.observe("INSUFFICIENT_DATA", 5.0) is True
    assert state.healthy is True


def test_state_round_trip() -> None:
    state = HealthCheckState(HealthCheck("hc", "alarm", "LastKnownStatus", inverted=True))
    state.observe("OK", 7.0)
    restored = HealthCheckState.from_dict(json.loads(json.dumps(state.to_dict())))
    assert restored.check == state.check
    assert (restored.last_known, restored.changed_at) == (False, 7.0)
    assert restored.observe("INSUFFICIENT_DATA", 8.0) is False
    other = HealthCheck("hc", "alarm", "Healthy")
    assert HealthCheckState.from_dict(state.to_dict(), check=other).check is other
    for broken in (
        {},
        {**state.to_dict(), "last_known": "yes"},
        {**state.to_dict(), "changed_at": "x"},
    ):
        with pytest.raises(ValueError):  # noqa: PT011 - several messages
            HealthCheckState.from_dict(broken)


def test_seed_loop_alarm_to_check() -> None:
    """The seed: breaching alarm, check with InsufficientDataHealthStatus Unhealthy."""
    alarm = Alarm(canary_alarm("us-east-1", 60.0))
    state = HealthCheckState(HealthCheck("us-east-1", alarm.config.name, "Unhealthy"))
    assert state.observe(alarm.state, 0.0) is False  # a new alarm has no data yet
    seen: list[AlarmState] = []
    history: list[float | None] = []
    for i, value in enumerate([1, 1, 0, 0, 1, 1, 1, 1, 1, 1]):
        history.append(value)
        alarm.update(float(i), history)
        seen.append(alarm.state)
        state.observe(alarm.state, float(i))
    assert seen[3] == "ALARM"
    assert state.healthy is True
    assert state.changed_at == 9.0


# ------------------------------------------------------------------ calculated


def statuses(**kw: bool) -> dict[str, bool]:
    return dict(kw)


def test_calculated_at_least_x_of_y() -> None:
    check = CalculatedHealthCheck("calc", ("a", "b", "c"), 2)
    assert check.status(statuses(a=True, b=True, c=False)) is True
    assert check.status(statuses(a=True, b=False, c=False)) is False
    inverted = CalculatedHealthCheck("calc", ("a", "b", "c"), 2, inverted=True)
    assert inverted.status(statuses(a=True, b=False, c=False)) is True


def test_calculated_and_or() -> None:
    both = CalculatedHealthCheck.all_of("and", ["a", "b"])
    either = CalculatedHealthCheck.any_of("or", ["a", "b"])
    assert both.healthy_threshold == 2
    assert either.healthy_threshold == 1
    for a in (True, False):
        for b in (True, False):
            assert both.status(statuses(a=a, b=b)) is (a and b)
            assert either.status(statuses(a=a, b=b)) is (a or b)
    nobody = CalculatedHealthCheck.any_of("none", [])
    assert nobody.status({}) is True  # threshold 0: always healthy
    assert CalculatedHealthCheck("zero", ("a",), 0).status(statuses(a=False)) is True


def test_calculated_validation() -> None:
    with pytest.raises(ValueError, match="healthy_threshold"):
        CalculatedHealthCheck("c", ("a", "b"), 3)
    with pytest.raises(ValueError, match="distinct"):
        CalculatedHealthCheck("c", ("a", "a"), 1)
    with pytest.raises(ValueError, match="own child"):
        CalculatedHealthCheck("c", ("c",), 1)
    with pytest.raises(ValueError, match="no status for child"):
        CalculatedHealthCheck("c", ("a", "b"), 1).status(statuses(a=True))
