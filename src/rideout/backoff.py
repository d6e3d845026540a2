"""Delay policies as immutable data, a retry budget and a deadline.

A policy answers one question: how long to wait before attempt ``n`` (0-based) of
the sequence it governs. It never sleeps; the caller owns the loop and the clock::

    deadline = Deadline(30.0)
    for delay in delays(FullJitter(base=1.0, cap=20.0)):
        if not deadline.allows(delay):
            break
        await asyncio.sleep(delay)
        ...  # attempt

The exponential policies follow the AWS Architecture Blog post "Exponential Backoff
And Jitter"; :class:`FixedSchedule` is the REST client's explicit schedule (seed 001:
``(0, 1, 3, 6, 10)`` seconds, the first attempt immediate). Every ``rng`` is
injectable for deterministic tests; without one, the :mod:`random` module's shared
generator is used.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Protocol

from rideout._validate import count, seconds

__all__ = [
    "Deadline",
    "DelayPolicy",
    "EqualJitter",
    "FixedSchedule",
    "FullJitter",
    "NoJitter",
    "RetryBudget",
    "delays",
]


class DelayPolicy(Protocol):
    """What every delay policy offers."""

    @property
    def max_attempts(self) -> int | None:
        """How many attempts the policy allows, or None for no bound of its own."""
        ...

    def delay(
        self,
        attempt: int,
        rng: random.Random | None = None,
        previous: float | None = None,
    ) -> float:
        """Seconds to wait before ``attempt`` (0-based); ``previous`` is the last delay."""
        ...


# ------------------------------------------------------------------------- validation


def _check_attempt(attempt: object) -> int:
    return count("attempt", attempt)


def _check_base_cap(policy: object, base: float, cap: float) -> None:
    checked_base = seconds("base", base)
    checked_cap = seconds("cap", cap)
    if checked_cap < checked_base:
        raise ValueError(f"cap ({cap!r}) must be >= base ({base!r})")
    object.__setattr__(policy, "base", checked_base)
    object.__setattr__(policy, "cap", checked_cap)


def _ceiling(base: float, cap: float, attempt: int) -> float:
    """``min(cap, base * 2**attempt)`` without overflow for any attempt."""
    try:
        return min(cap, math.ldexp(base, attempt))
    except OverflowError:
        return cap


def _uniform(rng: random.Random | None, low: float, high: float) -> float:
    return rng.uniform(low, high) if rng is not None else random.uniform(low, high)


# --------------------------------------------------------------------------- policies


@dataclass(frozen=True, slots=True)
class _Exponential:
    """What the exponential policies share: ``base`` and ``cap`` (seconds), validated,
    and no bound on attempts of their own."""

    base: float
    cap: float

    def __post_init__(self) -> None:
        _check_base_cap(self, self.base, self.cap)

    @property
    def max_attempts(self) -> None:
        """No bound of its own."""
        return None


@dataclass(frozen=True, slots=True)
class FullJitter(_Exponential):
    """Exponential backoff with full jitter: ``uniform(0, min(cap, base * 2**n))``.

    Spreads reconnecting clients over the whole window, so a failover does not turn
    into a thundering herd. Unbounded: bound the loop by attempts or a :class:`Deadline`.
    """

    def delay(
        self,
        attempt: int,
        rng: random.Random | None = None,
        previous: float | None = None,
    ) -> float:
        """A random delay in ``[0, min(cap, base * 2**attempt)]``; ``previous`` is unused."""
        return _uniform(rng, 0.0, _ceiling(self.base, self.cap, _check_attempt(attempt)))


@dataclass(frozen=True, slots=True)
class EqualJitter(_Exponential):
    """Exponential backoff with equal jitter: half of ``min(cap, base * 2**n)`` fixed,
    half uniform, so within ``[c / 2, c]``.

    For retries that must not come back together nor at once: a bid the server
    answered ``unavailable`` waits at least half of the plain delay, and the retries of
    bids refused together are spread over the other half. Unbounded.
    """

    def delay(
        self,
        attempt: int,
        rng: random.Random | None = None,
        previous: float | None = None,
    ) -> float:
        """A random delay in ``[c / 2, c]``, ``c = min(cap, base * 2**attempt)``."""
        ceiling = _ceiling(self.base, self.cap, _check_attempt(attempt))
        return _uniform(rng, ceiling / 2, ceiling)


@dataclass(frozen=True, slots=True)
class NoJitter(_Exponential):
    """Plain exponential backoff, ``min(cap, base * 2**n)``: the herd drills compare with."""

    def delay(
        self,
        attempt: int,
        rng: random.Random | None = None,
        previous: float | None = None,
    ) -> float:
        """Exactly ``min(cap, base * 2**attempt)``; ``rng`` and ``previous`` are unused."""
        return _ceiling(self.base, self.cap, _check_attempt(attempt))


@dataclass(frozen=True, slots=True)
class FixedSchedule:
    """An explicit schedule: ``delays[k]`` seconds before attempt ``k``.

    The schedule bounds the attempts: ``FixedSchedule((0, 1, 3, 6, 10))`` allows five
    attempts, the first immediate, and :meth:`delay` refuses a sixth.
    """

    delays: tuple[float, ...]

    def __post_init__(self) -> None:
        values: object = self.delays
        if isinstance(values, str | bytes) or not isinstance(values, Iterable):
            raise TypeError(f"delays must be a tuple of seconds, not {values!r}")
        checked = tuple(
            seconds(f"delays[{index}]", value, zero_ok=True) for index, value in enumerate(values)
        )
        if not checked:
            raise ValueError("delays must not be empty: the schedule bounds the attempts")
        object.__setattr__(self, "delays", checked)

    @property
    def max_attempts(self) -> int:
        """The number of attempts the schedule allows (its length)."""
        return len(self.delays)

    def delay(
        self,
        attempt: int,
        rng: random.Random | None = None,
        previous: float | None = None,
    ) -> float:
        """``delays[attempt]``; ValueError past the end of the schedule."""
        if _check_attempt(attempt) >= len(self.delays):
            raise ValueError(
                f"attempt {attempt} is beyond the schedule of {len(self.delays)} attempts"
            )
        return self.delays[attempt]


def delays(policy: DelayPolicy, rng: random.Random | None = None) -> Iterator[float]:
    """Yield the policy's successive delays, from attempt 0.

    Infinite for the exponential policies, ``max_attempts`` long for a bounded one.
    """
    previous: float | None = None
    attempt = 0
    limit = policy.max_attempts
    while limit is None or attempt < limit:
        previous = policy.delay(attempt, rng, previous)
        yield previous
        attempt += 1


# ---------------------------------------------------------------------- retry budget


class RetryBudget:
    """A token bucket limiting retries, like the AWS SDKs' "standard" retry mode.

    The bucket starts full (``capacity`` tokens). A retry costs ``retry_cost`` tokens,
    or ``timeout_cost`` after a timeout; each success refunds ``success_refund``, up to
    the capacity. When the bucket cannot pay, the caller must not retry, so a fleet of
    clients stops amplifying an outage. Count-based (no clock). Not thread-safe: meant
    for one asyncio event loop.
    """

    __slots__ = ("_available", "_capacity", "_retry_cost", "_success_refund", "_timeout_cost")

    def __init__(
        self,
        capacity: int = 500,
        retry_cost: int = 5,
        timeout_cost: int = 10,
        success_refund: int = 1,
    ) -> None:
        for name, value, least in (
            ("capacity", capacity, 1),
            ("retry_cost", retry_cost, 0),
            ("timeout_cost", timeout_cost, 0),
            ("success_refund", success_refund, 0),
        ):
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"{name} must be an int, not {value!r}")
            if value < least:
                raise ValueError(f"{name} must be >= {least}, not {value}")
        self._capacity = capacity
        self._retry_cost = retry_cost
        self._timeout_cost = timeout_cost
        self._success_refund = success_refund
        self._available = capacity

    def __repr__(self) -> str:
        return (
            f"RetryBudget(available={self._available}, capacity={self._capacity}, "
            f"retry_cost={self._retry_cost}, timeout_cost={self._timeout_cost}, "
            f"success_refund={self._success_refund})"
        )

    @property
    def available(self) -> int:
        """Tokens left."""
        return self._available

    @property
    def capacity(self) -> int:
        """Tokens when full."""
        return self._capacity

    def try_acquire(self, is_timeout: bool = False) -> bool:
        """Pay for one retry; False (and nothing paid) when the budget cannot."""
        cost = self._timeout_cost if is_timeout else self._retry_cost
        if cost > self._available:
            return False
        self._available -= cost
        return True

    def record_success(self) -> None:
        """Refund ``success_refund`` tokens after a successful request."""
        self._available = min(self._capacity, self._available + self._success_refund)


# -------------------------------------------------------------------------- deadline


class Deadline:
    """A total time budget measured on ``clock`` (seconds), starting at creation.

    Lets a retry loop stop *before* a sleep would pass the deadline, instead of
    sleeping and then finding it has no time left.
    """

    __slots__ = ("_clock", "_expires_at", "_total")

    def __init__(self, total: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._total = seconds("total", total)
        self._clock = clock
        self._expires_at = clock() + self._total

    def __repr__(self) -> str:
        return f"Deadline(total={self._total!r}, remaining={self.remaining()!r})"

    @property
    def total(self) -> float:
        """The whole budget, in seconds."""
        return self._total

    def remaining(self) -> float:
        """Seconds left, never negative."""
        return max(0.0, self._expires_at - self._clock())

    def expired(self) -> bool:
        """Whether no time is left."""
        return self.remaining() <= 0.0

    def allows(self, delay: float) -> bool:
        """True only if, after sleeping ``delay`` seconds, some time would be left."""
        return seconds("delay", delay, zero_ok=True) < self.remaining()
