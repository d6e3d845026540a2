"""Which writer epoch this server believes in.

Bids carry this belief into the Lua script, which refuses them when the writer's epoch
differs: that is how a server attached to a writer that has been fenced stops changing
state. The belief is re-read periodically and whenever a bid is refused as stale.

The belief comes from outside the server's own Redis, from the control plane's
``/v1/writer`` (:func:`control_plane_epoch`): a Redis that was the writer before a
failover still holds the old epoch, and a server that asked only it would never notice.
Until the control plane has answered once (at start-up, or when a server runs without
one) the server's own Redis is asked instead.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import httpx

from rideout._tasks import TaskSupervisor
from rideout.realtime.polling import Polling

__all__ = ["EpochTracker", "control_plane_epoch", "control_plane_writer"]

log = logging.getLogger("rideout.realtime.epoch")


async def control_plane_epoch(http: httpx.AsyncClient, url: str) -> int | None:
    """The writer epoch the control plane announces at `url`; None if it cannot say."""
    return (await control_plane_writer(http, url))[0]


async def control_plane_writer(
    http: httpx.AsyncClient, url: str
) -> tuple[int | None, str | None, str | None]:
    """The writer's epoch, region and Redis (``host:port``) announced at `url`; None
    for what it cannot say."""
    try:
        response = await http.get(url)
        if response.status_code != 200:
            return None, None, None
        data = response.json()
        epoch, region, redis = data.get("epoch"), data.get("region"), data.get("redis")
    except (httpx.HTTPError, ValueError, AttributeError):
        return None, None, None
    good = isinstance(epoch, int) and not isinstance(epoch, bool)
    return (
        epoch if good else None,
        region if isinstance(region, str) else None,
        redis if isinstance(redis, str) else None,
    )


class EpochTracker:
    """Holds the last epoch read from `source`; refreshes it every `interval` seconds."""

    def __init__(
        self,
        source: Callable[[], Awaitable[int | None]],
        interval: float,
        on_change: Callable[[int], None] | None = None,
        *,
        fallback: Callable[[], Awaitable[int | None]] | None = None,
    ) -> None:
        self._source = source
        self._fallback = fallback
        self.authoritative = False  # the source has answered at least once
        self._on_change = on_change
        self.value: int | None = None
        self._polling = Polling(self.refresh, interval, "epoch")

    async def refresh(self) -> int | None:
        """Read the epoch now; keep the old value when the source cannot answer."""
        try:
            value = await self._source()
            if value is not None:
                self.authoritative = True
            elif not self.authoritative and self._fallback is not None:
                value = await self._fallback()
        except Exception as exc:  # the source is I/O; its failure must not stop serving
            log.warning("cannot read the writer epoch: %s", exc)
            return self.value
        if value is not None and value != self.value:
            if self.value is not None:
                log.info("writer epoch changed: %s -> %s", self.value, value)
            self.value = value
            if self._on_change is not None:
                self._on_change(value)
        return self.value

    def start(self, tasks: TaskSupervisor | None = None) -> None:
        self._polling.start(tasks)

    async def stop(self) -> None:
        await self._polling.stop()
