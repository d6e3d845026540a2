"""What one user, one client address or the zone as a whole may take of an app server:
connection caps with a reserve for the canary, a cost budget per user, and load shedding
while the event loop runs late.

Pure: no I/O, the clock and the randomness are injected. The WebSocket endpoint
(:mod:`~rideout.realtime.connection`) asks :class:`LoadShedder` and
:class:`ConnectionCaps` before every upgrade and :class:`CostBudget` before every
``getState``; all count per app server process (worker), as the per-connection
:class:`TokenBucket` does for messages.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Literal

if TYPE_CHECKING:
    from rideout.config import RealtimeConfig

__all__ = ["ConnectionCaps", "CostBudget", "LoadShedder", "Refusal", "TokenBucket"]

Clock = Callable[[], float]

TOO_MANY_FOR_USER: Final = "too_many_connections"
TOO_MANY_FROM_ADDRESS: Final = "too_many_connections_from_address"
ZONE_FULL: Final = "zone_full"
DEMO_FULL: Final = "demo_full"
OVERLOADED: Final = "overloaded"


class TokenBucket:
    """`rate` tokens per second, at most `burst` at once. Pure: the clock is injected.

    :meth:`take` spends one token if there is one (a message); :meth:`spend` spends a
    cost known only afterwards and may leave the bucket in debt, which :meth:`wait`
    reports until it is paid back.
    """

    __slots__ = ("_clock", "_last", "_tokens", "burst", "rate")

    def __init__(self, rate: float, burst: int, clock: Clock = time.monotonic) -> None:
        self.rate = rate
        self.burst = burst
        self._clock = clock
        self._tokens = float(burst)
        self._last = clock()

    def _refill(self) -> float:
        now = self._clock()
        self._tokens = min(self.burst, self._tokens + (now - self._last) * self.rate)
        self._last = now
        return self._tokens

    def take(self) -> bool:
        """Spend one token if there is one."""
        if self._refill() >= 1:
            self._tokens -= 1
            return True
        return False

    def spend(self, cost: float) -> None:
        """Spend `cost` tokens, going into debt if there are fewer (a negative cost gives
        tokens back, never beyond the burst)."""
        self._tokens = min(self.burst, self._refill() - cost)

    def wait(self) -> float:
        """Seconds until a token is there (0 when one is there now)."""
        missing = 1 - self._refill()
        return max(0.0, missing / self.rate)

    def full(self) -> bool:
        """As good as a new bucket: forgetting it loses nothing."""
        return self._refill() >= self.burst


class CostBudget:
    """A :class:`TokenBucket` per user, shared by that user's connections.

    A request may start while its user's bucket is not in debt (:meth:`wait` is 0); the
    caller charges the most it can cost before it starts and gives back the difference
    once the real cost is known (:meth:`charge` with a negative cost): one expensive
    request goes through, the next waits until the debt is paid back. Buckets that have refilled
    are forgotten, so the table holds only users who spent recently.
    """

    __slots__ = ("_buckets", "_clock", "_prune_at", "burst", "rate")

    def __init__(self, rate: float, burst: int, clock: Clock = time.monotonic) -> None:
        self.rate = rate
        self.burst = burst
        self._clock = clock
        self._buckets: dict[str, TokenBucket] = {}
        self._prune_at = 64

    @classmethod
    def for_config(cls, realtime: RealtimeConfig) -> CostBudget:
        """The replay budget of ``[realtime]``."""
        return cls(realtime.replay_rate, realtime.replay_burst)

    def wait(self, user: str) -> float:
        """Seconds until `user` may start another request (0: now)."""
        bucket = self._buckets.get(user)
        return 0.0 if bucket is None else bucket.wait()

    def charge(self, user: str, cost: float) -> None:
        """Charge `user` for a request that cost `cost`."""
        bucket = self._buckets.get(user)
        if bucket is None:
            if len(self._buckets) >= self._prune_at:
                self._prune()
            bucket = self._buckets[user] = TokenBucket(self.rate, self.burst, self._clock)
        bucket.spend(cost)

    def __len__(self) -> int:
        return len(self._buckets)

    def _prune(self) -> None:
        self._buckets = {u: b for u, b in self._buckets.items() if not b.full()}
        self._prune_at = max(64, 2 * len(self._buckets))


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why an upgrade is refused: the HTTP status, the JSON ``error``, a message."""

    status: int
    reason: str
    message: str


class ConnectionCaps:
    """Open WebSocket connections by user and by client address, against their caps.

    `total` is the process's whole budget; `reserved` of it only probes (the canary) may
    use (ordinary connections stop at ``total - reserved``), so a zone that attackers
    have filled still answers its canary. Connections of demo identities (tokens of the
    demo sign-in, which anyone can get) stop at `demo`, their share: ordinary users
    always keep ``total - reserved - demo`` (and may use the share's free places), so
    demo names made by the thousand cannot keep them out. With `demo` 0, none open.
    Probes are exempt from the per-user and per-address caps. A cap of 0 is no cap.
    """

    __slots__ = (
        "_by_address", "_by_user", "demo", "demos", "open", "per_address", "per_user",
        "probes", "reserved", "total",
    )  # fmt: skip

    def __init__(
        self, total: int, reserved: int, per_user: int, per_address: int, demo: int = 0
    ) -> None:
        self.total = total
        self.reserved = reserved
        self.per_user = per_user
        self.per_address = per_address
        self.demo = demo
        self.open = 0  # connections, probes and demos included
        self.probes = 0
        self.demos = 0
        self._by_user: dict[str, int] = {}
        self._by_address: dict[str, int] = {}

    @classmethod
    def for_config(
        cls, realtime: RealtimeConfig, total: int | None = None, *, demo_tokens: bool = False
    ) -> ConnectionCaps:
        """The caps of ``[realtime]``; `total` in place of ``max_connections`` (the app
        passes it lowered to fit the open-file limit). The demo share is
        ``max_demo_connections`` with `demo_tokens` on (``[auth] demo_tokens``), at most
        half of what ordinary users may open; 0 with them off."""
        total = realtime.max_connections if total is None else total
        ordinary = total - realtime.reserved_connections
        demo = min(realtime.max_demo_connections, max(0, ordinary // 2)) if demo_tokens else 0
        return cls(
            total, realtime.reserved_connections, realtime.max_connections_per_user,
            realtime.max_connections_per_address, demo,
        )  # fmt: skip

    def admit(
        self, user: str, address: str, *, probe: bool = False, demo: bool = False
    ) -> Refusal | None:
        """Count a new connection, or say why it may not open (and count nothing)."""
        ordinary = self.open - self.probes
        if self.open >= self.total or (not probe and ordinary >= self.total - self.reserved):
            return Refusal(503, ZONE_FULL, "this server is at its connection limit; retry later")
        if demo and not probe and self.demos >= self.demo:
            return Refusal(
                503, DEMO_FULL,
                f"this server's {self.demo} connections for demo sign-ins are taken; retry "
                "later, or connect with a token of the deployment's own",
            )  # fmt: skip
        if not probe:
            if self.per_user and self._by_user.get(user, 0) >= self.per_user:
                return Refusal(
                    429, TOO_MANY_FOR_USER,
                    f"this user already has {self.per_user} connections open here",
                )  # fmt: skip
            if self.per_address and self._by_address.get(address, 0) >= self.per_address:
                return Refusal(
                    429, TOO_MANY_FROM_ADDRESS,
                    f"this address already has {self.per_address} connections open here",
                )  # fmt: skip
        self.open += 1
        if probe:
            self.probes += 1
        else:
            self.demos += demo
            self._by_user[user] = self._by_user.get(user, 0) + 1
            self._by_address[address] = self._by_address.get(address, 0) + 1
        return None

    def release(self, user: str, address: str, *, probe: bool = False, demo: bool = False) -> None:
        """Uncount a connection that :meth:`admit` let in (with the same `probe` and `demo`)."""
        self.open -= 1
        if probe:
            self.probes -= 1
        else:
            self.demos -= demo
            _decrement(self._by_user, user)
            _decrement(self._by_address, address)

    @property
    def full(self) -> bool:
        """At the cap for ordinary connections: a new one gets 503 ``zone_full`` (only
        the canary's reserve is left). A state, not a failure: the zone reports it to
        its canary, and DNS prefers the region's zones with room."""
        return self.open - self.probes >= self.total - self.reserved

    def of_user(self, user: str) -> int:
        return self._by_user.get(user, 0)

    def from_address(self, address: str) -> int:
        return self._by_address.get(address, 0)


Shed = Literal["bid", "connection", "replay"]
"""What a :class:`LoadShedder` refuses: a bid, a new connection (an upgrade), or a
replay (a ``getState`` the server would replay updates for)."""

_SHED_NAMES: Final[dict[Shed, str]] = {
    "bid": "bid(s) (error/unavailable)",
    "connection": "new WebSocket connection(s) (503 overloaded)",
    "replay": "replay(s) (error/throttled)",
}


class LoadShedder:
    """Refuses part of the new ordinary connections, and of the bids, while the event loop
    runs late.

    A process whose loop is `lag` seconds late answers everything that much later, the
    canary's probe too; every connection it takes on while late makes it later. `lag` is
    the typical lag of the last :attr:`samples` timers (:meth:`LoopLag.typical`). Under
    `start` seconds of lag every upgrade is let in; from there to `full` the share refused
    rises linearly from 0 to 1 (RED's ramp, the lag as the queue). The canary's probes
    are never shed (the caller does not ask for them), nor heartbeats and full-state
    reads; replays are (:mod:`~rideout.realtime.admission`). What a herd is refused, new
    connections and bids (each bid costs the store a script
    and, in sync mode, a WAIT, and an accepted one an update to every client of its room),
    is what keeps its region answering its canary. Those refused retry: a connection after
    its backoff, a bid (``unavailable``) with the same id after the client's bid delay.
    :meth:`report` says, at most every :attr:`every` seconds, how many it refused.
    """

    __slots__ = ("_last", "_random", "_refused", "_worst", "full", "start")

    samples: Final = 10
    """How many of the loop's latest timers the caller should take the median lag of
    (half a second's, when the loop keeps time): one long callback, or a process that
    was stopped and resumed, makes one late timer; a loop that is behind, all of them."""
    every: Final = 5.0
    """Seconds between two of :meth:`report`'s messages, at least."""

    def __init__(self, start: float, full: float, rng: Callable[[], float] = random.random) -> None:
        if not 0 < start < full:
            raise ValueError(f"need 0 < start < full, got start={start!r}, full={full!r}")
        self.start = start
        self.full = full
        self._random = rng
        self._refused: dict[Shed, int] = {}  # by kind, since the last report
        self._worst = 0.0
        self._last = float("-inf")

    @classmethod
    def for_canary(cls, canary_timeout: float) -> LoadShedder:
        """Shedding from a quarter of the canary's timeout, everything from half of it: a
        probe waits for the loop at least twice (the upgrade, then the answer)."""
        return cls(canary_timeout / 4, canary_timeout / 2)

    def share(self, lag: float) -> float:
        """The share of new connections and bids refused at `lag` seconds of lag (0 to 1)."""
        return min(1.0, max(0.0, (lag - self.start) / (self.full - self.start)))

    def sheds(self, lag: float) -> bool:
        """Whether any work is refused at `lag` seconds of lag (the process is busy)."""
        return self.share(lag) > 0.0

    def refuse(self, lag: float, kind: Shed = "connection") -> Refusal | None:
        """Whether to refuse one new ordinary connection, or one bid (`kind`), at `lag`:
        the refusal, or None."""
        share = self.share(lag)
        if share <= 0.0 or (share < 1.0 and self._random() >= share):
            return None
        self._refused[kind] = self._refused.get(kind, 0) + 1
        self._worst = max(self._worst, lag)
        return Refusal(
            503, OVERLOADED,
            f"this server's event loop is running {lag:.2f} s late; retry later",
        )  # fmt: skip

    def report(self, now: float) -> str | None:
        """What to log now about what was refused since the last report, if anything
        was and the last report is :attr:`every` seconds old."""
        if not self._refused or now - self._last < self.every:
            return None
        what = " and ".join(f"{n} {_SHED_NAMES[kind]}" for kind, n in sorted(self._refused.items()))
        message = (
            f"shedding load: refused {what} since the last report, the event loop "
            f"typically up to {self._worst:.2f} s late (realtime.shed_load)"
        )
        self._last, self._refused, self._worst = now, {}, 0.0
        return message


def _decrement(counts: dict[str, int], key: str) -> None:
    left = counts[key] - 1
    if left:
        counts[key] = left
    else:
        del counts[key]
