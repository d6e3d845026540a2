"""How late a process's event loop runs: the delay everything on it waits.

A process whose loop falls behind answers everything late, the canary's heartbeat
included, so a canary's timeout alone cannot tell a slow loop from a slow store or a
long accept queue; this tells the first apart. :class:`LoopLag` keeps the worst lag of the last few seconds (pure,
clock injected); :func:`watch` measures it with a timer that should fire every
`interval` seconds; :class:`LagReport` says when it passes a bound, at most once per
:attr:`LagReport.every` seconds. An app server exports it as
``rideout_event_loop_lag_seconds`` and logs a warning; a canary names its own lag in a
probe's timeout (a canary that stalled cannot tell a slow zone from itself).
"""

from __future__ import annotations

import asyncio
import logging
import statistics
import time
from collections import deque
from collections.abc import Callable

__all__ = ["LagReport", "LoopLag", "watch"]

Clock = Callable[[], float]


class LoopLag:
    """The lags seen within the last `window` seconds: the worst (what the metric and the
    warning show) and the typical one (what load shedding goes by: one long callback
    makes one late timer, a loop that is behind makes them all late)."""

    __slots__ = ("_all", "_samples", "window")

    def __init__(self, window: float = 2.0) -> None:
        self.window = window
        self._samples: deque[tuple[float, float]] = deque()  # (when, lag), lag decreasing
        self._all: deque[tuple[float, float]] = deque()  # (when, lag), every one

    def observe(self, expected: float, now: float) -> float:
        """A timer due at `expected` ran at `now`; returns its lag (never negative)."""
        lag = max(0.0, now - expected)
        samples = self._samples
        while samples and samples[-1][1] <= lag:
            samples.pop()  # a later, larger lag outlives it
        samples.append((now, lag))
        self._all.append((now, lag))
        self._expire(now)
        return lag

    def worst(self, now: float) -> float:
        """The largest lag observed in the window ending `now` (0 when none)."""
        self._expire(now)
        return self._samples[0][1] if self._samples else 0.0

    def typical(self, now: float, count: int) -> float:
        """The median lag of the last `count` timers within the window (0 when none ran).

        By count, not by time: a loop that was blocked (a long callback, a SIGSTOP, a
        paused VM) runs few timers while blocked, so its last second holds one huge lag
        that would be the median; its last ten timers hold it once."""
        self._expire(now)
        recent = [lag for _, lag in list(self._all)[-count:]]
        return statistics.median(recent) if recent else 0.0

    def _expire(self, now: float) -> None:
        since = now - self.window
        for samples in (self._samples, self._all):
            while samples and samples[0][0] < since:
                samples.popleft()


class LagReport:
    """Decides when a lag over `bound` is worth a warning: at most once per `every`
    seconds, with the worst lag and how many times it was passed since the last one."""

    __slots__ = ("_last", "_passed", "_worst", "bound", "every")

    def __init__(self, bound: float, every: float = 5.0) -> None:
        self.bound = bound
        self.every = every
        self._last = float("-inf")
        self._passed = 0
        self._worst = 0.0

    def observe(self, lag: float, now: float) -> str | None:
        """The warning to log now, if any."""
        if lag > self.bound:
            self._passed += 1
            self._worst = max(self._worst, lag)
        if not self._passed or now - self._last < self.every:
            return None
        times = "once" if self._passed == 1 else f"{self._passed} times"
        message = (
            f"the event loop ran up to {self._worst:.2f} s late ({times} over {self.bound:g} s "
            "since the last report): everything on it, the canary's heartbeat too, waits"
        )
        self._last, self._passed, self._worst = now, 0, 0.0
        return message


async def watch(
    lag: LoopLag,
    *,
    interval: float,
    report: LagReport | None = None,
    log: logging.Logger | None = None,
    on_lag: Callable[[float], None] | None = None,
    clock: Clock = time.monotonic,
) -> None:
    """Measure the running loop's lag every `interval` seconds until cancelled; with
    `report`, its warnings go to `log` (default ``rideout``)."""
    logger = log or logging.getLogger("rideout")
    while True:
        expected = clock() + interval
        await asyncio.sleep(interval)
        now = clock()
        late = lag.observe(expected, now)
        if on_lag is not None:
            on_lag(lag.worst(now))
        if report is not None:
            message = report.observe(late, now)
            if message is not None:
                logger.warning("%s", message)
