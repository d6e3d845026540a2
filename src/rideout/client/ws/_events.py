"""What the WebSocket client tells its user: the events, and the causes of a disconnect.

Plain frozen dataclasses, compared by value, for ``isinstance`` matching (or ``match``)
on what :meth:`~rideout.client.ws.AuctionClient.events` yields.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any, TypeAlias

from rideout.protocol import Position

__all__ = [
    "Acked",
    "Cause",
    "Connected",
    "Disconnected",
    "Event",
    "GaveUp",
    "HeartbeatFailed",
    "ReconnectScheduled",
    "RegionChanged",
    "StateRestored",
    "Updated",
]


class Cause(StrEnum):
    """Why a connection ended, or why a connection attempt failed."""

    HEARTBEAT_TIMEOUT = "heartbeat_timeout"
    """Nothing arrived for ``heartbeat_timeout``."""
    DEGRADED = "degraded"
    """``heartbeat_failures`` consecutive heartbeat replies were not ``pong``."""
    CLOSED = "closed"
    """The server closed the connection (see the close code)."""
    CONNECTION_LOST = "connection_lost"
    """The connection broke without a close frame."""
    CONNECT_FAILED = "connect_failed"
    """No address of the answer accepted a WebSocket."""
    RESOLVE_FAILED = "resolve_failed"
    """The name did not resolve."""
    AUTH_REJECTED = "auth_rejected"
    """The handshake was refused with 401/403, even with a freshly provided token."""
    TOKEN_FAILED = "token_failed"
    """The token provider raised."""


@dataclass(frozen=True, slots=True)
class Connected:
    """A WebSocket is open to ``address``.

    ``region`` is the serving region as known when it opened (the previous connection's,
    None at first); the new connection's first reply confirms it or emits
    :class:`RegionChanged`.
    """

    address: str
    region: str | None


@dataclass(frozen=True, slots=True)
class StateRestored:
    """A room's ``getState`` answer was applied.

    ``recovered``: the server replayed every update since the last position seen
    (``replayed`` of them were new to the client); False: the state was replaced.
    """

    room: str
    state: Any
    position: Position
    recovered: bool
    replayed: int
    region: str


@dataclass(frozen=True, slots=True)
class Updated:
    """A room changed; ``replayed`` when the update came from a ``getState`` replay."""

    room: str
    state: Any
    position: Position
    region: str
    replayed: bool = False


@dataclass(frozen=True, slots=True)
class Acked:
    """A bid's outcome.

    ``accepted`` and ``reason`` as the server decided (``too_low``, ``out_of_bounds``),
    or ``accepted=False`` with ``reason`` the error code that ended it (``bad_request``,
    ``throttled``, ``unavailable`` after ``bid_retries`` retries); ``position`` is None then.
    ``state`` is the room's state the server decided against (after the bid when
    accepted, as it stood when refused: the price that beat it), when the server said.
    """

    id: str
    accepted: bool
    reason: str | None
    position: Position | None
    room: str
    amount: int
    region: str | None
    state: Any = None


@dataclass(frozen=True, slots=True)
class RegionChanged:
    """The serving region changed (``old`` is None when it was first learnt)."""

    old: str | None
    new: str


@dataclass(frozen=True, slots=True)
class Disconnected:
    """An open connection ended; ``code``/``reason`` are the server's close frame, if any."""

    cause: Cause
    code: int | None
    reason: str
    address: str


@dataclass(frozen=True, slots=True)
class ReconnectScheduled:
    """Reconnect attempt ``attempt`` (1-based, since the last healthy connection) in ``delay`` s."""

    attempt: int
    delay: float
    cause: Cause
    code: int | None = None


@dataclass(frozen=True, slots=True)
class HeartbeatFailed:
    """The ``count``-th consecutive heartbeat reply that was not ``pong`` (``code``: its error)."""

    count: int
    code: str


@dataclass(frozen=True, slots=True)
class GaveUp:
    """The client stopped reconnecting: ``reason`` is ``max_attempts`` or ``max_disconnected``.

    The last event; :class:`~rideout.client.ws.AllReconnectsFailed` is raised after it.
    """

    reason: str
    attempts: int
    disconnected_for: float
    detail: str


Event: TypeAlias = (
    Connected
    | StateRestored
    | Updated
    | Acked
    | RegionChanged
    | Disconnected
    | ReconnectScheduled
    | HeartbeatFailed
    | GaveUp
)
