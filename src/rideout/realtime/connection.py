"""One WebSocket connection: the ``$connect`` authorizer, routing on ``action``, and a
bounded send queue.

Everything a connection sends goes through its queue, so replies and room updates
leave in the order they were produced. A consumer that lets the queue fill is closed
with 1013 and a retry hint; it recovers what it missed with ``getState`` + ``since``.
State lives in Redis, keyed by room and by the token's ``sub``: nothing here survives
the connection, and nothing needs to.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from starlette.responses import JSONResponse
from starlette.websockets import WebSocket, WebSocketDisconnect

from rideout.auth import AuthError, Claims, extract_token
from rideout.protocol import (
    MESSAGE_TOO_BIG,
    PONG,
    Bid,
    CloseCode,
    ErrorCode,
    GetState,
    Heartbeat,
    ProtocolError,
    Update,
    encode_ack,
    encode_error,
    encode_state,
    overloaded_reason,
    parse_client_message,
)
from rideout.realtime.hub import OffsetKey, offset_key
from rideout.store.auction import NotWriter, Reason, StoreCorrupt, StoreError

if TYPE_CHECKING:
    from rideout.realtime.app import ZoneServer

__all__ = ["TokenBucket", "websocket_endpoint"]

log = logging.getLogger("rideout.realtime")

_SENTINEL = object()


class TokenBucket:
    """`rate` tokens per second, at most `burst` at once. Pure: the clock is injected."""

    __slots__ = ("_clock", "_last", "_tokens", "burst", "rate")

    def __init__(
        self, rate: float, burst: int, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.rate = rate
        self.burst = burst
        self._clock = clock
        self._tokens = float(burst)
        self._last = clock()

    def take(self) -> bool:
        """Spend one token if there is one."""
        now = self._clock()
        self._tokens = min(self.burst, self._tokens + (now - self._last) * self.rate)
        self._last = now
        if self._tokens >= 1:
            self._tokens -= 1
            return True
        return False


async def websocket_endpoint(websocket: WebSocket) -> None:
    """``GET /ws``: authorize before the upgrade, then serve the connection."""
    server: ZoneServer = websocket.app.state.zone
    if server.mode == "draining":
        return await _deny(
            websocket, server, 503, "draining", "this zone is draining; reconnect elsewhere"
        )
    origin = websocket.headers.get("origin")
    if origin is not None and not server.origin_allowed(origin):
        return await _deny(
            websocket, server, 403, "origin_not_allowed", f"origin {origin!r} is not allowed"
        )
    try:
        bearer = extract_token(websocket.scope.get("query_string", b""), websocket.scope["headers"])
        claims = server.verifier.verify(bearer.token)
    except AuthError as exc:
        return await _deny(websocket, server, exc.status, exc.reason, exc.message)
    await websocket.accept(subprotocol=bearer.subprotocol)
    server.metrics.handshakes.labels("accepted").inc()
    await Connection(websocket, claims, server).serve()


async def _deny(
    websocket: WebSocket, server: ZoneServer, status: int, reason: str, message: str
) -> None:
    server.metrics.handshakes.labels(reason).inc()
    await websocket.send_denial_response(
        JSONResponse({"error": reason, "message": message}, status_code=status)
    )


class Connection:
    """A connected, authenticated client (implements the hub's Subscriber)."""

    def __init__(self, websocket: WebSocket, claims: Claims, server: ZoneServer) -> None:
        self.websocket = websocket
        self.claims = claims
        self.sub = claims.sub
        self.server = server
        realtime = server.config.realtime
        self._limit = realtime.send_queue
        self._bucket = TokenBucket(realtime.rate_limit, realtime.rate_burst)
        self._queue: deque[str | object] = deque()
        self._wakeup = asyncio.Event()
        self._close: tuple[int, str] | None = None
        # Per room: the newest offset this client has (None while its state is being read),
        # and the updates that arrived meanwhile.
        self._seen: dict[str, OffsetKey] = {}
        self._pending: dict[str, list[tuple[OffsetKey, str]]] = {}

    # ------------------------------------------------------------------ sending

    def _send(self, text: str) -> None:
        if self._close is not None:
            return
        if len(self._queue) >= self._limit:
            self._fell_behind()
            return
        self._queue.append(text)
        self._wakeup.set()

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
        self._queue.clear()
        self._queue.append(_SENTINEL)
        self._wakeup.set()

    def deliver(self, room: str, key: OffsetKey, text: str) -> None:
        """From the hub: queue an update unless this client already has it."""
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

    async def _write(self) -> None:
        while True:
            while not self._queue:
                self._wakeup.clear()
                await self._wakeup.wait()
            item = self._queue.popleft()
            if item is _SENTINEL:
                assert self._close is not None
                code, reason = self._close
                self.server.metrics.closes.labels(str(code)).inc()
                with contextlib.suppress(RuntimeError, OSError):
                    await self.websocket.close(code, reason)
                return
            assert isinstance(item, str)
            await self.websocket.send_text(item)

    # ------------------------------------------------------------------ serving

    async def serve(self) -> None:
        server = self.server
        server.connections.add(self)
        server.metrics.connections.inc()
        loop = asyncio.get_running_loop()
        expiry = loop.call_later(
            max(0.0, self.claims.exp - time.time()),
            self.close_soon,
            CloseCode.POLICY,
            "token expired",
        )
        writer = asyncio.create_task(self._write())
        reader = asyncio.create_task(self._read())
        try:
            done, _ = await asyncio.wait({reader, writer}, return_when=asyncio.FIRST_COMPLETED)
            if writer in done and self._close is not None:
                # We closed: give the client a moment to answer the close frame.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(reader), 2.0)
        finally:
            expiry.cancel()
            for task in (reader, writer):
                task.cancel()
            for task in (reader, writer):
                with contextlib.suppress(
                    asyncio.CancelledError, WebSocketDisconnect, RuntimeError, OSError
                ):
                    await task
            for room in list(self._seen) + list(self._pending):
                server.hub.unsubscribe(room, self)
            server.connections.discard(self)
            server.metrics.connections.dec()

    async def _read(self) -> None:
        while True:
            message = await self.websocket.receive()
            if message["type"] == "websocket.disconnect":
                return
            data = message.get("text")
            if data is None:
                data = message.get("bytes") or b""
            await self.handle(data)
            if self._close is not None:
                return

    async def handle(self, data: str | bytes) -> None:
        """Answer one client message (never raises for bad input)."""
        server = self.server
        metrics = server.metrics
        try:
            msg = parse_client_message(data, max_size=server.config.realtime.max_message_size)
        except ProtocolError as exc:
            if exc.code == MESSAGE_TOO_BIG:
                metrics.messages.labels("invalid", "too_big").inc()
                self.close_soon(CloseCode.MESSAGE_TOO_BIG, "message too big")
            else:
                metrics.messages.labels("invalid", "bad_request").inc()
                self._send(encode_error(ErrorCode.BAD_REQUEST, exc.message, exc.request_id))
            return
        action = _ACTIONS[type(msg)]
        request_id = msg.id if isinstance(msg, Bid) else None
        if not self._bucket.take():
            metrics.messages.labels(action, "throttled").inc()
            rate = server.config.realtime.rate_limit
            self._send(
                encode_error(
                    ErrorCode.THROTTLED, f"more than {rate:g} messages per second", request_id
                )
            )
            return
        if server.mode == "degraded":
            metrics.messages.labels(action, "unavailable").inc()
            self._send(
                encode_error(ErrorCode.UNAVAILABLE, "this zone's backend is degraded", request_id)
            )
            return
        try:
            if isinstance(msg, Heartbeat):
                self._send(PONG)
                outcome = "ok"
            elif isinstance(msg, GetState):
                outcome = await self._get_state(msg)
            else:
                outcome = await self._bid(msg)
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
            self._send(
                encode_error(
                    ErrorCode.UNAVAILABLE, "the state store is unavailable; retry", request_id
                )
            )
        metrics.messages.labels(action, outcome).inc()

    async def _get_state(self, msg: GetState) -> str:
        room = msg.room
        server = self.server
        # Subscribe first, then read: the hub's cursor is then at or before the state
        # we send, so no later change can slip between the two.
        fresh = room not in self._seen and room not in self._pending
        self._pending[room] = []
        self._seen.pop(room, None)
        try:
            if fresh:
                await server.hub.subscribe(room, self)
            result = await server.store.get_state(room, self.sub, msg.since)
        except BaseException:
            self._pending.pop(room, None)
            server.hub.unsubscribe(room, self)
            raise
        region = server.region.name
        missed = [Update(room, e.state, e.position, region) for e in result.missed]
        self._send(
            encode_state(
                region=region, room=room, state=result.state, user=result.session,
                position=result.position, recovered=result.recovered, missed=missed,
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

    async def _bid(self, msg: Bid) -> str:
        server = self.server
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
            wait_replicas=1 if sync else 0, wait_timeout=failover.sync_timeout,
        )  # fmt: skip
        if result.reason == Reason.STALE_EPOCH:
            # Fenced: this server's idea of the writer is out of date. Nothing changed;
            # the client retries with the same id once the server has caught up.
            await server.epoch.refresh()
            self._send(encode_error(ErrorCode.UNAVAILABLE, "the writer changed; retry", msg.id))
            return "fenced"
        outcome = "accepted" if result.accepted else "rejected"
        if sync and result.accepted:
            if (result.replicas or 0) >= 1:
                server.metrics.sync_replication.labels("replicated").inc()
            elif failover.replica_down == "reject":
                # Applied on the writer but not yet in the other region: do not promise
                # it. The client retries with the same id; the retry is acknowledged
                # once the replica has it.
                server.metrics.sync_replication.labels("rejected").inc()
                self._send(
                    encode_error(
                        ErrorCode.UNAVAILABLE,
                        "not yet replicated to the other region; retry",
                        msg.id,
                    )
                )
                return "unreplicated"
            else:
                server.metrics.sync_replication.labels("degraded").inc()
                server.unreplicated_acks += 1
                outcome = "accepted_async"
        self._send(
            encode_ack(
                request_id=msg.id, accepted=result.accepted, reason=result.reason,
                position=result.position, region=server.region.name,
            )
        )  # fmt: skip
        return outcome


_ACTIONS: dict[type[Any], str] = {Heartbeat: "heartbeat", GetState: "getState", Bid: "bid"}
