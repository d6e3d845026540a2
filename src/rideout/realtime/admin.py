"""Local-mode admin switches for failure drills (the seed's "reserved concurrency zero").

``POST /admin/mode`` with ``{"mode": "serving" | "degraded" | "draining"}`` (a
:class:`~rideout.realtime.zone.ZoneMode`, which says what each does) and the
deployment's admin token (``Authorization: Bearer …``); ``GET`` shows the mode.
A drain may be gradual: ``{"mode": "draining", "spread": S}`` closes the connections
over ``S`` seconds, and ``"serve_after": T`` (at least ``S``) serves again ``T`` seconds
after the drain began (the control plane's failback drain sends both).

The routes exist only in ``local`` mode; elsewhere they answer 404.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from rideout import _validate
from rideout.auth.admin import check_admin_token
from rideout.errors import InvalidArgument
from rideout.realtime.zone import ZoneMode, ZoneServer

__all__ = ["admin_mode"]

_EXPECTED = f'expected {{"mode": one of {[mode.value for mode in ZoneMode]}}}'
MAX_SPREAD = 3600.0  # seconds a gradual drain may take
MAX_SERVE_AFTER = 86400.0


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
        body = await request.body()
        mode = _parse_mode(body)
        if mode is None:
            return JSONResponse({"error": "bad_request", "message": _EXPECTED}, status_code=400)
        drain = _parse_drain(body, mode)
        if isinstance(drain, str):
            return JSONResponse({"error": "bad_request", "message": drain}, status_code=400)
        server.set_mode(mode, spread=drain[0], serve_after=drain[1])
    return JSONResponse({"region": server.region.name, "zone": server.zone.name, "mode": server.mode,
                         "connections": len(server.connections)})  # fmt: skip


def _parse_drain(body: bytes, mode: ZoneMode) -> tuple[float, float | None] | str:
    """A body's ``spread`` and ``serve_after`` (only with draining); else the problem."""
    data: dict[str, Any] = json.loads(body)  # _parse_mode has checked it is an object
    spread, serve_after = data.get("spread"), data.get("serve_after")
    if mode != ZoneMode.DRAINING:
        if spread is not None or serve_after is not None:
            return f"spread and serve_after go with draining only, not {mode}"
        return (0.0, None)
    checked = _seconds("spread", 0.0 if spread is None else spread, MAX_SPREAD)
    if isinstance(checked, str):
        return checked
    if serve_after is None:
        return (checked, None)
    after = _seconds("serve_after", serve_after, MAX_SERVE_AFTER)
    if isinstance(after, str):
        return after
    if after < checked:
        return f"serve_after ({after:g}) must be at least spread ({checked:g})"
    return (checked, after)


def _seconds(name: str, value: object, maximum: float) -> float | str:
    """`value` as seconds from 0 to `maximum`, or what is wrong with it."""
    try:
        seconds = _validate.seconds(name, value, zero_ok=True)
    except InvalidArgument as exc:
        return str(exc)
    if seconds > maximum:
        return f"{name} must be at most {maximum:g} seconds, not {value!r}"
    return seconds


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
