"""The WebSocket client's counters (kept by the sans-I/O core and planner)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ClientStats"]


@dataclass(slots=True)
class ClientStats:
    """Counters since the client was created (plain attributes, read at will)."""

    connects: int = 0
    disconnects: int = 0
    reconnect_attempts: int = 0
    time_disconnected: float = 0.0
    """Seconds without an open connection, connection attempts included."""
    heartbeat_failures: int = 0
    heartbeat_timeouts: int = 0
    degraded_closes: int = 0
    restores: int = 0
    recovered_restores: int = 0
    updates_replayed: int = 0
    duplicates_ignored: int = 0
    bids_sent: int = 0
    bids_resent: int = 0
    bids_retried: int = 0
    bids_acked: int = 0
    bids_rejected: int = 0
    events_dropped: int = 0
    """Events an :class:`~rideout.client.ws.EventStream` dropped, its reader behind."""
    tickets_received: int = 0
    """Resumption tickets the servers handed out."""
    tickets_presented: int = 0
    """Handshakes that presented a resumption ticket instead of the token."""
    tickets_refused: int = 0
    """Of those, refused: the client then presented its token."""
