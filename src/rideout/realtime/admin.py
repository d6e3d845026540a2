"""Local-mode admin switches for failure drills (the seed's "reserved concurrency zero").

``POST /admin/mode`` with ``{"mode": "serving" | "degraded" | "draining"}`` (a
:class:`~rideout.realtime.zone.ZoneMode`, which says what each does) and the
deployment's admin token (``Authorization: Bearer …``); ``GET`` shows the mode.

The routes exist only in ``local`` mode; elsewhere they answer 404.
"""

from __future__ import annotations

import json

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from rideout.auth.admin import check_admin_token
from rideout.realtime.zone import ZoneMode, ZoneServer

__all__ = ["admin_mode"]

_EXPECTED = f'expected {{"mode": one of {[mode.value for mode in ZoneMode]}}}'


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
        mode = _parse_mode(await request.body())
        if mode is None:
            return JSONResponse({"error": "bad_request", "message": _EXPECTED}, status_code=400)
        server.set_mode(mode)
    return JSONResponse({"region": server.region.name, "zone": server.zone.name, "mode": server.mode,
                         "connections": len(server.connections)})  # fmt: skip


def _parse_mode(body: bytes) -> ZoneMode | None:
    """The mode a ``{"mode": ...}`` body asks for; None for anything else."""
    try:
        data = json.loads(body)
    except ValueError:
        return None
    try:
        return ZoneMode(data["mode"])
    except (TypeError, KeyError, ValueError):  # not an object, no "mode", no such mode
        return None
