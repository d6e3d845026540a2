"""The per-process cache of numbered positions and the touch pacing (pure, no I/O)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rideout.errors import InvalidArgument
from rideout.waitingroom.model import Position, PositionState
from rideout.waitingroom.poll_cache import (
    TOUCH_CAP,
    TOUCH_DELAY,
    PositionCache,
    touch_interval,
    touch_slack,
)


def pos(rid: str, q: int = 1, state: PositionState = PositionState.WAITING) -> Position:
    return Position("ev", rid, q, 1_800_000_000.75, state)


@pytest.mark.parametrize(
    ("abandon_after", "slack", "interval"),
    [(0, 0.0, None), (-1, 0.0, None), (0.0004, 0.0, None), (1, 0.1, 0.0), (5, 0.5, 0.0),
     (10, 1.0, 0.5), (0.3, 0.03, 0.0), (300, 30.0, 29.5), (301, 30.0, 29.5),
     (86_400, 30.0, 29.5)],
)  # fmt: skip
def test_the_slack_is_a_tenth_of_the_hold_capped_and_the_interval_leaves_the_delay(
    abandon_after: float, slack: float, interval: float | None
) -> None:
    assert touch_slack(abandon_after) == slack
    assert touch_interval(abandon_after) == interval


@given(st.floats(min_value=0, max_value=1e6, allow_nan=False))
def test_the_slack_is_the_sweeps(abandon_after: float) -> None:
    """scripts.SWEEP's slack, from the event hash's abandon_ms, is the same number, and
    the touch interval plus the delay a touch may wait fit in it."""
    hold = round(abandon_after * 1000)
    slack = min(math.ceil(hold / 10), 30_000) if hold > 0 else 0
    assert touch_slack(abandon_after) * 1000 == pytest.approx(slack, abs=1e-6)
    assert touch_slack(abandon_after) <= TOUCH_CAP
    interval = touch_interval(abandon_after)
    assert (interval is None) == (slack == 0)
    if interval is not None and slack >= TOUCH_DELAY * 1000:
        assert interval + TOUCH_DELAY == pytest.approx(touch_slack(abandon_after))


def test_a_numbered_position_is_answered_once_remembered() -> None:
    cache = PositionCache(10)
    assert cache.answer("ev", "g1", "a") is None
    cache.remember("g1", pos("a", 7), touched=5.0)
    assert cache.answer("ev", "g1", "a") == (7, 1_800_000_000)  # entry time in whole seconds
    assert cache.answer("ev", "g2", "a") is None  # another generation: a reset happened
    assert cache.answer("other", "g1", "a") is None
    assert (cache.hits, cache.misses) == (1, 3)


@pytest.mark.parametrize(
    "state", [PositionState.SERVED, PositionState.EXPIRED, PositionState.ABANDONED]
)
def test_served_expired_and_abandoned_positions_are_answered_but_never_touched(
    state: PositionState,
) -> None:
    cache = PositionCache(10)
    cache.remember("g", pos("a", 3, state), touched=None)
    assert cache.answer("ev", "g", "a") == (3, 1_800_000_000)
    assert not cache.touch_due("ev", "g", "a", 1e9, 1.0)


def test_a_prequeued_position_is_not_kept() -> None:
    cache = PositionCache(10)
    cache.remember("g", pos("a", 0, PositionState.PREQUEUED), touched=1.0)
    assert len(cache) == 0
    assert cache.answer("ev", "g", "a") is None


def test_the_cache_is_bounded_and_drops_the_least_recently_polled() -> None:
    cache = PositionCache(3)
    for i, rid in enumerate("abc"):
        cache.remember("g", pos(rid, i + 1), touched=0.0)
    assert cache.answer("ev", "g", "a") == (1, 1_800_000_000)  # a is now the most recent
    cache.remember("g", pos("d", 4), touched=0.0)
    assert len(cache) == 3
    assert cache.answer("ev", "g", "b") is None  # the least recently polled went
    assert [cache.answer("ev", "g", r) is not None for r in "acd"] == [True, True, True]
    for i in range(100):
        cache.remember("g", pos(f"x{i}", i), touched=0.0)
    assert len(cache) == 3


def test_size_zero_keeps_nothing_and_a_bad_size_is_refused() -> None:
    cache = PositionCache(0)
    cache.remember("g", pos("a"), touched=0.0)
    assert len(cache) == 0
    with pytest.raises(InvalidArgument):
        PositionCache(-1)


def test_touches_are_paced_per_request() -> None:
    cache = PositionCache(10)
    assert not cache.touch_due("ev", "g", "a", 0.0, None)  # abandonment off: never
    assert cache.touch_due("ev", "g", "a", 0.0, 1.0)  # unknown here: touch
    cache.remember("g", pos("a"), touched=100.0)
    assert not cache.touch_due("ev", "g", "a", 100.999, 1.0)
    assert cache.touch_due("ev", "g", "a", 101.0, 1.0)
    assert cache.touch_due("ev", "g2", "a", 100.5, 1.0)  # a new generation starts over
    cache.touched("ev", "a", 101.0)
    assert not cache.touch_due("ev", "g", "a", 101.5, 1.0)
    cache.remember("g", pos("a"), touched=None)  # a reload keeps the touch time
    assert not cache.touch_due("ev", "g", "a", 101.5, 1.0)


def test_a_failed_touch_is_tried_again_at_the_next_poll() -> None:
    cache = PositionCache(10)
    cache.remember("g", pos("a"), touched=None)
    cache.touched("ev", "a", 50.0)
    assert not cache.touch_due("ev", "g", "a", 50.1, 30.0)
    cache.touched("ev", "a", None)  # its batch was not written
    assert cache.touch_due("ev", "g", "a", 50.1, 30.0)


def test_forget_drops_one_events_positions() -> None:
    cache = PositionCache(10)
    cache.remember("g", pos("a"), touched=0.0)
    cache.remember("g", Position("other", "a", 1, 0.0, PositionState.WAITING), touched=0.0)
    cache.forget("ev")
    assert cache.answer("ev", "g", "a") is None
    assert cache.answer("other", "g", "a") == (1, 0)
