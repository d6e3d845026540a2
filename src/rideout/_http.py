"""HTTP clients of rideout's own servers (the control plane, the zones' admin and
health routes, the waiting room's private API, and the control plane's DoH endpoint,
which the client library's ``DohResolver`` is pointed at in a rideout deployment).

Every rideout server closes a kept-alive connection that stays idle past its deadline
(:attr:`rideout._guard.ServerLimits.handshake_timeout`; uvicorn's own keep-alive
timeout, 5 s, too). A client that keeps an idle connection for reuse longer than that
can send its next request just as the server closes the connection: the request is
lost with it (httpx: ``RemoteProtocolError: Server disconnected without sending a
response``), and on a POST nobody knows whether it was carried out. The window is the
time the server's close takes to reach the client, which is a network round trip
between hosts and a late event loop's lag on one. httpx keeps idle connections for 5 s,
longer than the fast profile's 2 s deadline and as long as uvicorn's own.

So the clients made here drop an idle connection themselves, after
:data:`KEEPALIVE_EXPIRY` (the configuration refuses a ``handshake_timeout`` under
twice that), and never take proxies from the environment: rideout's servers are on
loopback and private addresses, which must not go through a proxy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:  # imported where a client is made: the configuration reads only the
    import httpx  # constant, and importing rideout.client stays cheap (test_public_api)

__all__ = ["KEEPALIVE_EXPIRY", "async_client", "limits", "sync_client"]

KEEPALIVE_EXPIRY: Final = 1.0
"""Seconds a client of rideout's servers keeps an idle connection for its next request."""


def limits(*, max_connections: int = 100, max_keepalive_connections: int = 20) -> httpx.Limits:
    """httpx's pool limits (its defaults), with idle connections dropped after
    :data:`KEEPALIVE_EXPIRY`."""
    import httpx

    return httpx.Limits(
        max_connections=max_connections,
        max_keepalive_connections=max_keepalive_connections,
        keepalive_expiry=KEEPALIVE_EXPIRY,
    )


def async_client(*, timeout: float | httpx.Timeout, **options: Any) -> httpx.AsyncClient:
    """An ``httpx.AsyncClient`` for rideout's servers (`options`: httpx's own; ``limits``
    should come from :func:`limits`)."""
    import httpx

    options.setdefault("limits", limits())
    return httpx.AsyncClient(timeout=timeout, trust_env=False, **options)


def sync_client(*, timeout: float | httpx.Timeout, **options: Any) -> httpx.Client:
    """The blocking :func:`async_client`."""
    import httpx

    options.setdefault("limits", limits())
    return httpx.Client(timeout=timeout, trust_env=False, **options)
