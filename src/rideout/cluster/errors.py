"""The base of every error the local supervisor raises."""

from __future__ import annotations

from rideout.errors import RideoutError

__all__ = ["ClusterError"]


class ClusterError(RideoutError, RuntimeError):
    """Base of the errors of :mod:`rideout.cluster`: the local deployment could not be
    started, is already running, or did not carry out a chaos command."""
