"""External mode's view of the deployment, from the network alone (`rideout status`).

No supervisor, PID files or run directory: every control plane URL is asked for its
``/ready`` (acting, or standing by and why) and the acting one for its summary; every
zone for its ``/ready``; every region's Redis, as the monitor user over its configured
TLS, for its role, link and epoch. Each probe is bounded by `timeout`, all run at once.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx

from rideout import _http, routes
from rideout.config import Config, RegionConfig
from rideout.store.acl import RedisRole, StoreAuthError, credentials_for
from rideout.store.client import probe_client
from rideout.store.replication import read_epoch, replication_status

__all__ = ["ExternalInventory"]


async def _get(http: httpx.AsyncClient, url: str) -> dict[str, Any]:
    try:
        response = await http.get(url)
        body = response.json()
    except (httpx.HTTPError, ValueError) as exc:
        return {"up": False, "error": f"{type(exc).__name__}: {exc}".rstrip(": ")}
    return {"up": response.status_code == 200, "status_code": response.status_code, "body": body}


async def _redis(config: Config, region: RegionConfig, timeout: float) -> dict[str, Any]:
    redis = region.redis
    where = redis.url or f"{redis.address}:{redis.port}"
    try:
        credentials = credentials_for(config, RedisRole.MONITOR)
        client = probe_client(redis.address, redis.port, credentials=credentials,
                              timeout=timeout, tls=redis.tls)  # fmt: skip
    except StoreAuthError as exc:
        return {"address": where, "reachable": False, "error": str(exc)}
    try:
        status = await replication_status(client)
        epoch = await read_epoch(client) if status.reachable else None
    finally:
        await client.aclose()
    return {"address": where, **status.to_dict(), "epoch": epoch}


class ExternalInventory:
    """The :class:`~rideout.controlplane.ports.Inventory` of external mode: probes."""

    def __init__(self, config: Config, *, timeout: float = 1.5) -> None:
        self.config = config
        self.timeout = timeout

    async def collect(self) -> dict[str, Any]:
        config = self.config
        async with _http.async_client(timeout=self.timeout) as http:
            planes = routes.control_plane_urls(config)
            zones = [(r, z) for r in config.regions for z in r.zones]
            answers = await asyncio.gather(
                *(_get(http, url + routes.READY) for url in planes),
                *(_get(http, routes.zone_url(config, z.address, routes.READY)) for _, z in zones),
                *(_redis(config, r, self.timeout) for r in config.regions),
            )
            ready = list(answers[: len(planes)])
            zone_answers = answers[len(planes) : len(planes) + len(zones)]
            redis_answers = answers[len(planes) + len(zones) :]
            active = next((u for u, a in zip(planes, ready, strict=True) if a["up"]), None)
            summary = await _get(http, active + routes.SUMMARY) if active else None
        view: dict[str, Any] = {
            "app_domain": config.app_domain,
            "mode": config.mode,
            "collected_at": time.time(),
            "control_plane": {"name": "control-plane", "url": active or planes[0]},
            "control_planes": [
                {"url": url, **answer} for url, answer in zip(planes, ready, strict=True)
            ],
            "summary": summary["body"] if summary and summary["up"] else None,
            "regions": [],
        }
        for region, redis in zip(config.regions, redis_answers, strict=True):
            view["regions"].append({
                "name": region.name,
                "role": region.role,
                "redis": redis,
                "zones": [
                    {"name": z.name, "url": routes.zone_url(config, z.address), "ready": a}
                    for (r, z), a in zip(zones, zone_answers, strict=True)
                    if r.name == region.name
                ],
            })  # fmt: skip
        return view
