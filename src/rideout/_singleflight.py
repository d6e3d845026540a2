"""Singleflight: identical concurrent reads share one (Go's ``singleflight``, as
Centrifugo PRO does for history).

A flight is one task doing the work for a key; every caller that asks for that key
while it runs waits for it instead of doing the work again. Pure asyncio, no clock:

- a caller's cancellation never cancels the flight (the others still want it; a
  flight left with no caller finishes on its own, and its outcome is dropped);
- an error reaches every caller of the flight, and the next call starts a new one;
- a flight is joined only when its result is good enough for the caller: ``after``
  says "started after this sequence number" (:attr:`SingleFlight.sequence` read
  earlier), for a caller that needs a read begun after something it did (the hub's
  cursor it subscribed at, say). Otherwise a new flight starts, and later callers join
  that one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

__all__ = ["Flight", "SingleFlight"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class Flight(Generic[V]):
    """One shared piece of work: its task and when (in sequence) it started."""

    __slots__ = ("sequence", "task")

    def __init__(self, task: asyncio.Task[V], sequence: int) -> None:
        self.task = task
        self.sequence = sequence

    async def result(self) -> V:
        """The work's result (or its error); cancelling the caller leaves the work running."""
        return await asyncio.shield(self.task)


class SingleFlight(Generic[K, V]):
    """Flights by key; counts what it started and what it shared (for ``/metrics``)."""

    __slots__ = ("_flights", "sequence", "shared")

    def __init__(self) -> None:
        self._flights: dict[K, Flight[V]] = {}
        self.sequence = 0  # flights started so far; each one's number is its place
        self.shared = 0  # calls that joined a flight someone else started

    def __len__(self) -> int:
        return len(self._flights)

    def current(self, key: K) -> Flight[V] | None:
        """The flight for `key` running now, if any."""
        return self._flights.get(key)

    def run(self, key: K, work: Callable[[], Awaitable[V]], *, after: int = -1) -> Flight[V]:
        """The flight for `key`: the running one if it started after sequence `after`
        (by default any), else a new one doing `work()`, which later calls join."""
        flight = self._flights.get(key)
        if flight is not None and flight.sequence > after:
            self.shared += 1
            return flight
        self.sequence += 1
        task = asyncio.ensure_future(work())
        flight = Flight(task, self.sequence)
        self._flights[key] = flight
        task.add_done_callback(lambda done: self._landed(key, flight, done))
        return flight

    async def do(self, key: K, work: Callable[[], Awaitable[V]], *, after: int = -1) -> V:
        """:meth:`run`, then wait for its result."""
        return await self.run(key, work, after=after).result()

    def _landed(self, key: K, flight: Flight[V], task: asyncio.Task[V]) -> None:
        if self._flights.get(key) is flight:
            del self._flights[key]
        if not task.cancelled():
            task.exception()  # retrieved: a flight nobody waits for any more is not an error
