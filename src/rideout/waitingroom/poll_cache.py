"""What each process remembers of the positions it answered ``queue_num`` for.

A numbered position's ``queue_number`` and ``entry_time`` never change (AWS lets its
CDN cache ``queue_num`` for a day), so :class:`PositionCache` keeps them per (event,
request id) and most polls need no Redis. It also paces the abandonment clock: a
poll restarts it (a write to the event's ``seen`` zset, with the poll's time) at most
once per :func:`touch_interval` per request id per process, and that write may wait
up to :data:`TOUCH_DELAY` to go out with others; the sweep allows
:func:`touch_slack` (``model.abandon_slack``, as ``scripts.SWEEP`` does), which covers both, so a visitor who keeps
polling is never abandoned for it.

Pure: no I/O, the caller passes the time. Entries are keyed by the event's
*generation* (a value that a reset and a delete change), so a reset or delete made
through another process is seen as soon as this process reloads the event's settings
(the micro-cache: ``micro_cache_ttl``).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from typing import Final

from rideout import _validate
from rideout.waitingroom.model import ABANDON_SLACK_CAP_MS, Position, PositionState, abandon_slack

__all__ = [
    "DEFAULT_SIZE",
    "TOUCH_CAP",
    "TOUCH_DELAY",
    "PositionCache",
    "touch_interval",
    "touch_slack",
]

DEFAULT_SIZE: Final = 100_000
"""Positions kept per process (about 400 bytes each, the request id included)."""

TOUCH_CAP: Final = ABANDON_SLACK_CAP_MS / 1000
"""The longest touch interval, seconds (``abandon_after`` of 300 s or more)."""

TOUCH_DELAY: Final = 0.5
"""Seconds of the slack kept for a touch's way to Redis (they are written in batches,
about every 50 ms, so a loaded process has room to be late)."""


def touch_slack(abandon_after: float) -> float:
    """Seconds past `abandon_after` the sweep waits before it abandons a position
    (:func:`~rideout.waitingroom.model.abandon_slack`, in seconds; 0: abandonment off)."""
    return abandon_slack(round(abandon_after * 1000)) / 1000


def touch_interval(abandon_after: float) -> float | None:
    """Seconds between two touches of one position's clock by one process: the slack
    less :data:`TOUCH_DELAY` (0: every poll); None when abandonment is off (no touches
    at all)."""
    slack = touch_slack(abandon_after)
    return None if slack == 0 else max(0.0, slack - TOUCH_DELAY)


class _Entry:
    __slots__ = ("entry_time", "generation", "queue_number", "touched_at", "waiting")

    def __init__(
        self, generation: str, queue_number: int, entry_time: int, waiting: bool, touched_at: float
    ) -> None:
        self.generation = generation
        self.queue_number = queue_number
        self.entry_time = entry_time
        self.waiting = waiting
        self.touched_at = touched_at


class PositionCache:
    """Numbered positions' ``(queue_number, entry_time)``, at most `size` of them (the
    least recently polled go first; 0: nothing kept), and when each was last touched.

    ``hits`` and ``misses`` count :meth:`answer`'s calls.
    """

    def __init__(self, size: int = DEFAULT_SIZE) -> None:
        self.size = _validate.count("size", size, low=0)
        self.hits = 0
        self.misses = 0
        self._entries: OrderedDict[tuple[str, str], _Entry] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def answer(self, event_id: str, generation: str, request_id: str) -> tuple[int, int] | None:
        """``(queue_number, entry_time)`` of a position seen in this generation, or None."""
        entry = self._entries.get((event_id, request_id))
        if entry is None or entry.generation != generation:
            self.misses += 1
            return None
        self._entries.move_to_end((event_id, request_id))
        self.hits += 1
        return entry.queue_number, entry.entry_time

    def touch_due(
        self, event_id: str, generation: str, request_id: str, now: float, interval: float | None
    ) -> bool:
        """Whether this poll should restart the position's abandonment clock: never when
        abandonment is off (`interval` None) or the position no longer waits (as this
        process last read it), else when it was not touched for `interval` seconds."""
        if interval is None:
            return False
        entry = self._entries.get((event_id, request_id))
        if entry is None or entry.generation != generation:
            return True
        return entry.waiting and now - entry.touched_at >= interval

    def remember(self, generation: str, position: Position, *, touched: float | None) -> None:
        """Keep a position read from Redis (only a numbered one: a pre-queued position
        gets its number later); `touched` is when this poll touched its clock."""
        if self.size == 0 or position.status is PositionState.PREQUEUED:
            return
        key = (position.event_id, position.request_id)
        old = self._entries.get(key)
        if touched is None:
            touched = (
                old.touched_at if old is not None and old.generation == generation else -math.inf
            )
        self._entries[key] = _Entry(
            generation, position.queue_number, math.floor(position.entry_time),
            position.status is PositionState.WAITING, touched,
        )  # fmt: skip
        self._entries.move_to_end(key)
        while len(self._entries) > self.size:
            self._entries.popitem(last=False)

    def touched(self, event_id: str, request_id: str, at: float | None) -> None:
        """Record a touch of the position's clock at `at` (None: it failed, so the
        next poll touches again)."""
        entry = self._entries.get((event_id, request_id))
        if entry is not None:
            entry.touched_at = -math.inf if at is None else at

    def forget(self, event_id: str) -> None:
        """Drop an event's positions (after a reset or delete made through this process)."""
        for key in [k for k in self._entries if k[0] == event_id]:
            del self._entries[key]
