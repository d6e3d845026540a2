"""The drill's clients: the library's own resilient :class:`~rideout.client.ws.AuctionClient`,
many of them, bidding, with every event that matters recorded with a wall-clock time.

A :class:`GroupSpec` describes a group of clients; :func:`run_group` runs one group in
the current event loop, reporting batches of :mod:`~rideout.drill.records` to a
``sink``. :class:`ClientFleet` runs groups either in this process (small N) or in
spawned worker processes (large N, ``clients_per_process`` each), whose records come
back over a queue.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import os
import queue
import random
import threading
import time
import uuid
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from rideout.auth import SigningKey, TokenIssuer
from rideout.backoff import FullJitter, NoJitter
from rideout.client.errors import ClientError
from rideout.client.resolve import CachingResolver, NameserverResolver, Resolved, Resolver
from rideout.client.ws import (
    Acked,
    AllReconnectsFailed,
    AuctionClient,
    ClientSettings,
    Connected,
    Disconnected,
    Event,
    GaveUp,
    QueueFull,
    ReconnectScheduled,
    StateRestored,
    Updated,
)
from rideout.config import Config
from rideout.drill.records import (
    OUTBID,
    AckRecord,
    AttemptRecord,
    ConnectedRecord,
    DisconnectedRecord,
    DrillRecord,
    FailedRecord,
    GaveUpRecord,
    RejectedRecord,
    RestoredRecord,
)
from rideout.store.client import cancel_and_wait

__all__ = [
    "ClientFleet",
    "GroupSpec",
    "failed_bidders",
    "failed_records",
    "flush_every",
    "run_group",
]

Sink = Callable[[list[DrillRecord]], None]


class Flag(Protocol):
    def is_set(self) -> bool: ...


def region_of(config: Config) -> dict[str, str]:
    """Zone address → region name."""
    return {z.address: r.name for r in config.regions for z in r.zones}


@dataclass(frozen=True, slots=True)
class GroupSpec:
    """A group of drill clients (picklable: it crosses into worker processes)."""

    config: Config
    first: int
    count: int
    rooms: tuple[str, ...]
    prefix: str
    """Bidders are ``{prefix}-{client index}``."""
    jitter: bool = True
    bid_interval: float = 1.0
    """Mean seconds between one client's bids."""
    max_pending: int = 3
    ramp: float = 2.0
    """Seconds over which the group's clients are started."""
    seed: int = 0

    def room(self, cid: int) -> str:
        return self.rooms[cid % len(self.rooms)]

    def bidder(self, cid: int) -> str:
        return f"{self.prefix}-{cid}"


def client_settings(config: Config, jitter: bool) -> ClientSettings:
    """The profile's settings, with full jitter or none as the backoff policy."""
    t = config.timing
    backoff = (
        FullJitter(t.backoff_base, t.backoff_cap)
        if jitter
        else NoJitter(t.backoff_base, t.backoff_cap)
    )
    # A frozen region accepts TCP but never answers the handshake: bound the wait like
    # the heartbeat bounds an open connection (the library default of 10 s is for seed).
    open_timeout = min(10.0, max(2.0, 2 * t.heartbeat_timeout))
    return ClientSettings.from_config(config, backoff=backoff, open_timeout=open_timeout)


class _Resume:
    """When a client's bidder bids out of turn (:attr:`wake`): as soon as the client's
    state is restored, and, while that first bid back is outbid, again once the client
    has seen the price that beat it, until one is accepted. A user whose auction page
    comes back bids, and bids again above the new price; the drill's write RTO is then
    the time until the service takes a write again (and the room's races lost on the
    way), not the drill's own pacing."""

    __slots__ = ("_outbid_at", "_price", "_resuming", "wake")

    def __init__(self) -> None:
        self._resuming = False  # restored, and no bid accepted since
        self._price = 0  # the highest bid the client has seen in its room
        self._outbid_at: int | None = None  # outbid while resuming: bid once the price shows
        self.wake = asyncio.Event()

    def observe(self, event: Event) -> None:
        if isinstance(event, StateRestored):
            self._resuming, self._outbid_at, self._price = True, None, 0
            self._saw(event.state)
            self.wake.set()
        elif isinstance(event, Updated):
            self._saw(event.state)
        elif isinstance(event, Acked):
            if event.accepted:
                self._resuming, self._outbid_at = False, None
            elif self._resuming and event.reason == OUTBID:
                self._outbid_at = event.amount
            # The ack names the room's state it was decided against: for an outbid
            # bid, the price that beat it, which its update may not have shown yet.
            self._saw(event.state)

    @property
    def price(self) -> int:
        """The highest bid the client has seen in its room (updates and acks)."""
        return self._price

    def _saw(self, state: Any) -> None:
        bid = state.get("bid") if isinstance(state, dict) else None
        if isinstance(bid, int) and not isinstance(bid, bool):
            self._price = max(self._price, bid)
        if self._outbid_at is not None and self._price >= self._outbid_at:
            self._outbid_at = None
            self.wake.set()


class _ClientRecorder:
    """One client's records: its events (:meth:`on_event`) and its connection attempts;
    it also passes the events to the client's :class:`_Resume` (``resume``)."""

    __slots__ = ("_bidder", "_cid", "_due", "_out", "_regions", "_resume", "_sent")

    def __init__(self, cid: int, bidder: str, regions: dict[str, str], out: list[DrillRecord]):
        self._cid = cid
        self._bidder = bidder
        self._regions = regions
        self._out = out
        self._due: float | None = None  # when the pending reconnect's backoff ends
        self._resume = _Resume()
        self._sent: dict[str, float] = {}  # bid id -> when it was submitted

    @property
    def resume(self) -> asyncio.Event:
        """Set when the client's bidder should bid now (:class:`_Resume`)."""
        return self._resume.wake

    @property
    def price(self) -> int:
        """The highest bid the client has seen since its last restore (:class:`_Resume`)."""
        return self._resume.price

    def submitting(self) -> str:
        """The id of a bid submitted now: its ack's record carries the round trip."""
        request_id = str(uuid.uuid4())
        self._sent[request_id] = time.time()
        return request_id

    def not_submitted(self, request_id: str) -> None:
        """The client refused the bid (its queue is full): no ack will come."""
        self._sent.pop(request_id, None)

    def on_event(self, event: Event) -> None:
        now, cid = time.time(), self._cid
        self._resume.observe(event)
        if isinstance(event, Acked):
            sent = self._sent.pop(event.id, None)
            rtt = None if sent is None else now - sent
            region = event.region or "?"
            if event.accepted:
                offset = event.position.offset if event.position else None
                ack = AckRecord(
                    cid, now, event.room, self._bidder, event.amount, offset, region, rtt
                )
                self._out.append(ack)
            else:
                self._out.append(RejectedRecord(cid, now, event.reason or "?", region, rtt))
        elif isinstance(event, StateRestored):
            self._out.append(RestoredRecord(cid, now, event.region))
        elif isinstance(event, Connected):
            self._out.append(ConnectedRecord(cid, now, self._regions.get(event.address, "?")))
        elif isinstance(event, Disconnected):
            self._out.append(DisconnectedRecord(cid, now, self._regions.get(event.address, "?")))
        elif isinstance(event, ReconnectScheduled):
            self._due = now + event.delay
        elif isinstance(event, GaveUp):
            self._out.append(GaveUpRecord(cid, now))

    def take_due(self, started: float) -> float:
        """When the attempt starting now was due (now, if no backoff came before it)."""
        due, self._due = self._due, None
        return started if due is None else due

    def attempt(self, started: float, due: float, addresses: tuple[str, ...]) -> None:
        region = self._regions.get(addresses[0], "?") if addresses else "?"
        self._out.append(AttemptRecord(self._cid, started, region, due))


class _RecordingResolver:
    """Records each resolution (one per connection attempt) by the region it answered.

    The time is when the resolution *started*: the moment the attempt began. Taken after
    the answer, it would include the DNS server's queue, which on one machine spreads a
    herd of simultaneous attempts over however long one server takes to answer them all.
    """

    def __init__(self, inner: Resolver, recorder: _ClientRecorder):
        self._inner = inner
        self._recorder = recorder

    async def resolve(self, name: str) -> Resolved:
        started = time.time()
        due = self._recorder.take_due(started)
        answer = await self._inner.resolve(name)
        self._recorder.attempt(started, due, answer.addresses)
        return answer

    def invalidate(self, name: str | None = None) -> None:
        """Forget the inner resolver's answer (see :class:`~rideout.client.resolve.Resolver`)."""
        forget = getattr(self._inner, "invalidate", None)
        if callable(forget):
            forget(name)


async def flush_every(out: list[Any], sink: Callable[[list[Any]], None], interval: float) -> None:
    """Hand ``out``'s records to ``sink`` in batches every ``interval`` s (until cancelled)."""
    while True:
        await asyncio.sleep(interval)
        if out:
            batch = out[:]
            del out[: len(batch)]
            sink(batch)


def failed_records(clients: Sequence[AuctionClient], first: int, t: float) -> list[FailedRecord]:
    """A record for each client (numbered from `first`) whose connection loop died of an
    unexpected error; one that gave up has its own record (:class:`GaveUpRecord`)."""
    return [
        FailedRecord(cid, t, repr(client.error))
        for cid, client in enumerate(clients, first)
        if client.error is not None and not isinstance(client.error, AllReconnectsFailed)
    ]


def failed_bidders(outcomes: Sequence[object], first: int, t: float) -> list[FailedRecord]:
    """A record for each bidder (numbered from `first`) that died of an unexpected error:
    not cancelled at the end, not stopped because its client had ended (a
    :class:`ClientError`, which the client's own record covers)."""
    return [
        FailedRecord(cid, t, f"bidder: {outcome!r}")
        for cid, outcome in enumerate(outcomes, first)
        if isinstance(outcome, BaseException)
        and not isinstance(outcome, asyncio.CancelledError | ClientError)
    ]


async def run_group(spec: GroupSpec, sink: Sink, bidding: Flag, stop: Flag) -> None:
    """Run ``spec``'s clients until ``stop`` is set; bid while ``bidding`` is set."""
    config = spec.config
    regions = region_of(config)
    key = SigningKey.load_or_create(config.keys_dir)
    a = config.auth
    issuer = TokenIssuer(key, a.issuer, a.audience, max(a.token_ttl, 3600.0))
    settings = client_settings(config, spec.jitter)
    cp = config.control_plane
    out: list[DrillRecord] = []
    rng = random.Random(spec.seed)
    clients: list[AuctionClient] = []
    tasks: list[asyncio.Task[None]] = []

    async def bidder(client: AuctionClient, cid: int, recorder: _ClientRecorder) -> None:
        room, resume = spec.room(cid), recorder.resume
        last = 0
        local = random.Random(spec.seed * 1_000_003 + cid)
        while True:
            # The next turn of the client's pace, or sooner when the recorder says so.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(resume.wait(), spec.bid_interval * local.uniform(0.5, 1.5))
            resume.clear()
            if not bidding.is_set() or not client.ready or client.pending_bids >= spec.max_pending:
                continue
            known = client.rooms.get(room)
            state = known.state if known is not None else None
            current = state.get("bid") if isinstance(state, dict) else None
            # The room's view, or a price an ack named that its update has not yet shown.
            base = max(last, current if isinstance(current, int) else 0, recorder.price)
            amount = base + local.randint(1, 5)
            last = amount
            request_id = recorder.submitting()  # timed before the send: the ack may come first
            try:
                await client.bid(room, amount, request_id)
            except (QueueFull, ValueError):
                recorder.not_submitted(request_id)

    flusher = asyncio.create_task(flush_every(out, sink, 0.05))
    try:
        for cid in range(spec.first, spec.first + spec.count):
            sub = spec.bidder(cid)
            token = issuer.issue(sub)
            inner = CachingResolver(NameserverResolver(cp.address, cp.dns_port))
            recorder = _ClientRecorder(cid, sub, regions, out)
            client = AuctionClient.from_config(
                config,
                token=token,
                resolver=_RecordingResolver(inner, recorder),
                settings=settings,
                rooms=[spec.room(cid)],
                rng=random.Random(rng.random()),
                on_event=recorder.on_event,
            )
            client.start()
            clients.append(client)
            tasks.append(asyncio.create_task(bidder(client, cid, recorder)))
            if spec.count > 1:
                await asyncio.sleep(spec.ramp / spec.count)
        # `stop` is a threading or multiprocessing event (set from another process).
        while not stop.is_set():  # noqa: ASYNC110
            await asyncio.sleep(0.05)
    finally:
        out.extend(failed_records(clients, spec.first, time.time()))
        for task in tasks:
            task.cancel()
        outcomes = await asyncio.gather(*tasks, return_exceptions=True)
        out.extend(failed_bidders(outcomes, spec.first, time.time()))
        await asyncio.gather(*(c.stop() for c in clients), return_exceptions=True)
        await cancel_and_wait(flusher)
        if out:
            sink(out[:])
            out.clear()


Runner = Callable[..., Coroutine[Any, Any, None]]
"""Runs one group spec until ``stop`` is set: :func:`run_group`, or the surge drill's
visitors (a module-level function, so that spawned workers can import it)."""


def _worker(
    runner: Runner, spec: Any, results: Any, bidding: Any, stop: Any, nice: int = 0
) -> None:
    """A worker process: one group, records batched onto ``results``; `nice` lowers its
    scheduling priority first."""
    if nice:
        os.nice(nice)
    logging.basicConfig(level=logging.ERROR)
    logging.getLogger("rideout.client.ws").setLevel(logging.ERROR)

    def sink(batch: list[DrillRecord]) -> None:
        results.put(batch)

    try:
        with asyncio.Runner(loop_factory=fleet_loop_factory()) as runner_loop:
            runner_loop.run(runner(spec, sink, bidding, stop))
    finally:
        results.put(None)


def fleet_loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The event loop the fleet's worker processes run: uvloop where it is installed (it
    comes with uvicorn[standard], and the app servers run on it), else asyncio's own.

    The fleet shares the machine with what it measures: 1,000 clients' three workers
    took 88% (of two cores' 200%) before a fault on asyncio's loop and 76% on uvloop, and
    the median connect of the herd went from 1.0 s to 0.5 s (one run each; drill.md).
    """
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency where it builds
        return None
    return uvloop.new_event_loop


class ClientFleet:
    """Many groups of clients, in this process or in spawned workers. ``runner`` runs
    one group (default: the region-outage drill's bidders, :func:`run_group`); the
    workers run `nice` (os.nice) below this process."""

    def __init__(
        self,
        specs: Sequence[Any],
        *,
        processes: bool,
        runner: Runner | None = None,
        nice: int = 0,
    ) -> None:
        if nice and not processes:
            raise ValueError("a fleet without worker processes cannot run at another niceness")
        self.specs = list(specs)
        self.nice = nice
        self.runner: Runner = runner or run_group
        self.processes = processes
        self.records: list[DrillRecord] = []
        self._lock = threading.Lock()
        self._procs: list[multiprocessing.process.BaseProcess] = []
        self._reader: threading.Thread | None = None
        self._tasks: list[asyncio.Task[None]] = []
        if processes:
            ctx = multiprocessing.get_context("spawn")
            self._queue: Any = ctx.Queue()
            self.bidding: Any = ctx.Event()
            self.stopping: Any = ctx.Event()
            self._ctx = ctx
        else:
            self.bidding = threading.Event()
            self.stopping = threading.Event()

    @property
    def clients(self) -> int:
        return sum(s.count for s in self.specs)

    def _add(self, batch: list[DrillRecord]) -> None:
        with self._lock:
            self.records.extend(batch)

    def snapshot(self) -> list[DrillRecord]:
        with self._lock:
            return list(self.records)

    def start(self) -> None:
        if not self.processes:
            for spec in self.specs:
                self._tasks.append(
                    asyncio.create_task(self.runner(spec, self._add, self.bidding, self.stopping))
                )
            return
        for spec in self.specs:
            proc = self._ctx.Process(
                target=_worker,
                args=(self.runner, spec, self._queue, self.bidding, self.stopping, self.nice),
                name=f"rideout-drill-clients-{spec.first}",
                daemon=True,
            )
            proc.start()
            self._procs.append(proc)
        self._reader = threading.Thread(target=self._read, name="drill-records", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        ended = 0
        while ended < len(self._procs):
            try:
                batch = self._queue.get(timeout=0.5)
            except queue.Empty:
                if not any(p.is_alive() for p in self._procs):
                    break
                continue
            if batch is None:
                ended += 1
            else:
                self._add(batch)

    async def stop(self, timeout: float = 20.0) -> None:
        """Stop every client (their records are collected) and every worker process."""
        self.bidding.clear()
        self.stopping.set()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
            self._tasks.clear()
        if self._procs:
            deadline = time.monotonic() + timeout
            for proc in self._procs:
                await asyncio.to_thread(proc.join, max(0.1, deadline - time.monotonic()))
            for proc in self._procs:
                if proc.is_alive():
                    proc.kill()
                    await asyncio.to_thread(proc.join, 5)
            if self._reader is not None:
                await asyncio.to_thread(self._reader.join, 5)
            self._queue.close()
            self._queue.join_thread()
            self._procs.clear()
