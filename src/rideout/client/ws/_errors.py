"""The errors of the WebSocket client, all :class:`~rideout.client.errors.ClientError`."""

from __future__ import annotations

from rideout.client.errors import ClientError
from rideout.client.ws._events import GaveUp

__all__ = ["AllReconnectsFailed", "ClientClosed", "QueueFull"]


class QueueFull(ClientError):
    """``max_queued_bids`` bids already await their ack; nothing was queued."""


class ClientClosed(ClientError):
    """The client was stopped (or never can send again); a waiting bid's fate is unknown."""


class AllReconnectsFailed(ClientError):
    """Raised by :meth:`~rideout.client.ws.AuctionClient.run` (and ``async with``), and
    by :meth:`~rideout.client.ws.AuctionClient.bid` afterwards, when the client stopped
    reconnecting (``max_attempts`` or ``max_disconnected``); ``event`` is the
    :class:`~rideout.client.ws.GaveUp` event emitted just before."""

    def __init__(self, event: GaveUp, name: str = "") -> None:
        self.event = event
        self.name = name
        super().__init__(event, name)

    def __str__(self) -> str:
        e = self.event
        target = f" to {self.name!r}" if self.name else ""
        return (
            f"gave up reconnecting{target} after {e.attempts} attempts and "
            f"{e.disconnected_for:.1f} s without a healthy connection ({e.reason}); "
            f"last failure: {e.detail}"
        )
