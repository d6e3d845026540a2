"""The control plane's HTTP API: `/health`, `/status`, `/metrics`."""

from __future__ import annotations

import time

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

__all__ = ["create_app"]


def create_app(config: Config) -> Starlette:
    """The control plane ASGI app for `config`'s deployment."""
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
        return JSONResponse(await collect_status(config))

    async def metrics(request: Request) -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    return Starlette(
        routes=[Route("/health", health), Route("/status", status), Route("/metrics", metrics)]
    )
