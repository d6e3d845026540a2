"""The canary as a long-lived service: its loop, plus ``/live``, ``/ready`` and ``/metrics``.

For a process of its own on a host of its own (``rideout canary --listen HOST:PORT``):

- ``/live`` (and ``/health``): 200 while the probe loop runs and has finished a round
  within the last few intervals (a stuck loop is restarted by the orchestrator); 503
  otherwise, and while the loop, dead of a bug, awaits its restart (rideout._tasks);
- ``/ready``: 200 once a round has reached a control plane recently (its datapoints
  count); 503 and why otherwise;
- ``/metrics``: rounds, the last probe of each zone, when a push last landed, and the
  pushes in a row each control plane instance did not take.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Callable

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Gauge, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from rideout import routes
from rideout._tasks import Supervised, TaskSupervisor
from rideout.health.canary import Canary

__all__ = ["CanaryCollector", "create_canary_app"]

# How many intervals may pass without a round (live) or a landed push (ready).
_STALE_ROUNDS = 5


class CanaryCollector(Collector):
    """The canary's state as Prometheus metrics, read when scraped."""

    def __init__(self, canary: Canary) -> None:
        self.canary = canary

    def collect(self):  # type: ignore[no-untyped-def]  # prometheus_client's own signature
        c = self.canary
        rounds = CounterMetricFamily("rideout_canary_rounds", "Probe rounds finished.")
        rounds.add_metric([], c.rounds)
        yield rounds
        probe = GaugeMetricFamily(
            "rideout_canary_probe_healthy", "The last probe of each zone (1 healthy).",
            labels=["region", "zone"],
        )  # fmt: skip
        latency = GaugeMetricFamily(
            "rideout_canary_probe_seconds", "How long the last probe of each zone took.",
            labels=["region", "zone"],
        )  # fmt: skip
        for r in c.last_results:
            probe.add_metric([r.region, r.zone], 1.0 if r.healthy else 0.0)
            latency.add_metric([r.region, r.zone], r.latency)
        yield probe
        yield latency
        pushed = GaugeMetricFamily(
            "rideout_canary_last_push_timestamp_seconds",
            "When a control plane last took this canary's datapoints.",
        )
        pushed.add_metric([], c.last_pushed_at or 0.0)
        yield pushed
        failing = GaugeMetricFamily(
            "rideout_canary_failed_pushes",
            "Pushes in a row that this control plane instance did not take (0: it takes them).",
            labels=["url"],
        )  # fmt: skip
        for url, failed in c.failed_pushes.items():
            failing.add_metric([url], failed)
        yield failing


def create_canary_app(canary: Canary, *, clock: Callable[[], float] = time.time) -> Starlette:
    """The canary's HTTP app; its lifespan runs the probe loop."""
    interval = canary.config.timing.canary_interval
    window = _STALE_ROUNDS * interval + canary.config.timing.canary_timeout
    registry = CollectorRegistry()
    registry.register(CanaryCollector(canary))
    Gauge(
        "rideout_canary_info", "The region this canary probes.", ["region"], registry=registry
    ).labels(canary.region.name).set(1)
    # The probe loop runs supervised: a death is logged, counted and restarted, and
    # /live (and /health) answer 503 until the restart.
    tasks = TaskSupervisor(registry=registry)
    task: Supervised | None = None
    started = clock()

    def recent(at: float | None) -> bool:
        return clock() - (at if at is not None else started) <= window

    async def live(request: Request) -> Response:
        running = task is not None and not task.done() and task.up
        ok = running and recent(canary.last_round_at)
        body = {"status": "live" if ok else "stuck", "rounds": canary.rounds}
        return JSONResponse(body, status_code=200 if ok else 503)

    async def ready(request: Request) -> Response:
        ok = canary.last_pushed_at is not None and recent(canary.last_pushed_at)
        body: dict[str, object] = {"status": "ready" if ok else "not_ready",
                                   "last_pushed_at": canary.last_pushed_at}  # fmt: skip
        if not ok:
            body["message"] = (
                "no round has reached a control plane yet"
                if canary.last_pushed_at is None
                else f"no control plane took a round for {window:g} s"
            )
        return JSONResponse(body, status_code=200 if ok else 503)

    async def metrics(request: Request) -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        nonlocal task
        task = tasks.spawn("canary", canary.run)
        try:
            yield
        finally:
            await task.stop()

    return Starlette(
        routes=[
            Route(routes.LIVE, live),
            Route(routes.READY, ready),
            Route(routes.HEALTH, live),
            Route(routes.METRICS, metrics),
        ],
        lifespan=lifespan,
    )
