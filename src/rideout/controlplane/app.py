"""The control plane's HTTP API.

| route | what |
|---|---|
| ``GET /health`` | liveness |
| ``GET /status`` | the inventory's view (locally ``rideout status --json``) plus alarms, DNS, writer |
| ``GET /metrics`` | Prometheus |
| ``POST /v1/metrics`` | PutMetricData-shaped ingest for the canaries |
| ``GET /v1/writer`` | ``{region, epoch}``: what app servers fence their writes with |
| ``GET /v1/summary`` | alarms, health checks, the DNS answer, the failover controller |
| ``GET /resolve?name=&type=`` | DNS-over-HTTPS JSON for browsers |
| ``GET /`` | the ops dashboard |
| ``GET /v1/stream`` | server-sent events: the dashboard's live feed (one ``summary`` per period) |
| ``POST /v1/chaos`` | local mode, admin token: ``{"op": "kill", "region": R}`` for the chaos port |

DNS itself is served on UDP and TCP at ``control_plane.address:dns_port``. What only a
host can provide (fault injection, the process inventory) is injected as ports
(:mod:`rideout.controlplane.ports`): the local supervisor passes its own; without them
``/v1/chaos`` answers 501 and ``/status`` shows the configured topology.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    generate_latest,
)
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from rideout import routes
from rideout.auth.admin import check_admin_token, load_or_create_admin_token
from rideout.config import Config
from rideout.controlplane.errors import ChaosFailed, IngestError
from rideout.controlplane.ports import ChaosPort, ConfigInventory, Inventory
from rideout.controlplane.runtime import ControlPlane
from rideout.dns.doh import doh_route

__all__ = ["ApiMetrics", "ControlPlaneApi", "create_app"]

MAX_INGEST_BYTES = 1 << 20
DASHBOARD_DIR = Path(__file__).resolve().parent.parent / "web"


def _error(status_code: int, error: str, message: str | None = None) -> JSONResponse:
    body = {"error": error} if message is None else {"error": error, "message": message}
    return JSONResponse(body, status_code=status_code)


async def connected_clients(config: Config, http: httpx.AsyncClient) -> dict[str, int | None]:
    """Open WebSocket connections per region, from each zone's /health (None: no answer)."""

    async def zone(address: str) -> int | None:
        try:
            body = (await http.get(routes.zone_url(config, address, routes.HEALTH))).json()
            return int(body["connections"])
        except (httpx.HTTPError, ValueError, KeyError, TypeError):
            return None

    counts: dict[str, int | None] = {}
    for region in config.regions:
        answers = await asyncio.gather(*(zone(z.address) for z in region.zones))
        known = [a for a in answers if a is not None]
        counts[region.name] = sum(known) if known else None
    return counts


class ApiMetrics:
    """The HTTP API's own metrics (the runtime's are in ``ControlPlane.registry``)."""

    def __init__(self, config: Config) -> None:
        self.registry = CollectorRegistry()
        Gauge(
            "rideout_deployment_info", "The deployment this control plane runs.",
            ["app_domain", "profile"], registry=self.registry,
        ).labels(config.app_domain, config.profile).set(1)  # fmt: skip
        Gauge(
            "rideout_control_plane_start_time_seconds", "Unix time the control plane started.",
            registry=self.registry,
        ).set(time.time())  # fmt: skip
        self.requests = Counter(
            "rideout_control_plane_requests", "API requests answered, by endpoint.",
            ["endpoint"], registry=self.registry,
        )  # fmt: skip


class ControlPlaneApi:
    """The control plane's HTTP handlers: one method per route, over the runtime, the
    API's metrics and the ports its host injected."""

    def __init__(
        self,
        config: Config,
        plane: ControlPlane,
        *,
        chaos: ChaosPort | None = None,
        inventory: Inventory | None = None,
    ) -> None:
        self.config = config
        self.plane = plane
        self.chaos_port = chaos
        self.inventory = inventory or ConfigInventory(config)
        self.metrics = ApiMetrics(config)
        self.http = httpx.AsyncClient(timeout=0.5, trust_env=False)
        cp = config.control_plane
        self._own_hosts = {f"{cp.address}:{cp.port}"}

    def route_table(self) -> list[BaseRoute]:
        plane = self.plane
        return [
            Route(routes.HEALTH, self.health),
            Route(routes.STATUS, self.status),
            Route(routes.METRICS, self.prometheus),
            Route(routes.METRICS_INGEST, self.put_metrics, methods=["POST"]),
            Route(routes.WRITER, self.writer),
            Route(routes.SUMMARY, self.summary),
            doh_route(plane.resolve, path=routes.RESOLVE, metrics=plane.dns_metrics),
            Route(routes.STREAM, self.stream),
            Route(routes.DASHBOARD, self.dashboard_config),
            Route(routes.CHAOS, self.chaos, methods=["POST"]),
            Route("/", self.dashboard_page),
            Mount("/static", StaticFiles(directory=DASHBOARD_DIR), name="static"),
        ]

    @contextlib.asynccontextmanager
    async def lifespan(self, app: Starlette) -> AsyncIterator[None]:
        """Runs the control loop and the DNS server while the app serves."""
        await self.plane.start()
        app.state.control_plane = self.plane
        try:
            yield
        finally:
            await self.plane.stop()
            await self.http.aclose()

    def _count(self, endpoint: str) -> None:
        self.metrics.requests.labels(endpoint).inc()

    def _from_own_origin(self, request: Request) -> bool:
        # No CORS headers: other origins cannot read these answers. The Host check closes
        # DNS rebinding (a page on another name that resolves to 127.0.0.1).
        return request.headers.get("host") in self._own_hosts

    # ------------------------------------------------------------------ routes

    async def health(self, request: Request) -> Response:
        self._count("health")
        return JSONResponse({"status": "ok", "app_domain": self.config.app_domain})

    async def status(self, request: Request) -> Response:
        """The inventory's view of the deployment, with the control plane's summary."""
        self._count("status")
        view = await self.inventory.collect()
        view["control_plane"].update(self.plane.summary())
        return JSONResponse(view)

    async def summary(self, request: Request) -> Response:
        self._count("summary")
        return JSONResponse(self.plane.summary())

    async def writer(self, request: Request) -> Response:
        self._count("writer")
        controller = self.plane.controller
        if controller.epoch is None:
            return _error(503, "starting", "the writer is not known yet")
        return JSONResponse({"region": controller.writer, "epoch": controller.epoch})

    async def put_metrics(self, request: Request) -> Response:
        self._count("put_metrics")
        body = await request.body()
        if len(body) > MAX_INGEST_BYTES:
            return _error(413, "too_large", f"at most {MAX_INGEST_BYTES} bytes")
        try:
            stored = self.plane.put_metric_data(json.loads(body))
        except (ValueError, IngestError) as exc:
            return _error(400, "bad_request", str(exc))
        self.plane.ingested.inc(stored)
        return JSONResponse({"stored": stored})

    async def dashboard_view(self) -> dict[str, object]:
        """The summary, plus what the dashboard draws: canary history, clients per region."""
        plane = self.plane
        view = plane.summary()
        view["canary"] = plane.canary_history()
        view["now"] = time.time()
        view["clients"] = await connected_clients(self.config, self.http)
        view["period"] = plane.period
        return view

    async def stream(self, request: Request) -> Response:
        self._count("stream")

        async def events() -> AsyncIterator[bytes]:
            while not await request.is_disconnected():
                yield (
                    b"event: summary\ndata: "
                    + json.dumps(await self.dashboard_view()).encode()
                    + b"\n\n"
                )
                await asyncio.sleep(self.plane.period)

        return StreamingResponse(
            events(), media_type="text/event-stream", headers={"Cache-Control": "no-store"}
        )

    def _chaos_available(self) -> bool:
        return self.config.mode == "local" and self.chaos_port is not None

    async def dashboard_config(self, request: Request) -> Response:
        """Same-origin only: what the dashboard needs, the admin token where chaos runs."""
        if not self._from_own_origin(request):
            return _error(403, "forbidden", "wrong Host")
        config = self.config
        local = self._chaos_available()
        token = load_or_create_admin_token(config.keys_dir) if local else None
        regions = [r.name for r in config.regions]
        return JSONResponse({"local": local, "admin_token": token, "regions": regions},
                            headers={"Cache-Control": "no-store"})  # fmt: skip

    async def chaos(self, request: Request) -> Response:
        """Local mode, same origin, admin token: one chaos command through the port."""
        self._count("chaos")
        if self.config.mode != "local":
            return _error(404, "not_found")
        if self.chaos_port is None:
            return _error(
                501,
                "not_implemented",
                "chaos needs the local supervisor (`rideout up`), and this control plane "
                "runs without one",
            )
        if not self._from_own_origin(request):
            return _error(403, "forbidden", "wrong Host")
        token = load_or_create_admin_token(self.config.keys_dir)
        if not check_admin_token(token, request.headers.get("authorization")):
            return _error(401, "unauthorized", "admin token required")
        try:
            body = json.loads(await request.body())
            op, region = body["op"], body["region"]
        except (ValueError, KeyError, TypeError):
            return _error(400, "bad_request", 'expected {"op": ..., "region": ...}')
        try:
            message = await self.chaos_port.run(str(op), str(region))
        except ChaosFailed as exc:
            return _error(409, "chaos_failed", str(exc))
        return JSONResponse({"message": message})

    async def prometheus(self, request: Request) -> Response:
        body = generate_latest(self.metrics.registry) + generate_latest(self.plane.registry)
        return Response(body, media_type=CONTENT_TYPE_LATEST)

    async def dashboard_page(self, request: Request) -> Response:
        return FileResponse(DASHBOARD_DIR / "dashboard.html")


def create_app(
    config: Config,
    *,
    runtime: ControlPlane | None = None,
    chaos: ChaosPort | None = None,
    inventory: Inventory | None = None,
) -> Starlette:
    """The control plane ASGI app; runs the control loop and DNS server in its lifespan.

    ``chaos`` and ``inventory`` are the host's ports (see :mod:`rideout.controlplane.ports`);
    the local supervisor's are in :mod:`rideout.cluster`.
    """
    api = ControlPlaneApi(config, runtime or ControlPlane(config), chaos=chaos, inventory=inventory)
    return Starlette(routes=api.route_table(), lifespan=api.lifespan)
