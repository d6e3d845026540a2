"""The drills' errors: :class:`DrillError` is the one base of :mod:`rideout.drill`'s."""

from __future__ import annotations

from rideout.errors import RideoutError

__all__ = ["DrillError"]


class DrillError(RideoutError, RuntimeError):
    """The drill could not run (a refused option, a deployment that never got healthy).
    The one base of :mod:`rideout.drill`'s errors."""
