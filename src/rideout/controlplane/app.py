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

DNS itself is served on UDP and TCP at ``control_plane.address:dns_port``.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import AsyncIterator

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

from rideout.cluster.status import collect_status
from rideout.config import Config
from rideout.controlplane.runtime import ControlPlane, IngestError
from rideout.dns.doh import doh_route

__all__ = ["create_app"]

MAX_INGEST_BYTES = 1 << 20


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

    async def metrics(request: Request) -> Response:
        body = generate_latest(registry) + generate_latest(plane.registry)
        return Response(body, media_type=CONTENT_TYPE_LATEST)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await plane.start()
        app.state.control_plane = plane
        try:
            yield
        finally:
            await plane.stop()

    return Starlette(
        routes=[
            Route("/health", health),
            Route("/status", status),
            Route("/metrics", metrics),
            Route("/v1/metrics", put_metrics, methods=["POST"]),
            Route("/v1/writer", writer),
            Route("/v1/summary", summary),
            doh_route(plane.resolve, metrics=plane.dns_metrics),
        ],
        lifespan=lifespan,
    )
