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
    "DASHBOARD_ZONES": "/v1/dashboard/zones",
    "LOGIN_CODES": "/v1/login-codes",
    "LOGIN": "/login",
    "STATUS": "/status",
    "RESOLVE": "/resolve",
    "HEALTH": "/health",
    "METRICS": "/metrics",
    "LIVE": "/live",
    "READY": "/ready",
    "OPENAPI": "/openapi.json",
    "ADMIN_MODE": "/admin/mode",
    "JWKS": "/.well-known/jwks.json",
    "BROWSER_CONFIG": "/config.json",
    "DEMO_TOKEN": "/auth/demo-token",
    # the waiting room: AWS's public paths, then rideout's private API
    "ROOM_ASSIGN_QUEUE_NUM": "/assign_queue_num",
    "ROOM_QUEUE_NUM": "/queue_num",
    "ROOM_SERVING_NUM": "/serving_num",
    "ROOM_WAITING_NUM": "/waiting_num",
    "ROOM_QUEUE_POS_EXPIRY": "/queue_pos_expiry",
    "ROOM_GENERATE_TOKEN": "/generate_token",
    "ROOM_PUBLIC_KEY": "/public_key",
    "ROOM_ESTIMATED_WAIT": "/estimated_wait",
    "ROOM_REFRESH_TOKEN": "/refresh_token",
    "ROOM_ISSUER_PATH": "/waitingroom",
    "ROOM_JWKS": "/waitingroom/.well-known/jwks.json",
    "ROOM_PRIVATE_INCREMENT": "/private/increment_serving_counter",
    "ROOM_PRIVATE_UPDATE_SESSION": "/private/update_session",
    "ROOM_PRIVATE_ACTIVE_TOKENS": "/private/num_active_tokens",
    "ROOM_PRIVATE_EXPIRED_TOKENS": "/private/expired_tokens",
    "ROOM_PRIVATE_RESET": "/private/reset_initial_state",
    "ROOM_PRIVATE_GENERATE_TOKEN": "/private/generate_token",
    "ROOM_PRIVATE_EVENTS": "/private/events",
    "ROOM_PRIVATE_EVENT": "/private/events/{event_id}",
    "ROOM_PRIVATE_EVENT_OPEN": "/private/events/{event_id}/open",
    "ROOM_PRIVATE_EVENT_CLOSE": "/private/events/{event_id}/close",
    "ZONES": "/v1/zones",
    "ZONE_EVACUATE": "/v1/zones/{zone_id}/evacuate",
    "ZONE_RECOVER": "/v1/zones/{zone_id}/recover",
    # the waiting-room page and the OpenID adapter (one issuer per event)
    "ROOM_PAGE": "/room.html",
    "OIDC_PREFIX": "/oidc/{event_id}",
    "OIDC_DISCOVERY": "/oidc/{event_id}/.well-known/openid-configuration",
    "OIDC_JWKS": "/oidc/{event_id}/.well-known/jwks.json",
    "OIDC_AUTHORIZE": "/oidc/{event_id}/authorize",
    "OIDC_ENTER": "/oidc/{event_id}/enter",
    "OIDC_WAIT": "/oidc/{event_id}/wait",
    "OIDC_RESUME": "/oidc/{event_id}/resume",
    "OIDC_TOKEN": "/oidc/{event_id}/token",
    "OIDC_USERINFO": "/oidc/{event_id}/userinfo",
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
    dns = f"http://{cp.address}:{cp.dns_metrics_port}"
    assert routes.dns_metrics_url(config, routes.METRICS) == dns + "/metrics"
    assert routes.oidc_issuer(config, "ev") == (
        f"http://{config.app_domain}:{config.app_port}/oidc/ev"
    )
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
