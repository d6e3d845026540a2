"""The base of the dns package's exceptions, importable without any DNS library."""

from __future__ import annotations

from rideout.errors import RideoutError

__all__ = ["DnsError"]


class DnsError(RideoutError):
    """Base of every error the dns package raises."""
