"""Views computed once and shared by every caller, so readers cannot multiply the work.

:class:`SharedFeed` is the dashboard's live feed: one task computes the view at most
once per period, only while someone reads it, within its own timeout, and every reader
awaits the next published frame; readers are capped. :class:`SharedResult` is the
pull-side twin for ``/status``: concurrent callers share one computation and its result
for a while. Neither is ever awaited by the evaluation loop.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Generic, TypeVar

from rideout import _validate
from rideout._tasks import Supervised, TaskSupervisor
from rideout.controlplane.errors import ControlPlaneError
from rideout.store.client import cancel_and_wait

__all__ = ["FeedFull", "SharedFeed", "SharedResult", "Subscription"]

log = logging.getLogger("rideout.controlplane.shared")

T = TypeVar("T")


class FeedFull(ControlPlaneError):
    """Every reader slot of a feed is taken; ``retry_after`` is a hint in seconds."""

    def __init__(self, readers: int, retry_after: float) -> None:
        self.readers = readers
        self.retry_after = retry_after
        super().__init__(f"{readers} readers already: retry in {retry_after:g} s")


class Subscription:
    """One reader's place in a :class:`SharedFeed`; :meth:`close` frees it (idempotent)."""

    def __init__(self, feed: SharedFeed) -> None:
        self._feed = feed
        self.closed = False

    async def frames(self) -> AsyncIterator[bytes]:
        """Every frame published from now on (first the current one, if it is fresh)."""
        version = -1
        while not self.closed:
            frame, version = await self._feed.next_frame(version)
            yield frame

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._feed._leave()


class SharedFeed:
    """`compute` run at most once per `period`, while there are readers, each run within
    `timeout`; at most `max_readers` readers, plus `reserved` more for privileged ones."""

    def __init__(
        self,
        compute: Callable[[], Awaitable[bytes]],
        period: float,
        *,
        timeout: float,
        max_readers: int,
        reserved: int = 0,
        clock: Callable[[], float] = time.monotonic,
        on_readers: Callable[[int], None] | None = None,
    ) -> None:
        self._compute = compute
        self.period = _validate.seconds("period", period)
        self.timeout = _validate.seconds("timeout", timeout)
        self.max_readers = _validate.count("max_readers", max_readers, low=1)
        self.reserved = _validate.count("reserved", reserved)
        self._clock = clock
        self._on_readers = on_readers
        self.readers = 0
        self.computed = 0  # views published
        self.failed = 0  # runs that timed out or raised
        self._frame: bytes | None = None
        self._version = 0
        self._published_at = -float("inf")
        self._published = asyncio.Event()
        self._wanted = asyncio.Event()
        self._task: Supervised | None = None

    def start(self, tasks: TaskSupervisor | None = None) -> None:
        """Run the feed in a task supervised by `tasks` (the process's; None: one of its
        own). Not critical for /health: only the dashboard reads it."""
        if self._task is None:
            self._task = (tasks or TaskSupervisor()).spawn(
                "dashboard-feed", self._run, critical=False
            )

    async def stop(self) -> None:
        if self._task is not None:
            await self._task.stop()
            self._task = None

    def subscribe(self, *, privileged: bool = False) -> Subscription:
        """A reader's slot; raises :class:`FeedFull` when none is left."""
        limit = self.max_readers + (self.reserved if privileged else 0)
        if self.readers >= limit:
            raise FeedFull(self.readers, max(1.0, self.period))
        self.readers += 1
        self._changed()
        self._wanted.set()
        return Subscription(self)

    def _leave(self) -> None:
        self.readers -= 1
        self._changed()

    def _changed(self) -> None:
        if self._on_readers is not None:
            self._on_readers(self.readers)

    async def next_frame(self, after: int) -> tuple[bytes, int]:
        """The first frame newer than version `after` (for a new reader, -1: the current
        frame if it was published within the last period)."""
        while True:
            published = self._published
            if self._frame is not None and self._version > after:
                fresh = self._clock() - self._published_at < self.period
                if after >= 0 or fresh:
                    return self._frame, self._version
            await published.wait()

    def _publish(self, frame: bytes, at: float) -> None:
        self._frame = frame
        self._version += 1
        self._published_at = at
        self.computed += 1
        published, self._published = self._published, asyncio.Event()
        published.set()

    async def _run(self) -> None:
        while True:
            if self.readers == 0:
                self._wanted.clear()
                await self._wanted.wait()
            started = self._clock()
            try:
                async with asyncio.timeout(self.timeout):
                    frame = await self._compute()
            except TimeoutError:
                self.failed += 1
                log.warning("the dashboard view took longer than %g s: skipped", self.timeout)
            except Exception:  # one bad view must not end the feed
                self.failed += 1
                log.exception("the dashboard view failed")
            else:
                self._publish(frame, started)
            await asyncio.sleep(max(0.0, started + self.period - self._clock()))


class SharedResult(Generic[T]):
    """`compute`'s result, shared by concurrent callers and reused for `ttl` seconds."""

    def __init__(
        self,
        compute: Callable[[], Awaitable[T]],
        ttl: float,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._compute = compute
        self.ttl = _validate.seconds("ttl", ttl)
        self._clock = clock
        self._value: tuple[float, T] | None = None
        self._task: asyncio.Task[T] | None = None
        self.computed = 0

    async def get(self) -> T:
        if self._value is not None and self._clock() - self._value[0] < self.ttl:
            return self._value[1]
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._refresh())
        # A caller that goes away does not cancel the others' computation.
        return await asyncio.shield(self._task)

    async def _refresh(self) -> T:
        started = self._clock()
        value = await self._compute()
        self.computed += 1
        self._value = (started, value)
        return value

    async def close(self) -> None:
        if self._task is not None and not self._task.done():
            await cancel_and_wait(self._task)
