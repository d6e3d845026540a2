"""Tests for rideout.backoff: delay policies, retry budget and deadline."""

from __future__ import annotations

import dataclasses
import itertools
import math
import random
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from rideout.backoff import (
    Deadline,
    DelayPolicy,
    EqualJitter,
    FixedSchedule,
    FullJitter,
    NoJitter,
    RetryBudget,
    delays,
)
from tests.conftest import FakeClock

SEED = 20261130
DRAWS = 10_000
# Kolmogorov-Smirnov critical value: P(sqrt(N) * D > 2.5) ~ 7.5e-6 for a correct
# uniform sampler, so a correct implementation passes with overwhelming probability;
# any distribution off by a few percent of the window fails at N = 10,000.
KS_THRESHOLD = 2.5 / math.sqrt(DRAWS)


def ks_statistic(samples: Sequence[float], upper: float) -> float:
    """Kolmogorov-Smirnov distance between ``samples`` and uniform on [0, upper]."""
    ordered = sorted(samples)
    n = len(ordered)
    distance = 0.0
    for i, x in enumerate(ordered):
        cdf = min(1.0, max(0.0, x / upper))
        distance = max(distance, (i + 1) / n - cdf, cdf - i / n)
    return distance


# --------------------------------------------------------------------- full jitter


@pytest.mark.parametrize("attempt", range(7))
def test_full_jitter_is_uniform_over_the_window(attempt: int) -> None:
    policy = FullJitter(base=1.0, cap=20.0)
    upper = min(20.0, 2.0**attempt)  # 1, 2, 4, 8, 16, then capped at 20
    rng = random.Random(SEED + attempt)
    samples = [policy.delay(attempt, rng) for _ in range(DRAWS)]
    assert all(0.0 <= s <= upper for s in samples)
    assert ks_statistic(samples, upper) < KS_THRESHOLD
    # Both halves of the window are used (no accidental half-range draws).
    assert max(samples) > 0.99 * upper
    assert min(samples) < 0.01 * upper


@dataclasses.dataclass(frozen=True)
class _WrongJitter:
    """Deliberately wrong samplers, to show the uniformity test has teeth."""

    draw: Callable[[random.Random, float], float]

    def delay(self, attempt: int, rng: random.Random) -> float:
        return self.draw(rng, min(20.0, 2.0**attempt))


@pytest.mark.parametrize(
    "wrong",
    [
        pytest.param(_WrongJitter(lambda r, u: r.uniform(0, u / 2)), id="half-range"),
        pytest.param(_WrongJitter(lambda r, u: r.uniform(u / 2, u)), id="upper-half"),
        pytest.param(_WrongJitter(lambda r, u: r.uniform(0, 0.9 * u)), id="90-percent"),
        pytest.param(_WrongJitter(lambda r, u: u * r.random() ** 1.2), id="skewed"),
        pytest.param(_WrongJitter(lambda r, u: u), id="no-jitter"),
        pytest.param(_WrongJitter(lambda r, u: r.triangular(0, u)), id="triangular"),
    ],
)
def test_uniformity_check_rejects_wrong_distributions(wrong: _WrongJitter) -> None:
    for attempt in range(7):
        upper = min(20.0, 2.0**attempt)
        rng = random.Random(SEED + attempt)
        samples = [wrong.delay(attempt, rng) for _ in range(DRAWS)]
        assert ks_statistic(samples, upper) > KS_THRESHOLD


def test_full_jitter_is_deterministic_with_a_seeded_rng() -> None:
    policy = FullJitter(base=0.5, cap=30.0)
    first = list(itertools.islice(delays(policy, random.Random(7)), 20))
    second = list(itertools.islice(delays(policy, random.Random(7)), 20))
    assert first == second
    assert all(0 <= d <= min(30.0, 0.5 * 2**n) for n, d in enumerate(first))


def test_full_jitter_without_rng_uses_the_random_module() -> None:
    policy = FullJitter(base=2.0, cap=20.0)
    draws = {policy.delay(3) for _ in range(200)}
    assert all(0.0 <= d <= 16.0 for d in draws)
    assert len(draws) > 100


def test_full_jitter_spreads_a_herd_that_no_jitter_synchronises() -> None:
    rng = random.Random(SEED)
    clients = 1000
    plain = {NoJitter(2.0, 20.0).delay(2) for _ in range(clients)}
    jittered = [FullJitter(2.0, 20.0).delay(2, rng) for _ in range(clients)]
    assert plain == {8.0}  # every client retries at the same instant
    busiest_second = max(sum(1 for d in jittered if s <= d < s + 1) for s in range(8))
    assert busiest_second < clients / 4  # roughly 1/8 of them per second


# --------------------------------------------------------------------- equal jitter


@pytest.mark.parametrize("attempt", range(6))
def test_equal_jitter_is_uniform_over_the_upper_half_of_the_window(attempt: int) -> None:
    policy = EqualJitter(base=0.25, cap=2.0)
    upper = min(2.0, 0.25 * 2.0**attempt)
    rng = random.Random(SEED + attempt)
    samples = [policy.delay(attempt, rng) for _ in range(DRAWS)]
    assert all(upper / 2 <= s <= upper for s in samples)
    # Shifted onto [0, upper / 2], the draws are uniform.
    assert ks_statistic([s - upper / 2 for s in samples], upper / 2) < KS_THRESHOLD
    assert 0.0 <= EqualJitter(1.0, 60.0).delay(10**30, rng) - 30.0 <= 30.0  # no overflow


# ------------------------------------------------------------------------ no jitter


def test_no_jitter_exact_values_and_cap() -> None:
    policy = NoJitter(base=0.5, cap=10)
    assert list(itertools.islice(delays(policy), 8)) == [0.5, 1, 2, 4, 8, 10, 10, 10]
    assert policy.cap == 10.0
    assert isinstance(policy.cap, float)
    assert policy.delay(3, random.Random(1), previous=99.0) == 4.0  # rng/previous unused
    assert NoJitter(2.0, 2.0).delay(0) == 2.0


@pytest.mark.parametrize("attempt", [62, 63, 64, 1023, 1024, 1025, 5000, 2**64, 10**30])
def test_large_attempts_do_not_overflow(attempt: int) -> None:
    assert NoJitter(1.0, 60.0).delay(attempt) == 60.0
    assert 0.0 <= FullJitter(1.0, 60.0).delay(attempt, random.Random(attempt)) <= 60.0
    expected = min(1e300, math.ldexp(1e-300, attempt)) if attempt < 2000 else 1e300
    assert NoJitter(1e-300, 1e300).delay(attempt) == expected


def test_tiny_base_grows_exactly_until_the_cap() -> None:
    tiny = 5e-324  # the smallest subnormal, 2**-1074
    policy = NoJitter(tiny, 1e308)
    assert policy.delay(0) == tiny
    assert policy.delay(2000) == 2.0**926
    assert policy.delay(2100) == 1e308


# ------------------------------------------------------------------- fixed schedule


def test_fixed_schedule_is_finite_and_exact() -> None:
    schedule = FixedSchedule((0, 1, 3, 6, 10))  # seed 001's schedule, in seconds
    assert schedule.delays == (0.0, 1.0, 3.0, 6.0, 10.0)
    assert schedule.max_attempts == 5
    assert list(delays(schedule)) == [0.0, 1.0, 3.0, 6.0, 10.0]
    assert [schedule.delay(k, random.Random(1), previous=5.0) for k in range(5)] == [
        0.0,
        1.0,
        3.0,
        6.0,
        10.0,
    ]
    with pytest.raises(ValueError, match="attempt 5 is beyond the schedule of 5 attempts"):
        schedule.delay(5)
    with pytest.raises(ValueError, match="attempt"):
        schedule.delay(-1)


def test_fixed_schedule_accepts_any_iterable_and_stays_immutable() -> None:
    schedule = FixedSchedule([0.5, 2])  # type: ignore[arg-type]
    assert schedule.delays == (0.5, 2.0)
    assert schedule == FixedSchedule((0.5, 2.0))
    assert hash(schedule) == hash(FixedSchedule((0.5, 2.0)))
    assert list(delays(FixedSchedule((7,)))) == [7.0]
    with pytest.raises(dataclasses.FrozenInstanceError):
        schedule.delays = (1.0,)  # type: ignore[misc]


@pytest.mark.parametrize(
    ("delays_arg", "error", "match"),
    [
        ((), ValueError, "must not be empty"),
        ([], ValueError, "must not be empty"),
        ((0, -1), ValueError, r"delays\[1\] must be >= 0"),
        ((math.nan,), ValueError, r"delays\[0\] must be finite"),
        ((1, math.inf), ValueError, r"delays\[1\] must be finite"),
        ((1, "2"), TypeError, r"delays\[1\] must be a number"),
        ((True,), TypeError, r"delays\[0\] must be a number"),
        ("0136", TypeError, "delays must be a tuple"),
        (5, TypeError, "delays must be a tuple"),
    ],
)
def test_fixed_schedule_validation(delays_arg: Any, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        FixedSchedule(delays_arg)


# ------------------------------------------------------------- shared validation

EXPONENTIAL: list[Callable[[Any, Any], DelayPolicy]] = [FullJitter, NoJitter]


@pytest.mark.parametrize("policy_type", EXPONENTIAL)
@pytest.mark.parametrize(
    ("base", "cap", "error", "match"),
    [
        (0, 1, ValueError, "base must be > 0"),
        (-1, 1, ValueError, "base must be > 0"),
        (math.nan, 1, ValueError, "base must be finite"),
        (1, math.inf, ValueError, "cap must be finite"),
        (1, 0, ValueError, "cap must be > 0"),
        (2, 1, ValueError, r"cap \(1\) must be >= base \(2\)"),
        ("1", 2, TypeError, "base must be a number"),
        (1, True, TypeError, "cap must be a number"),
        (1, None, TypeError, "cap must be a number"),
    ],
)
def test_exponential_policy_validation(
    policy_type: Callable[[Any, Any], DelayPolicy],
    base: Any,
    cap: Any,
    error: type[Exception],
    match: str,
) -> None:
    with pytest.raises(error, match=match):
        policy_type(base, cap)


@pytest.mark.parametrize("policy_type", EXPONENTIAL)
def test_exponential_policies_are_frozen_unbounded_data(
    policy_type: Callable[[Any, Any], DelayPolicy],
) -> None:
    policy = policy_type(1, 8)
    assert policy == policy_type(1.0, 8.0)
    assert hash(policy) == hash(policy_type(1.0, 8.0))
    assert policy.max_attempts is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        policy.base = 2.0  # type: ignore[attr-defined]
    assert len(list(itertools.islice(delays(policy, random.Random(1)), 1000))) == 1000
    for bad_attempt, error in [(-1, ValueError), (1.0, TypeError), (True, TypeError)]:
        with pytest.raises(error, match="attempt"):
            policy.delay(bad_attempt)  # type: ignore[arg-type]


# ---------------------------------------------------------------------- retry budget


def test_retry_budget_defaults_exhaustion_and_refund() -> None:
    budget = RetryBudget()
    assert budget.available == budget.capacity == 500
    assert sum(budget.try_acquire() for _ in range(101)) == 100  # 500 / 5
    assert budget.available == 0
    assert not budget.try_acquire(is_timeout=True)
    for _ in range(4):
        budget.record_success()
    assert budget.available == 4
    assert not budget.try_acquire()  # a failed acquire pays nothing
    assert budget.available == 4
    budget.record_success()
    assert budget.try_acquire()
    assert budget.available == 0


def test_retry_budget_timeouts_cost_more_and_refunds_stop_at_capacity() -> None:
    budget = RetryBudget()
    assert sum(budget.try_acquire(is_timeout=True) for _ in range(51)) == 50  # 500 / 10
    budget = RetryBudget(capacity=20, retry_cost=3, timeout_cost=7, success_refund=2)
    assert budget.try_acquire(is_timeout=True)
    assert budget.try_acquire()
    assert budget.available == 10
    for _ in range(10):
        budget.record_success()
    assert budget.available == 20
    assert repr(budget) == (
        "RetryBudget(available=20, capacity=20, retry_cost=3, timeout_cost=7, success_refund=2)"
    )


def test_retry_budget_free_retries_and_no_refund() -> None:
    budget = RetryBudget(capacity=1, retry_cost=0, timeout_cost=0, success_refund=0)
    assert all(budget.try_acquire(is_timeout=t) for t in (False, True) * 10)
    budget = RetryBudget(capacity=5, success_refund=0)
    assert budget.try_acquire()
    budget.record_success()
    assert budget.available == 0


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"capacity": 0}, ValueError, "capacity must be >= 1"),
        ({"retry_cost": -1}, ValueError, "retry_cost must be >= 0"),
        ({"timeout_cost": -5}, ValueError, "timeout_cost must be >= 0"),
        ({"success_refund": -1}, ValueError, "success_refund must be >= 0"),
        ({"capacity": 5.0}, TypeError, "capacity must be an int"),
        ({"retry_cost": True}, TypeError, "retry_cost must be an int"),
    ],
)
def test_retry_budget_validation(
    kwargs: dict[str, Any], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        RetryBudget(**kwargs)


# -------------------------------------------------------------------------- deadline


def test_deadline_with_a_fake_clock() -> None:
    clock = FakeClock()
    deadline = Deadline(10.0, clock=clock)
    assert clock.calls == 1  # the budget starts at creation
    assert deadline.total == 10.0
    assert deadline.remaining() == 10.0
    assert not deadline.expired()
    assert deadline.allows(0.0)
    assert deadline.allows(9.999)
    assert not deadline.allows(10.0)  # would wake exactly at the deadline, with no time left
    clock.now += 7.5
    assert deadline.remaining() == 2.5
    assert deadline.allows(2.0)
    assert not deadline.allows(3.0)
    assert repr(deadline) == "Deadline(total=10.0, remaining=2.5)"
    clock.now += 2.5
    assert deadline.remaining() == 0.0
    assert deadline.expired()
    assert not deadline.allows(0.0)
    clock.now += 100
    assert deadline.remaining() == 0.0
    assert deadline.expired()


def test_deadline_stops_a_retry_loop_before_a_sleep_would_pass_it() -> None:
    clock = FakeClock(0.0)
    deadline = Deadline(12.0, clock=clock)
    slept = []
    for delay in delays(NoJitter(1.0, 60.0)):
        if not deadline.allows(delay):
            break
        clock.now += delay  # the caller's sleep
        slept.append(delay)
    assert slept == [1.0, 2.0, 4.0]  # 7 s used; the 8 s sleep would pass 12 s
    assert clock.now < 12.0


def test_deadline_defaults_to_a_monotonic_clock() -> None:
    deadline = Deadline(3600.0)
    assert 3599.0 < deadline.remaining() <= 3600.0
    assert not deadline.expired()


@pytest.mark.parametrize(
    ("total", "error", "match"),
    [
        (0, ValueError, "total must be > 0"),
        (-1, ValueError, "total must be > 0"),
        (math.nan, ValueError, "total must be finite"),
        (math.inf, ValueError, "total must be finite"),
        ("5", TypeError, "total must be a number"),
    ],
)
def test_deadline_validation(total: Any, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        Deadline(total, clock=FakeClock())
    deadline = Deadline(1.0, clock=FakeClock())
    with pytest.raises(ValueError, match="delay must be >= 0"):
        deadline.allows(-0.1)
    with pytest.raises(ValueError, match="delay must be finite"):
        deadline.allows(math.nan)
