"""Failure detection: the canary, metrics, CloudWatch-style alarms, health checks.

The pure parts (metrics store, alarm state machine, health checks) are re-exported
here; the canary (`rideout.health.canary`: sockets, HTTP) is not imported by the
package, so importing it stays light.
"""

from __future__ import annotations

from rideout.health.alarm import (
    Alarm,
    AlarmConfig,
    AlarmState,
    Evaluation,
    StateChange,
    canary_alarm,
    evaluate,
)
from rideout.health.check import CalculatedHealthCheck, HealthCheck, HealthCheckState
from rideout.health.metrics import MetricError, MetricKey, MetricStore, aggregate

__all__ = [
    "Alarm",
    "AlarmConfig",
    "AlarmState",
    "CalculatedHealthCheck",
    "Evaluation",
    "HealthCheck",
    "HealthCheckState",
    "MetricError",
    "MetricKey",
    "MetricStore",
    "StateChange",
    "aggregate",
    "canary_alarm",
    "evaluate",
]
