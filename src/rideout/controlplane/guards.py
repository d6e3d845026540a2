"""Checks the control plane's handlers make before they act on a request.

Browsers can be made to send requests to loopback from any page they show, so every
endpoint that changes state tells browser-made requests apart (``Origin`` and the
``Sec-Fetch-*`` headers, which a page's script cannot remove or forge). The media type
and the bounded body are :mod:`rideout._body`'s, as on every server.
"""

from __future__ import annotations

from starlette.datastructures import Headers

__all__ = ["browser_shaped"]

_BROWSER_HEADERS = ("origin", "sec-fetch-site", "sec-fetch-mode")


def browser_shaped(headers: Headers) -> bool:
    """Whether a browser sent this (any ``Origin``, ``Sec-Fetch-Site`` or
    ``Sec-Fetch-Mode``): machine-to-machine endpoints refuse those."""
    return any(name in headers for name in _BROWSER_HEADERS)
