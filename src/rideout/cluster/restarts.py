"""When to restart a child that died, and when to give up on it: pure, with an injected clock.

The rule is systemd's ``Restart=on-failure`` with a start limit (``StartLimitBurst`` in
``StartLimitIntervalSec``), with the delay drawn from a :mod:`rideout.backoff` policy:

- a child that dies without being told to is restarted after
  ``policy.backoff.delay(n)`` seconds, where ``n`` is the number of restarts within the
  last ``policy.window`` seconds (full jitter by default: ``uniform(0, min(cap, base·2ⁿ))``,
  so a crash-looping child backs off and children that died together do not all come
  back in the same instant);
- once ``policy.max_restarts`` restarts fall within one window, the next death is final:
  the child stays down, "crash-looping, gave up after N restarts";
- a restart ages out of the window, so a child that runs for a window starts from the
  shortest delay again;
- a child stopped on purpose (chaos, shutdown) is not this module's business: the
  supervisor never asks it about one. :meth:`RestartHistory.reset` forgets the window
  and a give-up (``rideout chaos restore``); the total count is kept, as Prometheus
  counters are.
"""

from __future__ import annotations

import random
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from rideout import _validate
from rideout.backoff import DelayPolicy, FullJitter

__all__ = ["RestartHistory", "RestartPolicy", "Verdict"]


@dataclass(frozen=True, slots=True)
class RestartPolicy:
    """How a supervisor restarts a child: the delay policy, the limit and its window."""

    backoff: DelayPolicy = field(default_factory=lambda: FullJitter(base=0.5, cap=10.0))
    max_restarts: int = 5
    window: float = 60.0

    def __post_init__(self) -> None:
        _validate.count("max_restarts", self.max_restarts, low=0)
        _validate.seconds("window", self.window)


@dataclass(frozen=True, slots=True)
class Verdict:
    """What to do about one death: restart after `delay` seconds, or give up."""

    restart: bool
    delay: float
    recent: int  # restarts within the window, this one included when `restart`
    reason: str


class RestartHistory:
    """One child's restarts, judged by `policy` on `clock` (seconds, monotonic)."""

    def __init__(
        self,
        policy: RestartPolicy | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
    ) -> None:
        self.policy = policy or RestartPolicy()
        self._clock = clock
        self._rng = rng
        self._recent: deque[float] = deque()
        self.total = 0
        self.gave_up = False

    def _prune(self, now: float) -> None:
        while self._recent and self._recent[0] <= now - self.policy.window:
            self._recent.popleft()

    def recent(self) -> int:
        """Restarts within the last window."""
        self._prune(self._clock())
        return len(self._recent)

    def died(self) -> Verdict:
        """The child died on its own: restart it (counted now) or give up for good."""
        policy = self.policy
        if self.gave_up:
            return Verdict(False, 0.0, len(self._recent), self.give_up_reason())
        now = self._clock()
        self._prune(now)
        n = len(self._recent)
        if n >= policy.max_restarts:
            self.gave_up = True
            return Verdict(False, 0.0, n, self.give_up_reason())
        delay = policy.backoff.delay(n, self._rng)
        self._recent.append(now)
        self.total += 1
        return Verdict(
            True,
            delay,
            n + 1,
            f"restart {n + 1} of at most {policy.max_restarts} in {policy.window:g} s",
        )

    def give_up_reason(self) -> str:
        return f"crash-looping, gave up after {self.policy.max_restarts} restarts"

    def reset(self) -> None:
        """Forget the window and any give-up (the child was restored on purpose)."""
        self._recent.clear()
        self.gave_up = False
