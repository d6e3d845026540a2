"""A step awaited every interval, in a task of its own, between start() and stop().

What the epoch tracker, the revocation follower and the store prober run on: the step
must not raise for the failures it expects (each logs and keeps its last value), so that
one bad read never stops the loop. What it did not expect ends the run: the task is
supervised (:mod:`rideout._tasks`), so the death is logged, counted and restarted, and
``/health`` is red until then.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from rideout._tasks import Supervised, TaskSupervisor
from rideout.store.client import check_cancelled

__all__ = ["Polling"]


class Polling:
    """Awaits ``step()``, then sleeps ``interval`` seconds, until stopped."""

    __slots__ = ("_interval", "_name", "_step", "_task")

    def __init__(self, step: Callable[[], Awaitable[object]], interval: float, name: str) -> None:
        self._step = step
        self._interval = interval
        self._name = name
        self._task: Supervised | None = None

    def start(self, tasks: TaskSupervisor | None = None) -> None:
        """Start polling, supervised by `tasks` (the process's; None: a supervisor of its
        own, which restarts it but which no ``/health`` reads)."""
        if self._task is None:
            self._task = (tasks or TaskSupervisor()).spawn(self._name, self._run)

    async def stop(self) -> None:
        if self._task is not None:
            await self._task.stop()
            self._task = None

    async def _run(self) -> None:
        while True:
            check_cancelled()
            await self._step()
            await asyncio.sleep(self._interval)
