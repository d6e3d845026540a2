"""Every HTTP path one rideout part calls on another, and the URLs built from config.

The servers mount these paths and the callers build their URLs here, so a path is
written once (as :mod:`rideout.store.keys` does for Redis keys).
"""

from __future__ import annotations

from typing import Final

from rideout.config import Config

__all__ = [
    "ADMIN_MODE",
    "CHAOS",
    "DASHBOARD",
    "HEALTH",
    "LOGIN",
    "LOGIN_CODES",
    "METRICS",
    "METRICS_INGEST",
    "RESOLVE",
    "ROOM_ASSIGN_QUEUE_NUM",
    "ROOM_ESTIMATED_WAIT",
    "ROOM_GENERATE_TOKEN",
    "ROOM_ISSUER_PATH",
    "ROOM_JWKS",
    "ROOM_PRIVATE_ACTIVE_TOKENS",
    "ROOM_PRIVATE_EVENT",
    "ROOM_PRIVATE_EVENTS",
    "ROOM_PRIVATE_EVENT_CLOSE",
    "ROOM_PRIVATE_EVENT_OPEN",
    "ROOM_PRIVATE_EXPIRED_TOKENS",
    "ROOM_PRIVATE_GENERATE_TOKEN",
    "ROOM_PRIVATE_INCREMENT",
    "ROOM_PRIVATE_RESET",
    "ROOM_PRIVATE_UPDATE_SESSION",
    "ROOM_PUBLIC_KEY",
    "ROOM_QUEUE_NUM",
    "ROOM_QUEUE_POS_EXPIRY",
    "ROOM_SERVING_NUM",
    "ROOM_WAITING_NUM",
    "STATUS",
    "STREAM",
    "SUMMARY",
    "WRITER",
    "control_plane_url",
    "dns_metrics_url",
    "room_issuer",
    "zone_url",
]

# The control plane.
METRICS_INGEST: Final = "/v1/metrics"
"""POST: the canaries' PutMetricData-shaped datapoints."""
WRITER: Final = "/v1/writer"
"""GET: ``{region, epoch}``, what app servers fence their writes with."""
SUMMARY: Final = "/v1/summary"
STREAM: Final = "/v1/stream"
DASHBOARD: Final = "/v1/dashboard"
"""GET, same origin: what the dashboard's script needs (chaos on or off, the session's
CSRF token); never a credential beyond that."""
CHAOS: Final = "/v1/chaos"
LOGIN_CODES: Final = "/v1/login-codes"
"""POST, admin token: a one-time dashboard login link (for ``rideout dashboard login``)."""
LOGIN: Final = "/login"
"""GET ``?code=``: redeem a login link for an operator session cookie."""
STATUS: Final = "/status"
RESOLVE: Final = "/resolve"
"""GET: DNS-over-HTTPS JSON."""

# Every server.
HEALTH: Final = "/health"
METRICS: Final = "/metrics"

# An app server.
ADMIN_MODE: Final = "/admin/mode"

# The waiting room (rideout.waitingroom.api), on every app server: the public API at
# AWS Virtual Waiting Room's paths, plus rideout's own.
ROOM_ASSIGN_QUEUE_NUM: Final = "/assign_queue_num"
"""POST ``{event_id}``: a queue position (AWS's public API, as its code behaves)."""
ROOM_QUEUE_NUM: Final = "/queue_num"
ROOM_SERVING_NUM: Final = "/serving_num"
ROOM_WAITING_NUM: Final = "/waiting_num"
ROOM_QUEUE_POS_EXPIRY: Final = "/queue_pos_expiry"
ROOM_GENERATE_TOKEN: Final = "/generate_token"
ROOM_PUBLIC_KEY: Final = "/public_key"
ROOM_ESTIMATED_WAIT: Final = "/estimated_wait"
ROOM_ISSUER_PATH: Final = "/waitingroom"
"""The room tokens' ``iss`` is the app domain's URL with this path (AWS's is its API
stage's URL, ``https://DOMAIN/api``); the room's JWKS is under it."""
ROOM_JWKS: Final = ROOM_ISSUER_PATH + "/.well-known/jwks.json"
"""GET: the room's current and previous public keys (``/.well-known/jwks.json`` at the
root is the auction's own keys)."""

ROOM_PRIVATE_INCREMENT: Final = "/private/increment_serving_counter"
"""The private API (the deployment admin token as a bearer credential)."""
ROOM_PRIVATE_UPDATE_SESSION: Final = "/private/update_session"
ROOM_PRIVATE_ACTIVE_TOKENS: Final = "/private/num_active_tokens"
ROOM_PRIVATE_EXPIRED_TOKENS: Final = "/private/expired_tokens"
ROOM_PRIVATE_RESET: Final = "/private/reset_initial_state"
ROOM_PRIVATE_GENERATE_TOKEN: Final = "/private/generate_token"
ROOM_PRIVATE_EVENTS: Final = "/private/events"
ROOM_PRIVATE_EVENT: Final = "/private/events/{event_id}"
ROOM_PRIVATE_EVENT_OPEN: Final = "/private/events/{event_id}/open"
ROOM_PRIVATE_EVENT_CLOSE: Final = "/private/events/{event_id}/close"


def control_plane_url(config: Config, path: str = "") -> str:
    """The control plane's base URL, or the URL of ``path`` on it."""
    cp = config.control_plane
    return f"http://{cp.address}:{cp.port}{path}"


def dns_metrics_url(config: Config, path: str = "") -> str:
    """The base URL of `rideout dns`'s HTTP port (/metrics, /health), or of ``path`` on it."""
    cp = config.control_plane
    return f"http://{cp.address}:{cp.dns_metrics_port}{path}"


def room_issuer(config: Config) -> str:
    """The ``iss`` of the waiting room's tokens: the same in every region and zone."""
    return f"http://{config.app_domain}:{config.app_port}{ROOM_ISSUER_PATH}"


def zone_url(config: Config, address: str, path: str = "") -> str:
    """The base URL of the app server at ``address``, or the URL of ``path`` on it."""
    return f"http://{address}:{config.app_port}{path}"
