"""The per-zone app server: one ASGI application per (region, zone), composed here from
the zone's parts (:mod:`~rideout.realtime.zone`, :mod:`~rideout.realtime.connection`,
:mod:`~rideout.realtime.admin`, the hub, the epoch tracker) and from other parts' routes
(:class:`ZoneExtension`).

Every zone of every region runs the same code; what differs is the config's region and
zone. State lives in the region's Redis, never in the process, so any number of these
processes can serve a region and any of them can die.

Routes: ``GET /ws`` (the WebSocket API), ``GET /health``, ``GET /live``, ``GET /ready``,
``GET /metrics``,
``GET /.well-known/jwks.json`` (the keys tokens are verified with), ``GET /config.json``
(what the browser client needs), the auction page and its scripts at ``/``, and in local
mode ``GET|POST /admin/mode`` (degrade or drain the zone for drills), and
``POST /auth/demo-token`` (the demo page's sign-in, when ``[auth] demo_tokens`` is on),
and ``GET /openapi.json``: the zone's OpenAPI document, its own routes and what its
extensions describe (:func:`zone_document`, docs/openapi.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

import httpx
import redis.asyncio as aioredis
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import Receive, Scope, Send

from rideout import _body, _http, openapi, routes
from rideout._guard import connection_cap
from rideout._looplag import LagReport, watch
from rideout._pages import SITE_CSP, WithHeaders, page_headers
from rideout._singleflight import SingleFlight
from rideout._tasks import TaskSupervisor
from rideout.auth import JWKSet, SigningKey, TokenIssuer, TokenVerifier
from rideout.auth.admin import load_or_create_admin_token
from rideout.auth.resume import ResumeTickets, load_resume_keys
from rideout.auth.revocation import RevocationList
from rideout.config import Config, RegionConfig, ZoneConfig
from rideout.openapi.zone import zone_fragment
from rideout.realtime import demo
from rideout.realtime.admin import admin_mode
from rideout.realtime.admission import AdmissionPolicy, ReplayGate
from rideout.realtime.backend import StoreProber
from rideout.realtime.connection import WebSocketEndpoint, close_revoked
from rideout.realtime.epoch import EpochTracker, control_plane_writer
from rideout.realtime.hub import Hub
from rideout.realtime.limits import ConnectionCaps, CostBudget, LoadShedder
from rideout.realtime.metrics import AppMetrics
from rideout.realtime.revocation import RevocationFollower
from rideout.realtime.zone import (
    DEGRADE_SIGNAL,
    SERVE_SIGNAL,
    HandshakeAuthority,
    ZoneMode,
    ZoneServer,
    drain,
    early_mode,
    hold_mode_signals,
)
from rideout.store.acl import RedisRole, credentials_for
from rideout.store.auction import AuctionSettings, AuctionStore
from rideout.store.client import retarget, state_client
from rideout.store.replication import read_epoch, replication_status
from rideout.store.revocations import RevocationStore
from rideout.store.sync import placements

__all__ = [
    "ZoneApp",
    "ZoneExtension",
    "auction_settings",
    "create_app",
    "drain_for_exit",
    "zone_document",
]

log = logging.getLogger("rideout.realtime")


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


async def health(request: Request) -> Response:
    """Region, zone, role, epoch, the Redis link and the background tasks: 200 when Redis
    answers and every critical task runs, else 503 (``tasks_down`` names the tasks)."""
    server: ZoneServer = request.app.state.zone
    status = await replication_status(server.redis)
    epoch = await read_epoch(server.redis) if status.reachable else None
    down = server.tasks.down()
    ok = status.reachable and not down
    outcome = "ok" if ok else "redis_unreachable" if not status.reachable else "task_down"
    server.metrics.health_checks.labels(outcome).inc()
    server.metrics.redis_up.set(1 if status.reachable else 0)
    body = {
        "status": "ok" if ok else "degraded",
        "region": server.region.name,
        "zone": server.zone.name,
        "role": server.region.role,
        "mode": server.mode,
        "epoch": epoch,
        "connections": len(server.connections),
        # At the cap for ordinary connections: healthy, but full (docs/realtime-api.md).
        "full": server.caps.full,
        # Shedding load (its event loop runs late): healthy, but busy.
        "busy": server.busy(),
        "replication": {
            "mode": server.config.failover.replication,
            "unreplicated_acks": server.unreplicated_acks,
        },
        "redis": status.to_dict(),
        "tasks_down": list(down),
        "tasks": server.tasks.status(),
        "uptime": round(time.monotonic() - server.started_at, 3),
    }
    return JSONResponse(body, status_code=200 if ok else 503)


async def live(request: Request) -> Response:
    """200 while the process answers: its event loop runs (restart it otherwise)."""
    return JSONResponse({"status": "live"})


async def ready(request: Request) -> Response:
    """200 while this server can take connections: its Redis answers with a known role,
    it knows the writer epoch, every critical background task runs, and it is not
    draining; else 503 and why."""
    server: ZoneServer = request.app.state.zone
    status = await replication_status(server.redis)
    problem = None
    down = server.tasks.down()
    if server.mode == ZoneMode.DRAINING:
        problem = "draining"
    elif down:
        problem = f"background tasks down (restarting): {', '.join(down)}"
    elif not status.reachable:
        problem = f"redis unreachable: {status.error}"
    elif status.role not in ("master", "replica"):
        problem = f"redis role unknown ({status.role})"
    elif server.epoch.value is None:
        problem = "the writer epoch is not known yet"
    body = {"status": "ready" if problem is None else "not_ready", "mode": server.mode,
            "redis_role": status.role, "epoch": server.epoch.value}  # fmt: skip
    if problem is not None:
        body["message"] = problem
    return JSONResponse(body, status_code=200 if problem is None else 503)


async def drain_for_exit(server: ZoneServer, *, poll: float = 0.05) -> None:
    """On SIGTERM: close every connection with 1012 (clients reconnect elsewhere at
    once), refuse new ones with 503, and return once none is left (the caller bounds
    the wait)."""
    server.set_mode(ZoneMode.DRAINING)
    while server.connections:  # noqa: ASYNC110  # a plain set: nothing to wait on
        await asyncio.sleep(poll)


async def metrics(request: Request) -> Response:
    """Prometheus text exposition."""
    server: ZoneServer = request.app.state.zone
    return Response(generate_latest(server.metrics.registry), media_type=CONTENT_TYPE_LATEST)


WEB_DIR = Path(__file__).resolve().parent.parent / "web"

LAG_INTERVAL = 0.05  # seconds between the loop-lag watcher's timers (rideout.realtime.lag)


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


class ZoneExtension(Protocol):
    """Another part's routes and start-up work on a zone (the waiting room's, say).

    Passed to :func:`create_app` by whoever composes the deployment, so ``realtime``
    never imports the part: anything with these three methods will do. One that also has
    ``openapi()``, returning its routes' OpenAPI fragment (``{"paths", "components",
    "tags"}``), is described in the zone's ``/openapi.json`` (:func:`zone_document`).
    """

    def routes(self, server: ZoneServer) -> Sequence[BaseRoute]:
        """The routes to mount once the zone is up: after rideout's own (which win a
        clash), before the auction page's catch-all at ``/``."""

    async def start(self, server: ZoneServer) -> None:
        """Start-up work (warm a script cache, open a client), before the zone serves."""

    async def stop(self) -> None:
        """Undo :meth:`start`, before the zone's own shutdown (last started, first stopped)."""


class _WriterFollower:
    """Keeps the zone's Redis clients on its region's writer: when the control plane
    announces the writer on the region's other Redis (an in-region promotion), the
    clients move there, and sync mode's rule learns the writer's new zone."""

    def __init__(
        self, config: Config, region: RegionConfig, clients: tuple[aioredis.Redis, ...]
    ) -> None:
        self.region = region
        self.clients = clients
        self.server: ZoneServer | None = None
        self._places = placements(config)
        self._nodes = {f"{n.address}:{n.port}" for n in region.redis_nodes}

    async def poll(self, http: httpx.AsyncClient, url: str) -> tuple[int | None, str | None]:
        """The writer's epoch and region the control plane at `url` announces (None for
        what it cannot say), the zone's clients moved to the writer's Redis first."""
        epoch, region, redis = await control_plane_writer(http, url)
        if region == self.region.name and redis in self._nodes:
            assert redis is not None
            host, _, port = redis.rpartition(":")
            moved = [await retarget(c, host, int(port)) for c in self.clients]
            server = self.server
            if any(moved) and server is not None:
                log.warning("the region's writer is now %s: the zone follows it", redis)
                if server.sync_rule is not None:
                    server.sync_rule.writer = self._places[redis]
        return epoch, region


async def _open_zone(
    stack: contextlib.AsyncExitStack,
    config: Config,
    region: RegionConfig,
    zone: ZoneConfig,
    authorities: Sequence[HandshakeAuthority] = (),
) -> ZoneServer:
    """Build and start one zone's server; `stack` stops and closes it all."""
    key = SigningKey.load_or_create(config.keys_dir)
    auth = config.auth
    verifier = TokenVerifier(
        JWKSet(key.jwks()), issuer=auth.issuer, audience=auth.audience, leeway=auth.leeway,
        max_ttl=auth.max_token_ttl,
    )  # fmt: skip
    credentials = credentials_for(config, RedisRole.APP)
    client = state_client(
        region.redis.address, region.redis.port, credentials=credentials, tls=region.redis.tls
    )
    stack.push_async_callback(client.aclose)
    # Blocking stream reads get a connection pool of their own.
    follower = state_client(
        region.redis.address, region.redis.port, credentials=credentials, tls=region.redis.tls
    )
    stack.push_async_callback(follower.aclose)
    # The store probes (the canary's, the server's own) get a pool of their own: under
    # load, users' replays hold the state client's connections and pipelines.
    probes = state_client(
        region.redis.address, region.redis.port, credentials=credentials, tls=region.redis.tls,
        max_connections=4,
    )  # fmt: skip
    stack.push_async_callback(probes.aclose)
    app_metrics = AppMetrics(region.name, zone.name)
    # Every background task of the zone is supervised (rideout._tasks); stopped last.
    tasks = TaskSupervisor(registry=app_metrics.registry)
    stack.push_async_callback(tasks.stop)
    store = AuctionStore(client, auction_settings(config), region.name)
    stack.push_async_callback(store.close)
    probe_store = AuctionStore(probes, auction_settings(config), region.name)
    stack.push_async_callback(probe_store.close)
    hub = Hub(
        AuctionStore(follower, auction_settings(config), region.name), region.name, app_metrics
    )
    control_plane = _http.async_client(timeout=1.0)
    stack.push_async_callback(control_plane.aclose)
    follow = _WriterFollower(config, region, (client, follower, probes))
    writer_urls = routes.control_plane_urls(config, routes.WRITER)
    writer_region: list[str] = []

    async def writer_epoch() -> int | None:
        for url in writer_urls:  # several control plane instances: the first that answers
            epoch, writer = await follow.poll(control_plane, url)
            if epoch is not None and writer is not None:
                if follow.server is not None and config.mode == "external":
                    _leave_with_the_writer(follow.server, writer_region, writer)
                writer_region[:] = [writer]
                return epoch
        return None

    epoch = EpochTracker(
        writer_epoch,
        interval=config.timing.canary_interval,
        on_change=app_metrics.epoch.set,
        fallback=lambda: read_epoch(client),
    )
    server = follow.server = ZoneServer(
        config=config, region=region, zone=zone, redis=client, store=store, hub=hub,
        epoch=epoch, verifier=verifier, jwks=dict(key.jwks()),
        issuer=TokenIssuer(
            key, auth.issuer, auth.audience, auth.token_ttl, max_ttl=auth.max_token_ttl
        ),
        admin_token=load_or_create_admin_token(config.keys_dir), metrics=app_metrics,
        started_at=time.monotonic(), origins=frozenset(config.origins()),
        caps=ConnectionCaps.for_config(
            config.realtime, connection_cap(config.realtime.max_connections),
            demo_tokens=auth.demo_tokens,
        ),
        budget=CostBudget.for_config(config.realtime),
        shedder=(
            LoadShedder.for_canary(config.timing.canary_timeout)
            if config.realtime.shed_load else None
        ),
        revocations=RevocationList(auth.leeway), authorities=tuple(authorities),
        replays=ReplayGate(AdmissionPolicy.for_config(config.realtime)), probe_store=probe_store,
        tasks=tasks, tickets=_resume_tickets(config),
        reads=SingleFlight() if config.realtime.coalesce_reads else None,
    )  # fmt: skip
    # Which tasks turn /health and /ready red while down (docs/realtime-api.md): the
    # epoch, revocation and store-probe followers and the hub (without them the zone
    # fences wrongly, accepts revoked tokens, answers heartbeats from a stale probe or
    # pushes no updates); not the loop-lag watcher (load shedding pauses, serving does not).
    await epoch.refresh()
    epoch.start(tasks)
    stack.push_async_callback(epoch.stop)
    await _follow_revocations(stack, server)
    hub.start(tasks)
    stack.push_async_callback(hub.stop)
    prober = StoreProber(server)
    await prober.step()  # opens the probes' own connection before the canary's first probe
    prober.start(tasks)
    stack.push_async_callback(prober.stop)
    lag_report = LagReport(config.timing.canary_timeout / 2)
    watcher = tasks.spawn(
        "loop-lag",
        lambda: watch(
            server.lag, interval=LAG_INTERVAL, on_lag=_on_lag(server), report=lag_report, log=log
        ),
        critical=False,
    )
    stack.push_async_callback(watcher.stop)
    return server


def _resume_tickets(config: Config) -> ResumeTickets | None:
    """The zone's resumption tickets: off when ``auth.resume_ttl`` is 0, or in external
    mode before ``rideout secrets init`` made the deployment's resume key (never made
    here: a key made on one host alone would differ from every other's)."""
    auth = config.auth
    if auth.resume_ttl <= 0:
        return None
    ring = load_resume_keys(config.keys_dir, create=config.mode != "external")
    if ring is None:
        log.warning(
            "no resume key in %s: resumption tickets are off (run `rideout secrets init`)",
            config.keys_dir,
        )
        return None
    return ResumeTickets(ring, auth.resume_ttl, leeway=auth.leeway, max_ttl=auth.max_token_ttl)


def _on_lag(server: ZoneServer) -> Callable[[float], None]:
    """What the lag watcher does on each of its timers: export the worst lag, and log
    what the load shedder refused (at most every LoadShedder.every seconds)."""
    gauge, shedder = server.metrics.loop_lag, server.shedder

    def on_lag(worst: float) -> None:
        gauge.set(worst)
        if shedder is not None and (message := shedder.report(time.monotonic())) is not None:
            log.warning("%s", message)

    return on_lag


def _leave_with_the_writer(server: ZoneServer, last: list[str], writer: str) -> None:
    """External mode: when the writer leaves this zone's region (a failover, or a
    failback away from it), close this zone's connections with 1012 spread over
    ``failback_drain_seconds``, still serving, so its clients follow DNS to the writer.

    Every worker does this for itself, having read the writer from the control plane;
    in local mode the control plane drains the zones instead (their admin switch)."""
    here = server.region.name
    if last and last[0] == here and writer != here:
        spread = server.config.failover.failback_drain_seconds
        log.info("the writer moved %s -> %s: draining this zone's clients over %g s",
                 here, writer, spread)  # fmt: skip
        if spread > 0:
            server.set_mode(ZoneMode.SERVING, drain_over=spread)
        else:
            drain(server, probes=False)  # the canary still probes this zone


async def _follow_revocations(stack: contextlib.AsyncExitStack, server: ZoneServer) -> None:
    """Read the region's revocation list before serving, then keep it current."""
    follower = RevocationFollower(
        RevocationStore(server.redis, server.region.name),
        server.revocations,
        interval=server.config.auth.revocation_interval,
        on_change=lambda: close_revoked(server),
        on_failure=server.metrics.store_errors.labels("revocations").inc,
    )
    await follower.refresh()
    follower.start(server.tasks)
    stack.push_async_callback(follower.stop)


def _switch_on_signals(stack: contextlib.AsyncExitStack, server: ZoneServer) -> None:
    loop = asyncio.get_running_loop()
    stack.callback(hold_mode_signals)  # last: once the handlers below are gone again
    for signum, mode in ((DEGRADE_SIGNAL, ZoneMode.DEGRADED), (SERVE_SIGNAL, ZoneMode.SERVING)):
        loop.add_signal_handler(signum, server.set_mode, mode)
        stack.callback(loop.remove_signal_handler, signum)
    requested = early_mode()
    if requested is not None:  # a signal came while the zone was starting
        server.set_mode(requested)


def zone_document(extensions: Sequence[object] = ()) -> dict[str, Any]:
    """The zone's OpenAPI document: its own routes, then each extension's that describes
    its own (an ``openapi()`` method returning a fragment: see :mod:`rideout.openapi`)."""
    fragments = [zone_fragment()]
    for extension in extensions:
        describe = getattr(extension, "openapi", None)
        if callable(describe):
            fragments.append(describe())
    return openapi.document(
        "rideout zone",
        "One zone's app server: probes, the auction's keys and page settings, the admin "
        "switch, and what its extensions mount (the waiting room's public and private API, "
        "the OpenID adapter). The WebSocket API at `/ws` is docs/realtime-api.md.",
        *fragments,
    )


def create_app(
    config: Config,
    region_name: str,
    zone_name: str,
    *,
    signals: bool = False,
    extensions: Sequence[ZoneExtension] = (),
    authorities: Sequence[HandshakeAuthority] = (),
) -> ZoneApp:
    """The ASGI app for one zone; raises KeyError for an unknown region or zone.

    The signing key and admin token are read from (or, on first use, created in) the
    deployment's keys directory, so every region verifies the same tokens. With
    `signals`, SIGUSR1 degrades the zone and SIGUSR2 puts it back to serving (for a
    process of its own: `rideout serve`). Each of `extensions` is started, in order,
    once the zone is up, and its routes mounted (see :class:`ZoneExtension`). `/ws`
    also accepts the tokens of `authorities` (see
    :class:`~rideout.realtime.zone.HandshakeAuthority`).
    """
    region = config.region(region_name)
    zone = config.zone(region_name, zone_name)
    own = [
        Route(routes.HEALTH, health),
        Route(routes.LIVE, live),
        Route(routes.READY, ready),
        Route(routes.METRICS, metrics),
        Route(routes.JWKS, jwks),
        Route(routes.ADMIN_MODE, admin_mode, methods=["GET", "POST"]),
        Route(routes.BROWSER_CONFIG, browser_config),
        Route(routes.DEMO_TOKEN, demo_token, methods=["POST"]),
    ]
    pages = WithHeaders(StaticFiles(directory=WEB_DIR, html=True), page_headers(SITE_CSP))
    page = Mount("/", pages, name="web")

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with contextlib.AsyncExitStack() as stack:
            server = app.state.zone = await _open_zone(
                stack, config, region, zone, authorities
            )  # fmt: skip
            for extension in extensions:
                await extension.start(server)
                stack.push_async_callback(extension.stop)
            added = [route for extension in extensions for route in extension.routes(server)]
            described = openapi.document_route(openapi.encode(zone_document(extensions)))
            app.router.routes[:] = [*own, described, *added, page]
            if signals:
                _switch_on_signals(stack, server)
            yield

    return ZoneApp(
        Starlette(
            routes=[*own, page], lifespan=lifespan, exception_handlers=_body.EXCEPTION_HANDLERS
        )
    )
