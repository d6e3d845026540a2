"""The per-zone app server: the ``/ws`` endpoint, the hub, the zone's mode, and the seam
other parts mount their routes through (:class:`ZoneExtension`).

Importing the package is cheap: the names below load their modules on first use, and
:mod:`rideout.realtime.zone` (the mode, its signals) loads neither Starlette, uvicorn
nor redis.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rideout.realtime.app import ZoneApp, ZoneExtension, create_app
    from rideout.realtime.zone import ZoneMode, ZoneServer

__all__ = ["ZoneApp", "ZoneExtension", "ZoneMode", "ZoneServer", "create_app"]

_HOMES = {
    "ZoneApp": "rideout.realtime.app",
    "ZoneExtension": "rideout.realtime.app",
    "create_app": "rideout.realtime.app",
    "ZoneMode": "rideout.realtime.zone",
    "ZoneServer": "rideout.realtime.zone",
}


def __getattr__(name: str) -> object:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
