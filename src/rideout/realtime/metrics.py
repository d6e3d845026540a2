"""The app server's Prometheus metrics, in a registry of its own (no globals).

Names are stable: dashboards and alerts depend on them.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from rideout._metrics import LabelCache

__all__ = ["AppMetrics"]

_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class AppMetrics:
    """Everything one app server process counts."""

    def __init__(self, region: str, zone: str) -> None:
        r = self.registry = CollectorRegistry()
        self.info = Gauge(
            "rideout_app_info",
            "Which region and zone this app server serves.",
            ["region", "zone"],
            registry=r,
        )
        self.info.labels(region, zone).set(1)
        self.health_checks = Counter(
            "rideout_health_checks", "Health checks answered, by outcome.", ["outcome"], registry=r
        )
        self.redis_up = Gauge(
            "rideout_redis_up",
            "1 when the region's Redis answered the last health check.",
            registry=r,
        )
        self.epoch = Gauge("rideout_epoch", "The writer epoch this server believes in.", registry=r)
        self.connections = Gauge(
            "rideout_ws_connections", "Open WebSocket connections.", registry=r
        )
        self.handshakes = Counter(
            "rideout_ws_handshakes", "WebSocket handshakes, by outcome.", ["outcome"], registry=r
        )
        self.credentials = Counter(
            "rideout_ws_credentials",
            "Accepted handshakes, by credential: token (the auction's own), ticket (a "
            "resumption ticket) or authority (another issuer's, such as the waiting room's).",
            ["kind"],
            registry=r,
        )
        self.messages = Counter(
            "rideout_ws_messages",
            "Messages received, by action and outcome.",
            ["action", "outcome"],
            registry=r,
        )
        self.closes = Counter(
            "rideout_ws_closes",
            "Connections closed by the server, by close code.",
            ["code"],
            registry=r,
        )
        self.loop_lag = Gauge(
            "rideout_event_loop_lag_seconds",
            "The worst lag of this process's event loop in the last 2 s: how late a timer "
            "due every 50 ms ran (every message on the loop waited as long).",
            registry=r,
        )
        self.fanout_latency = Histogram(
            "rideout_fanout_latency_seconds",
            "From a change's append to its stream until it is queued for every local subscriber.",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.replays = Counter(
            "rideout_replays",
            "getState requests with a position, by outcome.",
            ["outcome"],
            registry=r,
        )
        self.shed = Counter(
            "rideout_shed",
            "Work this server refused to stay answering its canary, by what (connection, "
            "bid, replay) and why (loop_lag: its event loop runs late; queue_full, "
            "queue_timeout: replays' admission, realtime.admission).",
            ["work", "reason"],
            registry=r,
        )
        self.state_reads = Counter(
            "rideout_state_reads",
            "getState's reads of a room, by how: redis (a read of its own), shared (it "
            "waited for an identical read in flight: realtime.coalesce_reads), again (a "
            "shared read older than the connection's subscription, read again).",
            ["how"],
            registry=r,
        )
        self.slow_consumers = Counter(
            "rideout_slow_consumers", "Connections closed for falling behind (1013).", registry=r
        )
        self.store_errors = Counter(
            "rideout_store_errors",
            "Failed calls to the state store, by kind.",
            ["kind"],
            registry=r,
        )
        self.backend_up = Gauge(
            "rideout_store_backend_up",
            "1 while this app server's latest call to its state store went through "
            "(0: heartbeats are answered with error/unavailable).",
            registry=r,
        )
        self.backend_up.set(1)
        self.sync_replication = Counter(
            "rideout_sync_replication",
            "Accepted bids in sync mode, by whether the replica had them before the ack.",
            ["outcome"], registry=r,
        )  # fmt: skip
        # One series per mode, set by the zone (rideout.realtime.zone.ZoneServer).
        self.modes = Gauge(
            "rideout_zone_mode", "1 for the zone's current admin mode.", ["mode"], registry=r
        )
        self._messages = LabelCache(self.messages)

    def count_message(self, action: str, outcome: str) -> None:
        """Count one received message (this runs for every message)."""
        self._messages(action, outcome).inc()
