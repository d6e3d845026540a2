"""The restart decision on its own: policy, window and counting, on an injected clock."""

from __future__ import annotations

import random

import pytest

from rideout.backoff import FullJitter, NoJitter
from rideout.cluster.restarts import RestartHistory, RestartPolicy
from rideout.errors import InvalidArgument
from tests.conftest import FakeClock


def test_backs_off_then_gives_up_after_the_limit() -> None:
    clock = FakeClock(1000.0)
    policy = RestartPolicy(NoJitter(base=0.5, cap=4.0), max_restarts=5, window=60)
    history = RestartHistory(policy, clock=clock)
    delays = []
    for _ in range(5):
        verdict = history.died()
        assert verdict.restart
        delays.append(verdict.delay)
        clock.now += verdict.delay + 1  # it runs a second, then dies again
    assert delays == [0.5, 1.0, 2.0, 4.0, 4.0]  # exponential, capped
    assert history.total == 5
    final = history.died()
    assert not final.restart
    assert final.reason == "crash-looping, gave up after 5 restarts"
    assert history.gave_up
    assert history.total == 5
    # A child given up on stays given up, however long one waits.
    clock.now += 3600
    assert not history.died().restart


def test_full_jitter_stays_under_the_ceiling() -> None:
    clock = FakeClock(1000.0)
    policy = RestartPolicy(FullJitter(base=0.5, cap=2.0), max_restarts=50, window=1e6)
    history = RestartHistory(policy, clock=clock, rng=random.Random(7))
    for n in range(50):
        verdict = history.died()
        assert 0.0 <= verdict.delay <= min(2.0, 0.5 * 2**n)
        assert verdict.recent == n + 1


def test_restarts_age_out_of_the_window() -> None:
    clock = FakeClock(1000.0)
    policy = RestartPolicy(NoJitter(base=1.0, cap=8.0), max_restarts=2, window=10)
    history = RestartHistory(policy, clock=clock)
    assert history.died().delay == 1.0
    clock.now += 5
    assert history.died().delay == 2.0
    clock.now += 5.5  # the first restart is now more than a window ago
    assert history.recent() == 1
    verdict = history.died()
    assert verdict.restart  # only one restart in the window: allowed
    assert verdict.delay == 2.0
    clock.now += 60  # ran for a long while: back to the shortest delay
    assert history.recent() == 0
    assert history.died().delay == 1.0
    assert history.total == 4


def test_reset_forgets_the_window_and_the_give_up_but_not_the_total() -> None:
    clock = FakeClock(1000.0)
    history = RestartHistory(RestartPolicy(NoJitter(1, 1), max_restarts=1, window=60), clock=clock)
    assert history.died().restart
    assert not history.died().restart
    history.reset()  # `rideout chaos restore`
    assert not history.gave_up
    assert history.recent() == 0
    assert history.died().restart
    assert history.total == 2


def test_no_restarts_at_all() -> None:
    history = RestartHistory(RestartPolicy(max_restarts=0), clock=FakeClock(1000.0))
    verdict = history.died()
    assert (verdict.restart, verdict.reason) == (False, "crash-looping, gave up after 0 restarts")


@pytest.mark.parametrize(("field", "value"), [("max_restarts", -1), ("window", 0)])
def test_bad_policies_are_refused(field: str, value: float) -> None:
    with pytest.raises(InvalidArgument, match=field):
        RestartPolicy(**{field: value})  # type: ignore[arg-type]
