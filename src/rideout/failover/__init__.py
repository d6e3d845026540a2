"""Moving the writer between regions: failover, failback, fencing."""

from __future__ import annotations

from rideout.failover.controller import (
    ControllerState,
    Decision,
    FailoverController,
    FailoverEvent,
    decide,
)

__all__ = ["ControllerState", "Decision", "FailoverController", "FailoverEvent", "decide"]
