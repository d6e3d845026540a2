"""The per-zone app server: one ASGI application per (region, zone).

Every zone of every region runs the same code; what differs is the config's region and
zone. State lives in the region's Redis, never in the process, so any number of these
processes can serve a region and any of them can die.

Routes: ``GET /ws`` (the WebSocket API), ``GET /health``, ``GET /metrics``,
``GET /.well-known/jwks.json`` (the keys tokens are verified with), ``GET /config.json``
(what the browser client needs), the auction page and its scripts at ``/``, and in local
mode ``GET|POST /admin/mode`` (degrade or drain the zone for drills), and
``POST /auth/demo-token`` (the demo page's sign-in, when ``[auth] demo_tokens`` is on).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import redis.asyncio as aioredis
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import Receive, Scope, Send

from rideout import routes
from rideout.auth import JWKSet, SigningKey, TokenIssuer, TokenVerifier
from rideout.auth.admin import load_or_create_admin_token
from rideout.config import Config, RegionConfig, ZoneConfig
from rideout.realtime import admin, demo
from rideout.realtime.connection import WebSocketEndpoint
from rideout.realtime.epoch import EpochTracker, control_plane_epoch
from rideout.realtime.hub import Hub
from rideout.realtime.metrics import AppMetrics
from rideout.store.auction import AuctionSettings, AuctionStore
from rideout.store.client import state_client
from rideout.store.replication import read_epoch, replication_status

if TYPE_CHECKING:
    from rideout.realtime.connection import Connection

__all__ = ["ZoneApp", "ZoneServer", "auction_settings", "create_app"]


def auction_settings(config: Config) -> AuctionSettings:
    """The store's rules from the deployment's ``[realtime]`` settings."""
    rt = config.realtime
    return AuctionSettings(
        min_bid=rt.min_bid,
        max_bid=rt.max_bid,
        min_increment=rt.min_increment,
        history_size=rt.history_size,
        history_ttl=rt.history_ttl,
    )


@dataclass(eq=False)
class ZoneServer:
    """What one app server process holds; kept on ``app.state.zone``."""

    config: Config
    region: RegionConfig
    zone: ZoneConfig
    redis: aioredis.Redis
    store: AuctionStore
    hub: Hub
    epoch: EpochTracker
    verifier: TokenVerifier
    issuer: TokenIssuer
    jwks: dict[str, object]
    admin_token: str
    metrics: AppMetrics
    started_at: float
    origins: frozenset[str]
    mode: str = "serving"
    connections: set[Connection] = field(default_factory=set)
    unreplicated_acks: int = 0  # sync mode degraded to async for these acknowledgements

    def origin_allowed(self, origin: str) -> bool:
        return "*" in self.origins or origin in self.origins

    def set_mode(self, mode: str) -> None:
        """serving, degraded or draining (see rideout.realtime.admin)."""
        self.mode = mode
        for name in admin.MODES:
            self.metrics.modes.labels(name).set(1 if name == mode else 0)
        if mode == "draining":
            admin.drain(self)


async def health(request: Request) -> Response:
    """Region, zone, role, epoch and the Redis link: 200 when Redis answers, else 503."""
    server: ZoneServer = request.app.state.zone
    status = await replication_status(server.redis)
    epoch = await read_epoch(server.redis) if status.reachable else None
    ok = status.reachable
    server.metrics.health_checks.labels("ok" if ok else "redis_unreachable").inc()
    server.metrics.redis_up.set(1 if ok else 0)
    body = {
        "status": "ok" if ok else "degraded",
        "region": server.region.name,
        "zone": server.zone.name,
        "role": server.region.role,
        "mode": server.mode,
        "epoch": epoch,
        "connections": len(server.connections),
        "replication": {
            "mode": server.config.failover.replication,
            "unreplicated_acks": server.unreplicated_acks,
        },
        "redis": status.to_dict(),
        "uptime": round(time.monotonic() - server.started_at, 3),
    }
    return JSONResponse(body, status_code=200 if ok else 503)


async def metrics(request: Request) -> Response:
    """Prometheus text exposition."""
    server: ZoneServer = request.app.state.zone
    return Response(generate_latest(server.metrics.registry), media_type=CONTENT_TYPE_LATEST)


WEB_DIR = Path(__file__).resolve().parent.parent / "web"


async def browser_config(request: Request) -> Response:
    """What the auction page needs: the name to resolve, where, and the timings."""
    server: ZoneServer = request.app.state.zone
    config, timing = server.config, server.config.timing
    return JSONResponse(
        {
            "app_domain": config.app_domain,
            "app_port": config.app_port,
            "doh_url": routes.control_plane_url(config, routes.RESOLVE),
            "heartbeat_interval": timing.heartbeat_interval,
            "heartbeat_timeout": timing.heartbeat_timeout,
            "heartbeat_failures": timing.heartbeat_failures,
            "backoff_base": timing.backoff_base,
            "backoff_cap": timing.backoff_cap,
            "region": server.region.name,
            "zone": server.zone.name,
        },
        headers={"Cache-Control": "no-store"},
    )


async def demo_token(request: Request) -> Response:
    """The demo page's sign-in: a token for a bidder name nobody else holds, behind
    ``[auth] demo_tokens`` and the deployment's Origins (see rideout.realtime.demo).
    (The waiting room issues the real tokens.)"""
    server: ZoneServer = request.app.state.zone
    return await demo.demo_token(request, server.config, server.redis, server.issuer)


async def jwks(request: Request) -> Response:
    """The public keys access tokens are verified with."""
    server: ZoneServer = request.app.state.zone
    return JSONResponse(server.jwks, headers={"Cache-Control": "max-age=300"})


class ZoneApp:
    """The app server's ASGI app: ``/ws`` goes straight to the WebSocket endpoint,
    everything else to Starlette.

    Every layer a connection passes through keeps a suspended frame (and the
    middleware's closures) alive for the connection's whole life, about 2.5 KB with
    Starlette's router and exception middleware, and each send would pass through them.
    """

    def __init__(self, web: Starlette) -> None:
        self.web = web
        self.state = web.state
        self._ws = WebSocketEndpoint(web.state)

    def __call__(self, scope: Scope, receive: Receive, send: Send) -> Awaitable[None]:
        # A plain method returning the coroutine: no frame of its own stays behind.
        if scope["type"] == "websocket" and scope["path"] == "/ws":
            return self._ws(scope, receive, send)
        return self.web(scope, receive, send)


def create_app(
    config: Config, region_name: str, zone_name: str, *, signals: bool = False
) -> ZoneApp:
    """The ASGI app for one zone; raises KeyError for an unknown region or zone.

    The signing key and admin token are read from (or, on first use, created in) the
    deployment's keys directory, so every region verifies the same tokens. With
    `signals`, SIGUSR1 degrades the zone and SIGUSR2 puts it back to serving (for a
    process of its own: `rideout serve`).
    """
    region = config.region(region_name)
    zone = config.zone(region_name, zone_name)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        key = SigningKey.load_or_create(config.keys_dir)
        verifier = TokenVerifier(
            JWKSet(key.jwks()), issuer=config.auth.issuer, audience=config.auth.audience,
            leeway=config.auth.leeway,
        )  # fmt: skip
        client = state_client(region.redis.address, region.redis.port)
        # Blocking stream reads get a connection pool of their own.
        follower = state_client(region.redis.address, region.redis.port)
        app_metrics = AppMetrics(region.name, zone.name)
        store = AuctionStore(client, auction_settings(config), region.name)
        hub = Hub(
            AuctionStore(follower, auction_settings(config), region.name), region.name, app_metrics
        )
        control_plane = httpx.AsyncClient(timeout=1.0, trust_env=False)
        epoch = EpochTracker(
            lambda: control_plane_epoch(
                control_plane, routes.control_plane_url(config, routes.WRITER)
            ),
            interval=config.timing.canary_interval,
            on_change=app_metrics.epoch.set,
            fallback=lambda: read_epoch(client),
        )
        app.state.zone = ZoneServer(
            config=config, region=region, zone=zone, redis=client, store=store, hub=hub,
            epoch=epoch, verifier=verifier, jwks=dict(key.jwks()),
            issuer=TokenIssuer(key, config.auth.issuer, config.auth.audience, config.auth.token_ttl),
            admin_token=load_or_create_admin_token(config.keys_dir), metrics=app_metrics,
            started_at=time.monotonic(), origins=frozenset(config.origins()),
        )  # fmt: skip
        await epoch.refresh()
        epoch.start()
        hub.start()
        loop = asyncio.get_running_loop()
        if signals:
            server = app.state.zone
            loop.add_signal_handler(admin.DEGRADE_SIGNAL, server.set_mode, "degraded")
            loop.add_signal_handler(admin.SERVE_SIGNAL, server.set_mode, "serving")
        try:
            yield
        finally:
            if signals:
                loop.remove_signal_handler(admin.DEGRADE_SIGNAL)
                loop.remove_signal_handler(admin.SERVE_SIGNAL)
            await hub.stop()
            await epoch.stop()
            await control_plane.aclose()
            await store.close()
            await follower.aclose()
            await client.aclose()

    web = Starlette(
        routes=[
            Route("/health", health),
            Route("/metrics", metrics),
            Route("/.well-known/jwks.json", jwks),
            Route("/admin/mode", admin.admin_mode, methods=["GET", "POST"]),
            Route("/config.json", browser_config),
            Route("/auth/demo-token", demo_token, methods=["POST"]),
            Mount("/", StaticFiles(directory=WEB_DIR, html=True), name="web"),
        ],
        lifespan=lifespan,
    )
    return ZoneApp(web)
