"""Moving the writer between regions: failover, failback, fencing, failback damping."""

from __future__ import annotations

from rideout.failover.controller import (
    ControllerState,
    Decision,
    FailoverController,
    FailoverEvent,
    damping_policy,
    decide,
    repeats_note,
)
from rideout.failover.damping import DampingPolicy, DampingState

__all__ = [
    "ControllerState",
    "DampingPolicy",
    "DampingState",
    "Decision",
    "FailoverController",
    "FailoverEvent",
    "damping_policy",
    "decide",
    "repeats_note",
]
