"""The waiting room's in-process micro-cache: what a surge of polls for an event's shared
values (its counters, settings, serving history) costs Redis is one read per event per
``micro_cache_ttl`` in each process."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, cast

from rideout.waitingroom.errors import UnknownEvent

__all__ = ["MicroCache"]

T = TypeVar("T")


class MicroCache:
    """Values kept for `ttl` seconds per key; concurrent misses of one key share one
    load (a surge of polls is one Redis read). ``loads`` counts the reads made."""

    def __init__(
        self,
        ttl: float,
        *,
        clock: Callable[[], float] = time.monotonic,
        on_load: Callable[[], None] | None = None,
    ) -> None:
        self.ttl = ttl
        self.clock = clock
        self.loads = 0
        self._on_load = on_load
        self._values: dict[tuple[str, str], tuple[float, Any]] = {}
        self._pending: dict[tuple[str, str], asyncio.Future[Any]] = {}

    async def get(self, key: tuple[str, str], load: Callable[[], Awaitable[T]]) -> T:
        """The cached value of `key`, or `load()`'s (an UnknownEvent is cached too)."""
        if self.ttl <= 0:
            self._loaded()
            return await load()
        now = self.clock()
        hit = self._values.get(key)
        if hit is not None and hit[0] > now:
            return cast(T, self._unwrap(hit[1]))
        pending = self._pending.get(key)
        if pending is not None:
            return cast(T, self._unwrap(await asyncio.shield(pending)))
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[key] = future
        try:
            self._loaded()
            try:
                value: Any = await load()
            except UnknownEvent as exc:
                value = exc
            except BaseException as exc:
                future.set_exception(exc)
                future.exception()  # retrieved: waiters re-raise it, nobody logs it
                raise
            future.set_result(value)
            self._values[key] = (self.clock() + self.ttl, value)
            if len(self._values) > 10_000:
                self._values.clear()  # bounded: unknown event ids cannot grow it forever
            return cast(T, self._unwrap(value))
        finally:
            del self._pending[key]

    def _loaded(self) -> None:
        self.loads += 1
        if self._on_load is not None:
            self._on_load()

    @staticmethod
    def _unwrap(value: Any) -> Any:
        if isinstance(value, UnknownEvent):
            raise value
        return value

    def forget(self, event_id: str) -> None:
        """Drop an event's values (after a change made through this process)."""
        for key in [k for k in self._values if k[0] == event_id]:
            del self._values[key]
