"""Fan-out: one follower per process reads the room streams its connections watch and
hands each change to every local subscriber, in stream order, encoded once.

Cross-worker and cross-zone delivery comes from Redis: every app server process follows
the same streams, so a change accepted by any server reaches every subscriber of that
room in the region. A connection subscribes *before* it reads the room's state; the
hub's cursor for the room is then at or before that state's position, so nothing after
it can be missed, and the connection drops what it has already seen (see
:class:`Subscriber`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Final, Protocol

from rideout._tasks import Supervised, TaskSupervisor
from rideout.backoff import DelayPolicy, NoJitter
from rideout.protocol import OffsetKey, encode_update, offset_key
from rideout.realtime.metrics import AppMetrics
from rideout.store.auction import AuctionStore, StoreError
from rideout.store.client import check_cancelled

__all__ = ["Hub", "Subscriber"]

log = logging.getLogger("rideout.realtime.hub")

RETRY: Final = NoJitter(base=0.05, cap=2.0)
"""How long the hub waits after its n-th failed read in a row: 0.1 s, 0.2 s, ... 2 s,
for as long as the store fails (the arithmetic cannot overflow, however long that is)."""


class Subscriber(Protocol):
    """What the hub delivers to: a connection's per-room filter and send queue."""

    def deliver(self, room: str, key: OffsetKey, text: str) -> None:
        """Take one encoded update; must not block (the hub serves every subscriber)."""


class Hub:
    """Follows room streams in Redis and dispatches their changes to local subscribers."""

    def __init__(
        self,
        store: AuctionStore,
        region: str,
        metrics: AppMetrics,
        *,
        block_ms: int = 200,
        batch: int = 500,
        clock: Callable[[], float] = time.time,
        retry: DelayPolicy = RETRY,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._store = store
        self._retry = retry
        self._sleep = sleep
        self._region = region
        self._metrics = metrics
        self._block_ms = block_ms
        self._batch = batch
        self._clock = clock
        self._subscribers: dict[str, set[Subscriber]] = {}
        self._cursors: dict[str, str] = {}
        self._starting: dict[str, asyncio.Future[None]] = {}
        self._changed = asyncio.Event()
        self._task: Supervised | None = None

    @property
    def rooms(self) -> frozenset[str]:
        return frozenset(self._subscribers)

    def cursor(self, room: str) -> str | None:
        """The offset the hub has delivered `room` up to (None while not following it):
        a subscriber's state must be at least this new, or it misses what lies between."""
        return self._cursors.get(room)

    def subscriber_count(self, room: str) -> int:
        return len(self._subscribers.get(room, ()))

    async def subscribe(self, room: str, subscriber: Subscriber) -> None:
        """Add `subscriber`; once this returns, every later change of `room` reaches it.

        The first subscriber of a room makes the hub start following its stream from
        the current end. Raises StoreError when the stream cannot be read.
        """
        if room in self._cursors:
            self._subscribers[room].add(subscriber)
            return
        starting = self._starting.get(room)
        if starting is not None:
            await asyncio.shield(starting)
            return await self.subscribe(room, subscriber)
        future = self._starting[room] = asyncio.get_running_loop().create_future()
        try:
            offset = await self._store.last_offset(room)
            self._cursors[room] = offset
            self._subscribers.setdefault(room, set()).add(subscriber)
            future.set_result(None)
            self._changed.set()
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: waiters re-raise their own attempt
            raise
        finally:
            del self._starting[room]

    def unsubscribe(self, room: str, subscriber: Subscriber) -> None:
        """Remove `subscriber` from `room`; the last one out stops the following."""
        subscribers = self._subscribers.get(room)
        if subscribers is None:
            return
        subscribers.discard(subscriber)
        if not subscribers:
            del self._subscribers[room]
            self._cursors.pop(room, None)

    def start(self, tasks: TaskSupervisor | None = None) -> None:
        """Follow the streams in a task supervised by `tasks` (the process's, whose
        ``/health`` is red while the hub is down: a zone without it serves no updates;
        None: a supervisor of its own). A restarted hub keeps its cursors: the updates
        appended while it was down are delivered when it reads again."""
        if self._task is None:
            self._task = (tasks or TaskSupervisor()).spawn("hub", self._run)

    async def stop(self) -> None:
        if self._task is not None:
            await self._task.stop()
            self._task = None

    async def _run(self) -> None:
        failures = 0
        while True:
            check_cancelled()
            if not self._cursors:
                self._changed.clear()
                await self._changed.wait()
                continue
            try:
                updates = await self._store.read_updates(
                    dict(self._cursors), count=self._batch, block_ms=self._block_ms
                )
                failures = 0
            except StoreError as exc:
                # The region's Redis is failing over or gone: keep the subscribers and
                # retry; their clients' heartbeats decide whether to move elsewhere.
                failures += 1
                self._metrics.store_errors.labels("fanout").inc()
                if failures == 1:
                    log.warning("fan-out cannot read the room streams: %s", exc)
                await self._sleep(self._retry.delay(failures))
                continue
            except Exception:
                # A bug must not end fan-out for every subscriber of the zone for good
                # while /health stays green: log it loudly and keep following.
                failures += 1
                self._metrics.store_errors.labels("fanout_internal").inc()
                log.exception("fan-out failed reading the room streams; retrying")
                await self._sleep(self._retry.delay(failures))
                continue
            for room, entry in updates:
                if room not in self._cursors:
                    continue  # the last subscriber left while we read
                offset = entry.position.offset
                self._cursors[room] = offset
                key = offset_key(offset)
                text = encode_update(
                    room=room, state=entry.state, position=entry.position, region=self._region
                )
                for subscriber in tuple(self._subscribers.get(room, ())):
                    try:
                        subscriber.deliver(room, key, text)
                    except Exception:  # one connection's failure is not the room's
                        self._metrics.store_errors.labels("fanout_internal").inc()
                        log.exception("delivering an update of %s failed", room)
                # The entry id is the writer's clock (ms) at append time; on one machine
                # (or NTP-synced hosts) this is append-to-queued latency.
                self._metrics.fanout_latency.observe(max(0.0, self._clock() - key[0] / 1000))
