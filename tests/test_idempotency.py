"""Idempotency-Key middleware against real Redis (primary + replica) and real servers."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections import Counter as Tally
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis
from prometheus_client import CollectorRegistry
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Scope

from rideout.config import Config
from rideout.idempotency import (
    REPLAYED_HEADER,
    SCOPE_KEY,
    IdempotencyMiddleware,
    credential_principal,
    default_store_status,
    parse_idempotency_key,
    request_fingerprint,
)
from rideout.store import keys
from rideout.store.acl import RedisRole
from rideout.store.client import probe_client, state_client
from tests.conftest import (
    TEST_ADMIN,
    credentials,
    free_port,
    replicated,
    running_redis_pair,
    serving,
    until,
)

APP_ADDRESSES = ("127.0.6.1", "127.0.6.2")


# ------------------------------------------------------------------------ pure parts


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (b"abc-123", "abc-123"),
        (b"  8e03978e-40d5-43e8-bc93-6894a57f9324 ", "8e03978e-40d5-43e8-bc93-6894a57f9324"),
        (b'"8e03978e"', "8e03978e"),  # the draft's structured-field string
        (b'"a \\"quoted\\" \\\\ key"', 'a "quoted" \\ key'),
        (b"with space inside", "with space inside"),
        (b"", None),
        (b'""', None),
        (b'"bad \\escape"', None),
        (b'"unescaped " quote"', None),
        (b'"unterminated', None),
        (b"caf\xc3\xa9", None),  # not ASCII
        (b"tab\there", None),  # not printable
        (b"x" * 255, "x" * 255),
        (b"x" * 256, None),
    ],
)
def test_parse_idempotency_key(raw: bytes, expected: str | None) -> None:
    assert parse_idempotency_key(raw) == expected


def test_fingerprint_covers_method_path_query_and_body() -> None:
    base = request_fingerprint("POST", "/orders", b"a=1", b"{}")
    assert base == request_fingerprint("post", "/orders", b"a=1", b"{}")
    assert len({
        base,
        request_fingerprint("PATCH", "/orders", b"a=1", b"{}"),
        request_fingerprint("POST", "/order", b"a=1", b"{}"),
        request_fingerprint("POST", "/orders", b"a=2", b"{}"),
        request_fingerprint("POST", "/orders", b"a=1", b"{ }"),
        request_fingerprint("POST", "/ordersa=1", b"", b"{}"),  # no ambiguity at joins
    }) == 6  # fmt: skip


def test_store_status_default() -> None:
    assert [s for s in (200, 201, 204, 400, 404, 409, 422) if default_store_status(s)] == [
        200, 201, 204, 400, 404, 409, 422,
    ]  # fmt: skip
    assert not any(default_store_status(s) for s in (408, 425, 429, 500, 502, 503, 504))
    # refusals of the caller: another caller (or this one with a credential) may pass
    assert not any(default_store_status(s) for s in (401, 403, 407))


def test_a_credentials_principal_is_a_hash_of_it() -> None:
    principal = credential_principal("s3cret-token")
    assert "s3cret" not in principal
    assert principal == credential_principal("s3cret-token")
    assert principal != credential_principal("s3cret-token2")


def test_key_names_are_scoped_and_escaped() -> None:
    assert keys.idempotency("rest", "k1") == "rideout:idem:rest:-:k1"
    assert keys.idempotency("rest", "k1", "alice") == "rideout:idem:rest:u=alice:k1"
    assert keys.idempotency("rest", "a:b{c}") == "rideout:idem:rest:-:a%3Ab%7Bc%7D"
    assert keys.idempotency("rest", "k", "-") != keys.idempotency("rest", "k")


def test_middleware_arguments_are_checked() -> None:
    client = aioredis.Redis()
    app = Starlette()
    with pytest.raises(ValueError, match="scope"):
        IdempotencyMiddleware(app, client, scope="")
    with pytest.raises(ValueError, match="ttl"):
        IdempotencyMiddleware(app, client, scope="x", ttl=0)
    with pytest.raises(ValueError, match="max_stored_body"):
        IdempotencyMiddleware(app, client, scope="x", max_stored_body=0)


# ------------------------------------------------------------------------ the app


@dataclass
class Orders:
    """A small REST app that counts how often each handler really ran."""

    runs: Tally[str] = field(default_factory=Tally)
    gate: asyncio.Event = field(default_factory=asyncio.Event)

    def app(self) -> Starlette:
        async def create(request: Request) -> Response:
            body = await request.json()
            self.runs["create"] += 1
            n = self.runs["create"]
            return JSONResponse(
                {"order": n, "item": body.get("item"), "user": request.headers.get("x-user")},
                status_code=201,
                headers={"X-Order": str(n), "Set-Cookie": f"last={n}"},
            )

        async def flaky(request: Request) -> Response:
            self.runs["flaky"] += 1
            if self.runs["flaky"] == 1:
                return JSONResponse({"error": "backend down"}, status_code=503)
            return JSONResponse({"flaky": self.runs["flaky"]}, status_code=201)

        async def crash(request: Request) -> Response:
            self.runs["crash"] += 1
            if self.runs["crash"] == 1:
                raise RuntimeError("the handler crashed")
            return JSONResponse({"crash": self.runs["crash"]})

        async def slow(request: Request) -> Response:
            self.runs["slow"] += 1
            await asyncio.wait_for(self.gate.wait(), 10)
            return JSONResponse({"slow": self.runs["slow"]})

        async def big(request: Request) -> Response:
            self.runs["big"] += 1
            return Response(b"x" * 5000, media_type="application/octet-stream")

        async def optional(request: Request) -> Response:
            self.runs["optional"] += 1
            # The record key the middleware passes on (None without a key).
            return JSONResponse(
                {"optional": self.runs["optional"], "record": request.scope.get(SCOPE_KEY)}
            )

        return Starlette(
            routes=[
                Route("/orders", create, methods=["POST"]),
                Route("/flaky", flaky, methods=["POST"]),
                Route("/crash", crash, methods=["POST"]),
                Route("/slow", slow, methods=["POST"]),
                Route("/big", big, methods=["POST"]),
                Route("/optional", optional, methods=["POST", "PATCH"]),
            ]
        )


def wrap(app: ASGIApp, client: aioredis.Redis, **kwargs: Any) -> IdempotencyMiddleware:
    kwargs.setdefault("required_paths", {"/orders", "/flaky", "/slow", "/big", "/crash"})
    kwargs.setdefault("max_stored_body", 4096)
    return IdempotencyMiddleware(app, client, scope="rest", **kwargs)


@dataclass
class Site:
    """The primary's and the replica's Redis clients (as app servers make them, and the
    test superuser's for what no rideout user may do), and helpers to serve apps."""

    config: Config
    primary: aioredis.Redis
    replica: aioredis.Redis
    admin: aioredis.Redis
    replica_admin: aioredis.Redis
    stack: contextlib.AsyncExitStack
    port: int

    async def serve(self, app: ASGIApp, index: int = 0) -> str:
        address = APP_ADDRESSES[index]
        await self.stack.enter_async_context(serving(app, address, self.port))
        return f"http://{address}:{self.port}"


@pytest.fixture
async def site(make_config: Callable[..., Config]) -> AsyncIterator[Site]:
    config = make_config()
    async with running_redis_pair(config), contextlib.AsyncExitStack() as stack:
        p, s = config.primary.redis, config.secondary.redis
        app = credentials(config, RedisRole.APP)
        clients = (
            state_client(p.address, p.port, credentials=app),
            state_client(s.address, s.port, credentials=app),
            state_client(p.address, p.port, credentials=TEST_ADMIN),
            state_client(s.address, s.port, credentials=TEST_ADMIN),
        )
        for client in clients:
            stack.push_async_callback(client.aclose)
        yield Site(config, *clients, stack, free_port(*APP_ADDRESSES))


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=10, trust_env=False) as client:
        yield client


def key(value: str) -> dict[str, str]:
    return {"Idempotency-Key": value}


def problem(response: httpx.Response) -> dict[str, Any]:
    assert response.headers["content-type"] == "application/problem+json"
    document: dict[str, Any] = response.json()
    assert document["status"] == response.status_code
    return document


# ------------------------------------------------------------------------- behaviour


async def test_first_request_runs_and_repeats_replay(site: Site, http: httpx.AsyncClient) -> None:
    orders = Orders()
    registry = CollectorRegistry()
    url = await site.serve(wrap(orders.app(), site.primary, registry=registry))
    first = await http.post(f"{url}/orders", json={"item": 1}, headers=key("k1"))
    assert first.status_code == 201
    assert first.json() == {"order": 1, "item": 1, "user": None}
    assert REPLAYED_HEADER.lower() not in first.headers
    for _ in range(2):
        again = await http.post(f"{url}/orders", json={"item": 1}, headers=key("k1"))
        assert again.status_code == 201
        assert again.content == first.content
        assert again.headers["x-order"] == "1"
        assert again.headers["set-cookie"] == "last=1"
        assert again.headers[REPLAYED_HEADER] == "true"
    assert orders.runs["create"] == 1
    other = await http.post(f"{url}/orders", json={"item": 1}, headers=key("k2"))
    assert other.json()["order"] == 2
    # The quoted (structured-field) form names the same key.
    quoted = await http.post(f"{url}/orders", json={"item": 1}, headers=key('"k1"'))
    assert quoted.headers[REPLAYED_HEADER] == "true"
    assert orders.runs["create"] == 2
    ttl = await site.admin.pttl(keys.idempotency("rest", "k1"))
    assert 86_000_000 < ttl <= 86_400_000
    count = registry.get_sample_value
    assert count("rideout_idempotency_requests_total", {"outcome": "stored"}) == 2
    assert count("rideout_idempotency_requests_total", {"outcome": "replayed"}) == 3


async def test_the_app_is_told_its_requests_record_key(site: Site, http: httpx.AsyncClient) -> None:
    """So that a handler can make its own write idempotent under it (the waiting room's
    assign_queue_num): with a key the app sees the record's name, without one nothing."""
    url = await site.serve(wrap(Orders().app(), site.primary))
    keyed = await http.post(f"{url}/optional", headers=key("k-scope"))
    assert keyed.json()["record"] == keys.idempotency("rest", "k-scope")
    plain = await http.post(f"{url}/optional")
    assert plain.json()["record"] is None


async def test_same_key_different_request_is_422(site: Site, http: httpx.AsyncClient) -> None:
    orders = Orders()
    url = await site.serve(wrap(orders.app(), site.primary))
    await http.post(f"{url}/orders", json={"item": 1}, headers=key("k1"))
    for response in (
        await http.post(f"{url}/orders", json={"item": 2}, headers=key("k1")),
        await http.post(f"{url}/orders?x=1", json={"item": 1}, headers=key("k1")),
        await http.post(f"{url}/optional", json={"item": 1}, headers=key("k1")),
    ):
        assert response.status_code == 422
        assert problem(response)["type"] == "urn:rideout:problem:idempotency-key-reused"
    assert orders.runs["create"] == 1
    assert orders.runs["optional"] == 0


async def test_repeat_while_in_flight_is_409(site: Site, http: httpx.AsyncClient) -> None:
    orders = Orders()
    url = await site.serve(wrap(orders.app(), site.primary, lease=1.0))
    first = asyncio.create_task(http.post(f"{url}/slow", content=b"x", headers=key("s1")))
    try:
        await until(lambda: orders.runs["slow"], 5, interval=0.01, message="the app running")
        # Past two lease periods: the lease is renewed (every third of it) meanwhile.
        await asyncio.sleep(2.2)
        second = await http.post(f"{url}/slow", content=b"x", headers=key("s1"))
        assert second.status_code == 409
        assert second.headers["retry-after"] == "1"
        assert problem(second)["type"] == "urn:rideout:problem:idempotency-request-in-flight"
        pttl = await site.admin.pttl(keys.idempotency("rest", "s1"))
        assert 0 < pttl <= 1000
        # A different request under the same key is still a misuse, in flight or not.
        mismatch = await http.post(f"{url}/slow", content=b"y", headers=key("s1"))
        assert mismatch.status_code == 422
    finally:
        orders.gate.set()
        response = await first
    assert response.status_code == 200
    third = await http.post(f"{url}/slow", content=b"x", headers=key("s1"))
    assert third.json() == {"slow": 1}
    assert third.headers[REPLAYED_HEADER] == "true"
    assert orders.runs["slow"] == 1


async def test_missing_and_invalid_keys_are_400(site: Site, http: httpx.AsyncClient) -> None:
    orders = Orders()
    url = await site.serve(wrap(orders.app(), site.primary))
    missing = await http.post(f"{url}/orders", json={"item": 1})
    assert missing.status_code == 400
    assert problem(missing)["type"] == "urn:rideout:problem:idempotency-key-missing"
    # (Control characters never get this far: the HTTP server refuses them itself.)
    for bad in ("x" * 256, "caf\u00e9".encode(), b'"unterminated'):
        response = await http.post(f"{url}/orders", json={}, headers={"Idempotency-Key": bad})  # type: ignore[arg-type]
        assert response.status_code == 400, bad
        assert problem(response)["type"] == "urn:rideout:problem:idempotency-key-invalid"
    twice = await http.post(
        f"{url}/orders", json={}, headers=[("Idempotency-Key", "a"), ("Idempotency-Key", "b")]
    )
    assert twice.status_code == 400
    assert orders.runs["create"] == 0
    # Where a key is optional, a request without one passes straight through.
    for _ in range(2):
        assert (await http.post(f"{url}/optional")).status_code == 200
    assert orders.runs["optional"] == 2
    # Methods outside `methods` are never touched.
    assert (await http.get(f"{url}/orders")).status_code == 405


async def test_request_body_limit(site: Site, http: httpx.AsyncClient) -> None:
    orders = Orders()
    url = await site.serve(wrap(orders.app(), site.primary, max_request_body=100))
    response = await http.post(f"{url}/orders", content=b"{}" * 100, headers=key("k"))
    assert response.status_code == 413
    assert orders.runs["create"] == 0


async def test_5xx_is_not_stored(site: Site, http: httpx.AsyncClient) -> None:
    orders = Orders()
    url = await site.serve(wrap(orders.app(), site.primary))
    first = await http.post(f"{url}/flaky", content=b"pay", headers=key("f1"))
    assert first.status_code == 503
    # Released once the answer is sent (the middleware settles after streaming it).
    released = lambda: site.admin.exists(keys.idempotency("rest", "f1"))  # noqa: E731
    await until(lambda: _zero(released()), 5)
    second = await http.post(f"{url}/flaky", content=b"pay", headers=key("f1"))
    assert second.status_code == 201  # the retry ran for real
    assert REPLAYED_HEADER.lower() not in second.headers
    third = await http.post(f"{url}/flaky", content=b"pay", headers=key("f1"))
    assert third.status_code == 201
    assert third.headers[REPLAYED_HEADER] == "true"
    assert orders.runs["flaky"] == 2


async def test_a_crashing_handler_releases_the_key(site: Site, http: httpx.AsyncClient) -> None:
    orders = Orders()
    url = await site.serve(wrap(orders.app(), site.primary))
    # uvicorn closes the connection after an app exception: do not reuse it.
    crashed = await http.post(
        f"{url}/crash", content=b"x", headers={**key("c1"), "Connection": "close"}
    )
    assert crashed.status_code == 500
    again = await http.post(f"{url}/crash", content=b"x", headers=key("c1"))
    assert again.json() == {"crash": 2}
    assert orders.runs["crash"] == 2


async def test_too_large_to_replay_is_409(site: Site, http: httpx.AsyncClient) -> None:
    orders = Orders()
    url = await site.serve(wrap(orders.app(), site.primary, max_stored_body=4096))
    first = await http.post(f"{url}/big", content=b"x", headers=key("b1"))
    assert first.status_code == 200
    assert len(first.content) == 5000  # the client got all of it the first time
    again = await http.post(f"{url}/big", content=b"x", headers=key("b1"))
    assert again.status_code == 409
    document = problem(again)
    assert document["type"] == "urn:rideout:problem:idempotency-response-not-replayable"
    assert document["original_status"] == 200
    assert orders.runs["big"] == 1  # not run again
    stored = await site.primary.get(keys.idempotency("rest", "b1"))
    assert stored is not None
    assert len(stored) < 500


async def test_a_retry_the_moment_the_response_arrives_is_a_replay(
    site: Site, http: httpx.AsyncClient
) -> None:
    """The record is stored before the response's last message goes out: a client that
    has the whole answer and retries at once gets it replayed, not 409 "in flight".
    Regression: the record was settled after the response had gone out, and a slow
    store (here 0.3 s; a loaded machine's Redis round trip in the suite) lost the race."""
    orders = Orders()
    middleware = wrap(orders.app(), site.primary)
    finish = middleware._finish_call

    async def slow_store(*args: Any, **kwargs: Any) -> bool:
        if args[2] == "store":
            await asyncio.sleep(0.3)
        return await finish(*args, **kwargs)

    middleware._finish_call = slow_store  # type: ignore[method-assign]
    url = await site.serve(middleware)
    first = await http.post(f"{url}/orders", json={"item": 1}, headers=key("race-1"))
    again = await http.post(f"{url}/orders", json={"item": 1}, headers=key("race-1"))
    assert (first.status_code, again.status_code) == (201, 201), problem(again)
    assert again.headers[REPLAYED_HEADER] == "true"
    assert orders.runs["create"] == 1


async def test_keys_are_per_user(site: Site, http: httpx.AsyncClient) -> None:
    def user(scope: Scope) -> str | None:
        for name, value in scope["headers"]:
            if name == b"x-user":
                return str(value.decode())
        return None

    orders = Orders()
    url = await site.serve(wrap(orders.app(), site.primary, user_from_scope=user))
    for who in ("alice", "bob", "alice"):
        response = await http.post(
            f"{url}/orders", json={"item": 1}, headers={"Idempotency-Key": "same", "X-User": who}
        )
        assert response.json()["user"] == who
    assert orders.runs["create"] == 2
    assert await site.admin.exists(keys.idempotency("rest", "same", "bob")) == 1


async def test_replay_across_two_app_servers(site: Site, http: httpx.AsyncClient) -> None:
    orders = Orders()  # one tally for both servers: they are workers of one service
    a = await site.serve(wrap(orders.app(), site.primary), 0)
    b = await site.serve(wrap(orders.app(), site.primary), 1)
    first = await http.post(f"{a}/orders", json={"item": 7}, headers=key("x1"))
    retry = await http.post(f"{b}/orders", json={"item": 7}, headers=key("x1"))
    assert retry.status_code == 201
    assert retry.content == first.content
    assert retry.headers[REPLAYED_HEADER] == "true"
    assert orders.runs["create"] == 1


async def test_replay_from_the_replica_after_failover(site: Site, http: httpx.AsyncClient) -> None:
    orders = Orders()
    east = await site.serve(wrap(orders.app(), site.primary), 0)
    west = await site.serve(wrap(orders.app(), site.replica), 1)
    first = await http.post(f"{east}/orders", json={"item": 3}, headers=key("r1"))
    assert first.status_code == 201
    await replicated(site.primary)  # the record reached the replica
    # The client's retry lands in the other region: still one order.
    retry = await http.post(f"{west}/orders", json={"item": 3}, headers=key("r1"))
    assert retry.status_code == 201
    assert retry.content == first.content
    assert retry.headers[REPLAYED_HEADER] == "true"
    mismatch = await http.post(f"{west}/orders", json={"item": 4}, headers=key("r1"))
    assert mismatch.status_code == 422
    # A new key cannot be claimed on a read-only replica: fail closed, retryable.
    new = await http.post(f"{west}/orders", json={"item": 5}, headers=key("r2"))
    assert new.status_code == 503
    assert new.headers["retry-after"] == "1"
    assert problem(new)["type"] == "urn:rideout:problem:idempotency-store-read-only"
    assert orders.runs["create"] == 1
    # Failover promotes the replica: new keys run there, old ones still replay.
    await site.replica_admin.execute_command("REPLICAOF", "NO", "ONE")
    new = await http.post(f"{west}/orders", json={"item": 5}, headers=key("r2"))
    assert new.status_code == 201
    assert REPLAYED_HEADER.lower() not in new.headers
    old = await http.post(f"{west}/orders", json={"item": 3}, headers=key("r1"))
    assert old.headers[REPLAYED_HEADER] == "true"
    assert orders.runs["create"] == 2


async def test_store_down_is_503(http: httpx.AsyncClient) -> None:
    orders = Orders()
    dead = probe_client("127.0.6.1", free_port("127.0.6.1"), credentials=TEST_ADMIN, timeout=0.5)
    port = free_port(APP_ADDRESSES[0])
    try:
        async with serving(wrap(orders.app(), dead), APP_ADDRESSES[0], port):
            url = f"http://{APP_ADDRESSES[0]}:{port}"
            response = await http.post(f"{url}/orders", json={}, headers=key("k"))
            assert response.status_code == 503
            assert response.headers["retry-after"] == "1"
            assert problem(response)["type"] == "urn:rideout:problem:idempotency-store-unavailable"
            assert orders.runs["create"] == 0
            assert (await http.post(f"{url}/optional")).status_code == 200
    finally:
        await dead.aclose()


async def test_corrupt_record_is_500(site: Site, http: httpx.AsyncClient) -> None:
    orders = Orders()
    url = await site.serve(wrap(orders.app(), site.primary))
    fingerprint = request_fingerprint("POST", "/orders", b"", b"{}")
    for name, value in (
        ("bad1", "not json"),
        ("bad2", json.dumps({"state": "done", "fp": fingerprint, "status": 201})),
        ("bad3", json.dumps({"state": "weird", "fp": fingerprint})),
    ):
        await site.admin.set(keys.idempotency("rest", name), value)
        response = await http.post(f"{url}/orders", content=b"{}", headers=key(name))
        assert response.status_code == 500
        assert problem(response)["type"] == "urn:rideout:problem:idempotency-record-corrupt"
    assert orders.runs["create"] == 0


async def test_records_do_not_keep_hop_by_hop_headers(site: Site) -> None:
    """Drive the middleware directly (a real ASGI call, real Redis): what gets stored."""

    async def app(scope: Scope, receive: Any, send: Any) -> None:
        await receive()
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"connection", b"close"), (b"x-kept", b"1")],
            }
        )
        await send({"type": "http.response.body", "body": b"part1", "more_body": True})
        await send({"type": "http.response.body", "body": b"part2", "more_body": False})

    middleware = wrap(app, site.primary)
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "method": "POST",
        "path": "/orders",
        "query_string": b"",
        "headers": [(b"idempotency-key", b"h1")],
    }
    await middleware(scope, receive, send)
    record = json.loads(await site.primary.get(keys.idempotency("rest", "h1")))
    assert record["state"] == "done"
    assert record["headers"] == [["x-kept", "1"]]
    sent.clear()
    await middleware(scope, receive, send)
    assert sent[0]["headers"] == [(b"x-kept", b"1"), (b"idempotent-replayed", b"true")]
    assert sent[1]["body"] == b"part1part2"


async def _zero(count: Awaitable[int]) -> bool:
    return await count == 0
