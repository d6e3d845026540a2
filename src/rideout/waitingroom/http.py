"""The room API's HTTP plumbing: its JSON answers and how a CDN may cache them, the
request's fields read and checked (a refusal is :class:`BadInput`, answered 400 or 413),
the admin-token and any-origin wrappers, and the room's refusals turned into
``{"error"}`` answers (:func:`guarded`)."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final

from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from rideout import _body
from rideout.auth.admin import check_admin_token
from rideout.errors import InvalidArgument
from rideout.store.errors import StoreError
from rideout.waitingroom.errors import InvalidRequest, RoomError, RoomUnavailable
from rideout.waitingroom.model import check_event_id, check_request_id

__all__ = [
    "CACHE_COUNTERS",
    "CACHE_PRIVATE",
    "CACHE_PUBLIC_KEY",
    "AdminOnly",
    "AnyOrigin",
    "BadInput",
    "Handler",
    "body_field",
    "body_integer",
    "error",
    "event_id_of",
    "guarded",
    "json_response",
    "position_query",
    "query_param",
    "request_id_of",
]

CACHE_COUNTERS: Final = "public, max-age=1, s-maxage=2"
"""The shared counters: a CDN may serve them for a moment (AWS's CloudFront: 5 s)."""
CACHE_PUBLIC_KEY: Final = "public, max-age=3600"
"""The public key: an hour (a rotated key stays in the JWKS meanwhile)."""
CACHE_PRIVATE: Final = "private, no-store"
"""Per-request and per-caller answers: never shared, never stored."""


def json_response(
    body: object, status: int = 200, *, cache: str = CACHE_PRIVATE, public: bool = True
) -> Response:
    headers = {"Cache-Control": cache}
    if public:
        headers["Access-Control-Allow-Origin"] = "*"
    data = json.dumps(body, separators=(",", ":")).encode()
    return Response(data, status, headers=headers, media_type="application/json")


def error(status: int, message: str, *, public: bool = True, **headers: str) -> Response:
    response = json_response({"error": message}, status, public=public)
    response.headers.update(headers)
    return response


class BadInput(InvalidRequest):
    """A request that cannot be served as sent (answered with `status`: 400, 413)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def query_param(request: Request, name: str) -> str:
    values = request.query_params.getlist(name)
    if not values:
        raise BadInput(400, f"Missing {name}")
    if len(values) > 1:
        raise BadInput(400, f"{name} given more than once")
    return values[0]


def event_id_of(value: object) -> str:
    try:
        return check_event_id(value)
    except ValueError:
        raise BadInput(400, "Invalid event ID") from None


def request_id_of(value: object) -> str:
    try:
        return check_request_id(value)
    except ValueError:
        raise BadInput(400, "Invalid event or request ID") from None


def position_query(request: Request) -> tuple[str, str]:
    """The ``event_id`` and ``request_id`` query parameters, checked."""
    return event_id_of(query_param(request, "event_id")), request_id_of(
        query_param(request, "request_id")
    )


def body_field(body: Mapping[str, Any], name: str) -> Any:
    if name not in body:
        raise BadInput(400, f"Missing {name}")
    return body[name]


def body_integer(body: Mapping[str, Any], name: str, what: str) -> int:
    """A JSON integer field (not ``1.0``, not ``true``): the private API's one rule."""
    value = body_field(body, name)
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadInput(400, f"{name} must be {what}")
    return value


Handler = Callable[[Request], Awaitable[Response]]


class AdminOnly:
    """`app` for a request with the admin token; `refusal` (401) for any other, before
    `app` (its ``Idempotency-Key`` layer included) reads the request or a record."""

    def __init__(self, app: ASGIApp, *, refusal: ASGIApp, admin_token: str) -> None:
        self.app, self.refusal, self.admin_token = app, refusal, admin_token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        authorization = Headers(scope=scope).get("authorization")
        allowed = check_admin_token(self.admin_token, authorization)
        await (self.app if allowed else self.refusal)(scope, receive, send)


class AnyOrigin:
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


def guarded(handler: Handler, *, public: bool) -> Handler:
    """Turn the room's refusals into ``{"error"}`` answers; count nothing on any."""

    async def run(request: Request) -> Response:
        try:
            return await handler(request)
        except _body.BodyRefused as exc:
            return error(exc.status, str(exc), public=public)
        except RoomUnavailable as exc:
            return error(503, f"The waiting room is unavailable: {exc}", public=public,
                         **{"Retry-After": "1"})  # fmt: skip
        except RoomError as exc:
            return error(exc.status, str(exc), public=public)
        except InvalidArgument as exc:  # a setting or argument the model refused
            return error(400, str(exc), public=public)
        except StoreError as exc:
            return error(500, f"The waiting room's store failed: {exc}", public=public)

    return run
