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
    "LIVE",
    "LOGIN",
    "LOGIN_CODES",
    "METRICS",
    "METRICS_INGEST",
    "READY",
    "RESOLVE",
    "STATUS",
    "STREAM",
    "SUMMARY",
    "WRITER",
    "control_plane_url",
    "control_plane_urls",
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
LIVE: Final = "/live"
"""GET: 200 while the process runs its loop (an orchestrator restarts it otherwise)."""
READY: Final = "/ready"
"""GET: 200 while the process can do its job (send it traffic), else 503 and why."""

# An app server.
ADMIN_MODE: Final = "/admin/mode"


def control_plane_url(config: Config, path: str = "") -> str:
    """The control plane's base URL, or the URL of ``path`` on it (the first of
    ``[control_plane] urls`` when set)."""
    return config.control_plane_urls()[0] + path


def control_plane_urls(config: Config, path: str = "") -> tuple[str, ...]:
    """Every control plane instance's URL of ``path`` (canaries push to each)."""
    return tuple(url + path for url in config.control_plane_urls())


def zone_url(config: Config, address: str, path: str = "") -> str:
    """The base URL of the app server at ``address``, or the URL of ``path`` on it."""
    return f"http://{address}:{config.app_port}{path}"
