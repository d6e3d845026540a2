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
    "STATUS",
    "STREAM",
    "SUMMARY",
    "WRITER",
    "ZONES",
    "ZONE_EVACUATE",
    "ZONE_RECOVER",
    "control_plane_url",
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

ZONES: Final = "/v1/zones"
"""GET: every zone, evacuated or not (and why, since when, until when)."""
ZONE_EVACUATE: Final = "/v1/zones/{zone_id}/evacuate"
"""POST, admin token: stop answering the zone's address in DNS and drain its clients."""
ZONE_RECOVER: Final = "/v1/zones/{zone_id}/recover"
"""POST, admin token: answer the zone's address again."""

# Every server.
HEALTH: Final = "/health"
METRICS: Final = "/metrics"

# An app server.
ADMIN_MODE: Final = "/admin/mode"


def control_plane_url(config: Config, path: str = "") -> str:
    """The control plane's base URL, or the URL of ``path`` on it."""
    cp = config.control_plane
    return f"http://{cp.address}:{cp.port}{path}"


def zone_url(config: Config, address: str, path: str = "") -> str:
    """The base URL of the app server at ``address``, or the URL of ``path`` on it."""
    return f"http://{address}:{config.app_port}{path}"
