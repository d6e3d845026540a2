"""The base of every error the control plane raises."""

from __future__ import annotations

from rideout.errors import RideoutError

__all__ = ["ChaosFailed", "ControlPlaneError", "IngestError", "IngestForbidden"]


class ControlPlaneError(RideoutError):
    """Base of the errors of :mod:`rideout.controlplane`."""


class IngestError(ControlPlaneError, ValueError):
    """A PutMetricData request that cannot be stored; the message says why."""


class IngestForbidden(ControlPlaneError):
    """Datapoints the request's credential may not speak for (another region's)."""


class ChaosFailed(ControlPlaneError):
    """A chaos port could not run the command; the message says why."""
