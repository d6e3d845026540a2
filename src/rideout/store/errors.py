"""The store's exceptions: one base, :class:`StoreError`, for everything it raises.

A leaf of the package, so :mod:`rideout.store.replication` and
:mod:`rideout.store.embedded` share the base without importing the auction store.
"""

from __future__ import annotations

from rideout.errors import RideoutError

__all__ = ["NotWriter", "StoreCorrupt", "StoreError", "StoreUnavailable"]


class StoreError(RideoutError):
    """The state store could not do what was asked."""


class StoreUnavailable(StoreError):
    """The Redis server could not be reached or refused for now: retry, or fail over."""


class NotWriter(StoreUnavailable):
    """The Redis server is a read-only replica; writes must go to the region's writer."""


class StoreCorrupt(StoreError):
    """Redis holds data that rideout did not write in this shape (type, epoch, entry)."""
