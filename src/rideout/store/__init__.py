"""The state engine: Redis key names, embedded servers, replication roles.

Everything the package raises is a :class:`StoreError`.
"""

from __future__ import annotations

from rideout.store.errors import StoreError

__all__ = ["StoreError"]
