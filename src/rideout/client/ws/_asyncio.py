"""The asyncio driver: sockets, timers and tasks around the sans-I/O core."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import logging
import math
import random
import time
import uuid
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final, Literal, TypeAlias

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus
from websockets.http11 import Response

from rideout import __version__
from rideout._validate import choice, count, text
from rideout.client.errors import ClientError
from rideout.client.resolve import (
    CachingResolver,
    NameserverResolver,
    ResolutionError,
    Resolved,
    Resolver,
)
from rideout.client.ws._core import ClientCore, Feedback, Room, order_addresses
from rideout.client.ws._deadline import LazyDeadline
from rideout.client.ws._errors import AllReconnectsFailed, ClientClosed
from rideout.client.ws._events import (
    Acked,
    Cause,
    Event,
    GaveUp,
    HeartbeatFailed,
    ReconnectScheduled,
    RegionChanged,
)
from rideout.client.ws._metrics import AuctionClientMetrics
from rideout.client.ws._planner import ReconnectPlanner, StopReconnecting
from rideout.client.ws._settings import ClientSettings
from rideout.client.ws._stats import ClientStats
from rideout.protocol import parse_retry_after

if TYPE_CHECKING:
    from rideout.config import Config

__all__ = ["AuctionClient", "EventStream", "TokenProvider"]

log = logging.getLogger("rideout.client.ws")

TokenProvider: TypeAlias = Callable[[], "str | Awaitable[str]"]
"""Returns the access token (sync or async); called on every connect, so it can refresh."""

_USER_AGENT: Final = f"rideout/{__version__} (rideout.client.ws)"
_END: Final = object()


class EventStream:
    """One reader's view of the events: ``async for event in stream``.

    Receives every event emitted after it was created; holds at most ``maxsize``
    (dropping the oldest, counted in ``stats.events_dropped``). Ends when the client
    stops or gives up (after the :class:`GaveUp` event).
    """

    def __init__(self, client: AuctionClient, maxsize: int) -> None:
        self._client = client
        self._items: deque[object] = deque()
        self._maxsize = maxsize
        self._wakeup = asyncio.Event()
        self._closed = False
        client._streams.add(self)
        if client._finished:
            self._push(_END)

    def _push(self, item: object) -> None:
        if self._closed:
            return
        if item is not _END and len(self._items) >= self._maxsize:
            self._items.popleft()
            self._client.stats.events_dropped += 1
        self._items.append(item)
        self._wakeup.set()

    def __aiter__(self) -> EventStream:
        return self

    async def __anext__(self) -> Event:
        while not self._items:
            if self._closed:
                raise StopAsyncIteration
            self._wakeup.clear()
            await self._wakeup.wait()
        item = self._items.popleft()
        if item is _END:
            self.close()
            raise StopAsyncIteration
        return item  # type: ignore[return-value]

    def close(self) -> None:
        """Stop receiving events."""
        self._closed = True
        self._items.clear()
        self._client._streams.discard(self)
        self._wakeup.set()

    async def aclose(self) -> None:
        self.close()


@dataclass(frozen=True, slots=True)
class _ConnectResult:
    """How one connection attempt (or connection) ended."""

    cause: Cause
    code: int | None = None
    reason: str = ""
    address: str = ""
    detail: str = ""
    opened: bool = False
    retry_after: float | None = None  # what a server that refused the upgrade asked for

    def describe(self) -> str:
        return f"{self.cause.value}: {self.detail}" if self.detail else self.cause.value


class AuctionClient:
    """The asyncio driver: resolve, connect, watch, restore, reconnect (see the package doc).

    ``name`` is the app domain, resolved through ``resolver`` on every connect;
    ``port`` the app servers' port; ``token`` an access token or a provider (sync or
    async) called on every connect; ``rooms`` the rooms to follow from the start.
    ``sleep``, ``clock`` and ``rng`` drive the reconnect schedule (tests record the
    delays instead of waiting); ``on_event`` is called synchronously with every event;
    ``metrics`` (one :class:`AuctionClientMetrics`, shared by any number of clients)
    counts in Prometheus.

    Use ``async with client:`` (the connection loop runs in a background task, stopped
    cleanly on exit; if it gave up, :class:`AllReconnectsFailed` is raised on exit) or
    ``await client.run()`` in the foreground (returns after :meth:`stop`).
    """

    def __init__(
        self,
        name: str,
        *,
        port: int,
        token: str | TokenProvider,
        resolver: Resolver,
        rooms: Iterable[str] = (),
        settings: ClientSettings | None = None,
        scheme: Literal["ws", "wss"] = "ws",
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
        on_event: Callable[[Event], object] | None = None,
        metrics: AuctionClientMetrics | None = None,
    ) -> None:
        self.name = text("name", name)
        self.port = count("port", port, low=1, high=65535)
        self.scheme = choice("scheme", scheme, ("ws", "wss"))
        self.settings = settings if settings is not None else ClientSettings()
        self._token = token
        self._resolver = resolver
        self._sleep = sleep
        self._clock = clock
        self._on_event = on_event
        self._core = ClientCore(self.settings, rooms=rooms, rng=rng)
        self._planner = ReconnectPlanner(self.settings, rng=rng, stats=self._core.stats)
        self._metrics = metrics
        self._streams: set[EventStream] = set()
        self._waiters: dict[str, list[asyncio.Future[Acked]]] = {}
        self._ws: ClientConnection | None = None
        self._hung_up: Cause | None = None  # why the client closed the open connection
        self._avoid: set[str] = set()
        # Its own generator: the reconnect schedule's draws stay those of `rng`.
        self._shuffle = random.Random() if self.settings.shuffle_addresses else None
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self._finished = False
        self._error: BaseException | None = None
        self._ready = asyncio.Event()

    @classmethod
    def from_config(
        cls,
        config: Config,
        *,
        token: str | TokenProvider,
        resolver: Resolver | None = None,
        settings: ClientSettings | None = None,
        **kwargs: Any,
    ) -> AuctionClient:
        """A client for a rideout deployment: its app domain and port, resolved through
        the control plane's DNS server (cached for the answers' TTL) unless ``resolver``
        is given, with :meth:`ClientSettings.from_config` unless ``settings`` is given."""
        if resolver is None:
            cp = config.control_plane
            resolver = CachingResolver(NameserverResolver(cp.address, cp.dns_port))
        return cls(
            config.app_domain,
            port=config.app_port,
            token=token,
            resolver=resolver,
            settings=settings if settings is not None else ClientSettings.from_config(config),
            **kwargs,
        )

    def __repr__(self) -> str:
        address = self.address
        state = "connected to " + address if address else "disconnected"
        return f"<AuctionClient {self.name}:{self.port} {state} region={self.region}>"

    # ------------------------------------------------------------------ views

    @property
    def region(self) -> str | None:
        """The serving region, as the last state, update or ack said (None until one has)."""
        return self._core.region

    @property
    def address(self) -> str | None:
        """The address of the open connection, None when disconnected."""
        return self._core.address

    @property
    def connected(self) -> bool:
        """Whether a WebSocket is open."""
        return self._ws is not None

    @property
    def ready(self) -> bool:
        """Connected, and every followed room restored: bids go out at once."""
        return self._core.ready

    @property
    def running(self) -> bool:
        """Whether the connection loop is running."""
        return self._task is not None and not self._task.done()

    @property
    def error(self) -> BaseException | None:
        """What ended the connection loop: :class:`AllReconnectsFailed`, or an
        unexpected error (a bug, logged when it happens); None while it runs and when
        :meth:`stop` ended it."""
        return self._error

    @property
    def rooms(self) -> Mapping[str, Room]:
        """Every followed room: its state, position, region and last restore."""
        return self._core.rooms

    @property
    def disconnected_for(self) -> float:
        """Seconds since the last healthy connection was lost (0 while healthy)."""
        return self._planner.disconnected_for(self._clock())

    @property
    def pending_bids(self) -> int:
        """Bids awaiting their ack."""
        return len(self._core.bids)

    @property
    def stats(self) -> ClientStats:
        """Counters since the client was created (kept by the core and the planner)."""
        return self._core.stats

    @property
    def core(self) -> ClientCore:
        """The sans-I/O decision logic (for inspection)."""
        return self._core

    @property
    def planner(self) -> ReconnectPlanner:
        """The reconnect schedule (for inspection)."""
        return self._planner

    # ------------------------------------------------------------------ actions

    async def follow(self, room: str) -> None:
        """Follow ``room``: its state now (if connected) and on every reconnect."""
        await self._apply(self._core.follow(room, self._loop_time()))

    def unfollow(self, room: str) -> None:
        """Stop following ``room``."""
        self._core.unfollow(room)

    async def bid(self, room: str, amount: int, id: str | None = None) -> str:
        """Bid; returns the request id (a uuid4 unless ``id`` is given) at once.

        Sent now when the connection is ready, else queued for the next one. The
        outcome arrives as an :class:`Acked` event. Raises :class:`QueueFull`,
        ValueError for a bad room, amount or id (or an id already pending),
        :class:`AllReconnectsFailed` / :class:`ClientClosed` once the client has ended.
        """
        self._check_open()
        request_id = id if id is not None else str(uuid.uuid4())
        await self._apply(self._core.submit_bid(room, amount, request_id, self._loop_time()))
        return request_id

    async def bid_and_wait(
        self, room: str, amount: int, id: str | None = None, *, timeout: float | None = None
    ) -> Acked:
        """Bid and wait for its :class:`Acked` (``accepted`` may be False).

        After ``timeout`` seconds, TimeoutError; the bid stays pending (it may still
        be applied, exactly once). :class:`ClientClosed` if the client stops first.
        """
        self._check_open()
        request_id = id if id is not None else str(uuid.uuid4())
        future: asyncio.Future[Acked] = asyncio.get_running_loop().create_future()
        feedback = self._core.submit_bid(room, amount, request_id, self._loop_time())
        self._waiters.setdefault(request_id, []).append(future)
        try:
            await self._apply(feedback)
            async with asyncio.timeout(timeout):
                return await asyncio.shield(future)
        finally:
            waiters = self._waiters.get(request_id, [])
            if future in waiters:
                waiters.remove(future)
                if not waiters:
                    del self._waiters[request_id]

    def events(self, maxsize: int | None = None) -> EventStream:
        """A new stream of the events emitted from now on (see :class:`EventStream`)."""
        return EventStream(self, maxsize or self.settings.event_buffer)

    async def wait_ready(self, timeout: float | None = None) -> None:
        """Wait until the connection is open and every followed room restored."""
        async with asyncio.timeout(timeout):
            while not self._core.ready:
                if self._finished:
                    raise self._end_error()
                self._ready.clear()
                await self._ready.wait()

    # ------------------------------------------------------------------ lifecycle

    async def __aenter__(self) -> AuctionClient:
        self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()
        if exc_type is None and self._error is not None:
            raise self._error

    def start(self) -> None:
        """Start the connection loop in a background task."""
        if self._task is not None:
            raise RuntimeError("this AuctionClient was already started")
        self._task = asyncio.create_task(self._main(), name=f"rideout.client.ws:{self.name}")

    async def run(self) -> None:
        """Run the connection loop in the foreground until :meth:`stop`.

        Raises :class:`AllReconnectsFailed` when ``max_attempts`` or ``max_disconnected``
        is reached.
        """
        self.start()
        assert self._task is not None
        task = self._task
        try:
            await task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if task.cancelled() and self._stopping and not (current and current.cancelling()):
                return
            raise
        finally:
            if not task.done():
                task.cancel()
                await asyncio.wait({task})

    async def stop(self) -> None:
        """Stop: close the connection, end the loop and the event streams.

        Bids still pending stay unacknowledged: their waiters get :class:`ClientClosed`.
        """
        self._stopping = True
        task = self._task
        if task is None:
            self._finish(None)
            return
        if not task.done():
            task.cancel()
            await asyncio.wait({task})
        if not task.cancelled():
            task.exception()  # retrieved: stored in self._error, raised by __aexit__

    async def aclose(self) -> None:
        """Same as :meth:`stop`."""
        await self.stop()

    # ------------------------------------------------------------------ the loop

    async def _main(self) -> None:
        error: BaseException | None = None
        try:
            await self._loop()
        except BaseException as exc:
            error = exc
            if isinstance(exc, Exception) and not isinstance(exc, AllReconnectsFailed):
                # Raised again only by stop() or __aexit__: a client started in the
                # background would otherwise go quiet with nobody told.
                log.error("the connection loop for %s failed", self.name, exc_info=exc)
            raise
        finally:
            self._finish(error)

    async def _loop(self) -> None:
        self._planner.start(self._clock())
        while True:
            result = await self._attempt()
            decision = self._planner.lost(
                self._clock(), result.cause, result.code, result.reason, result.retry_after
            )
            detail = result.describe()
            if isinstance(decision, StopReconnecting):
                event = GaveUp(
                    decision.reason, decision.attempts, decision.disconnected_for, detail
                )
                log.error(
                    "giving up on %s after %d reconnect attempts (%s); last failure: %s",
                    self.name,
                    decision.attempts,
                    decision.reason,
                    detail,
                )
                self._emit(event)
                raise AllReconnectsFailed(event, self.name)
            log.info(
                "reconnect attempt %d to %s in %.3f s (after %s)",
                decision.attempt,
                self.name,
                decision.delay,
                detail,
            )
            self._emit(
                ReconnectScheduled(decision.attempt, decision.delay, result.cause, result.code)
            )
            await self._sleep(decision.delay)

    async def _resolve(self) -> Resolved | _ConnectResult:
        try:
            return await self._resolver.resolve(self.name)
        except ResolutionError as exc:
            log.warning("cannot resolve %s: %s", self.name, exc)
            return _ConnectResult(Cause.RESOLVE_FAILED, detail=str(exc))

    async def _attempt(self) -> _ConnectResult:
        resolved = await self._resolve()
        if isinstance(resolved, _ConnectResult):
            return resolved
        expires = self._clock() + resolved.ttl
        failures: list[str] = []
        asked: list[float] = []  # the Retry-After of each address that refused
        tried: set[str] = set()
        order = list(order_addresses(resolved.addresses, self._avoid, self._shuffle))
        while order:
            address = order.pop(0)
            tried.add(address)
            opened = await self._open(address)
            if not isinstance(opened, _ConnectResult):
                return await self._serve(opened, address)
            log.warning("cannot connect to %s (%s): %s", address, self.name, opened.detail)
            failures.append(opened.detail)
            if opened.retry_after is not None:
                asked.append(opened.retry_after)
            self._avoid.add(address)
            if opened.cause in (Cause.AUTH_REJECTED, Cause.TOKEN_FAILED):
                return opened
            if order and self._clock() >= expires:
                # The answer's TTL ran out while that address failed (a frozen region
                # completes TCP handshakes and never answers the upgrade: an open timeout
                # each): ask again rather than try the rest of a stale answer. If asking
                # fails, the rest is still worth a try.
                fresh = await self._resolve()
                if not isinstance(fresh, _ConnectResult):
                    expires = self._clock() + fresh.ttl
                    ordered = order_addresses(fresh.addresses, self._avoid, self._shuffle)
                    order = [a for a in ordered if a not in tried]
        # Every address of the answer refused: it is stale (a region that died before
        # DNS moved). A caching resolver forgets it, so that the next attempt asks
        # again instead of retrying dead addresses for the rest of the answer's TTL.
        forget = getattr(self._resolver, "invalidate", None)
        if callable(forget):
            forget(self.name)
        return _ConnectResult(
            Cause.CONNECT_FAILED,
            detail="; ".join(failures) or "no address",
            retry_after=max(asked, default=None),
        )

    async def _get_token(self) -> str:
        token = self._token
        if isinstance(token, str):
            return token
        value = token()
        if inspect.isawaitable(value):
            value = await value
        if not isinstance(value, str) or not value:
            raise TypeError(f"the token provider returned {type(value).__name__}, not a token")
        return value

    async def _open(self, address: str) -> ClientConnection | _ConnectResult:
        uri = f"{self.scheme}://{address}:{self.port}{self.settings.path}"
        # wss: verify the certificate against the name, not the address.
        tls: dict[str, Any] = {"server_hostname": self.name} if self.scheme == "wss" else {}
        refreshed = False
        # A resumption ticket the last connection gave, presented instead of the token
        # (cheaper for the server to check); refused, the token is presented at once.
        ticket = self._core.resume_ticket(self._loop_time())
        while True:
            if ticket is not None:
                token = ticket
                self._core.ticket_presented()
            else:
                try:
                    token = await self._get_token()
                except Exception as exc:
                    log.exception("the token provider failed")
                    return _ConnectResult(
                        Cause.TOKEN_FAILED, address=address, detail=f"token: {exc!r}"
                    )
            try:
                return await connect(
                    uri,
                    additional_headers={"Authorization": f"Bearer {token}"},
                    compression=self.settings.compression,
                    ping_interval=None,
                    open_timeout=self.settings.open_timeout,
                    close_timeout=self.settings.close_timeout,
                    max_size=self.settings.max_message_size,
                    user_agent_header=_USER_AGENT,
                    proxy=None,
                    **tls,
                )
            except InvalidStatus as exc:
                status = exc.response.status_code
                detail = f"{address}: HTTP {status} {_body(exc.response.body)}".rstrip()
                if status in (401, 403):
                    if ticket is not None:
                        log.info("%s refused the resumption ticket (%s); presenting the token",
                                 address, status)  # fmt: skip
                        self._core.ticket_refused()
                        ticket = None
                        continue
                    if not refreshed:
                        refreshed = True
                        log.info(
                            "%s refused the token (%s); asking for a fresh one", address, status
                        )
                        continue
                    return _ConnectResult(Cause.AUTH_REJECTED, address=address, detail=detail)
                return _ConnectResult(
                    Cause.CONNECT_FAILED, address=address, detail=detail,
                    retry_after=_retry_after(exc.response) if status in (429, 503) else None,
                )  # fmt: skip
            except (OSError, TimeoutError, InvalidHandshake, ConnectionClosed, EOFError) as exc:
                reason = str(exc) or type(exc).__name__
                return _ConnectResult(
                    Cause.CONNECT_FAILED, address=address, detail=f"{address}: {reason}"
                )

    async def _serve(self, ws: ClientConnection, address: str) -> _ConnectResult:
        self._ws, self._hung_up = ws, None
        gap = self._planner.connected(self._clock())
        if self._metrics is not None:
            self._metrics.count_disconnected(gap)
        log.info("connected to %s (%s)", address, self.name)
        result: _ConnectResult | None = None
        try:
            result = await self._converse(ws, address)
        finally:
            self._ws = None
            self._ready.set()  # wake wait_ready() to re-check
            if result is None:  # cancelled (stop) or an unexpected error: no Disconnected
                self._core.connection_lost()
                with contextlib.suppress(Exception):
                    await ws.close(1001, "client stopped")
        lost = self._core.connection_lost(result.cause, result.code, result.reason)
        self._avoid.add(address)
        log.warning(
            "disconnected from %s (%s): %s%s",
            address,
            self.name,
            result.cause.value,
            f" (close {result.code} {result.reason})".rstrip() if result.code else "",
        )
        await self._apply(lost)
        return result

    async def _converse(self, ws: ClientConnection, address: str) -> _ConnectResult:
        """Feed the open connection's messages and timers to the core until it ends."""
        loop = asyncio.get_running_loop()
        deadline = LazyDeadline()  # one timer for many messages (see _deadline)
        try:
            await self._apply(self._core.connection_opened(loop.time(), address))
            while self._hung_up is None:
                deadline.at_most(self._core.next_wakeup())
                try:
                    data = await deadline.wait(ws.recv)
                except TimeoutError:
                    feedback = self._core.tick(loop.time())
                else:
                    feedback = self._core.receive(data, loop.time())
                await self._apply(feedback)
        except ConnectionClosed as exc:
            if self._hung_up is None:
                return _closed_by_peer(exc, address)
        finally:
            deadline.close()
        cause = self._hung_up
        assert cause is not None
        return _ConnectResult(
            cause, address=address, detail=f"{address}: {cause.value}", opened=True
        )

    async def _apply(self, feedback: Feedback) -> None:
        """Carry out what the core decided, in order: emit the events, note health and
        readiness, send the frames, close.

        The one path for every :class:`Feedback`, from the connection loop and from
        :meth:`follow` and :meth:`bid` alike. Frames for a connection that has just
        closed are dropped: the loop's next receive reports the close.
        """
        for event in feedback.events:
            self._emit(event)
        if feedback.healthy:
            self._planner.healthy(self._clock())
            self._avoid.clear()
            log.debug("connection to %s is healthy", self._core.address)
        if feedback.ready:
            self._ready.set()
        ws = self._ws
        if ws is None:
            return
        if feedback.send:
            with contextlib.suppress(ConnectionClosed):
                for frame in feedback.send:
                    await ws.send(frame)
        if feedback.close is not None and self._hung_up is None:
            self._hung_up = feedback.close
            await self._hang_up(ws, feedback.close)

    async def _hang_up(self, ws: ClientConnection, cause: Cause) -> None:
        if cause is Cause.HEARTBEAT_TIMEOUT:
            # The peer is unresponsive by definition: do not wait for a close handshake.
            ws.transport.abort()
            with contextlib.suppress(Exception):
                async with asyncio.timeout(self.settings.close_timeout):
                    await ws.wait_closed()
        else:
            with contextlib.suppress(Exception):
                await ws.close(1000, cause.value)

    # ------------------------------------------------------------------ events

    def _emit(self, event: Event) -> None:
        if self._metrics is not None:
            self._metrics.count(event)
        if isinstance(event, Acked):
            for future in self._waiters.pop(event.id, []):
                if not future.done():
                    future.set_result(event)
        elif isinstance(event, HeartbeatFailed):
            log.warning("heartbeat failed (%d in a row): %s", event.count, event.code)
        elif isinstance(event, RegionChanged):
            log.info("serving region: %s -> %s", event.old, event.new)
        if self._on_event is not None:
            try:
                self._on_event(event)
            except Exception:
                log.exception("the on_event callback failed for %r", event)
        for stream in list(self._streams):
            stream._push(event)

    def _finish(self, error: BaseException | None) -> None:
        if self._finished:
            return
        self._finished = True
        if error is not None and not isinstance(error, asyncio.CancelledError):
            self._error = error
        failure = self._end_error()
        for futures in self._waiters.values():
            for future in futures:
                if not future.done():
                    future.set_exception(failure)
        self._waiters.clear()
        for stream in list(self._streams):
            stream._push(_END)
        self._ready.set()

    def _end_error(self) -> ClientError:
        if isinstance(self._error, AllReconnectsFailed):
            return self._error
        if self._error is not None:
            return ClientClosed(f"the client for {self.name!r} failed: {self._error!r}")
        return ClientClosed(f"the client for {self.name!r} was stopped")

    def _check_open(self) -> None:
        if self._finished or self._stopping:
            raise self._end_error()

    @staticmethod
    def _loop_time() -> float:
        try:
            return asyncio.get_running_loop().time()
        except RuntimeError:  # not in a loop yet (follow() before start): not connected
            return time.monotonic()


def _closed_by_peer(exc: ConnectionClosed, address: str) -> _ConnectResult:
    rcvd = exc.rcvd
    if rcvd is None:
        detail = f"{address}: connection lost"
        return _ConnectResult(Cause.CONNECTION_LOST, address=address, detail=detail, opened=True)
    detail = f"{address} closed {rcvd.code} {rcvd.reason}".rstrip()
    return _ConnectResult(Cause.CLOSED, rcvd.code, rcvd.reason, address, detail, opened=True)


def _retry_after(response: Response) -> float | None:
    """The seconds a refusal asks to wait: its JSON body's ``retry_after`` (rideout's,
    exact), else its ``Retry-After`` header; None when it names neither."""
    with contextlib.suppress(ValueError, AttributeError):
        value = json.loads(response.body or b"").get("retry_after")
        number = isinstance(value, int | float) and not isinstance(value, bool)
        if number and math.isfinite(value) and value >= 0:
            return float(value)
    return parse_retry_after(response.headers.get("Retry-After"))


def _body(body: bytes | bytearray | None) -> str:
    if not body:
        return ""
    snippet = body[:200].decode("utf-8", "replace")
    return " ".join(snippet.split())
