"""One WebSocket connection: the ``$connect`` authorizer, routing on ``action``, and a
bounded send queue.

The endpoint is a plain ASGI app and a connection is one task: the one the server runs
it in, reading. Sending never needs a task of its own: a send whose transport is not
paused finishes on the spot (see :mod:`rideout._eager`), so replies and room updates
leave in the order they were produced with no task switch. Only while the peer applies
back-pressure does a flusher task exist, with a queue behind it; a consumer that lets
that queue fill is closed with 1013 and a retry hint, and recovers what it missed with
``getState`` + ``since``. State lives in Redis, keyed by room and by the token's
``sub``: nothing here survives the connection, and nothing needs to.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from dataclasses import replace
from types import MappingProxyType
from typing import Any

from rideout._eager import Resumption, run_eagerly
from rideout.auth import AuthError, AuthUnavailable, Claims, extract_token
from rideout.auth.resume import is_ticket
from rideout.health.names import CANARY_PROBE, PROBE_CLAIM
from rideout.protocol import (
    MESSAGE_TOO_BIG,
    PONG,
    Bid,
    CloseCode,
    ErrorCode,
    GetState,
    Heartbeat,
    OffsetKey,
    Position,
    Probe,
    ProtocolError,
    TicketRequest,
    Update,
    encode_ack,
    encode_error,
    encode_missed,
    encode_probe,
    encode_state,
    encode_ticket,
    offset_key,
    overloaded_reason,
    parse_client_message,
)
from rideout.realtime.admission import Denied
from rideout.realtime.backend import probe_store, record_failure, record_ok
from rideout.realtime.demo import DEMO_CLAIM
from rideout.realtime.limits import Refusal, Shed, TokenBucket
from rideout.realtime.zone import ZoneMode, ZoneServer
from rideout.store.auction import NotWriter, Reason, StateResult, StoreCorrupt, StoreError

__all__ = ["REPLAY_YIELD", "Connection", "WebSocketEndpoint", "close_revoked"]

log = logging.getLogger("rideout.realtime")

Message = MutableMapping[str, Any]
Send = Callable[[Message], Awaitable[None]]
Receive = Callable[[], Awaitable[Message]]

_CLOSE = object()  # queued after the last message when a close has to wait its turn
_GONE = (1006, "")  # the client went away (never sent: 1006 is not a code to send)
CLOSE_GRACE = 2.0  # seconds a queued close frame may take to leave before we hang up
REPLAY_YIELD = 100
"""Replays of more updates than this let the event loop serve others before encoding."""


class WebSocketEndpoint:
    """``GET /ws`` as an ASGI app: authorize before the upgrade, then serve.

    `state` is where the app keeps its ZoneServer (``state.zone``, set at start-up).
    """

    def __init__(self, state: Any) -> None:
        self._state = state

    async def __call__(self, scope: Message, receive: Receive, send: Send) -> None:
        if (await receive())["type"] != "websocket.connect":
            return
        # The handshake's objects (claims, headers) die with its frame; this one lives
        # as long as the connection, so it keeps nothing but the Connection.
        server: ZoneServer = self._state.zone
        connection = await _handshake(server, scope, send)
        if connection is not None:
            try:
                await connection.serve(receive)
            finally:
                server.caps.release(
                    connection.sub, connection.address, probe=connection.probe,
                    demo=connection.demo,
                )  # fmt: skip


async def _handshake(server: ZoneServer, scope: Message, send: Send) -> Connection | None:
    """Authorize, then admit against the caps; the Connection, counted, or None."""
    if server.mode == ZoneMode.DRAINING:
        await _deny(
            scope, send, server, 503, "draining", "this zone is draining; reconnect elsewhere"
        )
        return None
    origin = _header(scope, b"origin")
    if origin is not None and not server.origin_allowed(origin):
        await _deny(
            scope, send, server, 403, "origin_not_allowed", f"origin {origin!r} is not allowed"
        )
        return None
    try:
        bearer = extract_token(scope.get("query_string", b""), scope["headers"])
        claims, kind = await _authorize(server, bearer.token)
        _refuse_revoked(server, claims.sub, claims.jti, claims.iat)
    except AuthError as exc:
        await _deny(scope, send, server, exc.status, exc.reason, exc.message)
        return None
    except AuthUnavailable as exc:
        await _deny(
            scope, send, server, 503, "auth_unavailable", exc.message,
            retry_after=exc.retry_after,
        )  # fmt: skip
        return None
    probe = claims.raw.get(PROBE_CLAIM) == CANARY_PROBE
    demo = claims.raw.get(DEMO_CLAIM) is True
    if demo and not server.config.auth.demo_tokens:
        await _deny(scope, send, server, 403, "demo_tokens_off",
                    "demo sign-in is off here ([auth] demo_tokens): use a token of the "
                    "deployment's own")  # fmt: skip
        return None
    client = scope.get("client")
    address = str(client[0]) if client else ""
    refusal = None if probe else _shed(server)
    if refusal is None:
        refusal = server.caps.admit(claims.sub, address, probe=probe, demo=demo)
    if refusal is not None:
        await _deny(
            scope, send, server, refusal.status, refusal.reason, refusal.message,
            retry_after=server.config.timing.backoff_cap,
        )  # fmt: skip
        return None
    try:
        await send({"type": "websocket.accept", "subprotocol": bearer.subprotocol})
    except BaseException:
        server.caps.release(claims.sub, address, probe=probe, demo=demo)
        raise
    server.metrics.handshakes.labels("accepted").inc()
    server.metrics.credentials.labels(kind).inc()
    return Connection(
        send, claims.sub, claims.exp, server,
        address=address, probe=probe, demo=demo, jti=claims.jti, issued=claims.iat,
        resumable=kind != "authority",
    )  # fmt: skip


def _shed(server: ZoneServer, kind: Shed = "connection") -> Refusal | None:
    """The load shedder's refusal of an ordinary upgrade or a bid (`kind`), if the loop
    runs that late."""
    shedder = server.shedder
    if shedder is None:
        return None
    refusal = shedder.refuse(server.lag.typical(time.monotonic(), shedder.samples), kind)
    if refusal is not None:
        server.metrics.shed.labels(kind, "loop_lag").inc()
    return refusal


async def _authorize(server: ZoneServer, token: str) -> tuple[Claims, str]:
    """The credential's claims and kind: a resumption ticket's (``ticket``), else the
    token's from the auction's verifier (``token``) or, when it refuses the token, from
    the first authority that owns it (``authority``); else the verifier's refusal.

    A ticket refused (tampered, expired, under a key this server does not hold, or
    tickets off here) gets a token's 401, so the client retries with its token."""
    if is_ticket(token):
        tickets = server.tickets
        if tickets is None:
            raise AuthError.of("unknown_kid", "resumption tickets are not accepted here")
        return tickets.verify(token), "ticket"
    try:
        return server.verifier.verify(token), "token"
    except AuthError as refusal:
        for authority in server.authorities:
            claims = await authority.authorize(token)
            if claims is not None:
                return claims, "authority"
        raise refusal from None


REVOKED_REASON = "token revoked"
"""Close reason (with 1008) of a connection whose token was revoked."""


def _refuse_revoked(server: ZoneServer, sub: str, jti: str, iat: float) -> None:
    """Refuse a revoked token (403 ``token_revoked``), from the list in memory."""
    if server.revocations.match(sub, jti, iat) is not None:
        raise AuthError.of("token_revoked", "this token has been revoked; get a new one")


def close_revoked(server: ZoneServer) -> int:
    """Close, with 1008, every connection whose token the zone's list now refuses."""
    closed = 0
    for connection in list(server.connections):
        if isinstance(connection, Connection) and server.revocations.match(
            connection.sub, connection.jti, connection.issued
        ):
            connection.close_soon(CloseCode.POLICY, REVOKED_REASON)
            closed += 1
    return closed


def _header(scope: Message, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key.lower() == name:
            return bytes(value).decode("latin-1")
    return None


async def _deny(
    scope: Message,
    send: Send,
    server: ZoneServer,
    status: int,
    reason: str,
    message: str,
    *,
    retry_after: float | None = None,
) -> None:
    """Refuse the upgrade with an HTTP response and a JSON reason, with `retry_after`
    (seconds) in the body and a ``Retry-After`` header when given (or, on a server
    without the denial-response extension, a bare close: 403)."""
    server.metrics.handshakes.labels(reason).inc()
    if "websocket.http.response" not in scope.get("extensions", {}):
        await send({"type": "websocket.close", "code": CloseCode.POLICY})
        return
    content: dict[str, object] = {"error": reason, "message": message}
    headers = [(b"content-type", b"application/json")]
    if retry_after is not None:
        content["retry_after"] = retry_after
        headers.append((b"retry-after", str(max(1, math.ceil(retry_after))).encode()))
    body = json.dumps(content).encode()
    headers.append((b"content-length", str(len(body)).encode()))
    await send({"type": "websocket.http.response.start", "status": status, "headers": headers})
    await send({"type": "websocket.http.response.body", "body": body})


class Connection:
    """A connected, authenticated client (implements the hub's Subscriber)."""

    __slots__ = (
        "_asgi_send", "_bucket", "_close", "_flusher", "_limit", "_pending", "_queue",
        "_seen", "address", "demo", "expires", "issued", "jti", "probe", "resumable", "server",
        "sub",
    )  # fmt: skip

    def __init__(
        self, send: Send, sub: str, expires: float, server: ZoneServer,
        *, address: str = "", probe: bool = False, demo: bool = False, jti: str = "",
        issued: float = 0.0, resumable: bool = False,
    ) -> None:  # fmt: skip
        self._asgi_send = send
        self.sub = sub
        self.expires = expires
        self.jti = jti  # with `sub` and `issued` (iat): what a revocation is matched on
        self.issued = issued
        self.server = server
        self.address = address  # the client's, as the caps count it
        self.probe = probe  # the canary's: counted in the reserve
        self.demo = demo  # a demo identity's: counted in the demo share
        # Opened with the auction's own token or a ticket: may be given tickets
        # (an authority's tokens depend on live state a ticket would skip).
        self.resumable = resumable and not probe
        realtime = server.config.realtime
        self._limit = realtime.send_queue
        self._bucket = TokenBucket(realtime.rate_limit, realtime.rate_burst)
        # Only while a send waits on back-pressure: the task finishing it, and what
        # was produced meanwhile.
        self._flusher: asyncio.Task[None] | None = None
        self._queue: deque[str | object] | None = None
        self._close: tuple[int, str] | None = None
        # Per room: the newest offset this client has (None while its state is being read),
        # and the updates that arrived meanwhile.
        self._seen: dict[str, OffsetKey] = {}
        self._pending: dict[str, list[tuple[OffsetKey, str]]] = {}

    # ------------------------------------------------------------------ sending

    def _send(self, text: str) -> None:
        if self._close is not None:
            return
        if self._queue is None:
            self._start({"type": "websocket.send", "text": text})
        elif len(self._queue) >= self._limit:
            self._fell_behind()
        else:
            self._queue.append(text)

    def _start(self, message: Message) -> None:
        """Send now; if the transport pushes back, a flusher finishes it and the queue."""
        try:
            rest = run_eagerly(self._asgi_send(message))
        except OSError:  # the client is gone; the reader sees the disconnect
            self._close = self._close or _GONE
            return
        if rest is not None:
            self._queue = deque()
            self._flusher = asyncio.get_running_loop().create_task(self._flush(rest, self._queue))

    async def _flush(self, first: Resumption, queue: deque[str | object]) -> None:
        try:
            await first
            while queue:
                item = queue.popleft()
                if item is _CLOSE:
                    assert self._close is not None
                    code, reason = self._close
                    await self._asgi_send(
                        {"type": "websocket.close", "code": code, "reason": reason}
                    )
                    return
                assert isinstance(item, str)
                await self._asgi_send({"type": "websocket.send", "text": item})
        except OSError:
            self._close = self._close or _GONE
        finally:
            self._queue = self._flusher = None

    def _fell_behind(self) -> None:
        """A slow consumer: close with 1013 and a retry hint; it recovers by replay."""
        self.server.metrics.slow_consumers.inc()
        self.close_soon(
            CloseCode.OVERLOADED, overloaded_reason(self.server.config.timing.backoff_base)
        )

    def close_soon(self, code: int, reason: str) -> None:
        """Drop what is queued and close with `code` (1012 drain, 1013 overload, ...)."""
        if self._close is not None:
            return
        self._close = (code, reason)
        self.server.metrics.closes.labels(str(code)).inc()
        if self._queue is None:
            self._start({"type": "websocket.close", "code": code, "reason": reason})
        else:
            self._queue.clear()
            self._queue.append(_CLOSE)

    def deliver(self, room: str, key: OffsetKey, text: str) -> None:
        """From the hub: send an update unless this client already has it."""
        pending = self._pending.get(room)
        if pending is not None:
            if len(pending) >= self._limit:
                self._fell_behind()
                return
            pending.append((key, text))
            return
        seen = self._seen.get(room)
        if seen is not None and key > seen:
            self._seen[room] = key
            self._send(text)

    # ------------------------------------------------------------------ serving

    async def serve(self, receive: Receive) -> None:
        """Read and answer messages until the client leaves or the server closes."""
        server = self.server
        server.connections.add(self)
        server.metrics.connections.inc()
        expiry = asyncio.get_running_loop().call_later(
            max(0.0, self.expires - time.time()), self.close_soon, CloseCode.POLICY, "token expired"
        )
        try:
            while self._close is None:
                message = await receive()
                if message["type"] != "websocket.receive":
                    self._close = self._close or _GONE
                    break
                data = message.get("text")
                await self.handle(data if data is not None else message.get("bytes") or b"")
            if self._flusher is not None and self._close is not _GONE:
                # We are closing behind queued sends: let the close frame leave, briefly.
                await asyncio.wait({self._flusher}, timeout=CLOSE_GRACE)
        finally:
            expiry.cancel()
            if self._flusher is not None:
                self._flusher.cancel()
                await asyncio.wait({self._flusher})
            for room in list(self._seen) + list(self._pending):
                server.hub.unsubscribe(room, self)
            server.connections.discard(self)
            server.metrics.connections.dec()

    async def handle(self, data: str | bytes) -> None:
        """Answer one client message (never raises for bad input)."""
        server = self.server
        metrics = server.metrics
        try:
            msg = parse_client_message(data, max_size=server.config.realtime.max_message_size)
        except ProtocolError as exc:
            if exc.code == MESSAGE_TOO_BIG:
                metrics.count_message("invalid", "too_big")
                self.close_soon(CloseCode.MESSAGE_TOO_BIG, "message too big")
            else:
                metrics.count_message("invalid", "bad_request")
                self._send(encode_error(ErrorCode.BAD_REQUEST, exc.message, exc.request_id))
            return
        action = _ACTIONS[type(msg)]
        request_id = msg.id if isinstance(msg, Bid) else None
        if not self._bucket.take():
            metrics.count_message(action, "throttled")
            rate = server.config.realtime.rate_limit
            self._throttled(
                f"more than {rate:g} messages per second", self._bucket.wait(), request_id
            )
            return
        if server.mode == ZoneMode.DEGRADED:
            metrics.count_message(action, "unavailable")
            self._send(
                encode_error(ErrorCode.UNAVAILABLE, "this zone's backend is degraded", request_id)
            )
            return
        try:
            if isinstance(msg, Heartbeat):
                outcome = self._heartbeat()
            elif isinstance(msg, Probe):
                outcome = await self._probe()
            elif isinstance(msg, GetState):
                outcome = await self._get_state(msg)
            elif isinstance(msg, TicketRequest):
                outcome = self._ticket()
            else:
                outcome = await self._bid(msg)
                if outcome in _STORE_ANSWERED:  # the writer took it (a read alone proves less)
                    record_ok(server)
        except NotWriter:
            metrics.store_errors.labels("not_writer").inc()
            outcome = "unavailable"
            self._send(
                encode_error(
                    ErrorCode.UNAVAILABLE,
                    f"{server.region.name} is not the writer region now",
                    request_id,
                )
            )
        except StoreCorrupt:
            log.exception("the state store holds data rideout cannot read")
            metrics.store_errors.labels("corrupt").inc()
            outcome = "internal"
            self._send(encode_error(ErrorCode.INTERNAL, "internal error", request_id))
        except StoreError as exc:
            metrics.store_errors.labels("unavailable").inc()
            outcome = "unavailable"
            log.warning("state store unavailable: %s", exc)
            record_failure(server, str(exc))
            self._send(
                encode_error(
                    ErrorCode.UNAVAILABLE, "the state store is unavailable; retry", request_id
                )
            )
        metrics.count_message(action, outcome)

    def _heartbeat(self) -> str:
        """``pong``, or ``error/unavailable`` while the zone's state store is failing."""
        backend = self.server.backend
        if not backend.degraded:
            self._send(PONG)
            return "ok"
        self._send(
            encode_error(ErrorCode.UNAVAILABLE, f"the state store is failing: {backend.reason}")
        )
        return "degraded"

    async def _probe(self) -> str:
        """The canary's store probe: a write and a read through the bid's path."""
        server = self.server
        if not self.probe:
            self._send(encode_error(ErrorCode.FORBIDDEN, "probe is for the canary's tokens"))
            return "forbidden"
        try:
            result = await probe_store(server, record=False)
        except StoreError as exc:
            server.metrics.store_errors.labels("probe").inc()
            self._send(encode_error(ErrorCode.UNAVAILABLE, f"store probe failed: {exc}"))
            return "unavailable"
        self._send(
            encode_probe(
                region=server.region.name, zone=server.zone.name, role=result.role,
                epoch=result.epoch, replicas=result.replicas, full=server.caps.full,
                busy=server.busy(),
            )
        )  # fmt: skip
        return "ok"

    def _ticket(self) -> str:
        """A resumption ticket for this connection's token (``ticket``), or
        ``error/forbidden`` where there is none to give."""
        tickets = self.server.tickets
        ticket = None
        if tickets is not None and self.resumable:
            claims = Claims(self.sub, self.expires, self.issued, self.jti, _NO_CLAIMS)
            ticket = tickets.mint(claims, _DEMO_CARRY if self.demo else None)
        if ticket is None:
            self._send(
                encode_error(ErrorCode.FORBIDDEN, "no resumption ticket for this connection")
            )
            return "forbidden"
        self._send(encode_ticket(ticket=ticket.value, ttl=ticket.ttl, expires=ticket.expires))
        return "ok"

    def _throttled(self, why: str, wait: float, request_id: str | None = None) -> None:
        """``error/throttled``; the message carries the hint: ``…; retry-after=0.25``."""
        hint = overloaded_reason(wait).partition("; ")[2]
        self._send(encode_error(ErrorCode.THROTTLED, f"{why}; {hint}", request_id))

    async def _get_state(self, msg: GetState) -> str:
        room = msg.room
        server = self.server
        fresh = room not in self._seen and room not in self._pending
        rooms = server.config.realtime.max_rooms_per_connection
        if fresh and len(self._seen) + len(self._pending) >= rooms:
            # Each room watched costs the hub a stream to follow: bounded, like the rest.
            self._send(
                encode_error(ErrorCode.BAD_REQUEST, f"a connection may watch at most {rooms} rooms")
            )
            return "bad_request"
        # A cost budget per user, shared by its connections: a replay of a thousand
        # updates keeps the event loop busy for ~100 ms (reading and encoding them), and
        # one user must not be able to keep it busy. The most a request can cost is
        # charged up front (so a user's connections cannot all start at once), the rest
        # given back once the real cost is known.
        budget = server.budget
        wait = budget.wait(self.sub)
        if wait > 0:
            self._throttled("this user's replay budget is spent", wait)
            return "throttled"
        # Admission: a replay (a position at the current epoch: one at an older epoch gets
        # the full state, cheap) is refused while the loop runs late, and otherwise runs
        # when one of the process's few places for replays is free (realtime.admission).
        # With coalesced reads the place is taken by the read itself, which identical
        # replays then share without one of their own: they cost Redis nothing more,
        # and the server a session read and an answer spliced around the `missed`
        # encoded once (rideout._singleflight).
        replay = msg.since is not None and msg.since.epoch == server.epoch.value
        if replay:
            refusal = _shed(server, "replay")
            if refusal is not None:
                self._throttled(refusal.message, server.config.timing.backoff_cap)
                return "overloaded"
            if server.reads is None:
                denied = await server.replays.enter()
                if denied is not None:
                    return self._replay_refused(denied)
                try:
                    return await self._read_state(msg, fresh, replay)
                finally:
                    server.replays.leave()
        return await self._read_state(msg, fresh, replay)

    def _replay_refused(self, denied: Denied) -> str:
        """Answer a replay the gate refused (``error/throttled``); its outcome."""
        server = self.server
        server.metrics.shed.labels("replay", denied).inc()
        policy = server.replays.policy
        # The queue moves within about `wait`: come back after one or two of them (the
        # client waits between half the hint and all of it), not after a backoff's cap.
        hint = max(2 * policy.wait, server.config.timing.backoff_base)
        why = (
            f"this server's replays are all taken ({policy.concurrency} running, "
            f"{policy.queue} waiting)" if denied == "queue_full"
            else f"no replay of this server's {policy.concurrency} was free within {policy.wait:g} s"
        )  # fmt: skip
        self._throttled(why, hint)
        return "overloaded"

    async def _read_state(self, msg: GetState, fresh: bool, replay: bool) -> str:
        room = msg.room
        server = self.server
        budget = server.budget
        most = 1 + (server.store.settings.replay_limit if msg.since is not None else 0)
        budget.charge(self.sub, most)
        cost = 1
        # Subscribe first, then read: the hub's cursor is then at or before the state
        # we send, so no later change can slip between the two.
        self._pending[room] = []
        self._seen.pop(room, None)
        try:
            if fresh:
                await server.hub.subscribe(room, self)
            if server.reads is None:
                result = await server.store.get_state(room, self.sub, msg.since)
                missed_json = None
            else:
                read = await self._shared_read(msg, replay)
                if isinstance(read, str):  # the replay gate refused the read
                    self._pending.pop(room, None)
                    server.hub.unsubscribe(room, self)
                    return self._replay_refused(read)
                result, missed_json = read
                result = replace(result, session=await server.store.read_session(room, self.sub))
            cost += len(result.missed)
        except BaseException:
            self._pending.pop(room, None)
            server.hub.unsubscribe(room, self)
            raise
        finally:
            budget.charge(self.sub, cost - most)
        region = server.region.name
        if missed_json is None:
            if len(result.missed) > REPLAY_YIELD:
                await asyncio.sleep(0)  # let others' messages through between read and encode
            missed = [Update(room, e.state, e.position, region) for e in result.missed]
        else:
            missed = []
        self._send(
            encode_state(
                region=region, room=room, state=result.state, user=result.session,
                position=result.position, recovered=result.recovered, missed=missed,
                missed_json=missed_json,
            )
        )  # fmt: skip
        seen = offset_key(result.position.offset)
        for key, text in self._pending.pop(room):
            if key > seen:
                seen = key
                self._send(text)
        self._seen[room] = seen
        if msg.since is not None:
            server.metrics.replays.labels(
                "recovered" if result.recovered else result.reason or "not_recovered"
            ).inc()
        return "ok"

    async def _shared_read(self, msg: GetState, replay: bool) -> _Read:
        """The room's part of the state from `msg.since`: a read of this room from this
        position in flight, else a read of its own that identical requests may share;
        a replay's read takes a place of the replay gate (or is refused: the reason).

        A shared read may have reached Redis before this connection subscribed (hence
        before the hub's cursor it subscribed at); if its position is older than that
        cursor, the updates between were delivered to others but not here, so it is
        read again, by a flight started after the cursor was taken (later ones share it).
        """
        server = self.server
        reads = server.reads
        assert reads is not None
        key = (msg.room, msg.since)
        floor = server.hub.cursor(msg.room)
        after = reads.sequence  # a flight started from now on reads at or after `floor`

        def work() -> Awaitable[_Read]:
            return _read_room(server, msg.room, msg.since, gated=replay)

        flight = reads.run(key, work)
        shared = flight.sequence <= after  # begun by someone else (else: by this call)
        read = await flight.result()
        labels = server.metrics.state_reads
        if isinstance(read, str):
            return read
        if floor is not None and offset_key(read[0].position.offset) < offset_key(floor):
            labels.labels("again").inc()
            return await reads.run(key, work, after=after).result()
        labels.labels("shared" if shared else "redis").inc()
        return read

    async def _bid(self, msg: Bid) -> str:
        server = self.server
        refusal = _shed(server, "bid")
        if refusal is not None:
            # Before the store: a loop this late answers nobody in time, the canary
            # included; the client retries the bid, with the same id, after its delay.
            self._send(encode_error(ErrorCode.UNAVAILABLE, refusal.message, msg.id))
            return "overloaded"
        epoch = server.epoch.value
        if epoch is None:
            epoch = await server.epoch.refresh()
        if epoch is None:
            self._send(
                encode_error(ErrorCode.UNAVAILABLE, "the writer's epoch is unknown; retry", msg.id)
            )
            return "unavailable"
        failover = server.config.failover
        sync = failover.replication == "sync"
        result = await server.store.bid(
            msg.room, self.sub, msg.amount, msg.id, epoch=epoch,
            wait_timeout=failover.sync_timeout, sync=server.sync_rule if sync else None,
        )  # fmt: skip
        if result.reason == Reason.STALE_EPOCH:
            # Fenced: this server's idea of the writer is out of date. Nothing changed;
            # the client retries with the same id once the server has caught up.
            await server.epoch.refresh()
            self._send(encode_error(ErrorCode.UNAVAILABLE, "the writer changed; retry", msg.id))
            return "fenced"
        outcome = "accepted" if result.accepted else "rejected"
        if sync and result.accepted:
            verdict = result.sync
            if verdict is not None and verdict.replicated:
                server.metrics.sync_replication.labels("replicated").inc()
            elif failover.replica_down == "reject":
                # Applied on the writer but not yet in a second failure domain (store.sync):
                # do not promise it. The client retries with the same id; the retry is
                # acknowledged once the replicas have it.
                server.metrics.sync_replication.labels("rejected").inc()
                why = verdict.detail if verdict is not None else "no replication verdict"
                self._send(
                    encode_error(
                        ErrorCode.UNAVAILABLE, f"not yet replicated ({why}); retry", msg.id
                    )
                )
                return "unreplicated"
            else:
                server.metrics.sync_replication.labels("degraded").inc()
                server.unreplicated_acks += 1
                outcome = "accepted_async"
        self._send(
            encode_ack(
                request_id=msg.id, room=msg.room, accepted=result.accepted,
                reason=result.reason, position=result.position, region=server.region.name,
                state=result.state,
            )
        )  # fmt: skip
        return outcome


async def _read_room(
    server: ZoneServer, room: str, since: Position | None, *, gated: bool
) -> _Read:
    """One read of a room from a position, with its `missed` encoded once for everyone
    who shares it (a flight of ``server.reads``). A replay's (`gated`) first takes a
    place of the process's replay gate, and gives it back once encoded; refused, the
    reason is every sharer's answer."""
    if gated:
        denied = await server.replays.enter()
        if denied is not None:
            return denied
    try:
        result = await server.store.read_room(room, since)
        if len(result.missed) > REPLAY_YIELD:
            await asyncio.sleep(0)  # let others' messages through between read and encode
        region = server.region.name
        missed = encode_missed(Update(room, e.state, e.position, region) for e in result.missed)
    finally:
        if gated:
            server.replays.leave()
    return result, missed


_Read = tuple[StateResult, str] | Denied
"""A shared read: the room's state and its `missed` encoded, or why the gate refused it."""

_STORE_ANSWERED = frozenset({"accepted", "rejected", "unreplicated", "accepted_async"})
"""The outcomes of a bid the writer's store answered: they prove the backend works."""

_ACTIONS: dict[type[Any], str] = {
    Heartbeat: "heartbeat", GetState: "getState", Bid: "bid", Probe: "probe",
    TicketRequest: "ticket",
}  # fmt: skip
_NO_CLAIMS: Mapping[str, Any] = MappingProxyType({})
_DEMO_CARRY: Mapping[str, bool] = MappingProxyType({DEMO_CLAIM: True})
