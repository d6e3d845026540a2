"""Every HTTP path one rideout part calls on another, and the URLs built from config.

The servers mount these paths and the callers build their URLs here, so a path is
written once (as :mod:`rideout.store.keys` does for Redis keys).
"""

from __future__ import annotations

from typing import Final

from rideout.config import Config

__all__ = [
    "ADMIN_MODE",
    "BROWSER_CONFIG",
    "CHAOS",
    "DASHBOARD",
    "DASHBOARD_ZONES",
    "DEMO_TOKEN",
    "HEALTH",
    "JWKS",
    "LIVE",
    "LOGIN",
    "LOGIN_CODES",
    "METRICS",
    "METRICS_INGEST",
    "OIDC_AUTHORIZE",
    "OIDC_DISCOVERY",
    "OIDC_ENTER",
    "OIDC_JWKS",
    "OIDC_PREFIX",
    "OIDC_RESUME",
    "OIDC_TOKEN",
    "OIDC_USERINFO",
    "OIDC_WAIT",
    "OPENAPI",
    "READY",
    "RESOLVE",
    "ROOM_ASSIGN_QUEUE_NUM",
    "ROOM_ESTIMATED_WAIT",
    "ROOM_GENERATE_TOKEN",
    "ROOM_ISSUER_PATH",
    "ROOM_JWKS",
    "ROOM_PAGE",
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
    "ROOM_REFRESH_TOKEN",
    "ROOM_SERVING_NUM",
    "ROOM_WAITING_NUM",
    "STATUS",
    "STREAM",
    "SUMMARY",
    "WRITER",
    "ZONES",
    "ZONE_EVACUATE",
    "ZONE_RECOVER",
    "control_plane_url",
    "control_plane_urls",
    "dns_metrics_url",
    "oidc_issuer",
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
DASHBOARD_ZONES: Final = "/v1/dashboard/zones"
"""POST ``{op: "evacuate" | "recover", zone}``, an operator session (as ``/v1/chaos``):
the dashboard's zone buttons, through the evacuation engine and its ledger."""
CHAOS: Final = "/v1/chaos"
LOGIN_CODES: Final = "/v1/login-codes"
"""POST, admin token: a one-time dashboard login link (for ``rideout dashboard login``)."""
LOGIN: Final = "/login"
"""GET ``?code=``: redeem a login link for an operator session cookie."""
STATUS: Final = "/status"
RESOLVE: Final = "/resolve"
"""GET: DNS-over-HTTPS JSON."""

ZONES: Final = "/v1/zones"
"""GET: every zone, evacuated or not (and why, since when, until when)."""
ZONE_EVACUATE: Final = "/v1/zones/{zone_id}/evacuate"
"""POST, admin token: stop answering the zone's address in DNS and drain its clients."""
ZONE_RECOVER: Final = "/v1/zones/{zone_id}/recover"
"""POST, admin token: answer the zone's address again."""

# Every server.
HEALTH: Final = "/health"
METRICS: Final = "/metrics"
LIVE: Final = "/live"
"""GET: 200 while the process runs its loop (an orchestrator restarts it otherwise)."""
READY: Final = "/ready"
"""GET: 200 while the process can do its job (send it traffic), else 503 and why."""

OPENAPI: Final = "/openapi.json"
"""GET: the server's OpenAPI 3.1 document (an app server's, or the control plane's)."""

# An app server.
ADMIN_MODE: Final = "/admin/mode"
JWKS: Final = "/.well-known/jwks.json"
"""GET: the auction's token keys (the room's are at :data:`ROOM_JWKS`)."""
BROWSER_CONFIG: Final = "/config.json"
"""GET: what the auction page needs (the name to resolve, where, the timings)."""
DEMO_TOKEN: Final = "/auth/demo-token"
"""POST ``{name}``: the demo page's sign-in (``[auth] demo_tokens``)."""

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
ROOM_REFRESH_TOKEN: Final = "/refresh_token"
"""POST ``{event_id, refresh_token}``: renew an active session (rideout's; AWS has none)."""
ROOM_ISSUER_PATH: Final = "/waitingroom"
"""The room tokens' ``iss`` is the app domain's URL with this path (AWS's is its API
stage's URL, ``https://DOMAIN/api``); the room's JWKS is under it."""
ROOM_JWKS: Final = ROOM_ISSUER_PATH + "/.well-known/jwks.json"
"""GET: the room's current and previous public keys (``/.well-known/jwks.json`` at the
root is the auction's own keys)."""

ROOM_PAGE: Final = "/room.html"
"""The waiting-room page (web/room.html): ``?event_id=`` (direct mode) or also
``&authz=`` (an OpenID authorize request waiting in the room)."""
# The OpenID adapter (rideout.waitingroom.oidc): one issuer per event,
# ``{app}/oidc/{event_id}``, its discovery document and endpoints under it.
OIDC_PREFIX: Final = "/oidc/{event_id}"
OIDC_DISCOVERY: Final = OIDC_PREFIX + "/.well-known/openid-configuration"
OIDC_JWKS: Final = OIDC_PREFIX + "/.well-known/jwks.json"
OIDC_AUTHORIZE: Final = OIDC_PREFIX + "/authorize"
OIDC_WAIT: Final = OIDC_PREFIX + "/wait"
"""GET ``?authz=``: the waiting page of an authorize request (where ``/authorize`` sends
the browser): takes its position on the first visit, and moves on to ``/resume`` by
itself without a script (``<meta http-equiv=refresh>``), or by room.js with one."""
OIDC_ENTER: Final = OIDC_PREFIX + "/enter"
"""POST ``{authz}``: the page's arrival for a waiting authorize request (one position
per request)."""
OIDC_RESUME: Final = OIDC_PREFIX + "/resume"
"""GET ``?authz=``: once served, the code goes back to the relying party."""
OIDC_TOKEN: Final = OIDC_PREFIX + "/token"
OIDC_USERINFO: Final = OIDC_PREFIX + "/userinfo"
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
    """The control plane's base URL, or the URL of ``path`` on it (the first of
    ``[control_plane] urls`` when set)."""
    return config.control_plane_urls()[0] + path


def control_plane_urls(config: Config, path: str = "") -> tuple[str, ...]:
    """Every control plane instance's URL of ``path`` (canaries push to each)."""
    return tuple(url + path for url in config.control_plane_urls())


def dns_metrics_url(config: Config, path: str = "") -> str:
    """The base URL of `rideout dns`'s HTTP port (/metrics, /health), or of ``path`` on it."""
    cp = config.control_plane
    return f"http://{cp.address}:{cp.dns_metrics_port}{path}"


def oidc_issuer(config: Config, event_id: str) -> str:
    """The OpenID adapter's ``issuer`` for one event (its discovery document is at
    ``{issuer}/.well-known/openid-configuration``)."""
    return f"http://{config.app_domain}:{config.app_port}" + OIDC_PREFIX.format(event_id=event_id)


def room_issuer(config: Config) -> str:
    """The ``iss`` of the waiting room's tokens: the same in every region and zone."""
    return f"http://{config.app_domain}:{config.app_port}{ROOM_ISSUER_PATH}"


def zone_url(config: Config, address: str, path: str = "") -> str:
    """The base URL of the app server at ``address``, or the URL of ``path`` on it."""
    return f"http://{address}:{config.app_port}{path}"
