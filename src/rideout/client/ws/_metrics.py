"""The WebSocket client's Prometheus counters: one object, shared by many clients."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter

from rideout._metrics import LabelCache
from rideout.client.ws._events import Disconnected, Event, HeartbeatFailed, ReconnectScheduled

__all__ = ["AuctionClientMetrics"]


class AuctionClientMetrics:
    """The WebSocket client's Prometheus counters, in ``registry`` (a new one by default).

    Names are stable: ``rideout_ws_client_reconnect_attempts_total``,
    ``rideout_ws_client_disconnects_total{cause}`` (a :class:`~rideout.client.ws.Cause`),
    ``rideout_ws_client_disconnected_seconds_total`` and
    ``rideout_ws_client_heartbeat_failures_total``. Create one per registry and pass it
    to every :class:`~rideout.client.ws.AuctionClient` (``metrics=``) to count them
    together: a registry refuses a second set of the same names.
    """

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        r = self.registry = registry if registry is not None else CollectorRegistry()
        self.reconnect_attempts = Counter(
            "rideout_ws_client_reconnect_attempts_total",
            "Reconnect attempts scheduled",
            registry=r,
        )
        self.disconnects = Counter(
            "rideout_ws_client_disconnects_total",
            "Connections lost, by cause",
            ["cause"],
            registry=r,
        )
        self.disconnected_seconds = Counter(
            "rideout_ws_client_disconnected_seconds_total",
            "Seconds without an open connection",
            registry=r,
        )
        self.heartbeat_failures = Counter(
            "rideout_ws_client_heartbeat_failures_total",
            "Heartbeat replies that were not pong",
            registry=r,
        )
        self._disconnects = LabelCache(self.disconnects)

    def count(self, event: Event) -> None:
        """Count what ``event`` says: a reconnect scheduled, a disconnect, a bad heartbeat."""
        if isinstance(event, ReconnectScheduled):
            self.reconnect_attempts.inc()
        elif isinstance(event, Disconnected):
            self._disconnects(event.cause.value).inc()
        elif isinstance(event, HeartbeatFailed):
            self.heartbeat_failures.inc()

    def count_disconnected(self, seconds: float) -> None:
        """Count ``seconds`` spent without an open connection (reported at each connect)."""
        self.disconnected_seconds.inc(seconds)
