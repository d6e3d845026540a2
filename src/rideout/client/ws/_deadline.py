"""A receive timeout re-armed lazily: one timer for many messages.

The connection loop waits for the next message until the core's next wakeup (a
heartbeat due, a bid retry). With ``asyncio.timeout_at`` around every receive, each
message costs a timeout scope, a timer scheduled and a timer cancelled (in a process
running a thousand clients, py-spy found a sixth of its samples there; ``bench.receive``
measures the scopes alone). :class:`LazyDeadline` keeps one timer and
moves it only when the wakeup comes *earlier*; a timer that fires for a wakeup that has
since moved later is a spurious tick, which the core's ``tick`` tolerates by design (it
acts only on what is due).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable
from typing import TypeVar

__all__ = ["LazyDeadline"]

T = TypeVar("T")


class LazyDeadline:
    """A timeout for the current task's waits, moved only when it must come sooner.

    Create it in the task that waits. :meth:`at_most` bounds when the deadline falls;
    :meth:`wait` runs one wait and raises TimeoutError if the deadline passes first (or
    has already passed), after which the deadline is unset until the next
    :meth:`at_most`. A cancellation of the task from elsewhere is never mistaken for
    the deadline. Call :meth:`close` when done.
    """

    __slots__ = ("_fired", "_handle", "_loop", "_task", "_waiting", "_when")

    def __init__(self) -> None:
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("LazyDeadline must be created inside a task")
        self._loop = asyncio.get_running_loop()
        self._task = task
        # The handle's own when() is not to be relied on: uvloop's call_at returns a
        # plain Handle, which has none, for a time already past.
        self._handle: asyncio.Handle | None = None
        self._when = math.inf
        self._waiting = False
        self._fired = False

    @property
    def when(self) -> float:
        """The loop time the deadline falls at (inf when unset)."""
        return self._when

    @property
    def expired(self) -> bool:
        """Whether the deadline has passed since the last :meth:`wait` ended."""
        return self._fired

    def at_most(self, when: float) -> None:
        """Make the deadline no later than `when` (loop time); an earlier one stays."""
        if self._fired or when >= self.when:
            return
        if self._handle is not None:
            self._handle.cancel()
        self._handle = self._loop.call_at(when, self._expire)
        self._when = when

    def _expire(self) -> None:
        self._handle, self._when = None, math.inf
        self._fired = True
        if self._waiting:
            self._task.cancel()

    async def wait(self, start: Callable[[], Awaitable[T]]) -> T:
        """``await start()``, unless the deadline passes first: then TimeoutError.

        `start` is called only when the deadline has not already passed, so a receive
        that would be cancelled at once is never begun.
        """
        if self._fired:
            self._fired = False
            raise TimeoutError
        self._waiting = True
        try:
            return await start()
        except asyncio.CancelledError:
            if self.expired and self._task.uncancel() == 0:
                self._fired = False
                raise TimeoutError from None
            raise
        finally:
            self._waiting = False

    def close(self) -> None:
        """Cancel the timer (the deadline is no longer wanted)."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle, self._when = None, math.inf
