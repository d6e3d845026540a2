"""Local-mode admin switches for failure drills (the seed's "reserved concurrency zero").

``POST /admin/mode`` with ``{"mode": "serving" | "degraded" | "draining"}`` (a
:class:`~rideout.realtime.zone.ZoneMode`, which says what each does) and the
deployment's admin token (``Authorization: Bearer …``); ``GET`` shows the mode.
``"drain_over": S`` (with ``serving`` or ``draining``) closes the open connections with
1012 over ``S`` seconds instead of at once; with ``serving``, the zone keeps accepting
new ones meanwhile (the control plane's failback drain).

The routes exist only in ``local`` mode; elsewhere they answer 404.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from rideout import _body, _validate
from rideout.auth.admin import check_admin_token
from rideout.errors import InvalidArgument
from rideout.realtime.zone import ZoneMode, ZoneServer

__all__ = ["admin_mode"]

_EXPECTED = f'expected {{"mode": one of {[mode.value for mode in ZoneMode]}}}'
MAX_DRAIN_OVER = 3600.0  # seconds a gradual drain may take
MAX_BODY = 4096  # bytes of a mode change


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
            body = await _body.read_json(request, MAX_BODY)
        except _body.BodyRefused as exc:
            return JSONResponse({"error": exc.code, "message": str(exc)}, status_code=exc.status)
        mode = _parse_mode(body)
        if mode is None:
            return JSONResponse({"error": "bad_request", "message": _EXPECTED}, status_code=400)
        drain_over = _parse_drain_over(body, mode)
        if isinstance(drain_over, str):
            return JSONResponse({"error": "bad_request", "message": drain_over}, status_code=400)
        server.set_mode(mode, drain_over=drain_over)
    return JSONResponse({"region": server.region.name, "zone": server.zone.name, "mode": server.mode,
                         "connections": len(server.connections)})  # fmt: skip


def _parse_drain_over(body: dict[str, Any], mode: ZoneMode) -> float | str:
    """A body's ``drain_over`` seconds (0 without one), or what is wrong with it."""
    value = body.get("drain_over")
    if value is None:
        return 0.0
    if mode == ZoneMode.DEGRADED:
        return "drain_over goes with serving or draining, not degraded"
    try:
        seconds = _validate.seconds("drain_over", value, zero_ok=True)
    except InvalidArgument as exc:
        return str(exc)
    if seconds > MAX_DRAIN_OVER:
        return f"drain_over must be at most {MAX_DRAIN_OVER:g} seconds, not {value!r}"
    return seconds


def _parse_mode(body: dict[str, Any]) -> ZoneMode | None:
    """The mode a ``{"mode": ...}`` body asks for; None for anything else."""
    mode = body.get("mode")
    if not isinstance(mode, str) or mode not in {m.value for m in ZoneMode}:
        return None
    return ZoneMode(mode)
