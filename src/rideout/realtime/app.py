"""The per-zone app server: one ASGI application per (region, zone).

Every zone of every region runs the same code; what differs is the config's region and
zone. State lives in the region's Redis, never in the process, so any number of these
processes can serve a region and any of them can die.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

import redis.asyncio as aioredis
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    generate_latest,
)
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from rideout.config import Config, RegionConfig, ZoneConfig
from rideout.store.client import state_client
from rideout.store.replication import read_epoch, replication_status

__all__ = ["AppMetrics", "ZoneServer", "create_app"]


class AppMetrics:
    """The app server's Prometheus metrics, in a registry of its own (no globals)."""

    def __init__(self, region: str, zone: str) -> None:
        self.registry = CollectorRegistry()
        self.info = Gauge(
            "rideout_app_info", "Which region and zone this app server serves.",
            ["region", "zone"], registry=self.registry,
        )  # fmt: skip
        self.info.labels(region, zone).set(1)
        self.health_checks = Counter(
            "rideout_health_checks", "Health checks answered, by outcome.",
            ["outcome"], registry=self.registry,
        )  # fmt: skip
        self.redis_up = Gauge(
            "rideout_redis_up", "1 when the region's Redis answered the last health check.",
            registry=self.registry,
        )  # fmt: skip
        self.epoch = Gauge(
            "rideout_epoch", "The writer epoch seen at the last health check.",
            registry=self.registry,
        )  # fmt: skip


@dataclass
class ZoneServer:
    """What the app server knows about where it runs; kept on ``app.state.zone``."""

    config: Config
    region: RegionConfig
    zone: ZoneConfig
    redis: aioredis.Redis
    metrics: AppMetrics
    started_at: float


async def health(request: Request) -> Response:
    """Region, zone, role, epoch and the Redis link: 200 when Redis answers, else 503."""
    server: ZoneServer = request.app.state.zone
    status = await replication_status(server.redis)
    epoch = await read_epoch(server.redis) if status.reachable else None
    ok = status.reachable
    server.metrics.health_checks.labels("ok" if ok else "redis_unreachable").inc()
    server.metrics.redis_up.set(1 if ok else 0)
    if epoch is not None:
        server.metrics.epoch.set(epoch)
    body = {
        "status": "ok" if ok else "degraded",
        "region": server.region.name,
        "zone": server.zone.name,
        "role": server.region.role,
        "epoch": epoch,
        "redis": status.to_dict(),
        "uptime": round(time.monotonic() - server.started_at, 3),
    }
    return JSONResponse(body, status_code=200 if ok else 503)


async def metrics(request: Request) -> Response:
    """Prometheus text exposition."""
    server: ZoneServer = request.app.state.zone
    return Response(generate_latest(server.metrics.registry), media_type=CONTENT_TYPE_LATEST)


def create_app(config: Config, region_name: str, zone_name: str) -> Starlette:
    """The ASGI app for one zone; raises KeyError for an unknown region or zone."""
    region = config.region(region_name)
    zone = config.zone(region_name, zone_name)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        client = state_client(region.redis.address, region.redis.port)
        app.state.zone = ZoneServer(
            config, region, zone, client, AppMetrics(region.name, zone.name), time.monotonic()
        )
        try:
            yield
        finally:
            await client.aclose()

    return Starlette(
        routes=[Route("/health", health), Route("/metrics", metrics)],
        lifespan=lifespan,
    )
