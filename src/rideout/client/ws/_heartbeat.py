"""Heartbeat timing and failure counting for one connection (no I/O, ``now`` given)."""

from __future__ import annotations

import math
from collections import deque

__all__ = ["HeartbeatMonitor"]


class HeartbeatMonitor:
    """Heartbeat timing and failure counting for one connection (no I/O, ``now`` given)."""

    def __init__(
        self,
        interval: float,
        timeout: float,
        failures: int,
        *,
        healthy_after_pongs: int = 2,
        healthy_after: float | None = None,
    ) -> None:
        self.interval = interval
        self.timeout = timeout
        self.limit = failures
        self.healthy_after_pongs = healthy_after_pongs
        self.healthy_after = healthy_after
        self.opened_at = 0.0
        self.last_received = 0.0
        self.next_beat = math.inf
        self.unanswered: deque[float] = deque()  # when each unanswered heartbeat left
        self.failures = 0
        self.pongs = 0
        self.healthy = False

    def open(self, now: float) -> None:
        """A connection opened: the first heartbeat is due one interval from now."""
        self.opened_at = self.last_received = now
        self.next_beat = now + self.interval
        self.unanswered.clear()
        self.failures = self.pongs = 0
        self.healthy = False

    def received(self, now: float) -> None:
        """Something arrived (any message keeps the connection alive)."""
        self.last_received = now

    def due(self, now: float) -> bool:
        """Whether a heartbeat should be sent now."""
        return now >= self.next_beat

    def sent(self, now: float) -> None:
        """A heartbeat was sent; schedule the next one."""
        self.unanswered.append(now)
        self.next_beat += self.interval
        if self.next_beat <= now:  # the loop fell behind: do not burst to catch up
            self.next_beat = now + self.interval

    def pong(self, now: float) -> bool:
        """A ``pong``: failures reset. True when this made the connection healthy."""
        if self.unanswered:
            self.unanswered.popleft()
        self.failures = 0
        self.pongs += 1
        return self.check_healthy(now)

    def failure(self) -> int:
        """A heartbeat reply that was not ``pong``: the consecutive count."""
        if self.unanswered:
            self.unanswered.popleft()
        self.failures += 1
        self.pongs = 0
        return self.failures

    @property
    def degraded(self) -> bool:
        """``failures`` consecutive bad replies: force a reconnect."""
        return self.failures >= self.limit

    def timed_out(self, now: float) -> bool:
        """Nothing arrived for ``timeout`` seconds, or a heartbeat went unanswered that long
        (a server that streams updates but no longer answers is not alive either)."""
        oldest = self.unanswered[0] if self.unanswered else math.inf
        return now - min(self.last_received, oldest) >= self.timeout

    def check_healthy(self, now: float) -> bool:
        """True once, when the connection first meets the healthy criterion."""
        if self.healthy:
            return False
        by_time = (
            self.healthy_after is not None
            and now - self.opened_at >= self.healthy_after
            and self.pongs >= 1
            and self.failures == 0
        )
        if self.pongs >= self.healthy_after_pongs or by_time:
            self.healthy = True
            return True
        return False

    def next_wakeup(self) -> float:
        """When :meth:`ClientCore.tick` must run next: a heartbeat or the timeout."""
        oldest = self.unanswered[0] if self.unanswered else math.inf
        wake = min(self.next_beat, min(self.last_received, oldest) + self.timeout)
        if (
            not self.healthy
            and self.healthy_after is not None
            and self.pongs >= 1
            and self.failures == 0
        ):  # the time-based criterion will hold then (and never busy-loops once it has)
            wake = min(wake, self.opened_at + self.healthy_after)
        return wake
