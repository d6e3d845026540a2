"""``rideout._body``: one way to read a request body, on a real uvicorn over loopback:
bounded before it is read (a declared or a streamed body over the limit is 413 without
buffering it), the endpoint's media type (415), strict JSON (400), and a client that
goes away mid-body costs one line at most, never a traceback."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import pytest_asyncio
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from rideout import _body
from tests.conftest import free_port, serving

pytestmark = pytest.mark.asyncio(loop_scope="module")

ADDRESS = "127.0.0.1"
LIMIT = 1024
seen: list[dict[str, Any]] = []


async def echo(request: Request) -> Response:
    media = request.query_params.get("media")
    try:
        body = await _body.read_json(
            request, LIMIT, media_type=_body.JSON if media else None,
            empty_ok="empty" in request.query_params,
        )  # fmt: skip
    except _body.BodyRefused as exc:
        return JSONResponse({"error": str(exc)}, exc.status)
    seen.append(body)
    return JSONResponse(body)


def app() -> Starlette:
    routes = [Route("/echo", echo, methods=["POST"])]
    return Starlette(routes=routes, exception_handlers=_body.EXCEPTION_HANDLERS)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def base() -> AsyncIterator[str]:
    port = free_port(ADDRESS)
    async with serving(app(), ADDRESS, port):
        yield f"http://{ADDRESS}:{port}"


async def test_the_refusals_are_the_same_for_every_endpoint(base: str) -> None:
    cases: list[tuple[str, bytes, dict[str, str], int]] = [
        ("", b'{"a": 1}', {}, 200),
        ("", b'{"a": 1, "a": 2}', {}, 400),  # a key named twice
        ("", b'{"a": NaN}', {}, 400),
        ("", b"[1]", {}, 400),  # not an object
        ("", b"\xff\xfe", {}, 400),  # not UTF-8
        ("", b"{" + b" " * LIMIT + b"}", {}, 413),
        ("?media=json", b'{"a": 1}', {"Content-Type": "text/plain"}, 415),
        ("?media=json", b'{"a": 1}', {}, 415),
        ("?media=json", b'{"a": 1}', {"Content-Type": "application/json; charset=utf-8"}, 200),
        ("?media=json&empty", b"", {}, 200),
        ("?media=json&empty", b"{}", {"Content-Type": "text/plain"}, 415),
    ]
    async with httpx.AsyncClient(trust_env=False) as http:
        for query, content, headers, status in cases:
            r = await http.post(base + "/echo" + query, content=content, headers=headers)
            assert r.status_code == status, (query, content[:20], r.text)
            if status != 200:
                assert r.json()["error"]  # says what to send instead


async def test_a_body_over_the_limit_is_refused_before_it_is_read(base: str) -> None:
    # declared: the answer comes although the body is never sent
    reader, writer = await asyncio.open_connection(ADDRESS, int(base.rsplit(":", 1)[1]))
    writer.write(
        b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 100000000\r\n"
        b"Content-Type: application/json\r\n\r\n{"
    )
    await writer.drain()
    status = await asyncio.wait_for(reader.readline(), 5)
    assert status.startswith(b"HTTP/1.1 413"), status
    writer.close()

    # streamed without a length: refused once past the limit, not buffered to the end
    async def chunks() -> AsyncIterator[bytes]:
        yield b'{"a": "'
        for _ in range(100):
            yield b"x" * 512

    async with httpx.AsyncClient(trust_env=False) as http:
        r = await http.post(base + "/echo", content=chunks())
    assert r.status_code == 413


async def test_a_client_gone_mid_body_logs_no_traceback(
    base: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    before = len(seen)
    _reader, writer = await asyncio.open_connection(ADDRESS, int(base.rsplit(":", 1)[1]))
    writer.write(b'POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 500\r\n\r\n{"a": ')
    await writer.drain()
    await asyncio.sleep(0.2)
    writer.close()  # gone, mid-body
    await asyncio.sleep(0.5)
    assert len(seen) == before
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    assert errors == [], [r.getMessage() for r in errors]
    gone = [r for r in caplog.records if "went away" in r.getMessage()]
    assert len(gone) <= 1
    assert all(r.levelno <= logging.WARNING for r in gone)
