"""The event loop's lag: the pure window and report, and the watcher on a real loop."""

from __future__ import annotations

import asyncio
import logging
import statistics
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rideout._looplag import LagReport, LoopLag, watch
from rideout.store.client import cancel_and_wait


def test_the_worst_lag_is_kept_for_the_window_then_forgotten() -> None:
    lag = LoopLag(window=2.0)
    assert lag.worst(0.0) == 0.0
    assert lag.observe(expected=10.0, now=10.3) == pytest.approx(0.3)
    assert lag.observe(expected=10.4, now=10.45) == pytest.approx(0.05)
    assert lag.worst(11.0) == pytest.approx(0.3)
    assert lag.worst(12.35) == pytest.approx(0.05)  # the 0.3 s one is older than 2 s
    assert lag.worst(12.5) == 0.0
    assert lag.observe(expected=20.0, now=19.9) == 0.0  # early is not late


@given(
    st.lists(st.tuples(st.floats(0.0, 1.0), st.floats(0.0, 2.0)), min_size=1, max_size=60),
    st.floats(0.1, 5.0),
    st.integers(1, 20),
)
def test_worst_is_the_largest_lag_and_typical_the_median_within_the_window(
    steps: list[tuple[float, float]], window: float, count: int
) -> None:
    lag = LoopLag(window=window)
    seen: list[tuple[float, float]] = []
    now = 0.0
    for gap, late in steps:
        now += gap
        lag.observe(expected=now - late, now=now)
        seen.append((now, late))
        expected = max((v for t, v in seen if t >= now - window), default=0.0)
        assert lag.worst(now) == pytest.approx(expected)
        recent = [v for t, v in seen if t >= now - window][-count:]
        median = statistics.median(recent) if recent else 0.0
        assert lag.typical(now, count) == pytest.approx(median)


def test_one_long_callback_or_a_stop_is_not_a_loop_that_is_behind() -> None:
    blocked, behind = LoopLag(), LoopLag()
    for i in range(10):  # on time, every 50 ms
        blocked.observe(expected=9.5 + 0.05 * i, now=9.5 + 0.05 * i + 0.002)
    blocked.observe(expected=10.0, now=11.0)  # stopped for a second (SIGSTOP), resumed
    assert blocked.worst(11.0) == pytest.approx(1.0)
    assert blocked.typical(11.0, 10) == pytest.approx(0.002)  # one late timer of ten
    for i in range(1, 6):
        behind.observe(expected=10.0 + 0.2 * i, now=10.0 + 0.2 * i + 0.15)  # late every time
    assert behind.typical(11.2, 10) == pytest.approx(0.15)
    assert behind.typical(14.0, 10) == 0.0  # none within the window


def test_a_report_comes_at_most_once_per_period_and_counts_what_it_covers() -> None:
    report = LagReport(bound=0.2, every=5.0)
    assert report.observe(0.1, now=0.0) is None  # under the bound
    first = report.observe(0.5, now=1.0)
    assert first is not None
    assert first.startswith("the event loop ran up to 0.50 s late (once over 0.2 s")
    assert report.observe(0.3, now=2.0) is None  # within 5 s of the last one
    assert report.observe(0.9, now=3.0) is None
    later = report.observe(0.1, now=6.5)
    assert later is not None
    assert "up to 0.90 s late (2 times over 0.2 s" in later
    assert report.observe(0.1, now=20.0) is None  # nothing passed since


async def test_the_watcher_sees_a_blocked_loop_and_warns(caplog: pytest.LogCaptureFixture) -> None:
    lag, values = LoopLag(), []
    caplog.set_level(logging.WARNING, logger="rideout")
    task = asyncio.create_task(
        watch(lag, interval=0.02, report=LagReport(bound=0.1, every=0.0), on_lag=values.append)
    )
    try:
        await asyncio.sleep(0.1)
        assert lag.worst(time.monotonic()) < 0.5  # idle: on time, bar a busy machine
        time.sleep(0.8)  # noqa: ASYNC251 - the point: something holds the loop
        await asyncio.sleep(0.1)
        assert 0.75 < lag.worst(time.monotonic()) < 5.0
        assert max(values) > 0.75
        assert any("the event loop ran up to" in r.getMessage() for r in caplog.records)
    finally:
        await cancel_and_wait(task)
    assert task.cancelled()
