"""Transport limits every rideout server runs with: a cap on open connections, a
deadline for each request head and WebSocket upgrade, and a bound on the head's size.

uvicorn's httptools protocol closes nothing that has not sent a request yet: a silent
socket, a head sent a byte at a time (slow loris) or an upgrade that never completes
each hold a file descriptor for good, and a process has only so many (20,000 here, not
raisable). Where websockets refuses an upgrade request (a request line or header
over its limits, or no valid request at all), uvicorn's sans-I/O WebSocket protocol
answers in plain text (before 0.55 it sent nothing) and closes at once.

The two protocol classes here, subclasses of uvicorn's, fix that with one
:class:`ConnectionTable` per server: every connection is counted; one that is
*waiting* (for its request head and body, for its next request on a kept-alive
connection, or for the app to accept its upgrade) has a deadline and is closed when it
passes; and at the cap a new connection pushes out the one that has waited longest,
so a flood of silent sockets cannot keep ``/health`` or the canary out. A head larger
than :attr:`ServerLimits.max_head` (or a request target or header longer than
:attr:`ServerLimits.max_line`, or an upgrade over websockets' limits) gets 431 with a
JSON body; an unreadable one 400, as every other rideout error.
Connections that are past waiting (a request being answered, an open WebSocket) cost
nothing here: no timer per connection, one table entry while waiting.
"""

from __future__ import annotations

import asyncio
import json
import logging
import resource
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Protocol

import httptools
import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from websockets.exceptions import InvalidMessage

from rideout import _validate

if TYPE_CHECKING:
    from rideout.config import Config

__all__ = [
    "FD_HEADROOM",
    "ConnectionTable",
    "Guard",
    "GuardedConfig",
    "GuardedHttpProtocol",
    "GuardedWebSocketProtocol",
    "ServerLimits",
    "connection_cap",
]

log = logging.getLogger("rideout.serve")

FD_HEADROOM: Final = 256
"""File descriptors kept out of :func:`connection_cap` for everything that is not a
client connection: listening sockets, Redis pools, log files, the event loop's own."""


def connection_cap(wanted: int) -> int:
    """`wanted`, lowered so that the connections and :data:`FD_HEADROOM` fit the
    process's open-file limit (RLIMIT_NOFILE, soft)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return wanted
    return max(1, min(wanted, soft - FD_HEADROOM))


def raise_fd_limit() -> None:
    """Raise the soft open-file limit to the hard one (allowed without privileges)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


@dataclass(frozen=True, slots=True)
class ServerLimits:
    """The transport limits of one server process (defaults: the ``seed`` profile's
    timeout and ``[realtime]``'s connection cap)."""

    handshake_timeout: float = 10.0  # seconds a connection may wait (see the module doc)
    max_connections: int = 16384  # lowered to fit the open-file limit: connection_cap()
    max_head: int = 16384  # bytes of request line and headers
    max_line: int = 8000  # bytes of the request target, and of one header

    def __post_init__(self) -> None:
        _validate.seconds("handshake_timeout", self.handshake_timeout)
        _validate.count("max_connections", self.max_connections, low=1)
        _validate.count("max_head", self.max_head, low=256)
        # websockets refuses lines over 8,192 bytes; keep ours (plus the method and
        # version uvicorn writes around the target) under that.
        _validate.count("max_line", self.max_line, low=64, high=8100)

    @classmethod
    def from_config(cls, config: Config) -> ServerLimits:
        """An app server's limits from its deployment's configuration."""
        return cls(
            handshake_timeout=config.timing.handshake_timeout,
            max_connections=config.realtime.max_connections,
        )


class Waiting(Protocol):
    """A connection as the table sees it while it waits: something to close."""

    def give_up(self) -> None:
        """Close the connection: its deadline passed, or another needs its place."""


class ConnectionTable:
    """Open connections of one server, and the waiting ones oldest first.

    Pure bookkeeping, clock injected: the protocols report what happens
    (:meth:`opened`, :meth:`wait`, :meth:`done`, :meth:`closed`), a timer calls
    :meth:`expire`. Of the connections closed at their deadline, :attr:`expired` counts
    those that never sent a request or never had their upgrade accepted (a dead peer, a
    slow loris, a stuck app), :attr:`idle` those kept alive after a response that sent no
    next one (ordinary: every HTTP server ends idle connections).
    """

    __slots__ = (
        "_clock", "_idle", "_waiting", "count", "evicted", "expired", "idle", "limit", "refused",
        "timeout",
    )  # fmt: skip

    def __init__(self, limit: int, timeout: float, clock: Callable[[], float] = time.monotonic):
        self.limit = _validate.count("limit", limit, low=1)
        self.timeout = _validate.seconds("timeout", timeout)
        self._clock = clock
        self._waiting: OrderedDict[Waiting, float] = OrderedDict()
        self._idle: set[Waiting] = set()  # the waiting ones kept alive after a response
        self.count = 0
        self.evicted = self.expired = self.idle = self.refused = 0

    def opened(self) -> bool:
        """Count a new connection. At the cap the longest-waiting one is closed to make
        room; with none waiting, False: refuse the new one (it is not counted)."""
        if self.count >= self.limit:
            if not self._waiting:
                self.refused += 1
                return False
            oldest, _ = self._waiting.popitem(last=False)
            self._idle.discard(oldest)
            self.evicted += 1
            oldest.give_up()
        self.count += 1
        return True

    def wait(self, connection: Waiting, *, idle: bool = False) -> float:
        """`connection` waits from now (`idle`: kept alive after a response, for its next
        request); returns its deadline."""
        self._waiting.pop(connection, None)
        if idle:
            self._idle.add(connection)
        else:
            self._idle.discard(connection)
        deadline = self._waiting[connection] = self._clock() + self.timeout
        return deadline

    def requesting(self, connection: Waiting) -> None:
        """A kept-alive `connection` began its next request: no longer idle (its deadline
        stays; one that passes now is a request head that never came in)."""
        self._idle.discard(connection)

    def done(self, connection: Waiting) -> None:
        """`connection` stopped waiting (its request is in, its upgrade accepted)."""
        self._waiting.pop(connection, None)
        self._idle.discard(connection)

    def closed(self, connection: Waiting) -> None:
        """A counted connection is gone."""
        self.count -= 1
        self._waiting.pop(connection, None)
        self._idle.discard(connection)

    def expire(self) -> float | None:
        """Close every connection past its deadline; the next deadline, if any."""
        now = self._clock()
        waiting = self._waiting
        while waiting:
            connection, deadline = next(iter(waiting.items()))
            if deadline > now:
                return deadline
            del waiting[connection]
            if connection in self._idle:
                self._idle.discard(connection)
                self.idle += 1
            else:
                self.expired += 1
            connection.give_up()
        return None

    @property
    def waiting(self) -> int:
        return len(self._waiting)


class Guard:
    """One server's :class:`ConnectionTable`, the timer that expires its entries, and a
    warning (at most every :attr:`REPORT_EVERY` seconds) when it had to close any."""

    REPORT_EVERY: Final = 10.0

    def __init__(self, limits: ServerLimits) -> None:
        self.limits = limits
        self.table = ConnectionTable(
            connection_cap(limits.max_connections), limits.handshake_timeout
        )
        self._timer: asyncio.TimerHandle | None = None
        self._reported = (0, 0, 0)
        self._reported_at = 0.0

    def wait(
        self, connection: Waiting, loop: asyncio.AbstractEventLoop, *, idle: bool = False
    ) -> None:
        deadline = self.table.wait(connection, idle=idle)
        if self._timer is None:
            self._arm(loop, deadline)

    def _arm(self, loop: asyncio.AbstractEventLoop, deadline: float) -> None:
        # A little late rather than early: one timer run then closes a whole batch.
        delay = max(0.0, deadline - time.monotonic()) + 0.05
        self._timer = loop.call_later(delay, self._expire, loop)

    def _expire(self, loop: asyncio.AbstractEventLoop) -> None:
        self._timer = None
        deadline = self.table.expire()
        if deadline is not None:
            self._arm(loop, deadline)
        self._report()

    def _report(self) -> None:
        table, now = self.table, time.monotonic()
        counts = (table.expired, table.evicted, table.refused)
        if counts == self._reported or now - self._reported_at < self.REPORT_EVERY:
            return
        expired, evicted, refused = (a - b for a, b in zip(counts, self._reported, strict=True))
        log.warning(
            "closed %d connections that sent no request in %g s, pushed out %d waiting ones "
            "at the cap of %d, refused %d (%d open)",
            expired, self.limits.handshake_timeout, evicted, table.limit, refused, table.count,
        )  # fmt: skip
        self._reported, self._reported_at = counts, now


class GuardedConfig(uvicorn.Config):
    """uvicorn's Config with the :class:`Guard` its protocols share."""

    def __init__(self, app: Any, *, limits: ServerLimits, **kwargs: Any) -> None:
        super().__init__(app, http=GuardedHttpProtocol, ws=GuardedWebSocketProtocol, **kwargs)
        self.guard = Guard(limits)


def _guard_of(config: uvicorn.Config) -> Guard:
    if not isinstance(config, GuardedConfig):
        raise TypeError("the guarded protocols need a GuardedConfig (see uvicorn_config)")
    return config.guard


def _response(status: int, reason: str, message: str) -> bytes:
    body = json.dumps({"error": reason, "message": message}).encode()
    phrase = {400: "Bad Request", 431: "Request Header Fields Too Large"}.get(
        status, "Service Unavailable"
    )
    head = (
        f"HTTP/1.1 {status} {phrase}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    )
    return head.encode() + body


_BUSY: Final = _response(503, "server_busy", "this server is at its connection limit; retry later")


class _HeadTooLarge(Exception):
    pass


def _answer_and_linger(transport: asyncio.Transport, response: bytes) -> None:
    """Send a last response and half-close, then let the client close: closing at once
    with its request still unread would reset the connection, and the client could lose
    the response. The connection stays in the table, waiting, so its deadline bounds it."""
    transport.write(response)
    if transport.can_write_eof():
        transport.write_eof()
    else:  # pragma: no cover - every TCP transport can
        transport.close()


class GuardedHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, counted, with a deadline and a bounded head."""

    def __init__(self, config: uvicorn.Config, *args: Any, **kwargs: Any) -> None:
        self._guard = _guard_of(config)
        super().__init__(config, *args, **kwargs)
        self._counted = False
        self._line = self._head = 0
        self._too_large = ""
        self._refused = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if not self._guard.table.opened():
            transport.write(_BUSY)
            transport.close()
            return
        self._counted = True
        self._guard.wait(self, self.loop)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._counted:
            self._counted = False
            self._guard.table.closed(self)
        super().connection_lost(exc)

    def give_up(self) -> None:
        if not self.transport.is_closing():
            self.transport.close()

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return  # answered already: the rest is read and dropped until the client closes
        self._unset_keepalive_if_required()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            if self._should_upgrade():
                self.handle_websocket_upgrade()
            else:
                self._unsupported_upgrade_warning()
        except httptools.HttpParserError:
            if self._too_large:
                self._refuse(431, "request_too_large", self._too_large)
            else:
                self._refuse(400, "bad_request", "not a valid HTTP/1.1 request")

    def _refuse(self, status: int, reason: str, message: str) -> None:
        self._refused = True
        if not self.transport.is_closing():
            _answer_and_linger(self.transport, _response(status, reason, message))

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._guard.table.requesting(self)
        self._line = self._head = 0

    def on_url(self, url: bytes) -> None:
        self._line += len(url)
        self._head += len(url)
        limits = self._guard.limits
        if self._line > limits.max_line:
            self._too_large = f"the request target is longer than {limits.max_line} bytes"
            raise _HeadTooLarge
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        # httptools may hand over one header in pieces; a piece counts as a header
        # of its own here, which is stricter, never looser.
        size = len(name) + len(value)
        self._head += size + 4
        limits = self._guard.limits
        if size > limits.max_line or self._head > limits.max_head:
            self._too_large = f"the request head is larger than {limits.max_head} bytes"
            if size > limits.max_line:
                self._too_large = f"a request header is longer than {limits.max_line} bytes"
            raise _HeadTooLarge
        super().on_header(name, value)

    def on_message_complete(self) -> None:
        if not (self.parser.should_upgrade() and self._should_upgrade()):
            self._guard.table.done(self)
        super().on_message_complete()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing() and self._counted:
            # Kept alive: the next request has a deadline (an idle connection ended at it
            # is no warning: rideout's own clients drop theirs sooner, rideout._http).
            self._guard.wait(self, self.loop, idle=True)

    def handle_websocket_upgrade(self) -> None:
        # The WebSocket protocol takes the transport, and the count with it.
        self._guard.table.done(self)
        self._counted = False
        super().handle_websocket_upgrade()


class GuardedWebSocketProtocol(WebSocketsSansIOProtocol):
    """uvicorn's sans-I/O WebSocket protocol: counted, with a deadline for the upgrade,
    and a JSON answer where websockets refuses the handshake."""

    def __init__(self, config: uvicorn.Config, *args: Any, **kwargs: Any) -> None:
        self._guard = _guard_of(config)
        super().__init__(config, *args, **kwargs)
        self._refused = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self._guard.wait(self, self.loop)

    def connection_lost(self, exc: Exception | None) -> None:
        self._guard.table.closed(self)
        super().connection_lost(exc)

    def give_up(self) -> None:
        if self.transport.is_closing():
            return
        if not (self.handshake_complete or self._refused):
            self.transport.write(
                _response(503, "handshake_timeout", "the upgrade did not complete in time")
            )
        self.transport.close()

    def start_keepalive(self) -> None:
        # Called once the app has accepted the upgrade: no longer waiting.
        self._guard.table.done(self)
        super().start_keepalive()

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return  # answered already: the rest is dropped until the client closes
        super().data_received(data)

    def handle_handshake_exception(self) -> None:
        # uvicorn (>= 0.55) calls this when websockets could not parse the upgrade
        # request. It would send websockets' plain-text answer (or a 400) and close at
        # once; rideout's answers are JSON, and the connection lingers so that a client
        # still sending loses no byte of the answer.
        self.handshake_complete = self.close_sent = True
        self._refused = True
        if self.transport.is_closing():
            return
        if isinstance(self.conn.handshake_exc, InvalidMessage):
            answer = _response(400, "bad_request", "not a valid WebSocket request")
        else:
            answer = _response(431, "request_too_large", str(self.conn.handshake_exc))
        _answer_and_linger(self.transport, answer)
