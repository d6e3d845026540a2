"""One way to read a request body, for every rideout server.

Bounded before it is read: a ``Content-Length`` over the limit is refused before a byte
of the body is taken, and a body streamed without one is refused as soon as it passes
the limit, so no server buffers more than an endpoint allows. Then the media type the
endpoint parses, then strict JSON (:mod:`rideout._json`). Every endpoint refuses the same
faults with the same status, in its own error shape:

- **413** a body over the endpoint's limit;
- **415** a body that is not the media type the endpoint parses (where it checks one:
  the control plane's endpoints, which a cross-site form must not reach);
- **400** a body that is not a JSON object as :func:`rideout._json.decode_object` reads
  it (a key named twice, ``NaN``, invalid UTF-8, ...).

A client that goes away mid-body is Starlette's ``ClientDisconnect``; servers pass
:data:`EXCEPTION_HANDLERS` to their Starlette app so that it costs one INFO line, never
an ERROR with a traceback (the request is over: nobody is left to answer).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Final

from starlette.datastructures import Headers
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.types import Receive

from rideout import _json
from rideout.errors import RideoutError

__all__ = [
    "CODES",
    "EXCEPTION_HANDLERS",
    "FORM",
    "JSON",
    "BodyRefused",
    "decode_object",
    "media_type",
    "read",
    "read_json",
    "read_receive",
]

JSON: Final = "application/json"
FORM: Final = "application/x-www-form-urlencoded"

log = logging.getLogger("rideout.http")


CODES: Final = {400: "bad_request", 413: "too_large", 415: "unsupported_media_type"}
"""The machine-readable error of each refusal, where an endpoint's answers carry one."""


class BodyRefused(RideoutError):
    """A request body an endpoint will not take: ``status`` (400, 413 or 415), its
    ``code`` (:data:`CODES`) and a message that says what to send instead."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = CODES[status]


def _too_large(limit: int) -> BodyRefused:
    return BodyRefused(413, f"Request body too large: send at most {limit} bytes")


def media_type(headers: Headers) -> str:
    """The ``Content-Type`` without parameters, lower case ('' when absent)."""
    return headers.get("content-type", "").split(";", 1)[0].strip().lower()


def _check_declared(headers: Headers, limit: int) -> None:
    declared = headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise _too_large(limit)


def _check_media(headers: Headers, expected: str | None) -> None:
    if expected is not None and media_type(headers) != expected:
        raise BodyRefused(415, f"Content-Type must be {expected}")


async def read_receive(receive: Receive, headers: Headers, limit: int) -> bytes:
    """The whole body from an ASGI `receive`, at most `limit` bytes (:class:`BodyRefused`
    413 past it, before reading when ``Content-Length`` says so); ``ClientDisconnect``
    when the client goes away first."""
    _check_declared(headers, limit)
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnect
        chunk = bytes(message.get("body", b""))
        size += len(chunk)
        if size > limit:
            raise _too_large(limit)
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


async def read(request: Request, limit: int, *, media_type: str | None = None) -> bytes:
    """The request's body as bytes: 413 over `limit` (checked first, from the declared
    length), 415 when `media_type` is given and the request declares another."""
    _check_declared(request.headers, limit)
    _check_media(request.headers, media_type)
    return await read_receive(request.receive, request.headers, limit)


def decode_object(raw: bytes) -> dict[str, Any]:
    """A body's strict JSON object, or :class:`BodyRefused` 400."""
    try:
        return _json.decode_object(raw)
    except ValueError:
        raise BodyRefused(
            400,
            "Request body must be one JSON object (UTF-8, no key named twice, no NaN or Infinity)",
        ) from None


async def read_json(
    request: Request, limit: int, *, media_type: str | None = None, empty_ok: bool = False
) -> dict[str, Any]:
    """The request's body as a strict JSON object (see the module's refusals). With
    `empty_ok`, an empty body is ``{}`` whatever its declared type."""
    if not empty_ok:
        return decode_object(await read(request, limit, media_type=media_type))
    raw = await read(request, limit)
    if not raw.strip():
        return {}
    _check_media(request.headers, media_type)
    return decode_object(raw)


async def _client_gone(request: Request, exc: Exception) -> Response:
    log.info("%s %s: the client went away before its request was read",
             request.method, request.url.path)  # fmt: skip
    return Response(status_code=400)  # sent to nobody: the connection is closed


EXCEPTION_HANDLERS: Final[Mapping[Any, Any]] = {ClientDisconnect: _client_gone}
"""Starlette ``exception_handlers``: a client gone mid-body is one INFO line."""
