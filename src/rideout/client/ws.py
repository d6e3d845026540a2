"""A resilient WebSocket client for the auction: the seed's client side of failover.

The client connects to a *name*, never to a fixed address. On every (re)connect it
resolves the app domain through the configured resolver (a
:class:`~rideout.client.resolve.CachingResolver` keeps an answer exactly for its TTL),
tries the answer's addresses in order (the one that just failed last), and opens
``ws://ADDRESS:PORT/ws`` with ``Authorization: Bearer TOKEN``. When the DNS answer
moves to the other region, the next reconnect follows it with no configuration
change::

    resolver = CachingResolver(NameserverResolver("127.0.0.1", 5300))
    async with AuctionClient(
        "auction.rideout.test", port=8000, resolver=resolver,
        token=lambda: issuer.issue("alice"), rooms=["lot-1"],
        settings=ClientSettings.from_config(config),
    ) as client:
        ack = await client.bid_and_wait("lot-1", 120)   # Acked(accepted=True, ...)
        async for event in client.events():
            print(event)                               # Updated, RegionChanged, ...

(``AuctionClient.from_config(config, token=...)`` builds the same from a rideout
``Config``: the control plane's DNS server, the app domain and port, the timing profile.)

**Liveness** (seed 000/002, "Heartbeat"): ``{"action":"heartbeat"}`` every
``heartbeat_interval``; the connection is closed (cause ``heartbeat_timeout``) when
nothing at all arrives for ``heartbeat_timeout`` (or a heartbeat stays unanswered that
long while other messages still flow), and force-closed (cause
``degraded``) after ``heartbeat_failures`` consecutive heartbeat replies that are not
``pong`` (the socket is open but the backend fails: the server answers
``{"type":"error","code":"unavailable"}``). WebSocket-level pings are off: the
application heartbeat is the liveness check.

**Reconnection** ("Client reconnection strategy"): exponential backoff with full
jitter, ``uniform(0, min(cap, base * 2**n))``, from a :mod:`rideout.backoff` policy
(data, injectable). ``n`` counts the failures since the last *healthy* connection:
a connection counts as healthy after ``healthy_after_pongs`` answered heartbeats (or,
if set, ``healthy_after`` seconds open without a heartbeat failure), not merely when
it opens, so a server that accepts and then fails at once cannot reset the backoff.
Close 1012 (draining) and 1008 (token expired) reconnect at once (a fresh token is
asked for on every connect) — once per outage, after that they back off like any
failure; close 1013 waits the ``retry-after`` hint of the close reason, capped at
``max_retry_hint``. ``max_attempts`` and ``max_disconnected`` bound the loop:
then :meth:`AuctionClient.run` raises :class:`GaveUpError` (a :class:`GaveUp` event
is emitted first). A handshake refused with 401/403 asks the token provider once more
and retries; a second refusal counts as a failed attempt. Any other connect failure
(refused, timeout, 503 draining) moves on to the next address before backing off.

**State restore**: on every connection, for every room followed (``rooms=`` or
``await client.follow(room)``), ``getState`` with
the last position seen. ``recovered: true``: the ``missed`` updates are applied in
order (each emitted as :class:`Updated` with ``replayed=True``), then
:class:`StateRestored` says how many were replayed; otherwise the state is replaced.
Updates whose position is not newer than the last one seen are ignored, so nothing is
applied twice. The serving region (every state, update and ack carries it) is
:attr:`AuctionClient.region`; a change emits :class:`RegionChanged`.

**Bids**: :meth:`AuctionClient.bid` returns the request id (a uuid4 unless given) at
once; :meth:`AuctionClient.bid_and_wait` returns the :class:`Acked` event. A bid is
sent at once when the connection is ready, and otherwise queued (at most
``max_queued_bids`` bids may await their ack at once: :class:`QueueFull`) and sent,
with its original id, after the state restore of the next connection. Bids sent but
not acknowledged when a connection drops are sent again on the next one, same id: the
server's idempotency makes them exactly-once. An ``unavailable`` error for a bid
(fenced during a failover, not yet replicated in sync mode, a degraded zone) is
retried with the same id after ``bid_retry`` delays, at most ``bid_retries`` times;
any other error with the bid's id (``bad_request``, ``throttled``, ...) ends it with
``Acked(accepted=False, reason=<code>)``.

**Events** (frozen dataclasses): :class:`Connected`, :class:`StateRestored`,
:class:`Updated`, :class:`Acked`, :class:`RegionChanged`, :class:`Disconnected`,
:class:`ReconnectScheduled`, :class:`HeartbeatFailed`, :class:`GaveUp`; through
``async for event in client.events()`` (each stream buffers ``event_buffer`` events
and drops the oldest when its reader falls behind) and/or the ``on_event`` callback.

**Observability**: logger ``rideout.client.ws`` (a warning per disconnect with its
cause, a line per reconnect attempt with its delay), :class:`ClientStats` counters on
:attr:`AuctionClient.stats`, and optional Prometheus counters in an injected registry.

**Design** (python-websockets' sans-I/O style): the decisions live in plain objects
with no I/O that tests drive directly — :class:`ClientCore` (what to send after a
connect, how to apply states and updates, heartbeat failure counting, the bid book)
and :class:`ReconnectPlanner` (which delay next, when to give up). ``now`` is passed
in. :class:`AuctionClient` is the thin asyncio driver around them: ``sleep``,
``clock`` and ``rng`` are injectable for the reconnect schedule; the in-connection
timers (heartbeats, bid retries) run on the event loop's clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import math
import random
import time
import uuid
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from types import MappingProxyType, TracebackType
from typing import TYPE_CHECKING, Any, Final, Literal, TypeAlias

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus

from rideout import __version__
from rideout.backoff import DelayPolicy, FullJitter, NoJitter
from rideout.client.errors import ClientError
from rideout.client.resolve import (
    CachingResolver,
    NameserverResolver,
    ResolutionError,
    Resolver,
)
from rideout.protocol import (
    MAX_AMOUNT,
    Ack,
    Bid,
    CloseCode,
    ErrorCode,
    ErrorMsg,
    GetState,
    Heartbeat,
    Pong,
    Position,
    ProtocolError,
    StateMsg,
    Update,
    encode_client_message,
    is_valid_name,
    is_valid_request_id,
    offset_key,
    parse_retry_hint,
    parse_server_message,
)

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from rideout.config import Config

__all__ = [
    "Acked",
    "AuctionClient",
    "BidBook",
    "Cause",
    "ClientClosed",
    "ClientCore",
    "ClientError",
    "ClientSettings",
    "ClientStats",
    "Connected",
    "Disconnected",
    "Event",
    "EventStream",
    "Feedback",
    "GaveUp",
    "GaveUpError",
    "GiveUp",
    "HeartbeatFailed",
    "HeartbeatMonitor",
    "PendingBid",
    "QueueFull",
    "Reconnect",
    "ReconnectPlanner",
    "ReconnectScheduled",
    "RegionChanged",
    "Room",
    "StateRestored",
    "TokenProvider",
    "Updated",
    "is_newer",
    "order_addresses",
]

log = logging.getLogger("rideout.client.ws")

TokenProvider: TypeAlias = Callable[[], "str | Awaitable[str]"]
"""Returns the access token (sync or async); called on every connect, so it can refresh."""

_HEARTBEAT: Final = encode_client_message(Heartbeat())
_USER_AGENT: Final = f"rideout/{__version__} (rideout.client.ws)"
_SEED_BACKOFF: Final = FullJitter(2.0, 20.0)  # the seed: min(20 s, 2 s * 2**n), full jitter
_BID_RETRY: Final = NoJitter(0.25, 2.0)


# ------------------------------------------------------------------------- settings


def _seconds(name: str, value: object, *, zero_ok: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise TypeError(f"{name} must be a finite number of seconds, not {value!r}")
    if value < 0 or (value == 0 and not zero_ok):
        raise ValueError(f"{name} must be {'>= 0' if zero_ok else '> 0'} seconds, not {value!r}")
    return float(value)


def _count(name: str, value: object, *, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, not {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, not {value!r}")
    return value


DEFAULT_OPEN_TIMEOUT = 10.0  # seconds; from_config caps it at the heartbeat timeout


@dataclass(frozen=True, slots=True)
class ClientSettings:
    """How the client watches its connection and reconnects (immutable data).

    The defaults are the seed's values (heartbeat every 30 s, timeout 35 s, two
    failures; backoff ``min(20, 2 * 2**n)`` with full jitter); build them from a rideout
    ``Config`` (seed or fast profile) with :meth:`from_config`.
    """

    heartbeat_interval: float = 30.0
    """Seconds between heartbeats."""
    heartbeat_timeout: float = 35.0
    """Close the connection when nothing at all arrives for this long (> interval)."""
    heartbeat_failures: int = 2
    """Consecutive non-``pong`` heartbeat replies that force a reconnect."""
    backoff: DelayPolicy = _SEED_BACKOFF
    """Delay before reconnect attempt ``n`` (0-based): the seed's full jitter."""
    healthy_after_pongs: int = 2
    """A connection counts as healthy (the attempt counter resets) after this many pongs."""
    healthy_after: float | None = None
    """...or after this many seconds open with a pong and no heartbeat failure (None: off)."""
    max_attempts: int | None = None
    """Give up after this many reconnect attempts without a healthy connection."""
    max_disconnected: float | None = None
    """Give up when no connection has been healthy for this long (seconds)."""
    max_retry_hint: float = 60.0
    """Cap on a close-1013 ``retry-after`` hint (seconds)."""
    max_queued_bids: int = 100
    """Bids that may await their ack at once (queued, in flight or waiting to retry)."""
    bid_retry: DelayPolicy = _BID_RETRY
    """Delay before re-sending a bid answered ``unavailable`` (retry ``n``, 0-based)."""
    bid_retries: int = 8
    """How many times a bid answered ``unavailable`` is retried before it is rejected."""
    open_timeout: float = DEFAULT_OPEN_TIMEOUT
    """Seconds for TCP connect plus the WebSocket handshake, per address."""
    close_timeout: float = 2.0
    """Seconds to wait for the server's close frame when the client closes."""
    max_message_size: int = 1 << 20
    """Largest incoming message in bytes (a room's state can be large)."""
    compression: Literal["deflate"] | None = None
    """permessage-deflate costs ~33 KB per connection: off unless asked for."""
    path: str = "/ws"
    """The WebSocket endpoint's path."""
    event_buffer: int = 1000
    """Events each :meth:`AuctionClient.events` stream holds before dropping the oldest."""

    def __post_init__(self) -> None:
        interval = _seconds("heartbeat_interval", self.heartbeat_interval)
        timeout = _seconds("heartbeat_timeout", self.heartbeat_timeout)
        if timeout <= interval:
            raise ValueError(
                f"heartbeat_timeout ({timeout:g} s) must be longer than heartbeat_interval "
                f"({interval:g} s), or a quiet connection times out before its first heartbeat"
            )
        object.__setattr__(self, "heartbeat_interval", interval)
        object.__setattr__(self, "heartbeat_timeout", timeout)
        _count("heartbeat_failures", self.heartbeat_failures)
        _count("healthy_after_pongs", self.healthy_after_pongs)
        _count("max_queued_bids", self.max_queued_bids)
        _count("bid_retries", self.bid_retries, minimum=0)
        _count("event_buffer", self.event_buffer)
        _count("max_message_size", self.max_message_size)
        if self.max_attempts is not None:
            _count("max_attempts", self.max_attempts, minimum=0)
        for name in ("healthy_after", "max_disconnected"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, _seconds(name, value))
        for name in ("max_retry_hint", "open_timeout", "close_timeout"):
            object.__setattr__(self, name, _seconds(name, getattr(self, name)))
        for name in ("backoff", "bid_retry"):
            if not callable(getattr(getattr(self, name), "delay", None)):
                raise TypeError(f"{name} must be a rideout.backoff delay policy")
        if self.compression not in (None, "deflate"):
            raise ValueError(f"compression must be None or 'deflate', not {self.compression!r}")
        if not isinstance(self.path, str) or not self.path.startswith("/"):
            raise ValueError(f"path must start with '/', not {self.path!r}")

    @classmethod
    def from_config(cls, config: Config, **overrides: Any) -> ClientSettings:
        """Heartbeat and backoff from ``config.timing`` (seed or fast profile), then ``overrides``.

        The opening handshake gets at most the heartbeat timeout: a server that accepts
        the TCP connection but never answers (a frozen process: the kernel still
        completes the handshake) is as dead as a silent connection.
        """
        timing = config.timing
        values: dict[str, Any] = {
            "heartbeat_interval": timing.heartbeat_interval,
            "heartbeat_timeout": timing.heartbeat_timeout,
            "heartbeat_failures": timing.heartbeat_failures,
            "backoff": FullJitter(timing.backoff_base, timing.backoff_cap),
            "open_timeout": min(DEFAULT_OPEN_TIMEOUT, timing.heartbeat_timeout),
        }
        values.update(overrides)
        return cls(**values)


# --------------------------------------------------------------------------- errors


class QueueFull(ClientError):
    """``max_queued_bids`` bids already await their ack; nothing was queued."""


class ClientClosed(ClientError):
    """The client was stopped (or never can send again); a waiting bid's fate is unknown."""


# --------------------------------------------------------------------------- events


class Cause(StrEnum):
    """Why a connection ended, or why a connection attempt failed."""

    HEARTBEAT_TIMEOUT = "heartbeat_timeout"
    """Nothing arrived for ``heartbeat_timeout``."""
    DEGRADED = "degraded"
    """``heartbeat_failures`` consecutive heartbeat replies were not ``pong``."""
    CLOSED = "closed"
    """The server closed the connection (see the close code)."""
    CONNECTION_LOST = "connection_lost"
    """The connection broke without a close frame."""
    CONNECT_FAILED = "connect_failed"
    """No address of the answer accepted a WebSocket."""
    RESOLVE_FAILED = "resolve_failed"
    """The name did not resolve."""
    AUTH_REJECTED = "auth_rejected"
    """The handshake was refused with 401/403, even with a freshly provided token."""
    TOKEN_FAILED = "token_failed"
    """The token provider raised."""


@dataclass(frozen=True, slots=True)
class Connected:
    """A WebSocket is open to ``address``.

    ``region`` is the serving region as known when it opened (the previous connection's,
    None at first); the new connection's first reply confirms it or emits
    :class:`RegionChanged`.
    """

    address: str
    region: str | None


@dataclass(frozen=True, slots=True)
class StateRestored:
    """A room's ``getState`` answer was applied.

    ``recovered``: the server replayed every update since the last position seen
    (``replayed`` of them were new to the client); False: the state was replaced.
    """

    room: str
    state: Any
    position: Position
    recovered: bool
    replayed: int
    region: str


@dataclass(frozen=True, slots=True)
class Updated:
    """A room changed; ``replayed`` when the update came from a ``getState`` replay."""

    room: str
    state: Any
    position: Position
    region: str
    replayed: bool = False


@dataclass(frozen=True, slots=True)
class Acked:
    """A bid's outcome.

    ``accepted`` and ``reason`` as the server decided (``too_low``, ``out_of_bounds``),
    or ``accepted=False`` with ``reason`` the error code that ended it (``bad_request``,
    ``throttled``, ``unavailable`` after ``bid_retries`` retries); ``position`` is None then.
    """

    id: str
    accepted: bool
    reason: str | None
    position: Position | None
    room: str
    amount: int
    region: str | None


@dataclass(frozen=True, slots=True)
class RegionChanged:
    """The serving region changed (``old`` is None when it was first learnt)."""

    old: str | None
    new: str


@dataclass(frozen=True, slots=True)
class Disconnected:
    """An open connection ended; ``code``/``reason`` are the server's close frame, if any."""

    cause: Cause
    code: int | None
    reason: str
    address: str


@dataclass(frozen=True, slots=True)
class ReconnectScheduled:
    """Reconnect attempt ``attempt`` (1-based, since the last healthy connection) in ``delay`` s."""

    attempt: int
    delay: float
    cause: Cause
    code: int | None = None


@dataclass(frozen=True, slots=True)
class HeartbeatFailed:
    """The ``count``-th consecutive heartbeat reply that was not ``pong`` (``code``: its error)."""

    count: int
    code: str


@dataclass(frozen=True, slots=True)
class GaveUp:
    """The client stopped reconnecting: ``reason`` is ``max_attempts`` or ``max_disconnected``."""

    reason: str
    attempts: int
    disconnected_for: float
    detail: str


Event: TypeAlias = (
    Connected
    | StateRestored
    | Updated
    | Acked
    | RegionChanged
    | Disconnected
    | ReconnectScheduled
    | HeartbeatFailed
    | GaveUp
)


class GaveUpError(ClientError):
    """Raised by :meth:`AuctionClient.run` (and ``async with``) when the client gave up."""

    def __init__(self, event: GaveUp, name: str = "") -> None:
        self.event = event
        self.name = name
        super().__init__(event, name)

    def __str__(self) -> str:
        e = self.event
        target = f" to {self.name!r}" if self.name else ""
        return (
            f"gave up reconnecting{target} after {e.attempts} attempts and "
            f"{e.disconnected_for:.1f} s without a healthy connection ({e.reason}); "
            f"last failure: {e.detail}"
        )


# ---------------------------------------------------------------------- statistics


@dataclass(slots=True)
class ClientStats:
    """Counters since the client was created (plain attributes, read at will)."""

    connects: int = 0
    disconnects: int = 0
    reconnect_attempts: int = 0
    time_disconnected: float = 0.0
    """Seconds without an open connection, connection attempts included."""
    heartbeat_failures: int = 0
    heartbeat_timeouts: int = 0
    degraded_closes: int = 0
    restores: int = 0
    recovered_restores: int = 0
    updates_replayed: int = 0
    duplicates_ignored: int = 0
    bids_sent: int = 0
    bids_resent: int = 0
    bids_retried: int = 0
    bids_acked: int = 0
    bids_rejected: int = 0
    events_dropped: int = 0


# --------------------------------------------------------------------- pure helpers


def is_newer(position: Position, than: Position | None) -> bool:
    """Whether ``position`` comes after ``than``: a later epoch, or the same and a later offset."""
    if than is None:
        return True
    return (position.epoch, offset_key(position.offset)) > (
        than.epoch,
        offset_key(than.offset),
    )


def order_addresses(addresses: Iterable[str], avoid: Iterable[str] = ()) -> tuple[str, ...]:
    """The answer's addresses in its order, those in ``avoid`` (that just failed) last."""
    unique = tuple(dict.fromkeys(addresses))
    avoided = set(avoid)
    return tuple(a for a in unique if a not in avoided) + tuple(a for a in unique if a in avoided)


@dataclass(frozen=True, slots=True)
class Room:
    """What the client knows of a followed room (``position`` None until its first state)."""

    name: str
    state: Any = None
    position: Position | None = None
    region: str | None = None
    recovered: bool = False
    replayed: int = 0


# ------------------------------------------------------------------------ heartbeat


class HeartbeatMonitor:
    """Heartbeat timing and failure counting for one connection (no I/O, ``now`` given)."""

    def __init__(
        self,
        interval: float,
        timeout: float,
        failures: int,
        *,
        healthy_after_pongs: int = 2,
        healthy_after: float | None = None,
    ) -> None:
        self.interval = interval
        self.timeout = timeout
        self.limit = failures
        self.healthy_after_pongs = healthy_after_pongs
        self.healthy_after = healthy_after
        self.opened_at = 0.0
        self.last_received = 0.0
        self.next_beat = math.inf
        self.unanswered: deque[float] = deque()  # when each unanswered heartbeat left
        self.failures = 0
        self.pongs = 0
        self.healthy = False

    def open(self, now: float) -> None:
        """A connection opened: the first heartbeat is due one interval from now."""
        self.opened_at = self.last_received = now
        self.next_beat = now + self.interval
        self.unanswered.clear()
        self.failures = self.pongs = 0
        self.healthy = False

    def received(self, now: float) -> None:
        """Something arrived (any message keeps the connection alive)."""
        self.last_received = now

    def due(self, now: float) -> bool:
        """Whether a heartbeat should be sent now."""
        return now >= self.next_beat

    def sent(self, now: float) -> None:
        """A heartbeat was sent; schedule the next one."""
        self.unanswered.append(now)
        self.next_beat += self.interval
        if self.next_beat <= now:  # the loop fell behind: do not burst to catch up
            self.next_beat = now + self.interval

    def pong(self, now: float) -> bool:
        """A ``pong``: failures reset. True when this made the connection healthy."""
        if self.unanswered:
            self.unanswered.popleft()
        self.failures = 0
        self.pongs += 1
        return self.check_healthy(now)

    def failure(self) -> int:
        """A heartbeat reply that was not ``pong``: the consecutive count."""
        if self.unanswered:
            self.unanswered.popleft()
        self.failures += 1
        self.pongs = 0
        return self.failures

    @property
    def degraded(self) -> bool:
        """``failures`` consecutive bad replies: force a reconnect."""
        return self.failures >= self.limit

    def timed_out(self, now: float) -> bool:
        """Nothing arrived for ``timeout`` seconds, or a heartbeat went unanswered that long
        (a server that streams updates but no longer answers is not alive either)."""
        oldest = self.unanswered[0] if self.unanswered else math.inf
        return now - min(self.last_received, oldest) >= self.timeout

    def check_healthy(self, now: float) -> bool:
        """True once, when the connection first meets the healthy criterion."""
        if self.healthy:
            return False
        by_time = (
            self.healthy_after is not None
            and now - self.opened_at >= self.healthy_after
            and self.pongs >= 1
            and self.failures == 0
        )
        if self.pongs >= self.healthy_after_pongs or by_time:
            self.healthy = True
            return True
        return False

    def next_wakeup(self) -> float:
        """When :meth:`ClientCore.tick` must run next: a heartbeat or the timeout."""
        oldest = self.unanswered[0] if self.unanswered else math.inf
        wake = min(self.next_beat, min(self.last_received, oldest) + self.timeout)
        if (
            not self.healthy
            and self.healthy_after is not None
            and self.pongs >= 1
            and self.failures == 0
        ):  # the time-based criterion will hold then (and never busy-loops once it has)
            wake = min(wake, self.opened_at + self.healthy_after)
        return wake


# ---------------------------------------------------------------------------- bids


@dataclass(slots=True)
class PendingBid:
    """A bid awaiting its ack."""

    id: str
    room: str
    amount: int
    seq: int
    sent: bool = False
    sends: int = 0
    retries: int = 0
    retry_at: float | None = None


class BidBook:
    """Bids not yet acknowledged, in submission order (no I/O).

    A bid is *unsent* (queued, or lost with a connection, or waiting for ``retry_at``)
    or *sent* (in flight on the current connection).
    """

    def __init__(
        self,
        limit: int,
        retry_policy: DelayPolicy,
        max_retries: int,
        rng: random.Random | None = None,
    ) -> None:
        self.limit = limit
        self.retry_policy = retry_policy
        self.max_retries = max_retries
        self._rng = rng
        self._bids: dict[str, PendingBid] = {}
        self._seq = 0

    def __len__(self) -> int:
        return len(self._bids)

    def __contains__(self, request_id: object) -> bool:
        return request_id in self._bids

    def get(self, request_id: str) -> PendingBid | None:
        return self._bids.get(request_id)

    def pending(self) -> tuple[PendingBid, ...]:
        """Every bid awaiting its ack, oldest first."""
        return tuple(self._bids.values())

    def add(self, room: str, amount: int, request_id: str) -> PendingBid:
        """Queue a bid; :class:`QueueFull` at the limit, ValueError for an id already pending."""
        if request_id in self._bids:
            raise ValueError(f"bid {request_id!r} is already awaiting its ack")
        if len(self._bids) >= self.limit:
            raise QueueFull(
                f"{len(self._bids)} bids already await their ack (max_queued_bids={self.limit})"
            )
        self._seq += 1
        bid = PendingBid(request_id, room, amount, self._seq)
        self._bids[request_id] = bid
        return bid

    def take_sendable(self, now: float) -> list[PendingBid]:
        """The unsent bids that may go now (oldest first), marked sent."""
        ready = []
        for bid in self._bids.values():
            if not bid.sent and (bid.retry_at is None or bid.retry_at <= now):
                bid.sent = True
                bid.sends += 1
                bid.retry_at = None
                ready.append(bid)
        return ready

    def connection_lost(self) -> None:
        """Every bid is unsent again, to go (same id) right after the next restore."""
        for bid in self._bids.values():
            bid.sent = False
            bid.retry_at = None

    def acked(self, request_id: str) -> PendingBid | None:
        """The acknowledged bid, removed; None for an id not pending."""
        return self._bids.pop(request_id, None)

    def unavailable(self, request_id: str, now: float) -> tuple[PendingBid, float | None] | None:
        """An ``unavailable`` error: ``(bid, retry_at)``, or ``(bid, None)`` when it is rejected."""
        bid = self._bids.get(request_id)
        if bid is None:
            return None
        bid.retries += 1
        if bid.retries > self.max_retries:
            del self._bids[request_id]
            return bid, None
        bid.sent = False
        bid.retry_at = now + self.retry_policy.delay(bid.retries - 1, self._rng)
        return bid, bid.retry_at

    def rejected(self, request_id: str) -> PendingBid | None:
        """A final error: the bid removed; None for an id not pending."""
        return self._bids.pop(request_id, None)

    def next_retry(self) -> float:
        """The earliest ``retry_at`` of a bid waiting to retry (inf when none)."""
        return min(
            (b.retry_at for b in self._bids.values() if not b.sent and b.retry_at is not None),
            default=math.inf,
        )


# ---------------------------------------------------------------------------- core


@dataclass(slots=True)
class Feedback:
    """What the driver must do after a call into :class:`ClientCore`."""

    send: list[str] = field(default_factory=list)
    """Text frames to send, in order."""
    events: list[Event] = field(default_factory=list)
    """Events to emit, in order (before sending)."""
    close: Cause | None = None
    """Close the connection for this cause."""
    healthy: bool = False
    """The connection just became healthy: reset the reconnect attempt counter."""
    ready: bool = False
    """The state restore just finished: bids flow."""


class ClientCore:
    """The client's decisions, across connections, with no I/O (``now`` is given).

    Call :meth:`connection_opened` when a WebSocket opens, :meth:`receive` with every
    message, :meth:`tick` at :meth:`next_wakeup`, and :meth:`connection_lost` when it
    ends; :meth:`follow` and :meth:`submit_bid` at any time. Each returns (or records)
    a :class:`Feedback`: frames to send, events, whether to close.
    """

    def __init__(
        self,
        settings: ClientSettings,
        *,
        rooms: Iterable[str] = (),
        rng: random.Random | None = None,
        stats: ClientStats | None = None,
    ) -> None:
        self.settings = settings
        self.stats = stats if stats is not None else ClientStats()
        self.heartbeat = HeartbeatMonitor(
            settings.heartbeat_interval,
            settings.heartbeat_timeout,
            settings.heartbeat_failures,
            healthy_after_pongs=settings.healthy_after_pongs,
            healthy_after=settings.healthy_after,
        )
        self.bids = BidBook(settings.max_queued_bids, settings.bid_retry, settings.bid_retries, rng)
        self.region: str | None = None
        self.connected = False
        self._rooms: dict[str, Room] = {}
        self._awaiting: set[str] = set()  # rooms whose restore is still awaited
        self._failed: set[str] = set()  # rooms whose getState was answered with an error
        self._replies: deque[tuple[str, str | None]] = deque()  # id-less requests in flight
        for room in rooms:
            self.follow(room, 0.0)

    # ------------------------------------------------------------------ views

    @property
    def rooms(self) -> Mapping[str, Room]:
        """Every followed room."""
        return MappingProxyType(self._rooms)

    @property
    def ready(self) -> bool:
        """Connected, and every room followed at the connect has its state back."""
        return self.connected and not self._awaiting

    # ------------------------------------------------------------------ inputs

    def follow(self, room: str, now: float) -> Feedback:
        """Follow ``room``: restore it on every connection (now too, if connected)."""
        if not is_valid_name(room):
            raise ValueError(f"room must be 1-64 characters of A-Z a-z 0-9 _ . : -, not {room!r}")
        feedback = Feedback()
        if room not in self._rooms:
            self._rooms[room] = Room(room)
            if self.connected:
                self._get_state(room, feedback)
        return feedback

    def unfollow(self, room: str) -> None:
        """Stop tracking ``room`` (its updates are ignored from now on)."""
        self._rooms.pop(room, None)
        self._awaiting.discard(room)
        self._failed.discard(room)

    def submit_bid(self, room: str, amount: int, request_id: str, now: float) -> Feedback:
        """Queue a bid; it is in the feedback's frames when the connection is ready."""
        if not is_valid_name(room):
            raise ValueError(f"room must be 1-64 characters of A-Z a-z 0-9 _ . : -, not {room!r}")
        if isinstance(amount, bool) or not isinstance(amount, int) or not 0 < amount <= MAX_AMOUNT:
            raise ValueError(f"amount must be an integer from 1 to {MAX_AMOUNT}, not {amount!r}")
        if not is_valid_request_id(request_id):
            raise ValueError(f"id must be 1-64 printable characters, not {request_id!r}")
        self.bids.add(room, amount, request_id)
        feedback = Feedback()
        self._release_bids(now, feedback)
        return feedback

    def connection_opened(self, now: float) -> Feedback:
        """A WebSocket opened: ``getState`` (with the last position) for every room."""
        self.connected = True
        self.heartbeat.open(now)
        self._replies.clear()
        self._awaiting = set(self._rooms)
        self._failed.clear()
        feedback = Feedback()
        for room in self._rooms:
            self._get_state(room, feedback)
        if not self._awaiting:
            feedback.ready = True
        self._release_bids(now, feedback)
        return feedback

    def connection_lost(self) -> None:
        """The WebSocket ended: bids in flight will be sent again (same id) next time."""
        self.connected = False
        self.bids.connection_lost()
        self._replies.clear()
        self._awaiting.clear()
        self._failed.clear()

    def receive(self, data: str | bytes, now: float) -> Feedback:
        """One message from the server."""
        feedback = Feedback()
        if not self.connected:
            return feedback
        self.heartbeat.received(now)
        try:
            message = parse_server_message(data)
        except ProtocolError as exc:
            log.warning("ignoring a message that does not follow the protocol: %s", exc)
            return feedback
        if isinstance(message, Pong):
            self._pop_reply("heartbeat", None)
            feedback.healthy = self.heartbeat.pong(now)
        elif isinstance(message, Update):
            self._apply_update(message, feedback)
        elif isinstance(message, StateMsg):
            self._apply_state(message, now, feedback)
        elif isinstance(message, Ack):
            self._apply_ack(message, feedback)
        else:
            self._apply_error(message, now, feedback)
        if self.heartbeat.degraded:
            feedback.close = Cause.DEGRADED
        return feedback

    def tick(self, now: float) -> Feedback:
        """Timers: the heartbeat, the timeout, bid retries, time-based health."""
        feedback = Feedback()
        if not self.connected:
            return feedback
        if self.heartbeat.timed_out(now):
            feedback.close = Cause.HEARTBEAT_TIMEOUT
            return feedback
        if self.heartbeat.due(now):
            feedback.send.append(_HEARTBEAT)
            self._replies.append(("heartbeat", None))
            self.heartbeat.sent(now)
            for room in sorted(self._failed):  # a failed restore is asked again
                self._failed.discard(room)
                self._get_state(room, feedback)
        if self.heartbeat.check_healthy(now):
            feedback.healthy = True
        self._release_bids(now, feedback)
        return feedback

    def next_wakeup(self) -> float:
        """When :meth:`tick` must run next (on the same clock as ``now``)."""
        return min(self.heartbeat.next_wakeup(), self.bids.next_retry())

    # ----------------------------------------------------------------- internals

    def _get_state(self, room: str, feedback: Feedback) -> None:
        since = self._rooms[room].position
        feedback.send.append(encode_client_message(GetState(room, since)))
        self._replies.append(("getState", room))

    def _pop_reply(self, kind: str, room: str | None) -> None:
        for index, entry in enumerate(self._replies):
            if entry == (kind, room):
                del self._replies[index]
                return

    def _release_bids(self, now: float, feedback: Feedback) -> None:
        if not self.ready:
            return
        for bid in self.bids.take_sendable(now):
            feedback.send.append(encode_client_message(Bid(bid.room, bid.amount, bid.id)))
            self.stats.bids_sent += 1
            if bid.sends > 1:
                self.stats.bids_resent += 1

    def _see_region(self, region: str, feedback: Feedback) -> None:
        if region != self.region:
            feedback.events.append(RegionChanged(self.region, region))
            self.region = region

    def _apply_update(self, update: Update, feedback: Feedback) -> None:
        self._see_region(update.region, feedback)
        room = self._rooms.get(update.room)
        if room is None:
            return
        if not is_newer(update.position, room.position):
            self.stats.duplicates_ignored += 1
            return
        self._rooms[update.room] = replace(
            room, state=update.state, position=update.position, region=update.region
        )
        feedback.events.append(Updated(update.room, update.state, update.position, update.region))

    def _apply_state(self, message: StateMsg, now: float, feedback: Feedback) -> None:
        self._pop_reply("getState", message.room)
        self._see_region(message.region, feedback)
        room = self._rooms.get(message.room)
        if room is None:
            return
        replayed = 0
        if message.recovered:
            for update in message.missed:
                if is_newer(update.position, room.position):
                    room = replace(room, state=update.state, position=update.position)
                    replayed += 1
                    feedback.events.append(
                        Updated(update.room, update.state, update.position, update.region, True)
                    )
                else:
                    self.stats.duplicates_ignored += 1
            self.stats.recovered_restores += 1
            self.stats.updates_replayed += replayed
        self.stats.restores += 1
        self._rooms[message.room] = Room(
            message.room,
            message.state,
            message.position,
            message.region,
            message.recovered,
            replayed,
        )
        feedback.events.append(
            StateRestored(
                message.room,
                message.state,
                message.position,
                message.recovered,
                replayed,
                message.region,
            )
        )
        self._restore_answered(message.room, now, feedback)

    def _restore_answered(self, room: str, now: float, feedback: Feedback) -> None:
        if room in self._awaiting:
            self._awaiting.discard(room)
            if not self._awaiting:
                feedback.ready = True
                self._release_bids(now, feedback)

    def _apply_ack(self, ack: Ack, feedback: Feedback) -> None:
        self._see_region(ack.region, feedback)
        bid = self.bids.acked(ack.id)
        if bid is None:
            log.debug("ack for a bid not pending: %s", ack.id)
            return
        self.stats.bids_acked += 1
        feedback.events.append(
            Acked(ack.id, ack.accepted, ack.reason, ack.position, bid.room, bid.amount, ack.region)
        )

    def _apply_error(self, error: ErrorMsg, now: float, feedback: Feedback) -> None:
        if error.id is not None:
            self._bid_error(error, now, feedback)
            return
        kind, room = self._replies.popleft() if self._replies else ("", None)
        if kind == "heartbeat":
            count = self.heartbeat.failure()
            self.stats.heartbeat_failures += 1
            feedback.events.append(HeartbeatFailed(count, error.code))
        elif kind == "getState" and room is not None:
            log.warning("restoring room %s failed: %s: %s", room, error.code, error.message)
            if room in self._rooms:
                self._failed.add(room)
            self._restore_answered(room, now, feedback)
        else:
            log.warning("server error: %s: %s", error.code, error.message)

    def _bid_error(self, error: ErrorMsg, now: float, feedback: Feedback) -> None:
        assert error.id is not None
        if error.code == ErrorCode.UNAVAILABLE:
            outcome = self.bids.unavailable(error.id, now)
            if outcome is None:
                return
            bid, retry_at = outcome
            if retry_at is not None:
                self.stats.bids_retried += 1
                log.info(
                    "bid %s unavailable (%s); retry %d in %.3f s",
                    bid.id,
                    error.message,
                    bid.retries,
                    retry_at - now,
                )
                return
        else:
            found = self.bids.rejected(error.id)
            if found is None:
                return
            bid = found
        self.stats.bids_rejected += 1
        log.warning("bid %s ended by the server: %s: %s", bid.id, error.code, error.message)
        feedback.events.append(
            Acked(bid.id, False, error.code, None, bid.room, bid.amount, self.region)
        )


# ------------------------------------------------------------------------- planner


@dataclass(frozen=True, slots=True)
class Reconnect:
    """Reconnect attempt ``attempt`` (1-based) after ``delay`` seconds."""

    attempt: int
    delay: float


@dataclass(frozen=True, slots=True)
class GiveUp:
    """Stop: ``reason`` is ``max_attempts`` or ``max_disconnected``."""

    reason: str
    attempts: int
    disconnected_for: float


class ReconnectPlanner:
    """Which delay before the next reconnect, and when to give up (no I/O, ``now`` given).

    ``attempt`` counts the failures since the last healthy connection (a failed
    connect and a connection lost before it became healthy both count), and only
    :meth:`healthy` resets it.
    """

    def __init__(
        self,
        settings: ClientSettings,
        *,
        rng: random.Random | None = None,
        stats: ClientStats | None = None,
    ) -> None:
        self.settings = settings
        self.stats = stats if stats is not None else ClientStats()
        self._rng = rng
        self.attempt = 0
        self._outage_since: float | None = None
        self._disconnected_since: float | None = None
        self._immediate_spent = False

    def start(self, now: float) -> None:
        """The client starts, disconnected."""
        self._outage_since = self._disconnected_since = now

    def connected(self, now: float) -> float:
        """A WebSocket opened; returns the seconds it was disconnected."""
        self.stats.connects += 1
        gap = 0.0
        if self._disconnected_since is not None:
            gap = max(0.0, now - self._disconnected_since)
            self.stats.time_disconnected += gap
            self._disconnected_since = None
        return gap

    def healthy(self, now: float) -> None:
        """The connection proved healthy: the next failure starts from attempt 0 again."""
        self.attempt = 0
        self._outage_since = None
        self._immediate_spent = False

    def disconnected_for(self, now: float) -> float:
        """Seconds since the last healthy connection was lost (0 while healthy)."""
        return 0.0 if self._outage_since is None else max(0.0, now - self._outage_since)

    def lost(
        self, now: float, cause: Cause, code: int | None = None, reason: str | None = None
    ) -> Reconnect | GiveUp:
        """A connection ended or an attempt failed: when to try again, or give up."""
        if self._disconnected_since is None:
            self._disconnected_since = now
        if self._outage_since is None:
            self._outage_since = now
        self.attempt += 1
        limits = [
            n
            for n in (self.settings.max_attempts, self.settings.backoff.max_attempts)
            if n is not None
        ]
        if limits and self.attempt > min(limits):
            return GiveUp("max_attempts", self.attempt - 1, self.disconnected_for(now))
        delay = self._delay(cause, code, reason)
        limit = self.settings.max_disconnected
        if limit is not None and self.disconnected_for(now) + delay > limit:
            return GiveUp("max_disconnected", self.attempt - 1, self.disconnected_for(now))
        self.stats.reconnect_attempts += 1
        return Reconnect(self.attempt, delay)

    def _delay(self, cause: Cause, code: int | None, reason: str | None) -> float:
        immediate = cause is Cause.CLOSED and code in (CloseCode.DRAINING, CloseCode.POLICY)
        if immediate and not self._immediate_spent:
            self._immediate_spent = True
            return 0.0
        if cause is Cause.CLOSED and code == CloseCode.OVERLOADED:
            hint = parse_retry_hint(reason)
            if hint is not None:
                return min(hint, self.settings.max_retry_hint)
        return self.settings.backoff.delay(self.attempt - 1, self._rng)


# ---------------------------------------------------------------------- the driver


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
class _Outcome:
    """How one connection attempt (or connection) ended."""

    cause: Cause
    code: int | None = None
    reason: str = ""
    address: str = ""
    detail: str = ""
    opened: bool = False


class _Prometheus:
    def __init__(self, registry: CollectorRegistry) -> None:
        from prometheus_client import Counter

        self.reconnects = Counter(
            "rideout_ws_client_reconnect_attempts_total",
            "Reconnect attempts scheduled",
            registry=registry,
        )
        self.disconnects = Counter(
            "rideout_ws_client_disconnects_total",
            "Connections lost, by cause",
            ["cause"],
            registry=registry,
        )
        self.disconnected = Counter(
            "rideout_ws_client_disconnected_seconds_total",
            "Seconds without an open connection",
            registry=registry,
        )
        self.heartbeat_failures = Counter(
            "rideout_ws_client_heartbeat_failures_total",
            "Heartbeat replies that were not pong",
            registry=registry,
        )


class AuctionClient:
    """The asyncio driver: resolve, connect, watch, restore, reconnect (see the module doc).

    ``name`` is the app domain, resolved through ``resolver`` on every connect;
    ``port`` the app servers' port; ``token`` an access token or a provider (sync or
    async) called on every connect; ``rooms`` the rooms to follow from the start.
    ``sleep``, ``clock`` and ``rng`` drive the reconnect schedule (tests record the
    delays instead of waiting); ``on_event`` is called synchronously with every event;
    ``registry`` receives Prometheus counters when given.

    Use ``async with client:`` (the connection loop runs in a background task, stopped
    cleanly on exit; if it gave up, :class:`GaveUpError` is raised on exit) or
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
        registry: CollectorRegistry | None = None,
    ) -> None:
        if not isinstance(name, str) or not name:
            raise ValueError(f"name must be a domain name, not {name!r}")
        if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
            raise ValueError(f"port must be 1-65535, not {port!r}")
        if scheme not in ("ws", "wss"):
            raise ValueError(f"scheme must be 'ws' or 'wss', not {scheme!r}")
        self.name = name
        self.port = port
        self.scheme = scheme
        self.settings = settings if settings is not None else ClientSettings()
        self.stats = ClientStats()
        self._token = token
        self._resolver = resolver
        self._sleep = sleep
        self._clock = clock
        self._on_event = on_event
        self._core = ClientCore(self.settings, rooms=rooms, rng=rng, stats=self.stats)
        self._planner = ReconnectPlanner(self.settings, rng=rng, stats=self.stats)
        self._metrics = _Prometheus(registry) if registry is not None else None
        self._streams: set[EventStream] = set()
        self._waiters: dict[str, list[asyncio.Future[Acked]]] = {}
        self._ws: ClientConnection | None = None
        self._address: str | None = None
        self._avoid: set[str] = set()
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
        state = "connected to " + self._address if self._address else "disconnected"
        return f"<AuctionClient {self.name}:{self.port} {state} region={self.region}>"

    # ------------------------------------------------------------------ views

    @property
    def region(self) -> str | None:
        """The serving region, as the last state, update or ack said (None until one has)."""
        return self._core.region

    @property
    def address(self) -> str | None:
        """The address of the open connection, None when disconnected."""
        return self._address

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
        await self._send_now(self._core.follow(room, self._loop_time()))

    def unfollow(self, room: str) -> None:
        """Stop following ``room``."""
        self._core.unfollow(room)

    async def bid(self, room: str, amount: int, id: str | None = None) -> str:
        """Bid; returns the request id (a uuid4 unless ``id`` is given) at once.

        Sent now when the connection is ready, else queued for the next one. The
        outcome arrives as an :class:`Acked` event. Raises :class:`QueueFull`,
        ValueError for a bad room, amount or id (or an id already pending),
        :class:`GaveUpError` / :class:`ClientClosed` once the client has ended.
        """
        self._check_open()
        request_id = id if id is not None else str(uuid.uuid4())
        feedback = self._core.submit_bid(room, amount, request_id, self._loop_time())
        await self._send_now(feedback)
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
            await self._send_now(feedback)
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

        Raises :class:`GaveUpError` when ``max_attempts`` or ``max_disconnected`` is reached.
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
            raise
        finally:
            self._finish(error)

    async def _loop(self) -> None:
        self._planner.start(self._clock())
        while True:
            outcome = await self._attempt()
            decision = self._planner.lost(
                self._clock(), outcome.cause, outcome.code, outcome.reason
            )
            detail = _describe(outcome)
            if isinstance(decision, GiveUp):
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
                raise GaveUpError(event, self.name)
            log.info(
                "reconnect attempt %d to %s in %.3f s (after %s)",
                decision.attempt,
                self.name,
                decision.delay,
                detail,
            )
            self._emit(
                ReconnectScheduled(decision.attempt, decision.delay, outcome.cause, outcome.code)
            )
            await self._sleep(decision.delay)

    async def _attempt(self) -> _Outcome:
        try:
            resolved = await self._resolver.resolve(self.name)
        except ResolutionError as exc:
            log.warning("cannot resolve %s: %s", self.name, exc)
            return _Outcome(Cause.RESOLVE_FAILED, detail=str(exc))
        failures: list[str] = []
        for address in order_addresses(resolved.addresses, self._avoid):
            opened = await self._open(address)
            if isinstance(opened, _Outcome):
                log.warning("cannot connect to %s (%s): %s", address, self.name, opened.detail)
                failures.append(opened.detail)
                self._avoid.add(address)
                if opened.cause in (Cause.AUTH_REJECTED, Cause.TOKEN_FAILED):
                    return opened
                continue
            return await self._serve(opened, address)
        return _Outcome(Cause.CONNECT_FAILED, detail="; ".join(failures) or "no address")

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

    async def _open(self, address: str) -> ClientConnection | _Outcome:
        uri = f"{self.scheme}://{address}:{self.port}{self.settings.path}"
        # wss: verify the certificate against the name, not the address.
        tls: dict[str, Any] = {"server_hostname": self.name} if self.scheme == "wss" else {}
        refreshed = False
        while True:
            try:
                token = await self._get_token()
            except Exception as exc:
                log.exception("the token provider failed")
                return _Outcome(Cause.TOKEN_FAILED, address=address, detail=f"token: {exc!r}")
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
                    if not refreshed:
                        refreshed = True
                        log.info(
                            "%s refused the token (%s); asking for a fresh one", address, status
                        )
                        continue
                    return _Outcome(Cause.AUTH_REJECTED, address=address, detail=detail)
                return _Outcome(Cause.CONNECT_FAILED, address=address, detail=detail)
            except (OSError, TimeoutError, InvalidHandshake, ConnectionClosed, EOFError) as exc:
                text = str(exc) or type(exc).__name__
                return _Outcome(Cause.CONNECT_FAILED, address=address, detail=f"{address}: {text}")

    async def _serve(self, ws: ClientConnection, address: str) -> _Outcome:
        loop = asyncio.get_running_loop()
        self._ws, self._address = ws, address
        gap = self._planner.connected(self._clock())
        if self._metrics is not None:
            self._metrics.disconnected.inc(gap)
        log.info("connected to %s (%s)", address, self.name)
        self._emit(Connected(address, self._core.region))
        outcome: _Outcome | None = None
        try:
            outcome = await self._apply(ws, self._core.connection_opened(loop.time()), address)
            while outcome is None:
                try:
                    async with asyncio.timeout_at(self._core.next_wakeup()):
                        data = await ws.recv()
                except TimeoutError:
                    feedback = self._core.tick(loop.time())
                else:
                    feedback = self._core.receive(data, loop.time())
                outcome = await self._apply(ws, feedback, address)
        except ConnectionClosed as exc:
            rcvd = exc.rcvd
            if rcvd is not None:
                outcome = _Outcome(
                    Cause.CLOSED,
                    rcvd.code,
                    rcvd.reason,
                    address,
                    opened=True,
                    detail=f"{address} closed {rcvd.code} {rcvd.reason}".rstrip(),
                )
            else:
                outcome = _Outcome(
                    Cause.CONNECTION_LOST,
                    address=address,
                    opened=True,
                    detail=f"{address}: connection lost",
                )
        finally:
            self._ws, self._address = None, None
            self._core.connection_lost()
            self._ready.set()  # wake wait_ready() to re-check
            if outcome is None:  # cancelled (stop) or an unexpected error
                with contextlib.suppress(Exception):
                    await ws.close(1001, "client stopped")
        self._avoid.add(address)
        self.stats.disconnects += 1
        if outcome.cause is Cause.HEARTBEAT_TIMEOUT:
            self.stats.heartbeat_timeouts += 1
        elif outcome.cause is Cause.DEGRADED:
            self.stats.degraded_closes += 1
        log.warning(
            "disconnected from %s (%s): %s%s",
            address,
            self.name,
            outcome.cause.value,
            f" (close {outcome.code} {outcome.reason})".rstrip() if outcome.code else "",
        )
        self._emit(Disconnected(outcome.cause, outcome.code, outcome.reason, address))
        return outcome

    async def _apply(
        self, ws: ClientConnection, feedback: Feedback, address: str
    ) -> _Outcome | None:
        for event in feedback.events:
            self._emit(event)
        if feedback.healthy:
            self._planner.healthy(self._clock())
            self._avoid.clear()
            log.debug("connection to %s is healthy", address)
        if feedback.ready:
            self._ready.set()
        for text in feedback.send:
            await ws.send(text)
        if feedback.close is None:
            return None
        cause = feedback.close
        if cause is Cause.HEARTBEAT_TIMEOUT:
            # The peer is unresponsive by definition: do not wait for a close handshake.
            ws.transport.abort()
            with contextlib.suppress(Exception):
                async with asyncio.timeout(self.settings.close_timeout):
                    await ws.wait_closed()
        else:
            with contextlib.suppress(Exception):
                await ws.close(1000, cause.value)
        return _Outcome(cause, address=address, opened=True, detail=f"{address}: {cause.value}")

    async def _send_now(self, feedback: Feedback) -> None:
        ws = self._ws
        self._deliver_events(feedback)
        if ws is None or not feedback.send:
            return
        with contextlib.suppress(ConnectionClosed):
            for text in feedback.send:
                await ws.send(text)

    def _deliver_events(self, feedback: Feedback) -> None:
        for event in feedback.events:
            self._emit(event)
        if feedback.ready:
            self._ready.set()

    # ------------------------------------------------------------------ events

    def _emit(self, event: Event) -> None:
        metrics = self._metrics
        if metrics is not None:
            if isinstance(event, ReconnectScheduled):
                metrics.reconnects.inc()
            elif isinstance(event, Disconnected):
                metrics.disconnects.labels(event.cause.value).inc()
            elif isinstance(event, HeartbeatFailed):
                metrics.heartbeat_failures.inc()
        if isinstance(event, Acked):
            for future in self._waiters.pop(event.id, []):
                if not future.done():
                    future.set_result(event)
        if isinstance(event, HeartbeatFailed):
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
        if isinstance(self._error, GaveUpError):
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


def _body(body: bytes | bytearray | None) -> str:
    if not body:
        return ""
    text = body[:200].decode("utf-8", "replace")
    return " ".join(text.split())


def _describe(outcome: _Outcome) -> str:
    return f"{outcome.cause.value}: {outcome.detail}" if outcome.detail else outcome.cause.value
