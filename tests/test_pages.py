"""The pages' security headers (rideout._pages); the browser test checks them live."""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route, WebSocketRoute
from starlette.testclient import TestClient
from starlette.websockets import WebSocket

from rideout._pages import DASHBOARD_CSP, SITE_CSP, WithHeaders, page_headers


async def _own(_: object) -> PlainTextResponse:
    return PlainTextResponse("x", headers={"Referrer-Policy": "same-origin"})


async def _socket(ws: WebSocket) -> None:
    await ws.accept()
    await ws.send_text("hello")
    await ws.close()


def _client() -> TestClient:
    inner = Starlette(routes=[Route("/", _own), WebSocketRoute("/ws", _socket)])
    return TestClient(WithHeaders(inner, page_headers(SITE_CSP)))


def test_every_response_gets_the_headers_and_keeps_its_own() -> None:
    with _client() as client:
        response = client.get("/")
        missing = client.get("/nowhere")
    assert response.headers["content-security-policy"] == SITE_CSP
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.headers["referrer-policy"] == "same-origin"  # the app's own
    assert missing.status_code == 404
    assert missing.headers["content-security-policy"] == SITE_CSP


def test_a_websocket_passes_through_untouched() -> None:
    with _client() as client, client.websocket_connect("/ws") as ws:
        assert ws.receive_text() == "hello"


def test_no_page_runs_an_inline_script_or_can_be_framed() -> None:
    for csp in (SITE_CSP, DASHBOARD_CSP):
        directives = dict(d.strip().split(" ", 1) for d in csp.split(";"))
        assert directives["script-src"] == "'self'"
        assert directives["frame-ancestors"] == "'none'"
        assert directives["object-src"] == "'none'"
    assert "connect-src" not in SITE_CSP  # the site's pages reach other zones and DoH
    assert DASHBOARD_CSP.startswith("default-src 'self';")
