"""A step awaited every interval, in a task of its own, between start() and stop().

What the epoch tracker and the revocation follower run on: the step must not raise for
the failures it expects (each logs and keeps its last value), so that one bad read never
stops the loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from rideout.store.client import cancel_and_wait, check_cancelled

__all__ = ["Polling"]


class Polling:
    """Awaits ``step()``, then sleeps ``interval`` seconds, until stopped."""

    __slots__ = ("_interval", "_name", "_step", "_task")

    def __init__(self, step: Callable[[], Awaitable[object]], interval: float, name: str) -> None:
        self._step = step
        self._interval = interval
        self._name = name
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=self._name)

    async def stop(self) -> None:
        if self._task is not None:
            await cancel_and_wait(self._task)
            self._task = None

    async def _run(self) -> None:
        while True:
            check_cancelled()
            await self._step()
            await asyncio.sleep(self._interval)
