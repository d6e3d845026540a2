"""The reconnect schedule: which delay next, and when to stop (no I/O, ``now`` given)."""

from __future__ import annotations

import random
from dataclasses import dataclass

from rideout.client.ws._events import Cause
from rideout.client.ws._settings import ClientSettings
from rideout.client.ws._stats import ClientStats
from rideout.protocol import CloseCode, parse_retry_hint

__all__ = ["Reconnect", "ReconnectPlanner", "StopReconnecting"]


@dataclass(frozen=True, slots=True)
class Reconnect:
    """Reconnect attempt ``attempt`` (1-based) after ``delay`` seconds."""

    attempt: int
    delay: float


@dataclass(frozen=True, slots=True)
class StopReconnecting:
    """Stop: ``reason`` is ``max_attempts`` or ``max_disconnected``."""

    reason: str
    attempts: int
    disconnected_for: float


class ReconnectPlanner:
    """Which delay before the next reconnect, and when to give up (no I/O, ``now`` given).

    ``attempt`` counts the failures since the last healthy connection (a failed
    connect and a connection lost before it became healthy both count), and only
    :meth:`healthy` resets it. Counts ``connects``, ``time_disconnected`` and
    ``reconnect_attempts`` in ``stats``.
    """

    def __init__(
        self,
        settings: ClientSettings,
        *,
        rng: random.Random | None = None,
        stats: ClientStats | None = None,
    ) -> None:
        self.settings = settings
        self.stats = stats if stats is not None else ClientStats()
        self._rng = rng
        self.attempt = 0
        self._outage_since: float | None = None
        self._disconnected_since: float | None = None
        self._immediate_spent = False

    def start(self, now: float) -> None:
        """The client starts, disconnected."""
        self._outage_since = self._disconnected_since = now

    def connected(self, now: float) -> float:
        """A WebSocket opened; returns the seconds it was disconnected."""
        self.stats.connects += 1
        gap = 0.0
        if self._disconnected_since is not None:
            gap = max(0.0, now - self._disconnected_since)
            self.stats.time_disconnected += gap
            self._disconnected_since = None
        return gap

    def healthy(self, now: float) -> None:
        """The connection proved healthy: the next failure starts from attempt 0 again."""
        self.attempt = 0
        self._outage_since = None
        self._immediate_spent = False

    def disconnected_for(self, now: float) -> float:
        """Seconds since the last healthy connection was lost (0 while healthy)."""
        return 0.0 if self._outage_since is None else max(0.0, now - self._outage_since)

    def lost(
        self,
        now: float,
        cause: Cause,
        code: int | None = None,
        reason: str | None = None,
        retry_after: float | None = None,
    ) -> Reconnect | StopReconnecting:
        """A connection ended or an attempt failed: when to try again, or to stop.

        `retry_after` is what a server that refused the upgrade (429, 503) asked for."""
        if self._disconnected_since is None:
            self._disconnected_since = now
        if self._outage_since is None:
            self._outage_since = now
        self.attempt += 1
        limits = [
            n
            for n in (self.settings.max_attempts, self.settings.backoff.max_attempts)
            if n is not None
        ]
        if limits and self.attempt > min(limits):
            return StopReconnecting("max_attempts", self.attempt - 1, self.disconnected_for(now))
        delay = self._delay(cause, code, reason, retry_after)
        limit = self.settings.max_disconnected
        if limit is not None and self.disconnected_for(now) + delay > limit:
            return StopReconnecting(
                "max_disconnected", self.attempt - 1, self.disconnected_for(now)
            )
        self.stats.reconnect_attempts += 1
        return Reconnect(self.attempt, delay)

    def _delay(
        self, cause: Cause, code: int | None, reason: str | None, retry_after: float | None
    ) -> float:
        immediate = cause is Cause.CLOSED and code in (CloseCode.DRAINING, CloseCode.POLICY)
        if immediate and not self._immediate_spent:
            self._immediate_spent = True
            return 0.0
        if cause is Cause.CLOSED and code == CloseCode.OVERLOADED:
            hint = parse_retry_hint(reason)
            if hint is not None:
                return min(hint, self.settings.max_retry_hint)
        backoff = self.settings.backoff.delay(self.attempt - 1, self._rng)
        if cause is Cause.CONNECT_FAILED and retry_after is not None:
            # Between half the server's ask and all of it (or the backoff, if longer): a
            # herd it refused at once does not come back at once.
            hint = min(max(0.0, retry_after), self.settings.max_retry_hint)
            uniform = (self._rng or random).uniform
            return max(backoff, uniform(hint / 2, hint))
        return backoff
