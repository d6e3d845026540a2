"""The control plane's HTTP API.

| route | what |
|---|---|
| ``GET /health`` | liveness |
| ``GET /status`` | the deployment (as ``rideout status --json``) plus alarms, DNS, writer |
| ``GET /metrics`` | Prometheus |
| ``POST /v1/metrics`` | PutMetricData-shaped ingest for the canaries |
| ``GET /v1/writer`` | ``{region, epoch}``: what app servers fence their writes with |
| ``GET /v1/summary`` | alarms, health checks, the DNS answer, the failover controller |
| ``GET /resolve?name=&type=`` | DNS-over-HTTPS JSON for browsers |
| ``GET /`` | the ops dashboard |
| ``GET /v1/stream`` | server-sent events: the dashboard's live feed (one ``summary`` per period) |
| ``POST /v1/chaos`` | local mode, admin token: ``{"op": "kill", "region": R}`` for the supervisor |

DNS itself is served on UDP and TCP at ``control_plane.address:dns_port``.
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
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from rideout import routes
from rideout.auth.admin import check_admin_token, load_or_create_admin_token
from rideout.cluster.chaos import ChaosError, send_command
from rideout.cluster.status import collect_status
from rideout.config import Config
from rideout.controlplane.runtime import ControlPlane, IngestError
from rideout.dns.doh import doh_route

__all__ = ["create_app"]

MAX_INGEST_BYTES = 1 << 20
DASHBOARD_DIR = Path(__file__).resolve().parent.parent / "web"


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


def create_app(config: Config, *, runtime: ControlPlane | None = None) -> Starlette:
    """The control plane ASGI app; runs the control loop and DNS server in its lifespan."""
    plane = runtime or ControlPlane(config)
    registry = CollectorRegistry()
    info = Gauge(
        "rideout_deployment_info", "The deployment this control plane runs.",
        ["app_domain", "profile"], registry=registry,
    )  # fmt: skip
    info.labels(config.app_domain, config.profile).set(1)
    Gauge(
        "rideout_control_plane_start_time_seconds", "Unix time the control plane started.",
        registry=registry,
    ).set(time.time())  # fmt: skip
    requests = Counter(
        "rideout_control_plane_requests", "API requests answered, by endpoint.",
        ["endpoint"], registry=registry,
    )  # fmt: skip

    async def health(request: Request) -> Response:
        requests.labels("health").inc()
        return JSONResponse({"status": "ok", "app_domain": config.app_domain})

    async def status(request: Request) -> Response:
        requests.labels("status").inc()
        view = await collect_status(config)
        view["control_plane"].update(plane.summary())
        return JSONResponse(view)

    async def summary(request: Request) -> Response:
        requests.labels("summary").inc()
        return JSONResponse(plane.summary())

    async def writer(request: Request) -> Response:
        requests.labels("writer").inc()
        if plane.controller.epoch is None:
            return JSONResponse(
                {"error": "starting", "message": "the writer is not known yet"}, status_code=503
            )
        return JSONResponse({"region": plane.controller.writer, "epoch": plane.controller.epoch})

    async def put_metrics(request: Request) -> Response:
        requests.labels("put_metrics").inc()
        body = await request.body()
        if len(body) > MAX_INGEST_BYTES:
            return JSONResponse(
                {"error": "too_large", "message": f"at most {MAX_INGEST_BYTES} bytes"},
                status_code=413,
            )
        try:
            stored = plane.put_metric_data(json.loads(body))
        except (ValueError, IngestError) as exc:
            return JSONResponse({"error": "bad_request", "message": str(exc)}, status_code=400)
        plane.ingested.inc(stored)
        return JSONResponse({"stored": stored})

    async def dashboard_view() -> dict[str, object]:
        """The summary, plus what the dashboard draws: canary history, clients per region."""
        view = plane.summary()
        view["canary"] = plane.canary_history()
        view["now"] = time.time()
        view["clients"] = await connected_clients(config, http)
        view["period"] = plane.period
        return view

    async def stream(request: Request) -> Response:
        requests.labels("stream").inc()

        async def events() -> AsyncIterator[bytes]:
            while not await request.is_disconnected():
                yield (
                    b"event: summary\ndata: "
                    + json.dumps(await dashboard_view()).encode()
                    + b"\n\n"
                )
                await asyncio.sleep(plane.period)

        return StreamingResponse(
            events(), media_type="text/event-stream", headers={"Cache-Control": "no-store"}
        )

    own_hosts = {f"{config.control_plane.address}:{config.control_plane.port}"}

    def from_own_origin(request: Request) -> bool:
        # No CORS headers: other origins cannot read these answers. The Host check closes
        # DNS rebinding (a page on another name that resolves to 127.0.0.1).
        return request.headers.get("host") in own_hosts

    async def dashboard_config(request: Request) -> Response:
        """Same-origin only: what the dashboard needs, the admin token in local mode."""
        if not from_own_origin(request):
            return JSONResponse({"error": "forbidden", "message": "wrong Host"}, status_code=403)
        local = config.mode == "local"
        token = load_or_create_admin_token(config.keys_dir) if local else None
        regions = [r.name for r in config.regions]
        return JSONResponse({"local": local, "admin_token": token, "regions": regions},
                            headers={"Cache-Control": "no-store"})  # fmt: skip

    async def chaos(request: Request) -> Response:
        requests.labels("chaos").inc()
        if config.mode != "local":
            return JSONResponse({"error": "not_found"}, status_code=404)
        if not from_own_origin(request):
            return JSONResponse({"error": "forbidden", "message": "wrong Host"}, status_code=403)
        if not check_admin_token(
            load_or_create_admin_token(config.keys_dir), request.headers.get("authorization")
        ):
            return JSONResponse(
                {"error": "unauthorized", "message": "admin token required"}, status_code=401
            )
        try:
            body = json.loads(await request.body())
            op, region = body["op"], body["region"]
        except (ValueError, KeyError, TypeError):
            return JSONResponse(
                {"error": "bad_request", "message": 'expected {"op": ..., "region": ...}'},
                status_code=400,
            )
        try:
            message = await asyncio.to_thread(send_command, config.run_dir, str(op), str(region))
        except ChaosError as exc:
            return JSONResponse({"error": "chaos_failed", "message": str(exc)}, status_code=409)
        return JSONResponse({"message": message})

    async def metrics(request: Request) -> Response:
        body = generate_latest(registry) + generate_latest(plane.registry)
        return Response(body, media_type=CONTENT_TYPE_LATEST)

    http = httpx.AsyncClient(timeout=0.5, trust_env=False)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await plane.start()
        app.state.control_plane = plane
        try:
            yield
        finally:
            await plane.stop()
            await http.aclose()

    return Starlette(
        routes=[
            Route("/health", health),
            Route("/status", status),
            Route("/metrics", metrics),
            Route("/v1/metrics", put_metrics, methods=["POST"]),
            Route("/v1/writer", writer),
            Route("/v1/summary", summary),
            doh_route(plane.resolve, metrics=plane.dns_metrics),
            Route("/v1/stream", stream),
            Route("/v1/dashboard", dashboard_config),
            Route("/v1/chaos", chaos, methods=["POST"]),
            Route("/", lambda request: FileResponse(DASHBOARD_DIR / "dashboard.html")),
            Mount("/static", StaticFiles(directory=DASHBOARD_DIR), name="static"),
        ],
        lifespan=lifespan,
    )
