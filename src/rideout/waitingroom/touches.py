"""Touches of the abandonment clock that ``queue_num`` answered from the process's cache
queue up here and go to Redis together: one round trip per :data:`_TOUCH_BATCH` for
every poll in between (docs/waiting-room.md, "How polls reach Redis")."""

from __future__ import annotations

import asyncio
import logging
from typing import Final

from rideout.store.client import cancel_and_wait
from rideout.store.errors import StoreError
from rideout.waitingroom.errors import RoomError
from rideout.waitingroom.metrics import RoomMetrics
from rideout.waitingroom.poll_cache import PositionCache
from rideout.waitingroom.store import RoomStore

__all__ = ["TouchBatch"]

_TOUCH_BATCH: Final = 0.05  # seconds a queued touch waits for others (< poll_cache.TOUCH_DELAY)
log = logging.getLogger("rideout.waitingroom")


class TouchBatch:
    """The touches queued in one process, written to `store` in batches; `positions`
    learns which were written (one not written is touched again at its next poll)."""

    def __init__(
        self, store: RoomStore, positions: PositionCache, metrics: RoomMetrics | None = None
    ) -> None:
        self.store = store
        self.positions = positions
        self.metrics = metrics
        self._touches: dict[str, dict[str, float]] = {}  # event -> request id -> poll time
        self._flusher: asyncio.Task[None] | None = None

    def later(self, event_id: str, request_id: str, now: float) -> None:
        """Queue a touch of the position's clock (with the poll's time) for the next
        batch, written within about :data:`_TOUCH_BATCH` seconds."""
        if self.metrics is not None:
            self.metrics.position_touches.inc()
        self.positions.touched(event_id, request_id, now)
        self._touches.setdefault(event_id, {})[request_id] = now
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.get_running_loop().create_task(self._flush_soon())

    async def _flush_soon(self) -> None:
        while True:  # touches queued while a batch was being written go in the next
            await asyncio.sleep(_TOUCH_BATCH)
            await self.flush()
            if not self._touches:
                return

    async def flush(self) -> None:
        """Write the queued touches now, in one round trip. Those that could not be
        written (a replica, an outage) are touched again at their next poll."""
        batch, self._touches = self._touches, {}
        if not batch:
            return
        try:
            written = await self.store.touch_many(batch)
        except (RoomError, StoreError) as exc:
            log.debug("touches not written (again at the next polls): %s", exc)
            written = False
        if not written:
            for event_id, polls in batch.items():
                for request_id in polls:
                    self.positions.touched(event_id, request_id, None)

    async def aclose(self) -> None:
        """Write the touches still queued (at shutdown)."""
        flusher, self._flusher = self._flusher, None
        if flusher is not None and not flusher.done():
            await cancel_and_wait(flusher)
        await self.flush()
