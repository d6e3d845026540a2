"""The cross-part HTTP paths (a wire contract: pinned here) and the URLs built from config."""

from __future__ import annotations

from collections.abc import Callable

from rideout import routes
from rideout.config import Config

PATHS = {
    "METRICS_INGEST": "/v1/metrics",
    "WRITER": "/v1/writer",
    "SUMMARY": "/v1/summary",
    "STREAM": "/v1/stream",
    "DASHBOARD": "/v1/dashboard",
    "CHAOS": "/v1/chaos",
    "LOGIN_CODES": "/v1/login-codes",
    "LOGIN": "/login",
    "STATUS": "/status",
    "RESOLVE": "/resolve",
    "HEALTH": "/health",
    "METRICS": "/metrics",
    "LIVE": "/live",
    "READY": "/ready",
    "ADMIN_MODE": "/admin/mode",
}


def test_every_path_is_pinned_and_distinct() -> None:
    exported = {name for name in routes.__all__ if name.isupper()}
    assert exported == set(PATHS)
    assert {name: getattr(routes, name) for name in exported} == PATHS
    assert len(set(PATHS.values())) == len(PATHS)


def test_urls_from_the_config(make_config: Callable[..., Config]) -> None:
    config = make_config()
    cp = config.control_plane
    base = f"http://{cp.address}:{cp.port}"
    assert routes.control_plane_url(config) == base
    assert routes.control_plane_url(config, routes.WRITER) == base + "/v1/writer"
    zone = config.primary.zones[1].address
    assert routes.zone_url(config, zone) == f"http://{zone}:{config.app_port}"
    assert routes.zone_url(config, zone, routes.HEALTH) == f"http://{zone}:{config.app_port}/health"


def test_control_plane_urls_from_the_config(make_config: Callable[..., Config]) -> None:
    config = make_config(
        mode="external", control_plane={"urls": ["http://10.0.0.5:9000/", "https://cp.example"]}
    )
    assert routes.control_plane_url(config, routes.WRITER) == "http://10.0.0.5:9000/v1/writer"
    assert routes.control_plane_urls(config, routes.METRICS_INGEST) == (
        "http://10.0.0.5:9000/v1/metrics",
        "https://cp.example/v1/metrics",
    )
