"""What the control plane is given by whoever runs it: the parts only a host can provide.

The control plane runs in production, where no local supervisor exists, so it never
imports one. A host that owns the processes (the local supervisor of ``rideout up``,
:mod:`rideout.cluster`) passes its own implementations to
:func:`rideout.controlplane.app.create_app`:

| port | without one |
|---|---|
| :class:`ChaosPort`: break and mend regions on purpose | ``POST /v1/chaos`` answers 501 |
| :class:`Inventory`: the processes ``GET /status`` shows | :class:`ConfigInventory`: the topology the configuration describes |
"""

from __future__ import annotations

import os
import time
from typing import Any, Protocol

from rideout.config import Config
from rideout.routes import control_plane_url, zone_url

__all__ = ["ChaosPort", "ConfigInventory", "Inventory"]


class ChaosPort(Protocol):
    """Fault injection, done by whoever owns the region's processes."""

    async def run(self, op: str, region: str) -> str:
        """Run ``op`` (``kill``, ``kill-redis``, ``freeze``, ``throttle``, ``restore``) on
        ``region`` and return its report; raise
        :class:`~rideout.controlplane.errors.ChaosFailed` when it cannot."""
        ...


class Inventory(Protocol):
    """The deployment's processes, as ``GET /status`` shows them."""

    async def collect(self) -> dict[str, Any]:
        """A JSON-ready view with a ``control_plane`` object, to which the control plane
        adds its summary (alarms, health checks, DNS, failover)."""
        ...


class ConfigInventory:
    """What the control plane knows without a supervisor: the regions and zones of its
    configuration, and itself (no process ids of other processes, no probes)."""

    def __init__(self, config: Config) -> None:
        self.config = config

    async def collect(self) -> dict[str, Any]:
        config = self.config
        return {
            "app_domain": config.app_domain,
            "profile": config.profile,
            "collected_at": time.time(),
            "control_plane": {
                "name": "control-plane",
                "url": control_plane_url(config),
                "pid": os.getpid(),
                "alive": True,
            },
            "regions": [
                {
                    "name": region.name,
                    "role": region.role,
                    "redis": {"address": f"{region.redis.address}:{region.redis.port}"},
                    "zones": [
                        {"name": zone.name, "url": zone_url(config, zone.address)}
                        for zone in region.zones
                    ],
                }
                for region in config.regions
            ],
        }
