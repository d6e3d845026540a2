"""The OpenID adapter's pages: the waiting page of an authorize request, and the error
page shown when an error cannot go back to a validated redirect URI.

The waiting page is the room's own page (``web/room.html``, read once) with one
addition: a ``<noscript>`` refresh to ``/resume``, so that a client that follows
redirects and ``<meta http-equiv="refresh">`` but runs no script moves on too
(``/resume`` sends it back here until its turn). With a script, ``room.js`` shows the
queue and goes to ``/resume`` itself, and the refresh is ignored.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Final

from starlette.responses import HTMLResponse, Response

from rideout._pages import SITE_CSP, page_headers

__all__ = ["SECURITY_HEADERS", "WaitingPage", "error_page"]

SECURITY_HEADERS: Final = {
    "Cache-Control": "no-store",
    "Pragma": "no-cache",
    "Content-Security-Policy": "default-src 'none'; style-src 'self'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}
ROOM_PAGE_FILE: Final = Path(__file__).resolve().parent.parent / "web" / "room.html"
# The waiting page runs room.js, which asks DoH and other zones: the site's policy, with
# connect-src open. Its URL carries the authorize request's id, which no Referer may
# take elsewhere.
_WAITING_HEADERS: Final = {"Cache-Control": "no-store", **page_headers(SITE_CSP)}


class WaitingPage:
    """The room page with a refresh to ``/resume`` every `refresh` seconds for clients
    without a script."""

    def __init__(self, refresh: int, source: Path = ROOM_PAGE_FILE) -> None:
        if isinstance(refresh, bool) or not isinstance(refresh, int) or refresh < 1:
            raise ValueError(f"refresh must be a whole number of seconds >= 1, not {refresh!r}")
        self.refresh = refresh
        text = source.read_text(encoding="utf-8")
        if text.count("</head>") != 1 or text.count("</main>") != 1:
            raise ValueError(f"{source} is not the room page (one </head> and one </main>)")
        self._head, _, rest = text.partition("</head>")
        self._body, _, self._tail = rest.partition("</main>")

    def render(self, resume: str) -> Response:
        """The page for an authorize request whose ``/resume`` URL is `resume`."""
        url = html.escape(resume, quote=True)
        refresh = f'<noscript><meta http-equiv="refresh" content="{self.refresh}; url={url}">'
        note = (
            f'<noscript><p class="muted">Without JavaScript this page looks again every '
            f"{self.refresh} s and moves on by itself when it is your turn.</p></noscript>"
        )
        page = f"{self._head}{refresh}</noscript></head>{self._body}{note}</main>{self._tail}"
        return HTMLResponse(page, headers=_WAITING_HEADERS)


def error_page(status: int, error: str, description: str) -> Response:
    """The error shown to the user when it cannot go back to a validated redirect URI."""
    body = (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        "<title>Sign-in error</title><link rel=stylesheet href=/style.css></head>"
        f"<body><main class=card><h1>Sign-in error</h1><p><code>{html.escape(error)}</code></p>"
        f"<p>{html.escape(description)}</p></main></body></html>"
    )
    return HTMLResponse(body, status, headers=SECURITY_HEADERS)
