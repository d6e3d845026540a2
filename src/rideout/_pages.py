"""The headers every page rideout serves to a browser carries, one policy per page.

A page's scripts and styles come from its own origin only (no inline script can run, so
markup injected into a page cannot run either), no page can be framed (clickjacking),
no file is sniffed as another type, and no Referer leaves with a page's URL.

* :data:`DASHBOARD_CSP`: the control plane's dashboard talks to its own origin only
  (``/v1/*``, ``/v1/stream``).
* :data:`SITE_CSP`: the auction and waiting-room pages reach other zones (WebSocket,
  ``/health``) and the control plane's DNS-over-HTTPS, whose addresses come from the
  deployment, so ``connect-src`` is left open; everything else is as strict.

:class:`WithHeaders` adds a set of headers to every HTTP response of an ASGI app (a
static files mount, say).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["DASHBOARD_CSP", "SITE_CSP", "WithHeaders", "page_headers"]

_COMMON: Final = (
    "script-src 'self'; style-src 'self'; img-src 'self' data:; object-src 'none'; "
    "base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
DASHBOARD_CSP: Final = f"default-src 'self'; {_COMMON}"
SITE_CSP: Final = _COMMON


def page_headers(csp: str) -> dict[str, str]:
    """The headers of a page under `csp`."""
    return {
        "Content-Security-Policy": csp,
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "no-referrer",
    }


class WithHeaders:
    """An ASGI app: `app`, with `headers` added to each HTTP response it starts (a header
    the app set itself is kept)."""

    def __init__(self, app: ASGIApp, headers: Mapping[str, str]) -> None:
        self.app = app
        self.headers = [
            (k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()
        ]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                have = {k.lower() for k, _ in message.get("headers", [])}
                added = [(k, v) for k, v in self.headers if k not in have]
                message = {**message, "headers": [*message.get("headers", []), *added]}
            await send(message)

        await self.app(scope, receive, sending)
