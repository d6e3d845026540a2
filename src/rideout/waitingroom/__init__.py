"""The virtual waiting room: queue positions, a serving counter, signed tokens, inlets,
expiry and abandonment, on the region's replicated Redis (AWS Virtual Waiting Room's
contract; docs/waiting-room.md).

:mod:`.model` is the pure core, :mod:`.store` the Redis side, :mod:`.api` the HTTP
routes (the private ones in :mod:`.private_api`, their plumbing in :mod:`.http`, the
micro-cache in :mod:`.micro_cache`, batched touches in :mod:`.touches`), :mod:`.extension`
what mounts them on a zone's app server.
"""

from __future__ import annotations

from rideout.waitingroom.errors import (
    EventExists,
    InvalidRequest,
    NotServedYet,
    PositionExpired,
    RoomClosed,
    RoomError,
    RoomNotWriter,
    RoomUnavailable,
    SessionEnded,
    UnknownEvent,
    UnknownRequest,
)
from rideout.waitingroom.model import (
    Counters,
    EventSettings,
    ExpiredPage,
    Expiry,
    ExpiryState,
    InletKind,
    InletSettings,
    Position,
    PositionState,
    TokenGrant,
)
from rideout.waitingroom.store import RoomStore

__all__ = [
    "Counters",
    "EventExists",
    "EventSettings",
    "ExpiredPage",
    "Expiry",
    "ExpiryState",
    "InletKind",
    "InletSettings",
    "InvalidRequest",
    "NotServedYet",
    "Position",
    "PositionExpired",
    "PositionState",
    "RoomClosed",
    "RoomError",
    "RoomNotWriter",
    "RoomStore",
    "RoomUnavailable",
    "SessionEnded",
    "TokenGrant",
    "UnknownEvent",
    "UnknownRequest",
]
