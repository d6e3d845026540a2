"""The WebSocket client's Prometheus counters: names, labels, one object per registry."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from rideout.client.ws import (
    AuctionClientMetrics,
    Cause,
    Connected,
    Disconnected,
    HeartbeatFailed,
    ReconnectScheduled,
)


def test_events_are_counted_under_stable_names() -> None:
    registry = CollectorRegistry()
    metrics = AuctionClientMetrics(registry)
    for event in (
        Connected("127.0.1.1", None),  # not counted
        HeartbeatFailed(1, "unavailable"),
        Disconnected(Cause.DEGRADED, None, "", "127.0.1.1"),
        Disconnected(Cause.CLOSED, 1012, "draining", "127.0.1.2"),
        Disconnected(Cause.CLOSED, 1012, "draining", "127.0.1.1"),
        ReconnectScheduled(1, 0.0, Cause.CLOSED, 1012),
    ):
        metrics.count(event)
    metrics.count_disconnected(1.5)
    metrics.count_disconnected(0.25)
    value = registry.get_sample_value
    assert value("rideout_ws_client_heartbeat_failures_total") == 1
    assert value("rideout_ws_client_disconnects_total", {"cause": "degraded"}) == 1
    assert value("rideout_ws_client_disconnects_total", {"cause": "closed"}) == 2
    assert value("rideout_ws_client_reconnect_attempts_total") == 1
    assert value("rideout_ws_client_disconnected_seconds_total") == 1.75


def test_one_object_per_registry() -> None:
    """A registry holds each name once: share the object, do not make another."""
    registry = CollectorRegistry()
    assert AuctionClientMetrics(registry).registry is registry
    with pytest.raises(ValueError, match="Duplicated timeseries"):
        AuctionClientMetrics(registry)
    assert isinstance(AuctionClientMetrics().registry, CollectorRegistry)
