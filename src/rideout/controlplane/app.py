"""The control plane's HTTP API.

| route | who may call it | what |
|---|---|---|
| ``GET /health`` | anyone | 200, or 503 while a critical background task (the control loop, the lease's renewal) is down awaiting its restart |
| ``GET /live`` | anyone | 200 while the control loop runs |
| ``GET /ready`` | anyone | 200 while this instance acts (holds the lease, or runs alone); 503 with why (``standby: lease held by X until T``) |
| ``GET /status`` | anyone | the inventory's view (locally ``rideout status --json``) plus alarms, DNS, writer; collected at most once per period however many ask |
| ``GET /metrics`` | anyone | Prometheus |
| ``POST /v1/metrics`` | a region's canary: HMAC-signed, ``application/json``, no browser | PutMetricData-shaped ingest; every datapoint must be about the signer's region |
| ``GET /v1/writer`` | anyone | ``{region, epoch}``: what app servers fence their writes with |
| ``GET /v1/summary`` | anyone | alarms, health checks, the DNS answer, the failover controller |
| ``GET /resolve?name=&type=`` | anyone | DNS-over-HTTPS JSON for browsers |
| ``GET /`` | anyone | the ops dashboard |
| ``GET /v1/stream`` | same Host; capped | server-sent events: one shared ``summary`` per period |
| ``GET /v1/dashboard`` | same Host | what the dashboard's script needs: chaos on or off, the session's CSRF token |
| ``POST /v1/login-codes`` | the admin token, no browser | a one-time dashboard login link |
| ``GET /login?code=`` | the link's holder, once | an operator session cookie, then ``/`` |
| ``POST /v1/chaos`` | local mode: an operator session + CSRF token + own Origin, or the admin token | ``{"op": "kill", "region": R}`` for the chaos port |
| ``POST /v1/dashboard/zones`` | as ``/v1/chaos`` (any mode) | ``{"op": "evacuate" | "recover", "zone": Z}``: the dashboard's zone buttons, through the evacuation engine and its ledger (operator ``dashboard``) |
| ``GET /v1/zones`` | anyone | every zone: evacuated or not, since when, by whom, why, its drain |
| ``POST /v1/zones/{zone_id}/evacuate`` | the admin token, no browser | ``{"operator"?, "reason"?, "expires_in"?}``: out of DNS, clients drained (409: the region's last serving zone) |
| ``POST /v1/zones/{zone_id}/recover`` | the admin token, no browser | back into DNS |
| ``GET /openapi.json`` | anyone | this API's OpenAPI 3.1 document (:mod:`rideout.openapi`) |

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
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

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
from starlette.responses import (
    FileResponse,
    JSONResponse,
    RedirectResponse,
    Response,
    StreamingResponse,
)
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import Receive, Scope, Send

from rideout import _body, _http, openapi, routes
from rideout._pages import DASHBOARD_CSP, WithHeaders, page_headers
from rideout.auth.admin import check_admin_token, load_or_create_admin_token
from rideout.auth.canary_keys import load_canary_keys
from rideout.auth.request_signing import RequestVerifier, SignatureError
from rideout.config import Config
from rideout.controlplane.errors import ChaosFailed, IngestError, IngestForbidden
from rideout.controlplane.guards import browser_shaped
from rideout.controlplane.panels import DashboardPanels
from rideout.controlplane.ports import ChaosPort, ConfigInventory, Inventory
from rideout.controlplane.runtime import ControlPlane
from rideout.controlplane.sessions import OperatorSession, OperatorSessions
from rideout.controlplane.shared import FeedFull, SharedFeed, SharedResult, Subscription
from rideout.controlplane.zones import ZoneRefused
from rideout.dns.doh import doh_route
from rideout.openapi.control_plane import control_plane_document

__all__ = [
    "CSRF_HEADER",
    "SESSION_COOKIE",
    "ApiMetrics",
    "ControlPlaneApi",
    "connected_clients",
    "create_app",
]

MAX_INGEST_BYTES = 1 << 20
MAX_CHAOS_BYTES = 4096
MAX_ZONE_BYTES = 4096
SESSION_COOKIE = "rideout_operator"
CSRF_HEADER = "X-CSRF-Token"
OPERATOR_STREAMS = 4  # stream slots beyond the cap that only operator sessions may take
DASHBOARD_DIR = Path(__file__).resolve().parent.parent / "web"
_PAGE_HEADERS = page_headers(DASHBOARD_CSP)
_NO_STORE = {"Cache-Control": "no-store"}


def _error(
    status_code: int, error: str, message: str | None = None, **headers: str
) -> JSONResponse:
    body = {"error": error} if message is None else {"error": error, "message": message}
    return JSONResponse(body, status_code=status_code, headers=headers or None)


async def connected_clients(
    config: Config,
    http: httpx.AsyncClient,
    *,
    timeout: float = 0.5,
    on_poll: Callable[[str], None] | None = None,
) -> dict[str, int | None]:
    """Open WebSocket connections per region, from each zone's /health (None: no answer).

    Every zone is asked at once, each within `timeout`.
    """

    async def zone(name: str, address: str) -> int | None:
        if on_poll is not None:
            on_poll(name)
        try:
            url = routes.zone_url(config, address, routes.HEALTH)
            body = (await http.get(url, timeout=timeout)).json()
            return int(body["connections"])
        except (httpx.HTTPError, ValueError, KeyError, TypeError):
            return None

    zones = [(r.name, z) for r in config.regions for z in r.zones]
    answers = await asyncio.gather(*(zone(z.name, z.address) for _, z in zones))
    counts: dict[str, int | None] = {}
    for region in config.regions:
        known = [a for (r, _), a in zip(zones, answers, strict=True) if r == region.name]
        present = [a for a in known if a is not None]
        counts[region.name] = sum(present) if present else None
    return counts


class ApiMetrics:
    """The HTTP API's own metrics (the runtime's are in ``ControlPlane.registry``)."""

    def __init__(self, config: Config) -> None:
        self.registry = r = CollectorRegistry()
        Gauge(
            "rideout_deployment_info", "The deployment this control plane runs.",
            ["app_domain", "profile"], registry=r,
        ).labels(config.app_domain, config.profile).set(1)  # fmt: skip
        Gauge(
            "rideout_control_plane_start_time_seconds", "Unix time the control plane started.",
            registry=r,
        ).set(time.time())  # fmt: skip
        self.requests = Counter(
            "rideout_control_plane_requests", "API requests answered, by endpoint.",
            ["endpoint"], registry=r,
        )  # fmt: skip
        self.refused = Counter(
            "rideout_control_plane_refused", "Requests refused, by endpoint and reason.",
            ["endpoint", "reason"], registry=r,
        )  # fmt: skip
        self.dashboard_views = Counter(
            "rideout_dashboard_views", "Dashboard views computed (shared by every reader).",
            registry=r,
        )  # fmt: skip
        self.zone_polls = Counter(
            "rideout_dashboard_zone_polls", "Zone /health requests made for the dashboard.",
            ["zone"], registry=r,
        )  # fmt: skip
        self.stream_readers = Gauge(
            "rideout_dashboard_stream_readers", "Open /v1/stream readers.", registry=r
        )
        self.status_collections = Counter(
            "rideout_status_collections", "Inventory collections made for /status.", registry=r
        )
        self.logins = Counter(
            "rideout_operator_logins", "Dashboard login links redeemed, by outcome.",
            ["outcome"], registry=r,
        )  # fmt: skip


class _FeedResponse(StreamingResponse):
    """A reader's stream of the shared feed; its slot is freed however the stream ends."""

    def __init__(self, subscription: Subscription) -> None:
        super().__init__(subscription.frames(), media_type="text/event-stream", headers=_NO_STORE)
        self._subscription = subscription

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._subscription.close()


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
        self.http = _http.async_client(timeout=0.5)
        cp = config.control_plane
        self._own_hosts = {f"{cp.address}:{cp.port}"} | {
            url.split("://", 1)[1] for url in config.control_plane_urls()
        }
        self._own_origin = routes.control_plane_url(config)
        self.sessions = OperatorSessions(code_ttl=cp.login_code_ttl, session_ttl=cp.session_ttl)
        self.verifier = RequestVerifier(
            load_canary_keys(config.keys_dir, [r.name for r in config.regions]),
            max_skew=cp.ingest_max_skew,
        )
        period = plane.period
        self._poll_timeout = min(0.5, 0.5 * period)
        self._clients: dict[str, int | None] = {r.name: None for r in config.regions}
        self.panels = DashboardPanels(config, plane, self.http, timeout=self._poll_timeout * 1.5)
        self.feed = SharedFeed(
            self._dashboard_frame,
            period,
            # A safety net only: the zone polls have a tighter bound of their own, and a
            # busy event loop must not make the feed skip its views.
            timeout=min(10.0, max(1.0, 2 * period)),
            max_readers=cp.max_stream_readers,
            reserved=OPERATOR_STREAMS,
            on_readers=self.metrics.stream_readers.set,
        )
        self.status_view: SharedResult[dict[str, Any]] = SharedResult(
            self._collect_status, ttl=min(1.0, period)
        )

    def route_table(self) -> list[BaseRoute]:
        plane = self.plane
        return [
            Route(routes.HEALTH, self.health),
            Route(routes.LIVE, self.live),
            Route(routes.READY, self.ready),
            Route(routes.STATUS, self.status),
            Route(routes.METRICS, self.prometheus),
            Route(routes.METRICS_INGEST, self.put_metrics, methods=["POST"]),
            Route(routes.WRITER, self.writer),
            Route(routes.SUMMARY, self.summary),
            doh_route(
                plane.resolve,
                path=routes.RESOLVE,
                metrics=plane.dns_metrics,
                generation=plane.dns_generation,
            ),
            Route(routes.STREAM, self.stream),
            Route(routes.DASHBOARD, self.dashboard_config),
            Route(routes.LOGIN_CODES, self.login_codes, methods=["POST"]),
            Route(routes.LOGIN, self.login),
            Route(routes.CHAOS, self.chaos, methods=["POST"]),
            Route(routes.DASHBOARD_ZONES, self.dashboard_zones, methods=["POST"]),
            Route(routes.ZONES, self.zones),
            Route(routes.ZONE_EVACUATE, self.zone_evacuate, methods=["POST"]),
            Route(routes.ZONE_RECOVER, self.zone_recover, methods=["POST"]),
            Route("/", self.dashboard_page),
            openapi.document_route(openapi.encode(control_plane_document())),
            Mount(
                "/static",
                WithHeaders(StaticFiles(directory=DASHBOARD_DIR), _PAGE_HEADERS),
                name="static",
            ),
        ]

    @contextlib.asynccontextmanager
    async def lifespan(self, app: Starlette) -> AsyncIterator[None]:
        """Runs the control loop, the DNS server and the dashboard feed while the app
        serves (the feed in a task of its own: the loop never waits for it)."""
        await self.plane.start()
        self.feed.start(self.plane.tasks)
        app.state.control_plane = self.plane
        try:
            yield
        finally:
            await self.feed.stop()
            await self.status_view.close()
            await self.plane.stop()
            await self.http.aclose()

    def _count(self, endpoint: str) -> None:
        self.metrics.requests.labels(endpoint).inc()

    def _refuse(
        self, endpoint: str, reason: str, status_code: int, error: str, message: str, **headers: str
    ) -> JSONResponse:
        self.metrics.refused.labels(endpoint, reason).inc()
        return _error(status_code, error, message, **headers)

    def _body_refused(self, endpoint: str, exc: _body.BodyRefused) -> JSONResponse:
        reason = "media_type" if exc.status == 415 else exc.code
        return self._refuse(endpoint, reason, exc.status, exc.code, str(exc))

    def _from_own_origin(self, request: Request) -> bool:
        # No CORS headers: other origins cannot read these answers. The Host check closes
        # DNS rebinding (a page on another name that resolves to 127.0.0.1).
        return request.headers.get("host") in self._own_hosts

    def _session(self, request: Request) -> OperatorSession | None:
        return self.sessions.session(request.cookies.get(SESSION_COOKIE))

    def _admin(self, request: Request) -> bool:
        token = load_or_create_admin_token(self.config.keys_dir)
        return check_admin_token(token, request.headers.get("authorization"))

    # ------------------------------------------------------------------ routes

    async def health(self, request: Request) -> Response:
        """200 while every critical background task runs (the control loop, the lease's
        renewal); 503 naming those that died and await their restart."""
        self._count("health")
        down = self.plane.tasks.down()
        body = {
            "status": "degraded" if down else "ok",
            "app_domain": self.config.app_domain,
            "tasks_down": list(down),
            "tasks": self.plane.tasks.status(),
        }
        return JSONResponse(body, status_code=503 if down else 200)

    async def live(self, request: Request) -> Response:
        """200 while the control loop task runs (a stuck or dead loop: 503)."""
        running = self.plane.running
        return JSONResponse(
            {"status": "live" if running else "stopped"}, status_code=200 if running else 503
        )

    async def ready(self, request: Request) -> Response:
        """200 while this instance acts; a standby answers 503 saying who holds the lease."""
        ok, body = self.plane.readiness()
        return JSONResponse(body, status_code=200 if ok else 503, headers=_NO_STORE)

    async def _collect_status(self) -> dict[str, Any]:
        self.metrics.status_collections.inc()
        return await self.inventory.collect()

    async def status(self, request: Request) -> Response:
        """The inventory's view of the deployment, with the control plane's summary."""
        self._count("status")
        view = dict(await self.status_view.get())
        view["control_plane"] = {**view["control_plane"], **self.plane.summary()}
        return JSONResponse(view)

    async def summary(self, request: Request) -> Response:
        self._count("summary")
        return JSONResponse(self.plane.summary())

    async def writer(self, request: Request) -> Response:
        self._count("writer")
        controller = self.plane.controller
        if controller.epoch is None:
            return _error(503, "starting", "the writer is not known yet")
        return JSONResponse(
            {
                "region": controller.writer,
                "epoch": controller.epoch,
                "redis": controller.writer_endpoint,
            }
        )

    async def put_metrics(self, request: Request) -> Response:
        """A canary's datapoints: signed for one region, about that region only."""
        self._count("put_metrics")
        refuse = self._refuse
        if browser_shaped(request.headers):
            return refuse("put_metrics", "browser", 403, "forbidden",
                          "browser requests are not accepted here")  # fmt: skip
        try:
            body = await _body.read(request, MAX_INGEST_BYTES, media_type=_body.JSON)
        except _body.BodyRefused as exc:
            return self._body_refused("put_metrics", exc)
        try:
            region = self.verifier.verify("POST", routes.METRICS_INGEST, request.headers, body)
        except SignatureError as exc:
            error = "busy" if exc.status == 503 else "unauthorized"
            return refuse("put_metrics", exc.reason, exc.status, error, str(exc))
        try:
            stored = self.plane.put_metric_data(_body.decode_object(body), region=region)
        except _body.BodyRefused as exc:
            return self._body_refused("put_metrics", exc)
        except IngestForbidden as exc:
            return refuse("put_metrics", "other_region", 403, "forbidden", str(exc))
        except (ValueError, IngestError) as exc:
            return refuse("put_metrics", "bad_request", 400, "bad_request", str(exc))
        self.plane.ingested.inc(stored)
        return JSONResponse({"stored": stored})

    async def dashboard_view(self) -> dict[str, object]:
        """The summary, plus what the dashboard draws: canary history, clients per
        region, and the zones, ledger and rooms panels (:mod:`.panels`)."""
        plane = self.plane
        view = plane.summary()
        view["canary"] = plane.canary_history()
        view["now"] = time.time()
        await asyncio.gather(self._poll_clients(), self.panels.add_to(view, plane.zones_status()))
        view["clients"] = self._clients
        view["period"] = plane.period
        return view

    async def _poll_clients(self) -> None:
        try:
            # The zones' answers within one bound; a late round keeps the last counts.
            async with asyncio.timeout(self._poll_timeout * 1.5):
                self._clients = await connected_clients(
                    self.config, self.http, timeout=self._poll_timeout,
                    on_poll=lambda zone: self.metrics.zone_polls.labels(zone).inc(),
                )  # fmt: skip
        except TimeoutError:
            pass

    async def _dashboard_frame(self) -> bytes:
        view = await self.dashboard_view()
        self.metrics.dashboard_views.inc()
        return b"event: summary\ndata: " + json.dumps(view).encode() + b"\n\n"

    async def stream(self, request: Request) -> Response:
        """The shared feed; an operator session may use the few slots kept beyond the cap."""
        self._count("stream")
        if not self._from_own_origin(request):
            return self._refuse("stream", "host", 403, "forbidden", "wrong Host")
        try:
            subscription = self.feed.subscribe(privileged=self._session(request) is not None)
        except FeedFull as exc:
            return self._refuse("stream", "full", 503, "busy", str(exc),
                                **{"Retry-After": str(round(exc.retry_after))})  # fmt: skip
        return _FeedResponse(subscription)

    def _chaos_available(self) -> bool:
        return self.config.mode == "local" and self.chaos_port is not None

    async def dashboard_config(self, request: Request) -> Response:
        """Same-origin only: what the dashboard needs. No credential but the session's
        CSRF token, which only its own cookie's holder gets."""
        if not self._from_own_origin(request):
            return _error(403, "forbidden", "wrong Host")
        session = self._session(request)
        return JSONResponse(
            {
                "local": self._chaos_available(),
                "regions": [r.name for r in self.config.regions],
                "session": session is not None,
                "csrf": session.csrf if session is not None else None,
                "login": "rideout dashboard login",
            },
            headers=_NO_STORE,
        )

    async def login_codes(self, request: Request) -> Response:
        """The admin token's holder asks for a one-time login link (never a browser)."""
        self._count("login_codes")
        if browser_shaped(request.headers):
            return self._refuse("login_codes", "browser", 403, "forbidden",
                                "browser requests are not accepted here")  # fmt: skip
        if not self._from_own_origin(request):
            return self._refuse("login_codes", "host", 403, "forbidden", "wrong Host")
        if not self._admin(request):
            return self._refuse("login_codes", "unauthorized", 401, "unauthorized",
                                "admin token required")  # fmt: skip
        code, expires = self.sessions.mint_code()
        url = f"{routes.control_plane_url(self.config, routes.LOGIN)}?code={code}"
        return JSONResponse({"url": url, "expires_at": expires}, headers=_NO_STORE)

    async def login(self, request: Request) -> Response:
        """Redeem a login link once: set the session cookie and go to the dashboard."""
        self._count("login")
        if not self._from_own_origin(request):
            return self._refuse("login", "host", 403, "forbidden", "wrong Host")
        redeemed = self.sessions.redeem(request.query_params.get("code", ""))
        if redeemed is None:
            self.metrics.logins.labels("refused").inc()
            return _error(
                401, "login_failed",
                "this login link is unknown, used or expired; `rideout dashboard login` "
                "prints a new one", **_NO_STORE,
            )  # fmt: skip
        self.metrics.logins.labels("ok").inc()
        session_id, _ = redeemed
        response = RedirectResponse(
            "/", status_code=303, headers={**_NO_STORE, "Referrer-Policy": "no-referrer"}
        )
        # Plain HTTP on loopback: no Secure flag (the browser would drop the cookie).
        response.set_cookie(
            SESSION_COOKIE, session_id, max_age=int(self.sessions.session_ttl), path="/",
            httponly=True, samesite="strict",
        )  # fmt: skip
        return response

    def _operator_refusal(self, request: Request, endpoint: str) -> JSONResponse | None:
        """Who may press the dashboard's buttons (chaos, zones): the admin token (the
        CLI), or an operator session whose POST comes from the dashboard's own origin
        with the session's CSRF token."""
        origin = request.headers.get("origin")
        if origin is not None and origin != self._own_origin:
            return self._refuse(endpoint, "origin", 403, "forbidden", "wrong Origin")
        if request.headers.get("authorization") is not None:
            if self._admin(request):
                return None
            return self._refuse(endpoint, "unauthorized", 401, "unauthorized",
                                "wrong admin token")  # fmt: skip
        session = self._session(request)
        if session is None:
            return self._refuse(
                endpoint, "unauthorized", 401, "unauthorized",
                "an operator session (open the link `rideout dashboard login` prints) or "
                "the admin token is required",
            )  # fmt: skip
        if origin is None:
            return self._refuse(endpoint, "origin", 403, "forbidden",
                                "a session's request must carry the dashboard's Origin")  # fmt: skip
        if not session.csrf_matches(request.headers.get(CSRF_HEADER)):
            return self._refuse(endpoint, "csrf", 403, "forbidden",
                                f"missing or wrong {CSRF_HEADER}")  # fmt: skip
        return None

    async def _operator_body(
        self, request: Request, endpoint: str, limit: int
    ) -> dict[str, Any] | JSONResponse:
        """A dashboard button's POST (chaos, zones): the control plane's own Host, an
        operator's credential (:meth:`_operator_refusal`), a JSON object within `limit`
        bytes; else the refusal to answer with."""
        if not self._from_own_origin(request):
            return self._refuse(endpoint, "host", 403, "forbidden", "wrong Host")
        refusal = self._operator_refusal(request, endpoint)
        if refusal is not None:
            return refusal
        try:
            return await _body.read_json(request, limit, media_type=_body.JSON)
        except _body.BodyRefused as exc:
            return self._body_refused(endpoint, exc)

    async def chaos(self, request: Request) -> Response:
        """Local mode, same Host, an operator's credential: one chaos command."""
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
        body = await self._operator_body(request, "chaos", MAX_CHAOS_BYTES)
        if isinstance(body, JSONResponse):
            return body
        op, region = body.get("op"), body.get("region")
        if not isinstance(op, str) or not isinstance(region, str):
            return _error(400, "bad_request", 'send {"op": "kill" | ..., "region": REGION}')
        try:
            message = await self.chaos_port.run(str(op), str(region))
        except ChaosFailed as exc:
            return _error(409, "chaos_failed", str(exc))
        return JSONResponse({"message": message})

    async def dashboard_zones(self, request: Request) -> Response:
        """Same Host, an operator's credential (as chaos): evacuate or recover a zone
        through the evacuation engine, recorded in the ledger (operator ``dashboard``)."""
        self._count("dashboard_zones")
        body = await self._operator_body(request, "dashboard_zones", MAX_ZONE_BYTES)
        if isinstance(body, JSONResponse):
            return body
        op, zone = body.get("op"), body.get("zone")
        if op not in ("evacuate", "recover") or not isinstance(zone, str) or len(body) != 2:
            return _error(400, "bad_request", 'send {"op": "evacuate" | "recover", "zone": ZONE}')
        status, answer = await self.panels.zone_action(op, zone)
        return JSONResponse(answer, status_code=status, headers=_NO_STORE)

    async def zones(self, request: Request) -> Response:
        self._count("zones")
        return JSONResponse({"zones": self.plane.zones_status()}, headers=_NO_STORE)

    def _zone_refusal(self, request: Request, endpoint: str) -> JSONResponse | None:
        """Zone changes: the admin token's holder (the CLI, the evacuation engine's local
        provider), never a browser, on the control plane's own Host."""
        if browser_shaped(request.headers):
            return self._refuse(endpoint, "browser", 403, "forbidden",
                                "browser requests are not accepted here")  # fmt: skip
        if not self._from_own_origin(request):
            return self._refuse(endpoint, "host", 403, "forbidden", "wrong Host")
        if not self._admin(request):
            return self._refuse(endpoint, "unauthorized", 401, "unauthorized",
                                "admin token required")  # fmt: skip
        return None

    async def _zone_body(self, request: Request, endpoint: str) -> dict[str, Any] | JSONResponse:
        """The change's options: a JSON object, or an empty body for none."""
        try:
            return await _body.read_json(
                request, MAX_ZONE_BYTES, media_type=_body.JSON, empty_ok=True
            )
        except _body.BodyRefused as exc:
            return self._body_refused(endpoint, exc)

    async def zone_evacuate(self, request: Request) -> Response:
        """Evacuate one zone (see :meth:`ControlPlane.evacuate_zone`)."""
        self._count("zone_evacuate")
        refusal = self._zone_refusal(request, "zone_evacuate")
        if refusal is not None:
            return refusal
        body = await self._zone_body(request, "zone_evacuate")
        if isinstance(body, JSONResponse):
            return body
        unknown = set(body) - {"operator", "reason", "expires_in"}
        if unknown:
            return _error(400, "bad_request", f"unknown field(s): {', '.join(sorted(unknown))}")
        try:
            view = await self.plane.evacuate_zone(
                request.path_params["zone_id"],
                operator=body.get("operator", "admin"),
                reason=body.get("reason", "manual"),
                expires_in=body.get("expires_in"),
            )
        except ZoneRefused as exc:
            return _error(exc.status, "not_found" if exc.status == 404 else "refused", str(exc))
        except ValueError as exc:  # InvalidArgument: a field of the wrong type or range
            return _error(400, "bad_request", str(exc))
        return JSONResponse(view, headers=_NO_STORE)

    async def zone_recover(self, request: Request) -> Response:
        """Recover one zone (see :meth:`ControlPlane.recover_zone`)."""
        self._count("zone_recover")
        refusal = self._zone_refusal(request, "zone_recover")
        if refusal is not None:
            return refusal
        try:
            view = await self.plane.recover_zone(request.path_params["zone_id"])
        except ZoneRefused as exc:
            return _error(exc.status, "not_found", str(exc))
        return JSONResponse(view, headers=_NO_STORE)

    async def prometheus(self, request: Request) -> Response:
        body = generate_latest(self.metrics.registry) + generate_latest(self.plane.registry)
        return Response(body, media_type=CONTENT_TYPE_LATEST)

    async def dashboard_page(self, request: Request) -> Response:
        return FileResponse(DASHBOARD_DIR / "dashboard.html", headers=_PAGE_HEADERS)


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
    app = Starlette(
        routes=api.route_table(), lifespan=api.lifespan,
        exception_handlers=_body.EXCEPTION_HANDLERS,
    )  # fmt: skip
    app.state.api = api
    return app
