"""Checks the control plane's handlers make before they act on a request.

Browsers can be made to send requests to loopback from any page they show, so every
endpoint that changes state tells browser-made requests apart (``Origin`` and the
``Sec-Fetch-*`` headers, which a page's script cannot remove or forge), accepts only the
media type it parses, and reads at most a bounded body.
"""

from __future__ import annotations

from starlette.datastructures import Headers
from starlette.requests import Request

from rideout.controlplane.errors import ControlPlaneError

__all__ = ["BodyTooLarge", "browser_shaped", "is_json", "read_body"]

_BROWSER_HEADERS = ("origin", "sec-fetch-site", "sec-fetch-mode")


class BodyTooLarge(ControlPlaneError):
    """A request body over the endpoint's limit (answered 413)."""


def browser_shaped(headers: Headers) -> bool:
    """Whether a browser sent this (any ``Origin``, ``Sec-Fetch-Site`` or
    ``Sec-Fetch-Mode``): machine-to-machine endpoints refuse those."""
    return any(name in headers for name in _BROWSER_HEADERS)


def is_json(headers: Headers) -> bool:
    """Whether the body is declared ``application/json`` (parameters allowed). A
    cross-site form or ``fetch`` without a preflight cannot declare it."""
    media_type = headers.get("content-type", "").split(";", 1)[0].strip().lower()
    return media_type == "application/json"


async def read_body(request: Request, limit: int) -> bytes:
    """The body, or :class:`BodyTooLarge` as soon as it exceeds `limit` bytes (a lying
    or absent Content-Length does not make the server buffer more)."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise BodyTooLarge
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge
        chunks.append(chunk)
    return b"".join(chunks)
