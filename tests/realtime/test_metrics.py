"""The app server's metrics: a registry per server, stable names."""

from __future__ import annotations

from rideout.realtime.metrics import AppMetrics

NAMES = {
    "rideout_app_info", "rideout_health_checks", "rideout_redis_up", "rideout_epoch",
    "rideout_ws_connections", "rideout_ws_handshakes", "rideout_ws_messages",
    "rideout_ws_closes", "rideout_fanout_latency_seconds", "rideout_replays",
    "rideout_slow_consumers", "rideout_shed", "rideout_store_errors", "rideout_sync_replication",
    "rideout_zone_mode", "rideout_store_backend_up", "rideout_event_loop_lag_seconds",
    "rideout_ws_credentials", "rideout_state_reads",
}  # fmt: skip


def test_the_names_dashboards_depend_on() -> None:
    assert {family.name for family in AppMetrics("r", "z").registry.collect()} == NAMES


def test_each_server_counts_in_a_registry_of_its_own() -> None:
    a, b = AppMetrics("us-east-1", "use1-az1"), AppMetrics("us-east-1", "use1-az1")
    a.count_message("bid", "accepted")
    a.count_message("bid", "accepted")
    a.count_message("heartbeat", "ok")
    labels = {"action": "bid", "outcome": "accepted"}
    assert a.registry.get_sample_value("rideout_ws_messages_total", labels) == 2.0
    assert b.registry.get_sample_value("rideout_ws_messages_total", labels) is None
    info = {"region": "us-east-1", "zone": "use1-az1"}
    assert a.registry.get_sample_value("rideout_app_info", info) == 1.0
