"""Server-side ``Idempotency-Key``: a retried POST runs once, wherever it lands.

ASGI middleware after the IETF httpapi draft "The Idempotency-Key HTTP Header Field"
and Stripe's practice. A request that carries a key is run at most once per key;
repeats get the first response back, byte for byte, with ``Idempotent-Replayed:
true``::

    redis = state_client(host, port, credentials=credentials_for(config, RedisRole.APP))
    app = IdempotencyMiddleware(app, redis, scope="rest", required_paths={"/v1/orders"})

How a keyed request (``methods``, POST and PATCH by default) is handled:

1. The key is validated: 1 to ``max_key_length`` printable ASCII characters, bare or
   as the draft's structured-field string (``"..."``). Otherwise **400**; a missing
   key is **400** on ``required_paths`` and passes through untouched elsewhere.
2. The request is fingerprinted: method, path, query and the SHA-256 of the body
   (buffered by :func:`rideout._body.read_receive`: at most ``max_request_body``
   bytes, else **413**).
3. One atomic Lua script reads the key's record or, if there is none, marks the key
   in flight with a lease (``SET ... PX lease``, renewed while the app runs, so a
   crashed server frees the key when the lease lapses). The record lives in the
   region's Redis under :func:`rideout.store.keys.idempotency` (per ``scope``, and per
   user when ``user_from_scope`` is given), so it replicates with the rest of the
   state: a retry that lands in the other region after a failover is deduplicated
   too. On a read-only replica the middleware can still replay (it only reads).
4. A record with another fingerprint is **422** (the key was reused for a different
   request); one still in flight is **409** with ``Retry-After: 1``; a finished one
   is replayed.
5. The first request runs the app. Its response is stored for ``ttl`` seconds
   (status, headers without hop-by-hop ones, body), unless ``store_status`` says no:
   by default **5xx, 401, 403, 407, 408, 425 and 429 are not stored** and the
   in-flight mark is released instead: the first are refusals of this caller, which
   must never be replayed to another (nor poison the key for the caller with the
   credential), the rest mean "not done, try again" and the client's retry must run
   for real. An app that raises also releases the key.
6. A response body over ``max_stored_body`` bytes is not stored; a marker is, and
   repeats get **409** "not replayable" (with the original status in the problem
   body): the request did run, so re-running it would break the promise, and its
   response cannot be given back.

**The app's own write.** The stored answer and the app's effects are two writes: a
region lost between them (the effects replicated, the answer not) makes the retry run
the app again. The app is told its request's record key in the scope
(``scope[SCOPE_KEY]``, absent without an ``Idempotency-Key``), so a handler whose write
can be made idempotent under it does so and the retry finds what the first run made
(the waiting room derives ``assign_queue_num``'s request id from it).

**Whose record.** A record answers only requests of the principal that made it: the
record's key includes ``user_from_scope``'s answer (for a credential,
:func:`credential_principal`, a hash of it). Authentication must run *before* this
middleware, so that a request without the credential is refused without reading or
writing any record: mount it inside the check, never around it (the waiting room's
private API does so; its public API has no credential, and its records are shared).

Errors are RFC 9457 problem documents (``application/problem+json``). When Redis
cannot be reached the answer is **503** with ``Retry-After: 1``: the middleware fails
closed rather than run a keyed request without protection.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Collection
from typing import Any, Final

import redis.asyncio as aioredis
from prometheus_client import CollectorRegistry, Counter
from redis.exceptions import ReadOnlyError, RedisError
from starlette.datastructures import Headers
from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from rideout import _body
from rideout.store import functions, keys
from rideout.store.errors import StoreError
from rideout.store.functions import StoreFunction

__all__ = [
    "HOP_BY_HOP_HEADERS",
    "REFUSED_STATUSES",
    "REPLAYED_HEADER",
    "SCOPE_KEY",
    "IdempotencyMiddleware",
    "credential_principal",
    "default_store_status",
    "parse_idempotency_key",
    "request_fingerprint",
]

log = logging.getLogger("rideout.idempotency")

REPLAYED_HEADER = "Idempotent-Replayed"
SCOPE_KEY = "rideout.idempotency_record"
"""The ASGI scope key under which the app finds its request's record key."""

HOP_BY_HOP_HEADERS = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "trailers",
        "transfer-encoding",
        "upgrade",
    }
)
"""Headers that describe one connection, never stored or replayed (RFC 9110 §7.6.1)."""

_PROBLEM = "urn:rideout:problem:"
_RECORD_VERSION = 1


def credential_principal(credential: str) -> str:
    """The owner name of the records a credential's requests make: a hash of it."""
    return "sha256-" + hashlib.sha256(credential.encode()).hexdigest()[:32]


REFUSED_STATUSES: Final = frozenset({401, 403, 407, 408, 425, 429})
"""Never stored: refusals of the caller (401, 403, 407: another caller, or this one with
a credential, may be allowed) and "not done, try again" (408, 425, 429)."""


def default_store_status(status: int) -> bool:
    """Store every response except 5xx and :data:`REFUSED_STATUSES`."""
    return status < 500 and status not in REFUSED_STATUSES


def parse_idempotency_key(raw: bytes, max_length: int = 255) -> str | None:
    """The key in a header value, or None when it is not a valid key.

    Accepts a bare value (Stripe) or a structured-field string (the IETF draft:
    ``"..."`` with ``\\"`` and ``\\\\`` escapes). A key is 1 to ``max_length``
    printable ASCII characters (0x20-0x7E).
    """
    try:
        text = raw.decode("ascii").strip(" \t")
    except UnicodeDecodeError:
        return None
    if text.startswith('"'):
        if len(text) < 2 or not text.endswith('"'):
            return None
        inner, chars, i = text[1:-1], [], 0
        while i < len(inner):
            char = inner[i]
            if char == "\\":
                if i + 1 >= len(inner) or inner[i + 1] not in '"\\':
                    return None
                chars.append(inner[i + 1])
                i += 2
                continue
            if char == '"':
                return None
            chars.append(char)
            i += 1
        text = "".join(chars)
    if not 1 <= len(text) <= max_length:
        return None
    if any(not 0x20 <= ord(char) <= 0x7E for char in text):
        return None
    return text


def request_fingerprint(method: str, path: str, query: bytes, body: bytes) -> str:
    """SHA-256 over the method, path, query string and the SHA-256 of the body."""
    digest = hashlib.sha256()
    for part in (method.upper().encode(), path.encode(), query, hashlib.sha256(body).digest()):
        digest.update(len(part).to_bytes(8, "big"))
        digest.update(part)
    return digest.hexdigest()


def _millis(seconds: float) -> int:
    return max(1, round(seconds * 1000))


class _Capture:
    """Passes the app's response through to the client and keeps a copy of it; settles
    the record (`settle`) before it sends the last body message, so that a client that
    has the whole response, and retries at once, finds it stored (a replay), never still
    in flight (a 409). What the app does after that message (Starlette's background
    tasks) does not hold the response back."""

    def __init__(
        self, send: Send, limit: int, settle: Callable[[_Capture], Awaitable[None]]
    ) -> None:
        self._send = send
        self._limit = limit
        self._settle = settle
        self.settled = False
        self.status: int | None = None
        self.headers: list[tuple[bytes, bytes]] = []
        self.chunks: list[bytes] = []
        self.size = 0
        self.too_large = False
        self.complete = False
        self.unstorable = False

    async def __call__(self, message: Message) -> None:
        kind = message["type"]
        if kind == "http.response.start":
            self.status = int(message["status"])
            self.headers = [(bytes(k), bytes(v)) for k, v in message.get("headers", [])]
            if message.get("trailers"):
                self.unstorable = True
        elif kind == "http.response.body":
            body = bytes(message.get("body", b""))
            self.size += len(body)
            if self.size > self._limit:
                self.too_large = True
                self.chunks.clear()
            elif not self.too_large:
                self.chunks.append(body)
            if not message.get("more_body", False):
                self.complete = True
                await self.settle()
        else:
            self.unstorable = True  # trailers, pathsend, ...: not something to replay
        await self._send(message)

    async def settle(self) -> None:
        """Settle the record (once): stored, or released when there is nothing to store."""
        if not self.settled:
            self.settled = True
            await self._settle(self)


class IdempotencyMiddleware:
    """ASGI middleware that makes keyed requests run once; see the module docstring.

    ``redis_client`` is the region's writer (``rideout.store.client.state_client``;
    with ``decode_responses`` on or off). ``ttl`` is how long a response is replayed,
    ``lease`` how long an in-flight mark outlives a server that died mid-request.
    ``required_paths`` is a set of exact paths or a predicate on the path.
    ``user_from_scope`` returns the authenticated user (or None) so keys are per user.
    With ``registry``, ``rideout_idempotency_requests_total{outcome}`` is counted there
    (one middleware per registry: the counter is registered once).
    """

    def __init__(
        self,
        app: ASGIApp,
        redis_client: aioredis.Redis,
        *,
        scope: str,
        ttl: float = 86400.0,
        lease: float = 30.0,
        methods: Collection[str] = ("POST", "PATCH"),
        required_paths: Collection[str] | Callable[[str], bool] = (),
        user_from_scope: Callable[[Scope], str | None] | None = None,
        header: str = "Idempotency-Key",
        max_key_length: int = 255,
        max_request_body: int = 1024 * 1024,
        max_stored_body: int = 1024 * 1024,
        store_status: Callable[[int], bool] = default_store_status,
        registry: CollectorRegistry | None = None,
    ) -> None:
        if not isinstance(scope, str) or not scope:
            raise ValueError("scope must be a non-empty str (it separates one API's keys)")
        for name, value in (("ttl", ttl), ("lease", lease)):
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                raise ValueError(f"{name} must be a number of seconds > 0, not {value!r}")
        for name, size in (
            ("max_key_length", max_key_length),
            ("max_request_body", max_request_body),
            ("max_stored_body", max_stored_body),
        ):
            if isinstance(size, bool) or not isinstance(size, int) or size < 1:
                raise ValueError(f"{name} must be an int >= 1, not {size!r}")
        self.app = app
        self.redis = redis_client
        self.scope = scope
        self.ttl = float(ttl)
        self.lease = float(lease)
        self.methods = frozenset(m.upper() for m in methods)
        self._required: Callable[[str], bool] = (
            required_paths if callable(required_paths) else frozenset(required_paths).__contains__
        )
        self._user_from_scope = user_from_scope
        self.header = header
        self._header = header.lower().encode("latin-1")
        self.max_key_length = max_key_length
        self.max_request_body = max_request_body
        self.max_stored_body = max_stored_body
        self._store_status = store_status
        self._claim = StoreFunction(redis_client, functions.IDEMPOTENCY_CLAIM)
        self._finish = StoreFunction(redis_client, functions.IDEMPOTENCY_FINISH)
        self._counter = (
            Counter(
                "rideout_idempotency_requests",
                "Requests with an Idempotency-Key (or missing one), by outcome.",
                ["outcome"],
                registry=registry,
            )
            if registry is not None
            else None
        )

    def _count(self, outcome: str) -> None:
        if self._counter is not None:
            self._counter.labels(outcome).inc()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"].upper() not in self.methods:
            await self.app(scope, receive, send)
            return
        values = [v for k, v in scope.get("headers", []) if bytes(k).lower() == self._header]
        path: str = scope["path"]
        if not values:
            if self._required(path):
                self._count("missing_key")
                await _problem(
                    send, 400, "idempotency-key-missing", "Idempotency-Key required",
                    f"{scope['method']} {path} requires an {self.header} header",
                )  # fmt: skip
                return
            await self.app(scope, receive, send)
            return
        key = (
            parse_idempotency_key(bytes(values[0]), self.max_key_length)
            if len(values) == 1
            else None
        )
        if key is None:
            self._count("invalid_key")
            await _problem(
                send, 400, "idempotency-key-invalid", "Invalid Idempotency-Key",
                f"send exactly one {self.header}: 1 to {self.max_key_length} printable "
                "ASCII characters",
            )  # fmt: skip
            return
        try:
            body = await _body.read_receive(receive, Headers(scope=scope), self.max_request_body)
        except _body.BodyRefused:
            self._count("request_too_large")
            await _problem(
                send, 413, "request-too-large", "Request body too large",
                f"a request with an {self.header} may carry at most "
                f"{self.max_request_body} bytes",
            )  # fmt: skip
            return
        except ClientDisconnect:  # the client went away: nothing to run or answer
            return
        await self._keyed(scope, receive, send, key, body)

    async def _keyed(
        self, scope: Scope, receive: Receive, send: Send, key: str, body: bytes
    ) -> None:
        fingerprint = request_fingerprint(
            scope["method"], scope["path"], bytes(scope.get("query_string", b"")), body
        )
        user = self._user_from_scope(scope) if self._user_from_scope is not None else None
        record_key = keys.idempotency(self.scope, key, user)
        in_flight = json.dumps(
            {
                "v": _RECORD_VERSION,
                "state": "in_flight",
                "fp": fingerprint,
                "owner": uuid.uuid4().hex,
                "at": time.time(),
            },
            separators=(",", ":"),
        )
        try:
            existing = await self._claim(keys=[record_key], args=[in_flight, _millis(self.lease)])
        except ReadOnlyError:  # StoreFunction's, whichever way the server said it
            # A read-only replica (the other region before promotion) can still replay.
            try:
                existing = await self.redis.get(record_key)
            except (RedisError, OSError) as read_exc:
                return await self._unavailable(send, read_exc)
            if existing is None:
                self._count("store_read_only")
                await _problem(
                    send, 503, "idempotency-store-read-only", "Idempotency store is read-only",
                    "this region's state store is a replica; retry once failover completes",
                    retry_after=True,
                )  # fmt: skip
                return None
        except (RedisError, OSError, StoreError) as exc:
            return await self._unavailable(send, exc)
        if existing is not None:
            return await self._answer_existing(send, existing, fingerprint, key)
        return await self._run(scope, receive, send, body, record_key, in_flight, fingerprint)

    async def _unavailable(self, send: Send, exc: BaseException) -> None:
        log.warning("idempotency store unavailable: %s: %s", type(exc).__name__, exc)
        self._count("store_unavailable")
        await _problem(
            send, 503, "idempotency-store-unavailable", "Idempotency store unavailable",
            "the request was not run; retry with the same key", retry_after=True,
        )  # fmt: skip

    async def _answer_existing(
        self, send: Send, existing: str | bytes, fingerprint: str, key: str
    ) -> None:
        try:
            record = json.loads(existing)
            state = record["state"]
            stored_fp = record["fp"]
            if state == "done":
                status = int(record["status"])
                headers = [
                    (str(k).encode("latin-1"), str(v).encode("latin-1"))
                    for k, v in record["headers"]
                ]
                body = base64.b64decode(record["body"], validate=True)
        except (ValueError, TypeError, KeyError, AttributeError):
            log.error("unreadable idempotency record for key %r", key)
            await self._corrupt(send)
            return
        if stored_fp != fingerprint:
            self._count("mismatch")
            await _problem(
                send, 422, "idempotency-key-reused", "Idempotency-Key reused",
                f"this {self.header} was used for a different request (method, path, "
                "query or body differ); use a new key for a new request",
            )  # fmt: skip
            return
        if state == "in_flight":
            self._count("in_flight")
            await _problem(
                send, 409, "idempotency-request-in-flight", "Request in progress",
                f"a request with this {self.header} is still being processed; retry later",
                retry_after=True,
            )  # fmt: skip
            return
        if state == "too_large":
            self._count("not_replayable")
            await _problem(
                send, 409, "idempotency-response-not-replayable", "Response not replayable",
                "the request with this key was processed, but its response was too large "
                "to store for replay; it will not be run again",
                extra={"original_status": record.get("status")},
            )  # fmt: skip
            return
        if state != "done":
            log.error("idempotency record for key %r is in unknown state %r", key, state)
            await self._corrupt(send)
            return
        self._count("replayed")
        headers.append((REPLAYED_HEADER.lower().encode(), b"true"))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body, "more_body": False})

    async def _corrupt(self, send: Send) -> None:
        """Answer 500 for a stored record that cannot be read (counted as corrupt)."""
        self._count("corrupt")
        await _problem(
            send, 500, "idempotency-record-corrupt", "Idempotency record unreadable",
            "the stored record for this key cannot be read",
        )  # fmt: skip

    async def _run(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        body: bytes,
        record_key: str,
        in_flight: str,
        fingerprint: str,
    ) -> None:
        delivered = False

        async def replay_receive() -> Message:
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        async def settle(capture: _Capture) -> None:
            await self._settle(record_key, in_flight, fingerprint, capture)

        capture = _Capture(send, self.max_stored_body, settle)
        renewer = asyncio.create_task(self._renew(record_key, in_flight))
        try:
            await self.app({**scope, SCOPE_KEY: record_key}, replay_receive, capture)
        except BaseException:
            if not capture.settled:
                capture.settled = True
                self._count("app_error")
                await self._finish_call(record_key, in_flight, "release")
            raise
        finally:
            # Awaited directly, not through cancel_and_wait (asyncio.wait would cost the
            # loop more turns on every keyed request).
            renewer.cancel()
            try:
                await renewer
            except asyncio.CancelledError:
                current = asyncio.current_task()
                if current is not None and current.cancelling():
                    raise  # this request was cancelled meanwhile: not ours to swallow
        await capture.settle()  # a response without its last message: released

    async def _settle(
        self, record_key: str, in_flight: str, fingerprint: str, capture: _Capture
    ) -> None:
        status = capture.status
        if (
            status is None
            or not capture.complete
            or capture.unstorable
            or not self._store_status(status)
        ):
            self._count("not_stored")
            await self._finish_call(record_key, in_flight, "release")
            return
        record: dict[str, Any] = {"v": _RECORD_VERSION, "fp": fingerprint, "status": status}
        if capture.too_large:
            record["state"] = "too_large"
            record["size"] = capture.size
            self._count("stored_too_large")
        else:
            record["state"] = "done"
            record["headers"] = [
                [k.decode("latin-1"), v.decode("latin-1")]
                for k, v in capture.headers
                if k.decode("latin-1").lower() not in HOP_BY_HOP_HEADERS
            ]
            record["body"] = base64.b64encode(b"".join(capture.chunks)).decode("ascii")
            self._count("stored")
        record["at"] = time.time()
        await self._finish_call(
            record_key, in_flight, "store", json.dumps(record, separators=(",", ":")), self.ttl
        )

    async def _finish_call(
        self,
        record_key: str,
        in_flight: str,
        mode: str,
        value: str = "",
        seconds: float | None = None,
    ) -> bool:
        try:
            done = await self._finish(
                keys=[record_key],
                args=[in_flight, mode, value, _millis(seconds if seconds else self.lease)],
            )
        except (RedisError, OSError, StoreError) as exc:
            log.warning(
                "idempotency: cannot %s the record of %s (%s: %s); the in-flight mark "
                "lapses after its lease",
                mode,
                record_key,
                type(exc).__name__,
                exc,
            )
            return False
        if not done and mode != "renew":
            log.warning(
                "idempotency: the in-flight mark of %s lapsed before the request ended (%s)",
                record_key,
                mode,
            )
        return bool(done)

    async def _renew(self, record_key: str, in_flight: str) -> None:
        """Extend the in-flight lease every third of it while the app runs."""
        while True:
            await asyncio.sleep(self.lease / 3)
            if not await self._finish_call(record_key, in_flight, "renew"):
                return


async def _problem(
    send: Send,
    status: int,
    kind: str,
    title: str,
    detail: str,
    *,
    retry_after: bool = False,
    extra: dict[str, Any] | None = None,
) -> None:
    """An RFC 9457 problem document."""
    document: dict[str, Any] = {
        "type": _PROBLEM + kind,
        "title": title,
        "status": status,
        "detail": detail,
    }
    if extra:
        document.update(extra)
    body = json.dumps(document).encode()
    headers = [
        (b"content-type", b"application/problem+json"),
        (b"content-length", str(len(body)).encode()),
    ]
    if retry_after:
        headers.append((b"retry-after", b"1"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})
