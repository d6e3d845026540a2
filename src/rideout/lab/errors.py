"""The base of every error the network lab raises."""

from __future__ import annotations

from rideout.errors import RideoutError

__all__ = ["LabError"]


class LabError(RideoutError, RuntimeError):
    """Base of the errors of :mod:`rideout.lab`: the lab could not be built, changed or
    removed (not root, a command of ``ip`` failed, an unknown host or region)."""
