"""The base of every error the client package raises."""

from __future__ import annotations

from rideout.errors import RideoutError

__all__ = ["ClientError"]


class ClientError(RideoutError):
    """Base of the errors of :mod:`rideout.client` (WebSocket, HTTP and name resolution)."""
