"""Local-mode admin switches for failure drills (the seed's "reserved concurrency zero").

``POST /admin/mode`` with ``{"mode": "serving" | "degraded" | "draining"}`` and the
deployment's admin token (``Authorization: Bearer …``):

- ``degraded``: connections stay open, but every message, heartbeats included, is
  answered with ``error/unavailable``: the backend-failing-behind-an-open-socket case
  that the client's consecutive-failure detection exists for;
- ``draining``: every connection is closed with 1012 (reconnect now) and new
  handshakes are refused with 503 until the mode changes back;
- ``serving``: normal service.

The routes exist only in ``local`` mode; elsewhere they answer 404.
"""

from __future__ import annotations

import json
import signal
from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from rideout.auth.admin import check_admin_token
from rideout.protocol import CloseCode

if TYPE_CHECKING:
    from rideout.realtime.app import ZoneServer

__all__ = ["DEGRADE_SIGNAL", "MODES", "SERVE_SIGNAL", "admin_mode"]

MODES = ("serving", "degraded", "draining")

# `rideout serve` also switches on signals, which reach every worker of a zone (an
# HTTP request reaches only the worker the kernel picks): `rideout chaos throttle`.
DEGRADE_SIGNAL = signal.SIGUSR1
SERVE_SIGNAL = signal.SIGUSR2


async def admin_mode(request: Request) -> Response:
    """``GET`` shows the zone's mode; ``POST`` changes it."""
    server: ZoneServer = request.app.state.zone
    if server.config.mode != "local":
        return JSONResponse({"error": "not_found"}, status_code=404)
    if not check_admin_token(server.admin_token, request.headers.get("authorization")):
        return JSONResponse(
            {"error": "unauthorized", "message": "admin token required"},
            status_code=401,
            headers={"WWW-Authenticate": 'Bearer realm="rideout-admin"'},
        )
    if request.method == "POST":
        try:
            body = json.loads(await request.body())
            mode = body["mode"] if isinstance(body, dict) else None
        except (ValueError, KeyError):
            mode = None
        if mode not in MODES:
            return JSONResponse(
                {"error": "bad_request", "message": f'expected {{"mode": one of {list(MODES)}}}'},
                status_code=400,
            )
        server.set_mode(mode)
    return JSONResponse({"region": server.region.name, "zone": server.zone.name, "mode": server.mode,
                         "connections": len(server.connections)})  # fmt: skip


def drain(server: ZoneServer) -> None:
    """Close every connection with 1012 so clients reconnect (elsewhere) at once."""
    for connection in list(server.connections):
        connection.close_soon(CloseCode.DRAINING, "zone draining; reconnect now")
