"""Admission control for a zone's expensive work: replays run a few at a time.

A replay (``getState`` with a position the server can replay from) costs the server
~60 µs of its event loop per update (reading up to ``history_size`` of them from Redis,
decoding, encoding) and Redis a script that returns them all. The per-user budget
(:class:`~rideout.realtime.limits.CostBudget`) bounds what one user takes; it does not
bound the zone: 60 users with valid tokens, each within its budget, started 60 replays
at once on each zone, the loop ran 0.25-0.46 s late, Redis answered a ping up to 0.49 s
late, and the canary's store probe missed its 0.4 s: the region failed over and back,
and autoshift evacuated a zone (docs/realtime-api.md, "Admission").

So each process lets at most :attr:`AdmissionPolicy.concurrency` replays run at once;
the next :attr:`AdmissionPolicy.queue` wait, in order, at most
:attr:`AdmissionPolicy.wait` seconds for a place; the rest, and those whose wait runs
out, are refused at once (``error/throttled`` with a ``retry-after`` hint), which costs
the server a parse and a short answer. What a replay does to others is then bounded:
the loop runs at most `concurrency` replays' callbacks between two of anyone else's,
and Redis at most `concurrency` replay scripts before the canary's probe.

The policy is data; :class:`ReplayGate` is its state in one process (an asyncio
primitive: no I/O, and no clock but the loop's, for the wait's bound).
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Literal

if TYPE_CHECKING:
    from rideout.config import RealtimeConfig

__all__ = ["AdmissionPolicy", "Denied", "ReplayGate"]

Denied = Literal["queue_full", "queue_timeout"]
"""Why :meth:`ReplayGate.enter` refused: no place in the queue, or the wait ran out."""

QUEUE_FULL: Final = "queue_full"
QUEUE_TIMEOUT: Final = "queue_timeout"


@dataclass(frozen=True, slots=True)
class AdmissionPolicy:
    """How many replays one process runs at once, how many wait, and for how long."""

    concurrency: int = 1
    queue: int = 32
    wait: float = 1.0  # seconds a replay may wait for a place before it is refused

    def __post_init__(self) -> None:
        if self.concurrency < 1 or self.queue < 0 or self.wait < 0:
            raise ValueError(f"need concurrency >= 1, queue >= 0, wait >= 0: {self!r}")

    @classmethod
    def for_config(cls, realtime: RealtimeConfig) -> AdmissionPolicy:
        """The policy of ``[realtime]``'s ``max_replays``, ``replay_queue``, ``replay_wait``."""
        return cls(realtime.max_replays, realtime.replay_queue, realtime.replay_wait)


class ReplayGate:
    """At most ``policy.concurrency`` holders at once, ``policy.queue`` waiting (FIFO).

    ``await gate.enter()`` returns None once the caller holds a place (it must call
    :meth:`leave` after), or why it was refused. Counts are kept for ``/metrics``.
    """

    __slots__ = ("_waiting", "policy", "running")

    def __init__(self, policy: AdmissionPolicy) -> None:
        self.policy = policy
        self.running = 0
        self._waiting: deque[asyncio.Future[None]] = deque()

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    async def enter(self) -> Denied | None:
        """Take a place, waiting for one if need be: None, or why not."""
        policy = self.policy
        if self.running < policy.concurrency and not self._waiting:
            self.running += 1
            return None
        if len(self._waiting) >= policy.queue:
            return QUEUE_FULL
        place: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.append(place)
        try:
            async with asyncio.timeout(policy.wait):
                await place
        except TimeoutError:
            if place.done() and not place.cancelled():
                return None  # handed a place just as the wait ran out: keep it
            return QUEUE_TIMEOUT
        except BaseException:
            if place.done() and not place.cancelled():
                self.leave()  # handed a place, then cancelled: pass it on
            raise
        finally:
            if not place.done():
                place.cancel()
            if place in self._waiting:
                self._waiting.remove(place)
        return None

    def leave(self) -> None:
        """Give a place back: to the longest waiting caller, if any."""
        while self._waiting:
            place = self._waiting.popleft()
            if not place.done():
                place.set_result(None)  # the place passes on: `running` is unchanged
                return
        self.running -= 1
