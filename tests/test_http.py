"""rideout._http: clients of rideout's own servers drop an idle connection before the
server would, and take no proxy from the environment."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import httpx
import pytest

from rideout import _http
from rideout._guard import ServerLimits
from rideout._serve import uvicorn_config
from rideout.config import PROFILES
from tests.conftest import asgi_lifespan, free_port, serving

SRC = Path(__file__).resolve().parents[1] / "src" / "rideout"


async def peer_port(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Answers with the client's TCP port: the same port twice is one connection reused."""
    if scope["type"] == "lifespan":
        return await asgi_lifespan(receive, send)
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": str(scope["client"][1]).encode()})


def test_every_server_keeps_an_idle_connection_longer_than_the_clients_do() -> None:
    for name, timing in PROFILES.items():
        assert timing.handshake_timeout >= 2 * _http.KEEPALIVE_EXPIRY, name
    assert (
        uvicorn_config(peer_port, "127.0.0.1", 1).timeout_keep_alive >= 2 * _http.KEEPALIVE_EXPIRY
    )
    assert _http.limits().keepalive_expiry == _http.KEEPALIVE_EXPIRY
    assert _http.limits(max_connections=7).max_connections == 7


async def test_a_connection_idle_past_the_expiry_is_not_reused_and_no_proxy_is_taken(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Within the expiry the connection is reused; past it (and before the server's own
    deadline, the fast profile's 2 s) the next request opens a new one, where httpx's
    default (5 s) would send it on the connection the server is about to close."""
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")  # nothing listens there
    monkeypatch.setenv("ALL_PROXY", "http://127.0.0.1:9")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    port = free_port("127.0.0.1")
    url = f"http://127.0.0.1:{port}/"
    async with serving(peer_port, "127.0.0.1", port, limits=ServerLimits(handshake_timeout=2.0)):

        async def ports(client: httpx.AsyncClient, pause: float) -> tuple[str, str]:
            first = (await client.get(url)).text
            await asyncio.sleep(pause)
            return first, (await client.get(url)).text

        async with _http.async_client(timeout=5.0) as ours:
            soon = await ports(ours, 0.1)
            late = await ports(ours, _http.KEEPALIVE_EXPIRY + 0.3)
        async with httpx.AsyncClient(timeout=5.0, trust_env=False) as default:
            default_late = await ports(default, _http.KEEPALIVE_EXPIRY + 0.3)
    assert soon[0] == soon[1]  # reused while fresh
    assert late[0] != late[1]  # past the expiry: a new connection
    assert default_late[0] == default_late[1]  # httpx's default would have reused it


def test_sync_clients_follow_the_same_rule() -> None:
    with _http.sync_client(timeout=1.0) as client:
        assert client.trust_env is False
        assert client.timeout == httpx.Timeout(1.0)


_BUILDS_A_CLIENT = re.compile(r"httpx\.(Async)?Client\(")

# The client library's REST client is for any service (its users choose its HTTP
# settings); the EKS API is not a rideout server. The library's DohResolver does use this
# module: in a deployment its server is rideout's own DoH endpoint, on the control plane.
_OWN_CLIENTS_ALLOWED = {"_http.py", "client/http/_async.py", "client/http/_sync.py",
                        "evacuate/aws/eks.py"}  # fmt: skip


def test_rideouts_own_servers_are_called_through_this_module_only() -> None:
    found = sorted(
        str(path.relative_to(SRC))
        for path in SRC.rglob("*.py")
        if _BUILDS_A_CLIENT.search(path.read_text())
    )
    assert set(found) <= _OWN_CLIENTS_ALLOWED, set(found) - _OWN_CLIENTS_ALLOWED
