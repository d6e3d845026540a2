"""The waiting room's HTTP API: AWS Virtual Waiting Room's public API at its paths, and
a private API behind the deployment's admin token (docs/waiting-room.md).

Public (no credential; ``Access-Control-Allow-Origin: *`` and preflight, as AWS):
``POST /assign_queue_num``, ``GET /queue_num``, ``GET /serving_num``,
``GET /waiting_num``, ``GET /queue_pos_expiry``, ``POST /generate_token``,
``GET /public_key``, ``GET /estimated_wait``, and rideout's ``POST /refresh_token``
(a refresh token renews an active session; AWS has none). Field names and value types are those
AWS's code returns (``serving_counter`` is a JSON string). Errors are
``{"error": "..."}`` with AWS's status where AWS has one.

Private (``Authorization: Bearer <admin token>``, compared in constant time; no CORS):
``/private/increment_serving_counter``, ``/private/update_session``,
``/private/num_active_tokens``, ``/private/expired_tokens``,
``/private/reset_initial_state``, ``/private/generate_token``, and events at runtime:
``/private/events`` (GET list, POST create), ``/private/events/{id}`` (GET, PATCH,
DELETE), ``/private/events/{id}/open|close``.

Every POST and PATCH honours an optional ``Idempotency-Key``
(:class:`rideout.idempotency.IdempotencyMiddleware`): a client retrying
``assign_queue_num`` across a failover keeps one position. Each response says how a
CDN may cache it (``Cache-Control``: short and public for the shared counters, long for
the public key, ``private`` for per-request paths); ``serving_num`` and ``waiting_num``
also come from an in-process micro-cache, so a surge of polls costs Redis one read per
event per ``micro_cache_ttl``, and ``queue_num`` from a per-process cache of numbered
positions (:mod:`rideout.waitingroom.poll_cache`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final, TypeVar, cast

from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route, request_response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from rideout import _body, routes
from rideout.auth.admin import check_admin_token
from rideout.auth.errors import AuthError
from rideout.auth.room_tokens import KeySource, RoomTokenIssuer, RoomTokenVerifier
from rideout.errors import InvalidArgument
from rideout.idempotency import IdempotencyMiddleware, credential_principal
from rideout.store.client import cancel_and_wait
from rideout.store.errors import StoreError
from rideout.waitingroom.errors import (
    InvalidRequest,
    RoomError,
    RoomUnavailable,
    UnknownEvent,
)
from rideout.waitingroom.metrics import RoomMetrics
from rideout.waitingroom.model import (
    MAX_VALIDITY,
    POW_WINDOW,
    Counters,
    EventSettings,
    ExpiryState,
    PositionState,
    check_event_id,
    check_request_id,
    estimated_wait,
    pow_valid,
    serving_rate,
)
from rideout.waitingroom.poll_cache import DEFAULT_SIZE, PositionCache, touch_interval
from rideout.waitingroom.store import RoomStore

__all__ = [
    "CACHE_COUNTERS",
    "CACHE_PRIVATE",
    "CACHE_PUBLIC_KEY",
    "MicroCache",
    "RoomAPI",
]

CACHE_COUNTERS: Final = "public, max-age=1, s-maxage=2"
"""The shared counters: a CDN may serve them for a moment (AWS's CloudFront: 5 s)."""
CACHE_PUBLIC_KEY: Final = "public, max-age=3600"
"""The public key: an hour (a rotated key stays in the JWKS meanwhile)."""
CACHE_PRIVATE: Final = "private, no-store"
"""Per-request and per-caller answers: never shared, never stored."""
_PREFLIGHT_HEADERS: Final = {
    "Access-Control-Allow-Origin": "*",
    "Access-Control-Allow-Methods": "GET, POST, OPTIONS",
    "Access-Control-Allow-Headers": "Content-Type, Idempotency-Key",
    "Access-Control-Max-Age": "600",
}
_RATE_WINDOW: Final = 300.0  # seconds of serving-counter history the ETA looks at
_TOUCH_BATCH: Final = 0.05  # seconds a queued touch waits for others (< poll_cache.TOUCH_DELAY)
log = logging.getLogger("rideout.waitingroom")
T = TypeVar("T")


# -------------------------------------------------------------------------- the cache


class MicroCache:
    """Values kept for `ttl` seconds per key; concurrent misses of one key share one
    load (a surge of polls is one Redis read). ``loads`` counts the reads made."""

    def __init__(
        self,
        ttl: float,
        *,
        clock: Callable[[], float] = time.monotonic,
        on_load: Callable[[], None] | None = None,
    ) -> None:
        self.ttl = ttl
        self.clock = clock
        self.loads = 0
        self._on_load = on_load
        self._values: dict[tuple[str, str], tuple[float, Any]] = {}
        self._pending: dict[tuple[str, str], asyncio.Future[Any]] = {}

    async def get(self, key: tuple[str, str], load: Callable[[], Awaitable[T]]) -> T:
        """The cached value of `key`, or `load()`'s (an UnknownEvent is cached too)."""
        if self.ttl <= 0:
            self._loaded()
            return await load()
        now = self.clock()
        hit = self._values.get(key)
        if hit is not None and hit[0] > now:
            return cast(T, self._unwrap(hit[1]))
        pending = self._pending.get(key)
        if pending is not None:
            return cast(T, self._unwrap(await asyncio.shield(pending)))
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[key] = future
        try:
            self._loaded()
            try:
                value: Any = await load()
            except UnknownEvent as exc:
                value = exc
            except BaseException as exc:
                future.set_exception(exc)
                future.exception()  # retrieved: waiters re-raise it, nobody logs it
                raise
            future.set_result(value)
            self._values[key] = (self.clock() + self.ttl, value)
            if len(self._values) > 10_000:
                self._values.clear()  # bounded: unknown event ids cannot grow it forever
            return cast(T, self._unwrap(value))
        finally:
            del self._pending[key]

    def _loaded(self) -> None:
        self.loads += 1
        if self._on_load is not None:
            self._on_load()

    @staticmethod
    def _unwrap(value: Any) -> Any:
        if isinstance(value, UnknownEvent):
            raise value
        return value

    def forget(self, event_id: str) -> None:
        """Drop an event's values (after a change made through this process)."""
        for key in [k for k in self._values if k[0] == event_id]:
            del self._values[key]


# ------------------------------------------------------------------------ responses


def _json_response(
    body: object, status: int = 200, *, cache: str = CACHE_PRIVATE, public: bool = True
) -> Response:
    headers = {"Cache-Control": cache}
    if public:
        headers["Access-Control-Allow-Origin"] = "*"
    data = json.dumps(body, separators=(",", ":")).encode()
    return Response(data, status, headers=headers, media_type="application/json")


def _error(status: int, message: str, *, public: bool = True, **headers: str) -> Response:
    response = _json_response({"error": message}, status, public=public)
    response.headers.update(headers)
    return response


class _BadInput(InvalidRequest):
    """A request that cannot be served as sent (answered with `status`: 400, 413)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _query(request: Request, name: str) -> str:
    values = request.query_params.getlist(name)
    if not values:
        raise _BadInput(400, f"Missing {name}")
    if len(values) > 1:
        raise _BadInput(400, f"{name} given more than once")
    return values[0]


def _event_id(value: object) -> str:
    try:
        return check_event_id(value)
    except ValueError:
        raise _BadInput(400, "Invalid event ID") from None


def _request_id(value: object) -> str:
    try:
        return check_request_id(value)
    except ValueError:
        raise _BadInput(400, "Invalid event or request ID") from None


def _position_query(request: Request) -> tuple[str, str]:
    """The ``event_id`` and ``request_id`` query parameters, checked."""
    return _event_id(_query(request, "event_id")), _request_id(_query(request, "request_id"))


def _field(body: Mapping[str, Any], name: str) -> Any:
    if name not in body:
        raise _BadInput(400, f"Missing {name}")
    return body[name]


def _integer(body: Mapping[str, Any], name: str, what: str) -> int:
    """A JSON integer field (not ``1.0``, not ``true``): the private API's one rule."""
    value = _field(body, name)
    if isinstance(value, bool) or not isinstance(value, int):
        raise _BadInput(400, f"{name} must be {what}")
    return value


Handler = Callable[[Request], Awaitable[Response]]


class _AdminOnly:
    """`app` for a request with the admin token; `refusal` (401) for any other, before
    `app` (its ``Idempotency-Key`` layer included) reads the request or a record."""

    def __init__(self, app: ASGIApp, *, refusal: ASGIApp, admin_token: str) -> None:
        self.app, self.refusal, self.admin_token = app, refusal, admin_token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        authorization = Headers(scope=scope).get("authorization")
        allowed = check_admin_token(self.admin_token, authorization)
        await (self.app if allowed else self.refusal)(scope, receive, send)


class _AnyOrigin:
    """`app` with ``Access-Control-Allow-Origin: *`` on every answer, the idempotency
    middleware's own (409, 422, ...) included, so a page can read them. (A class: a
    plain function would be taken for a request handler by Starlette's Route.)"""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def send_with_origin(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                if not any(k.lower() == b"access-control-allow-origin" for k, _ in headers):
                    headers.append((b"access-control-allow-origin", b"*"))
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_origin)


def _guarded(handler: Handler, *, public: bool) -> Handler:
    """Turn the room's refusals into ``{"error"}`` answers; count nothing on any."""

    async def run(request: Request) -> Response:
        try:
            return await handler(request)
        except _body.BodyRefused as exc:
            return _error(exc.status, str(exc), public=public)
        except RoomUnavailable as exc:
            return _error(503, f"The waiting room is unavailable: {exc}", public=public,
                          **{"Retry-After": "1"})  # fmt: skip
        except RoomError as exc:
            return _error(exc.status, str(exc), public=public)
        except InvalidArgument as exc:  # a setting or argument the model refused
            return _error(400, str(exc), public=public)
        except StoreError as exc:
            return _error(500, f"The waiting room's store failed: {exc}", public=public)

    return run


# ------------------------------------------------------------------------------ API


class RoomAPI:
    """The room's routes over one :class:`RoomStore`.

    ``admin_token`` guards the private API. ``signer`` and ``keys`` sign and publish
    the room's tokens (without them ``generate_token``, ``refresh_token`` and
    ``public_key`` answer 503).
    ``issuer`` is the tokens' ``iss``.

    ``position_cache_size``: numbered positions each process keeps for ``queue_num``
    (0: every poll reads Redis). :meth:`aclose` writes the touches still queued.
    """

    def __init__(
        self,
        store: RoomStore,
        *,
        admin_token: str,
        issuer: str,
        signer: RoomTokenIssuer | None = None,
        keys: KeySource | None = None,
        micro_cache_ttl: float = 0.5,
        position_cache_size: int = DEFAULT_SIZE,
        max_body: int = 4096,
        idempotency_ttl: float = 86400.0,
        metrics: RoomMetrics | None = None,
    ) -> None:
        if len(admin_token) < 32:
            raise InvalidRequest("admin_token must be a secret of at least 32 characters")
        self.store = store
        self.admin_token = admin_token
        self.issuer = issuer
        self.signer = signer
        self.keys = keys
        self.metrics = metrics
        self.cache = MicroCache(
            micro_cache_ttl, on_load=None if metrics is None else metrics.loads.inc
        )
        self.positions = PositionCache(position_cache_size)
        self._touches: dict[str, dict[str, float]] = {}  # event -> request id -> poll time
        self._flusher: asyncio.Task[None] | None = None
        self.max_body = max_body
        self.idempotency_ttl = idempotency_ttl
        self._principal = credential_principal(admin_token)  # owns the operator's records
        self.verifier = (
            None if keys is None else RoomTokenVerifier(
                keys, issuer=issuer, max_ttl=MAX_VALIDITY, clock=store.clock
            )
        )  # fmt: skip

    # ------------------------------------------------------------- composition

    def routes(self) -> list[BaseRoute]:
        """Every route of the room (public, preflight, private)."""
        public: list[tuple[str, str, Handler]] = [
            (routes.ROOM_ASSIGN_QUEUE_NUM, "POST", self.assign_queue_num),
            (routes.ROOM_QUEUE_NUM, "GET", self.queue_num),
            (routes.ROOM_SERVING_NUM, "GET", self.serving_num),
            (routes.ROOM_WAITING_NUM, "GET", self.waiting_num),
            (routes.ROOM_QUEUE_POS_EXPIRY, "GET", self.queue_pos_expiry),
            (routes.ROOM_GENERATE_TOKEN, "POST", self.generate_token),
            (routes.ROOM_PUBLIC_KEY, "GET", self.public_key),
            (routes.ROOM_ESTIMATED_WAIT, "GET", self.estimated_wait),
            (routes.ROOM_REFRESH_TOKEN, "POST", self.refresh_token),
        ]
        private: list[tuple[str, str, Handler]] = [
            (routes.ROOM_PRIVATE_INCREMENT, "POST", self.increment_serving_counter),
            (routes.ROOM_PRIVATE_UPDATE_SESSION, "POST", self.update_session),
            (routes.ROOM_PRIVATE_ACTIVE_TOKENS, "GET", self.num_active_tokens),
            (routes.ROOM_PRIVATE_EXPIRED_TOKENS, "GET", self.expired_tokens),
            (routes.ROOM_PRIVATE_RESET, "POST", self.reset_initial_state),
            (routes.ROOM_PRIVATE_GENERATE_TOKEN, "POST", self.private_generate_token),
            (routes.ROOM_PRIVATE_EVENTS, "GET", self.list_events),
            (routes.ROOM_PRIVATE_EVENTS, "POST", self.create_event),
            (routes.ROOM_PRIVATE_EVENT, "GET", self.show_event),
            (routes.ROOM_PRIVATE_EVENT, "PATCH", self.change_event),
            (routes.ROOM_PRIVATE_EVENT, "DELETE", self.delete_event),
            (routes.ROOM_PRIVATE_EVENT_OPEN, "POST", self.open_event),
            (routes.ROOM_PRIVATE_EVENT_CLOSE, "POST", self.close_event),
        ]
        out: list[BaseRoute] = []
        for path, method, handler in public:
            counted = self._counted(path, _guarded(handler, public=True))
            out.append(self._route(path, method, counted, public=True))
        for path in dict.fromkeys(p for p, _, _ in public):
            out.append(Route(path, self.preflight, methods=["OPTIONS"]))
        for path, method, handler in private:
            guarded = self._counted(path, _guarded(handler, public=False))
            app = _AdminOnly(
                self._keyed(guarded, method, principal=self._principal),
                refusal=request_response(self._counted(path, self._unauthorized)),
                admin_token=self.admin_token,
            )
            out.append(Route(path, app, methods=[method]))
        return out

    def _counted(self, endpoint: str, handler: Handler) -> Handler:
        metrics = self.metrics
        if metrics is None:
            return handler

        async def run(request: Request) -> Response:
            response = await handler(request)
            metrics.answered(endpoint, response.status_code)
            return response

        return run

    def _route(self, path: str, method: str, handler: Handler, *, public: bool) -> Route:
        app = self._keyed(handler, method, principal=None)
        return Route(path, _AnyOrigin(app) if public else app, methods=[method])

    def _keyed(self, handler: Handler, method: str, *, principal: str | None) -> ASGIApp:
        """`handler` as an ASGI app; a POST or PATCH honours an ``Idempotency-Key``,
        its records kept for `principal` (None: the public API's, shared by all)."""
        if method not in ("POST", "PATCH"):
            return request_response(handler)
        return IdempotencyMiddleware(
            request_response(handler), self.store.redis, scope="waitingroom",
            ttl=self.idempotency_ttl, max_request_body=self.max_body,
            user_from_scope=None if principal is None else lambda _scope: principal,
        )  # fmt: skip

    async def _unauthorized(self, request: Request) -> Response:
        return _error(401, "Unauthorized: send the deployment's admin token as a bearer "
                      "credential", public=False,
                      **{"WWW-Authenticate": 'Bearer realm="rideout-waitingroom"'})  # fmt: skip

    async def preflight(self, request: Request) -> Response:
        """CORS preflight of the public API: any origin, GET and POST."""
        return Response(status_code=204, headers=_PREFLIGHT_HEADERS)

    # ---------------------------------------------------------------- public

    async def assign_queue_num(self, request: Request) -> Response:
        """A position for a new arrival: ``{api_request_id, queue_number, entry_time,
        event_id, status}`` (AWS answers only ``api_request_id`` and numbers later)."""
        body = await _body.read_json(request, self.max_body)
        event_id = _event_id(_field(body, "event_id"))
        event = await self.cache.get((event_id, "event"), lambda: self.store.get_event(event_id))
        if event.pow_bits:
            stamp = body.get("pow")
            now = self.store.clock()
            if not pow_valid(event_id, stamp, event.pow_bits, now):
                return _json_response(
                    {
                        "error": 'Proof of work required: send "pow": "TIMESTAMP:NONCE" '
                        f'whose SHA-256 of "EVENT_ID:TIMESTAMP:NONCE" starts with '
                        f"{event.pow_bits} zero bits, TIMESTAMP within {POW_WINDOW:g} s",
                        "pow_bits": event.pow_bits,
                        "server_time": math.floor(now),
                    },
                    400,
                )
            assert isinstance(stamp, str)
            if not await self.store.use_stamp(event_id, stamp, 2 * POW_WINDOW):
                raise _BadInput(400, "Proof of work already used: solve a new one")
        position = await self.store.assign(event_id)
        out: dict[str, Any] = {"api_request_id": position.request_id, "event_id": event_id}
        if position.status is not PositionState.PREQUEUED:
            out["queue_number"] = position.queue_number
            out["entry_time"] = math.floor(position.entry_time)
        return _json_response(out)

    async def queue_num(self, request: Request) -> Response:
        """``{queue_number, entry_time, event_id, status: 1}``; 202 while pre-queued.

        A numbered position's answer never changes, so it comes from the process's
        :class:`PositionCache` once read (keyed by the event's generation, which a reset
        or delete changes); the abandonment clock is restarted at most once per
        :func:`touch_interval` (docs/waiting-room.md, "How polls reach Redis")."""
        event_id, request_id = _position_query(request)
        settings, generation = await self.cache.get(
            (event_id, "poll"), lambda: self.store.poll_context(event_id)
        )
        metrics = self.metrics
        if metrics is not None:
            metrics.position_polls.inc()
        now = self.store.clock()
        interval = touch_interval(settings.abandon_after)
        touch = self.positions.touch_due(event_id, generation, request_id, now, interval)
        answer = self.positions.answer(event_id, generation, request_id)
        if answer is None:
            if metrics is not None:
                metrics.position_loads.inc()
            position, touched = await self.store.lookup(event_id, request_id, touch=touch)
            self.positions.remember(generation, position, touched=now if touched else None)
            if position.status is PositionState.PREQUEUED:
                return _error(202, "Request ID pre-queued: numbers are given at the start")
            answer = position.queue_number, math.floor(position.entry_time)
        elif touch:
            self._touch_later(event_id, request_id, now)
        return _json_response(
            {"queue_number": answer[0], "entry_time": answer[1], "event_id": event_id, "status": 1}
        )

    def _touch_later(self, event_id: str, request_id: str, now: float) -> None:
        """Queue a touch of the position's clock (with the poll's time) for the next
        batch, written within about :data:`_TOUCH_BATCH` seconds."""
        if self.metrics is not None:
            self.metrics.position_touches.inc()
        self.positions.touched(event_id, request_id, now)
        self._touches.setdefault(event_id, {})[request_id] = now
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.get_running_loop().create_task(self._flush_soon())

    async def _flush_soon(self) -> None:
        while True:  # touches queued while a batch was being written go in the next
            await asyncio.sleep(_TOUCH_BATCH)
            await self.flush_touches()
            if not self._touches:
                return

    async def flush_touches(self) -> None:
        """Write the queued touches now, in one round trip. Those that could not be
        written (a replica, an outage) are touched again at their next poll."""
        batch, self._touches = self._touches, {}
        if not batch:
            return
        try:
            written = await self.store.touch_many(batch)
        except (RoomError, StoreError) as exc:
            log.debug("touches not written (again at the next polls): %s", exc)
            written = False
        if not written:
            for event_id, polls in batch.items():
                for request_id in polls:
                    self.positions.touched(event_id, request_id, None)

    async def aclose(self) -> None:
        """Write the touches still queued (at shutdown)."""
        flusher, self._flusher = self._flusher, None
        if flusher is not None and not flusher.done():
            await cancel_and_wait(flusher)
        await self.flush_touches()

    async def _counters(self, event_id: str) -> Counters:
        if self.metrics is not None:
            self.metrics.polls.inc()
        return await self.cache.get((event_id, "counters"), lambda: self.store.counters(event_id))

    async def serving_num(self, request: Request) -> Response:
        """``{serving_counter: "N"}``: a JSON string, as AWS's (its clients parseInt it)."""
        event_id = _event_id(_query(request, "event_id"))
        counters = await self._counters(event_id)
        return _json_response({"serving_counter": str(counters.serving)}, cache=CACHE_COUNTERS)

    async def waiting_num(self, request: Request) -> Response:
        """``{waiting_num}``: queued, neither served, expired nor abandoned."""
        event_id = _event_id(_query(request, "event_id"))
        counters = await self._counters(event_id)
        return _json_response({"waiting_num": counters.waiting}, cache=CACHE_COUNTERS)

    async def queue_pos_expiry(self, request: Request) -> Response:
        """``{expires_in}``; 202 not served yet (or expiry off), 410 expired."""
        event_id, request_id = _position_query(request)
        expiry = await self.store.expiry(event_id, request_id)
        if expiry.state is ExpiryState.DISABLED:
            return _error(202, "Queue position expiration not enabled")
        if expiry.state is ExpiryState.NOT_SERVED:
            return _error(202, "Request ID not being served yet")
        if expiry.state is ExpiryState.EXPIRED:
            return _error(410, "Queue position has expired")
        return _json_response({"expires_in": expiry.expires_in})

    async def _token(
        self,
        event_id: str,
        request_id: str,
        *,
        issuer: str | None = None,
        validity: float | None = None,
    ) -> Response:
        if self.signer is None:
            return _error(503, "Token signing is not configured on this server")
        grant = await self.store.claim_token(event_id, request_id, validity=validity)
        tokens = self.signer.issue(
            event_id=event_id, request_id=request_id, queue_position=grant.queue_position,
            issued_at=grant.issued_at, expires_at=grant.expires_at,
            issuer=self.issuer if issuer is None else issuer,
        )  # fmt: skip
        return _json_response(
            {
                "access_token": tokens.access_token,
                "refresh_token": tokens.refresh_token,
                "id_token": tokens.id_token,
                "token_type": "Bearer",
                "expires_in": grant.expires_in(self.store.clock()),
            }
        )

    async def generate_token(self, request: Request) -> Response:
        """The token set of a served position (the same claims on every call)."""
        body = await _body.read_json(request, self.max_body)
        event_id = _event_id(_field(body, "event_id"))
        request_id = _request_id(_field(body, "request_id"))
        return await self._token(event_id, request_id)

    async def refresh_token(self, request: Request) -> Response:
        """``{event_id, refresh_token}`` -> a renewed set, as ``generate_token``'s (a
        new ``exp``: now + the event's ``validity``, within its ``max_session``; a new
        refresh token, the only one the next renewal takes). 400 a malformed body, 401
        a refresh token that does not verify for this event or was used already, 410
        an expired or ended session."""
        body = await _body.read_json(request, self.max_body)
        event_id = _event_id(_field(body, "event_id"))
        token = _field(body, "refresh_token")
        if not isinstance(token, str) or not token:
            raise _BadInput(400, "refresh_token must be a non-empty string")
        if self.signer is None or self.verifier is None:
            return _error(503, "Token signing is not configured on this server")
        try:
            claims = self.verifier.verify(token, token_use="refresh", audience=event_id)
        except AuthError as exc:
            if exc.reason == "token_expired":
                return _error(410, "Refresh token has expired: the session has ended")
            return _error(401, f"Invalid refresh token: {exc}")
        jti = claims.raw.get("jti")
        renewal = await self.store.renew(
            event_id, claims.sub, jti=jti if isinstance(jti, str) else None,
            issued_at=math.floor(claims.iat), queue_position=claims.queue_position,
        )  # fmt: skip
        tokens = self.signer.issue(
            event_id=event_id, request_id=claims.sub, queue_position=renewal.queue_position,
            issued_at=renewal.issued_at, expires_at=renewal.expires_at, issuer=self.issuer,
            refresh_jti=renewal.refresh_jti, now=self.store.clock(),
        )  # fmt: skip
        return _json_response(tokens.to_dict())

    async def public_key(self, request: Request) -> Response:
        """The room's current public JWK (AWS's ``/public_key``)."""
        event_id = _event_id(_query(request, "event_id"))
        await self.cache.get((event_id, "event"), lambda: self.store.get_event(event_id))
        if self.keys is None:
            return _error(503, "Token signing is not configured on this server")
        return _json_response(self.keys.ring().public_jwk(), cache=CACHE_PUBLIC_KEY)

    async def estimated_wait(self, request: Request) -> Response:
        """``{event_id, serving_counter, ahead, admitted_per_minute, estimated_wait}``:
        seconds until the position (or a new arrival) is served at the recent rate
        (``null`` while nothing is admitted)."""
        event_id = _event_id(_query(request, "event_id"))
        counters = await self._counters(event_id)
        ahead: int | None = counters.queue + 1 - counters.serving
        cache = CACHE_COUNTERS
        if "request_id" in request.query_params:
            request_id = _request_id(_query(request, "request_id"))
            position = await self.store.poll(event_id, request_id)
            cache = CACHE_PRIVATE
            if position.status is PositionState.PREQUEUED:
                ahead = None
            elif position.status is PositionState.WAITING:
                ahead = position.queue_number - counters.serving
            else:
                ahead = 0
        history = await self.cache.get(
            (event_id, "history"), lambda: self.store.serving_history(event_id)
        )
        rate = serving_rate(history, self.store.clock(), _RATE_WINDOW)
        eta = None if ahead is None else estimated_wait(ahead, rate)
        return _json_response(
            {
                "event_id": event_id,
                "serving_counter": counters.serving,
                "ahead": None if ahead is None else max(0, ahead),
                "admitted_per_minute": round(rate * 60, 3),
                "estimated_wait": None if eta is None else math.ceil(eta),
            },
            cache=cache,
        )

    # --------------------------------------------------------------- private

    async def increment_serving_counter(self, request: Request) -> Response:
        """``{event_id, increment_by}`` -> ``{serving_num}`` (never below the floor)."""
        body = await _body.read_json(request, self.max_body)
        event_id = _event_id(_field(body, "event_id"))
        by = _integer(body, "increment_by", "an integer")
        serving = await self.store.increment_serving(event_id, by)
        self.cache.forget(event_id)
        return _json_response({"serving_num": serving}, public=False)

    async def update_session(self, request: Request) -> Response:
        """``{event_id, request_id, status: 1 | -1}``; 404 unless the session is at 0."""
        body = await _body.read_json(request, self.max_body)
        event_id = _event_id(_field(body, "event_id"))
        request_id = _request_id(_field(body, "request_id"))
        status = _integer(body, "status", "the integer 1 (completed) or -1 (abandoned)")
        if status not in (1, -1):
            raise _BadInput(400, "status must be the integer 1 (completed) or -1 (abandoned)")
        await self.store.update_session(event_id, request_id, status)
        return _json_response(
            {"event_id": event_id, "request_id": request_id, "status": status}, public=False
        )

    async def num_active_tokens(self, request: Request) -> Response:
        """``{active_tokens}``: unexpired tokens whose session is still active."""
        event_id = _event_id(_query(request, "event_id"))
        count = await self.store.num_active_tokens(event_id)
        return _json_response({"active_tokens": count}, public=False)

    async def expired_tokens(self, request: Request) -> Response:
        """A bare JSON array of request ids (as AWS), ``limit`` per page; the next
        page's cursor in the ``Next-Cursor`` header."""
        event_id = _event_id(_query(request, "event_id"))
        cursor = request.query_params.get("cursor")
        raw_limit = request.query_params.get("limit", "1000")
        if not raw_limit.isdigit() or not 1 <= int(raw_limit) <= 10_000:
            raise _BadInput(400, "limit must be an integer from 1 to 10000")
        page = await self.store.expired_tokens(event_id, cursor=cursor, limit=int(raw_limit))
        response = _json_response(list(page.request_ids), public=False)
        if page.cursor is not None:
            response.headers["Next-Cursor"] = page.cursor
        return response

    async def reset_initial_state(self, request: Request) -> Response:
        """``{event_id}``: zero the counters and forget every position (at once, not
        AWS's "a minute or two"); the micro-cache forgets the event too."""
        body = await _body.read_json(request, self.max_body)
        event_id = _event_id(_field(body, "event_id"))
        await self.store.reset(event_id)
        self.cache.forget(event_id)
        self.positions.forget(event_id)
        return _json_response({"message": "Counters reset"}, public=False)

    async def private_generate_token(self, request: Request) -> Response:
        """As the public one, with ``issuer`` and ``validity_period`` for this call
        only (AWS keeps an override for later calls: a bug not copied)."""
        body = await _body.read_json(request, self.max_body)
        event_id = _event_id(_field(body, "event_id"))
        request_id = _request_id(_field(body, "request_id"))
        issuer = body.get("issuer")
        if issuer is not None and (not isinstance(issuer, str) or not 0 < len(issuer) <= 512):
            raise _BadInput(400, "issuer must be a string of 1 to 512 characters")
        validity = body.get("validity_period")
        if validity is not None and (
            isinstance(validity, bool)
            or not isinstance(validity, int | float)
            or not 1 <= validity <= MAX_VALIDITY
        ):
            raise _BadInput(400, f"validity_period must be seconds from 1 to {MAX_VALIDITY:g}")
        return await self._token(event_id, request_id, issuer=issuer, validity=validity)

    async def list_events(self, request: Request) -> Response:
        """``{"events": [settings, ...]}``."""
        events = await self.store.list_events()
        return _json_response({"events": [e.to_dict() for e in events]}, public=False)

    async def create_event(self, request: Request) -> Response:
        """The settings as a JSON object (``event_id`` required) -> 201 and the event."""
        body = await _body.read_json(request, self.max_body)
        event = EventSettings.from_dict(body)
        await self.store.create_event(event)
        return _json_response(event.to_dict(), 201, public=False)

    def _path_event(self, request: Request) -> str:
        return _event_id(request.path_params["event_id"])

    async def show_event(self, request: Request) -> Response:
        """``{event, counters, active_tokens, holding}``."""
        event_id = self._path_event(request)
        event = await self.store.get_event(event_id)
        counters = await self.store.counters(event_id)
        return _json_response(
            {
                "event": event.to_dict(),
                "counters": counters.to_dict(),
                "active_tokens": await self.store.num_active_tokens(event_id),
                "holding": await self.store.holding(event_id),
            },
            public=False,
        )

    async def change_event(self, request: Request) -> Response:
        """A JSON object of the settings to change -> the event's new settings."""
        event_id = self._path_event(request)
        body = await _body.read_json(request, self.max_body)
        event = await self.store.update_event(event_id, **body)
        self.cache.forget(event_id)
        return _json_response(event.to_dict(), public=False)

    async def delete_event(self, request: Request) -> Response:
        event_id = self._path_event(request)
        await self.store.delete_event(event_id)
        self.cache.forget(event_id)
        self.positions.forget(event_id)
        return Response(status_code=204, headers={"Cache-Control": CACHE_PRIVATE})

    async def _set_open(self, request: Request, is_open: bool) -> Response:
        event_id = self._path_event(request)
        event = await self.store.update_event(event_id, open=is_open)
        return _json_response(event.to_dict(), public=False)

    async def open_event(self, request: Request) -> Response:
        """Take arrivals again."""
        return await self._set_open(request, True)

    async def close_event(self, request: Request) -> Response:
        """Refuse new arrivals (403); those already queued keep their positions."""
        return await self._set_open(request, False)
