"""The DNS process (``rideout dns``): a follower of the published view, the server, /metrics.

:class:`DnsService` wires a :class:`~rideout.dns.feed.DnsFollower` to a
:class:`~rideout.dns.server.DnsServer` that answers from precomputed replies, rebuilt
(and warmed with the zone's usual questions) whenever the view's decision changes, and
serves an ASGI app on its own HTTP port: ``GET /metrics`` (Prometheus: the server's
counters, the view's age and serial, the kernel's drop count for the UDP socket) and
``GET /health`` (the view in force). Both are read-only and public, like the control
plane's; nothing here takes a credential.

When the view stops changing (the control plane is down, or hangs), the server keeps
answering the last view, however old: name resolution never waits for the control
plane. ``rideout_dns_view_age_seconds`` grows meanwhile (the control plane republishes
its view every few seconds even when nothing changed), so an alarm on it tells a stale
view from a quiet one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
from collections.abc import AsyncIterator, Iterable
from pathlib import Path

from prometheus_client import CONTENT_TYPE_LATEST, Gauge, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from rideout import routes
from rideout._tasks import TaskSupervisor
from rideout.dns.feed import DnsFollower, DnsView, ViewFile
from rideout.dns.records import Answer, DnsZoneConfig
from rideout.dns.server import DnsMetrics, DnsServer

__all__ = ["DnsService", "udp_socket_drops"]

log = logging.getLogger(__name__)

_PROC_UDP = (Path("/proc/net/udp"), Path("/proc/net/udp6"))


def udp_socket_drops(inode: int, tables: Iterable[Path] = _PROC_UDP) -> int | None:
    """The kernel's count of datagrams dropped for the UDP socket with `inode` (a full
    receive buffer, mostly), from /proc/net/udp; None where there is no such table."""
    for table in tables:
        try:
            lines = table.read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) >= 13 and fields[9] == str(inode):
                return int(fields[12])
    return None


class _KernelDrops(Collector):
    def __init__(self, server: DnsServer) -> None:
        self.server = server

    def collect(self) -> Iterable[Metric]:
        inode = self.server.udp_socket_inode()
        drops = None if inode is None else udp_socket_drops(inode)
        if drops is not None:
            yield GaugeMetricFamily(
                "rideout_dns_udp_kernel_drops",
                "Datagrams the kernel dropped for the DNS UDP socket (its receive buffer "
                "was full), since the socket opened.",
                value=drops,
            )


class DnsService:
    """``rideout dns``: answer `zone` from the view in `source`, on ``host:port``.

    :meth:`app` is the ASGI app for the metrics port; its lifespan runs the DNS server
    and the follower.
    """

    def __init__(
        self,
        zone: DnsZoneConfig,
        source: ViewFile,
        host: str,
        port: int,
        *,
        interval: float = 0.1,
    ) -> None:
        self.zone = zone
        self.metrics = DnsMetrics()
        # The view's follower runs supervised: while it is down (died, awaiting its
        # restart) /health is 503, the last view still answered.
        self.tasks = TaskSupervisor(registry=self.metrics.registry)
        self.follower = DnsFollower(zone, source, interval=interval, on_change=self._changed)
        self.server = DnsServer(
            self.follower.resolve,
            host,
            port,
            metrics=self.metrics,
            generation=self.follower.generation,
            warm=zone.questions(),
        )
        registry = self.metrics.registry
        Gauge(
            "rideout_dns_view_age_seconds",
            "Seconds since the DNS view in force was published (NaN before the first).",
            registry=registry,
        ).set_function(lambda: _or_nan(self.follower.age()))
        Gauge(
            "rideout_dns_view_serial",
            "SOA serial of the DNS view in force (0 before the first).",
            registry=registry,
        ).set_function(lambda: self.follower.view.serial if self.follower.view else 0)
        registry.register(_KernelDrops(self.server))

    def _changed(self, view: DnsView, answer: Answer) -> None:
        log.info("%s answers %s %s (%s), serial %d", self.zone.app_domain, answer.region,
                 ",".join(answer.addresses), answer.reason, view.serial)  # fmt: skip

    async def run(self) -> None:
        """Serve DNS and follow the view until cancelled."""
        async with self._serving():
            await asyncio.Event().wait()

    @contextlib.asynccontextmanager
    async def _serving(self) -> AsyncIterator[None]:
        self.follower.refresh()
        if self.follower.view is None:
            log.warning("no DNS view in %s yet: SERVFAIL until the control plane publishes one",
                        self.follower.source.path)  # fmt: skip
        async with self.server:
            task = self.tasks.spawn("dns-follower", lambda: self.follower.run(self.server.warm))
            try:
                yield
            finally:
                await task.stop()

    @contextlib.asynccontextmanager
    async def _lifespan(self, app: Starlette) -> AsyncIterator[None]:
        async with self._serving():
            yield

    async def _metrics(self, request: Request) -> Response:
        return Response(generate_latest(self.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    async def _health(self, request: Request) -> JSONResponse:
        view = self.follower.view
        down = self.tasks.down()
        body: dict[str, object] = {
            "status": "degraded" if down else "ok",
            "pid": os.getpid(),
            "view": None,
            "tasks_down": list(down),
        }
        if view is not None:
            answer = view.answer(self.zone)
            body["view"] = {
                "serial": view.serial,
                "age": self.follower.age(),
                "region": answer.region,
                "addresses": list(answer.addresses),
                "reason": answer.reason,
            }
        return JSONResponse(body, status_code=503 if down else 200)

    def app(self) -> Starlette:
        """The metrics port's app: ``GET /metrics``, ``GET /health``."""
        return Starlette(
            routes=[
                Route(routes.METRICS, self._metrics, methods=["GET"]),
                Route(routes.HEALTH, self._health, methods=["GET"]),
            ],
            lifespan=self._lifespan,
        )


def _or_nan(value: float | None) -> float:
    return math.nan if value is None else value
