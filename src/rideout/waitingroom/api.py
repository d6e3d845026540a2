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

import hashlib
import math
from typing import Any, Final

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route, request_response
from starlette.types import ASGIApp

from rideout import _body, routes
from rideout.auth.errors import AuthError
from rideout.auth.room_tokens import KeySource, RoomTokenIssuer, RoomTokenVerifier
from rideout.idempotency import SCOPE_KEY, IdempotencyMiddleware, credential_principal
from rideout.waitingroom.errors import InvalidRequest
from rideout.waitingroom.http import (
    CACHE_COUNTERS,
    CACHE_PRIVATE,
    CACHE_PUBLIC_KEY,
    AdminOnly,
    AnyOrigin,
    BadInput,
    Handler,
    body_field,
    error,
    event_id_of,
    guarded,
    json_response,
    position_query,
    query_param,
    request_id_of,
)
from rideout.waitingroom.metrics import RoomMetrics
from rideout.waitingroom.micro_cache import MicroCache
from rideout.waitingroom.model import (
    MAX_VALIDITY,
    POW_WINDOW,
    Counters,
    ExpiryState,
    PositionState,
    estimated_wait,
    keyed_request_id,
    pow_valid,
    serving_rate,
)
from rideout.waitingroom.poll_cache import DEFAULT_SIZE, PositionCache, touch_interval
from rideout.waitingroom.private_api import PrivateAPI
from rideout.waitingroom.store import RoomStore
from rideout.waitingroom.touches import TouchBatch

__all__ = ["RoomAPI"]

_PREFLIGHT_HEADERS: Final = {
    "Access-Control-Allow-Origin": "*",
    "Access-Control-Allow-Methods": "GET, POST, OPTIONS",
    "Access-Control-Allow-Headers": "Content-Type, Idempotency-Key",
    "Access-Control-Max-Age": "600",
}
_RATE_WINDOW: Final = 300.0  # seconds of serving-counter history the ETA looks at


class RoomAPI(PrivateAPI):
    """The room's routes over one :class:`RoomStore`: the public API here, the private
    one in :class:`PrivateAPI`.

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
        self.touches = TouchBatch(store, self.positions, metrics)
        self.max_body = max_body
        self.idempotency_ttl = idempotency_ttl
        self._principal = credential_principal(admin_token)  # owns the operator's records
        # The secret keyed request ids are made under (keyed_request_id): the admin
        # token's, which every app server of both regions holds.
        self._request_id_secret = hashlib.sha256(
            b"rideout keyed request id\0" + admin_token.encode()
        ).digest()
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
            counted = self._counted(path, guarded(handler, public=True))
            out.append(self._route(path, method, counted, public=True))
        for path in dict.fromkeys(p for p, _, _ in public):
            out.append(Route(path, self.preflight, methods=["OPTIONS"]))
        for path, method, handler in private:
            counted = self._counted(path, guarded(handler, public=False))
            app = AdminOnly(
                self._keyed(counted, method, principal=self._principal),
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
        return Route(path, AnyOrigin(app) if public else app, methods=[method])

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
        return error(401, "Unauthorized: send the deployment's admin token as a bearer "
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
        event_id = event_id_of(body_field(body, "event_id"))
        event = await self.cache.get((event_id, "event"), lambda: self.store.get_event(event_id))
        if event.pow_bits:
            stamp = body.get("pow")
            now = self.store.clock()
            if not pow_valid(event_id, stamp, event.pow_bits, now):
                return json_response(
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
                raise BadInput(400, "Proof of work already used: solve a new one")
        # With an Idempotency-Key the request id comes from its record: a retry whose
        # first answer was lost finds the position the first run made.
        record = request.scope.get(SCOPE_KEY)
        rid = (
            keyed_request_id(self._request_id_secret, event_id, record)
            if isinstance(record, str)
            else None
        )
        position = await self.store.assign(event_id, rid)
        out: dict[str, Any] = {"api_request_id": position.request_id, "event_id": event_id}
        if position.status is not PositionState.PREQUEUED:
            out["queue_number"] = position.queue_number
            out["entry_time"] = math.floor(position.entry_time)
        return json_response(out)

    async def queue_num(self, request: Request) -> Response:
        """``{queue_number, entry_time, event_id, status: 1}``; 202 while pre-queued.

        A numbered position's answer never changes, so it comes from the process's
        :class:`PositionCache` once read (keyed by the event's generation, which a reset
        or delete changes); the abandonment clock is restarted at most once per
        :func:`touch_interval` (docs/waiting-room.md, "How polls reach Redis")."""
        event_id, request_id = position_query(request)
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
                return error(202, "Request ID pre-queued: numbers are given at the start")
            answer = position.queue_number, math.floor(position.entry_time)
        elif touch:
            self.touches.later(event_id, request_id, now)
        return json_response(
            {"queue_number": answer[0], "entry_time": answer[1], "event_id": event_id, "status": 1}
        )

    async def flush_touches(self) -> None:
        """Write the queued touches of the abandonment clock now (:class:`TouchBatch`)."""
        await self.touches.flush()

    async def aclose(self) -> None:
        """Write the touches still queued (at shutdown)."""
        await self.touches.aclose()

    async def _counters(self, event_id: str) -> Counters:
        if self.metrics is not None:
            self.metrics.polls.inc()
        return await self.cache.get((event_id, "counters"), lambda: self.store.counters(event_id))

    async def serving_num(self, request: Request) -> Response:
        """``{serving_counter: "N"}``: a JSON string, as AWS's (its clients parseInt it)."""
        event_id = event_id_of(query_param(request, "event_id"))
        counters = await self._counters(event_id)
        return json_response({"serving_counter": str(counters.serving)}, cache=CACHE_COUNTERS)

    async def waiting_num(self, request: Request) -> Response:
        """``{waiting_num}``: queued, neither served, expired nor abandoned."""
        event_id = event_id_of(query_param(request, "event_id"))
        counters = await self._counters(event_id)
        return json_response({"waiting_num": counters.waiting}, cache=CACHE_COUNTERS)

    async def queue_pos_expiry(self, request: Request) -> Response:
        """``{expires_in}``; 202 not served yet (or expiry off), 410 expired."""
        event_id, request_id = position_query(request)
        expiry = await self.store.expiry(event_id, request_id)
        if expiry.state is ExpiryState.DISABLED:
            return error(202, "Queue position expiration not enabled")
        if expiry.state is ExpiryState.NOT_SERVED:
            return error(202, "Request ID not being served yet")
        if expiry.state is ExpiryState.EXPIRED:
            return error(410, "Queue position has expired")
        return json_response({"expires_in": expiry.expires_in})

    async def _token(
        self,
        event_id: str,
        request_id: str,
        *,
        issuer: str | None = None,
        validity: float | None = None,
    ) -> Response:
        if self.signer is None:
            return error(503, "Token signing is not configured on this server")
        grant = await self.store.claim_token(event_id, request_id, validity=validity)
        tokens = self.signer.issue(
            event_id=event_id, request_id=request_id, queue_position=grant.queue_position,
            issued_at=grant.issued_at, expires_at=grant.expires_at,
            issuer=self.issuer if issuer is None else issuer,
        )  # fmt: skip
        return json_response(
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
        event_id = event_id_of(body_field(body, "event_id"))
        request_id = request_id_of(body_field(body, "request_id"))
        return await self._token(event_id, request_id)

    async def refresh_token(self, request: Request) -> Response:
        """``{event_id, refresh_token}`` -> a renewed set, as ``generate_token``'s (a
        new ``exp``: now + the event's ``validity``, within its ``max_session``; a new
        refresh token, the only one the next renewal takes). 400 a malformed body, 401
        a refresh token that does not verify for this event or was used already, 410
        an expired or ended session."""
        body = await _body.read_json(request, self.max_body)
        event_id = event_id_of(body_field(body, "event_id"))
        token = body_field(body, "refresh_token")
        if not isinstance(token, str) or not token:
            raise BadInput(400, "refresh_token must be a non-empty string")
        if self.signer is None or self.verifier is None:
            return error(503, "Token signing is not configured on this server")
        try:
            claims = self.verifier.verify(token, token_use="refresh", audience=event_id)
        except AuthError as exc:
            if exc.reason == "token_expired":
                return error(410, "Refresh token has expired: the session has ended")
            return error(401, f"Invalid refresh token: {exc}")
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
        return json_response(tokens.to_dict())

    async def public_key(self, request: Request) -> Response:
        """The room's current public JWK (AWS's ``/public_key``)."""
        event_id = event_id_of(query_param(request, "event_id"))
        await self.cache.get((event_id, "event"), lambda: self.store.get_event(event_id))
        if self.keys is None:
            return error(503, "Token signing is not configured on this server")
        return json_response(self.keys.ring().public_jwk(), cache=CACHE_PUBLIC_KEY)

    async def estimated_wait(self, request: Request) -> Response:
        """``{event_id, serving_counter, ahead, admitted_per_minute, estimated_wait}``:
        seconds until the position (or a new arrival) is served at the recent rate
        (``null`` while nothing is admitted)."""
        event_id = event_id_of(query_param(request, "event_id"))
        counters = await self._counters(event_id)
        ahead: int | None = counters.queue + 1 - counters.serving
        cache = CACHE_COUNTERS
        if "request_id" in request.query_params:
            request_id = request_id_of(query_param(request, "request_id"))
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
        return json_response(
            {
                "event_id": event_id,
                "serving_counter": counters.serving,
                "ahead": None if ahead is None else max(0, ahead),
                "admitted_per_minute": round(rate * 60, 3),
                "estimated_wait": None if eta is None else math.ceil(eta),
            },
            cache=cache,
        )
