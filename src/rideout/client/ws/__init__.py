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
``max_retry_hint``. ``max_attempts`` and ``max_disconnected`` bound the loop: the
planner decides :class:`StopReconnecting`, a :class:`GaveUp` event is emitted, then
:meth:`AuctionClient.run` raises :class:`AllReconnectsFailed`. A handshake refused
with 401/403 asks the token provider once more and retries; a second refusal counts
as a failed attempt. Any other connect failure (refused, timeout, 503 draining) moves
on to the next address before backing off.

**Resumption tickets** (``resume_tickets``, on by default): each connection asks the
server for a ticket (``{"action":"ticket"}``) when the client holds none or the one it
holds is half spent, and the next connect presents the ticket instead of the token (no
token provider call): the server checks an HMAC instead of a signature. A ticket the
server refuses (401/403) is forgotten and the token presented at once, on the same
address. A ticket resumes the identity of the token whose connection it came from.

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
:attr:`AuctionClient.stats`, and Prometheus counters in an
:class:`AuctionClientMetrics` (``metrics=``), one object shared by any number of clients.

**Layout** (python-websockets' sans-I/O style): the decisions live in plain objects
that import neither ``websockets`` nor ``asyncio`` and that tests drive directly, with
``now`` passed in — :class:`ClientCore` (``_core``: what to send after a connect, how
to apply states and updates, which events to emit, what to count in
:class:`ClientStats`), with :class:`HeartbeatMonitor` (``_heartbeat``) and
:class:`BidBook` (``_bids``); :class:`ReconnectPlanner` (``_planner``: which delay
next, when to stop); the events (``_events``), the errors (``_errors``) and
:class:`ClientSettings` (``_settings``). :class:`AuctionClient` (``_asyncio``) is the
thin asyncio driver around them: it feeds the core what happened and carries out each
:class:`Feedback` along one path; ``sleep``, ``clock`` and ``rng`` are injectable for
the reconnect schedule; the in-connection timers (heartbeats, bid retries) run on the
event loop's clock.
"""

from __future__ import annotations

from rideout.client.errors import ClientError
from rideout.client.ws._asyncio import AuctionClient, EventStream, TokenProvider
from rideout.client.ws._bids import BidBook, PendingBid
from rideout.client.ws._core import ClientCore, Feedback, Room, is_newer, order_addresses
from rideout.client.ws._errors import AllReconnectsFailed, ClientClosed, QueueFull
from rideout.client.ws._events import (
    Acked,
    Cause,
    Connected,
    Disconnected,
    Event,
    GaveUp,
    HeartbeatFailed,
    ReconnectScheduled,
    RegionChanged,
    StateRestored,
    Updated,
)
from rideout.client.ws._heartbeat import HeartbeatMonitor
from rideout.client.ws._metrics import AuctionClientMetrics
from rideout.client.ws._planner import Reconnect, ReconnectPlanner, StopReconnecting
from rideout.client.ws._settings import DEFAULT_OPEN_TIMEOUT, ClientSettings
from rideout.client.ws._stats import ClientStats

__all__ = [
    "DEFAULT_OPEN_TIMEOUT",
    "Acked",
    "AllReconnectsFailed",
    "AuctionClient",
    "AuctionClientMetrics",
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
    "StopReconnecting",
    "TokenProvider",
    "Updated",
    "is_newer",
    "order_addresses",
]
