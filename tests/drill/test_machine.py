"""rideout.drill.machine: how busy the cores were, from /proc/stat."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rideout.drill.machine import (
    PROC_STAT,
    CpuTimes,
    busy_share,
    core_speed,
    cpu_rate,
    read_cpu_times,
    usage,
)

LINE = "cpu  100 5 20 800 10 1 2 3 0 0\ncpu0 50 2 10 400 5 1 1 2 0 0\nintr 1\n"


def test_the_cpu_line_is_read_busy_and_idle() -> None:
    times = CpuTimes.parse(LINE)
    # busy: user nice system irq softirq steal; idle: idle iowait
    assert times == CpuTimes(busy=100 + 5 + 20 + 1 + 2 + 3, total=131 + 800 + 10)


@pytest.mark.parametrize(
    "text",
    ["", "intr 1 2 3\n", "cpu0 1 2 3 4 5 6 7 8\n", "cpu 1 2 3\n", "cpu 1 2 x 4 5 6 7 8\n",
     "cpu 1 2 -3 4 5 6 7 8\n"],
)  # fmt: skip
def test_what_is_not_the_cpu_line_is_refused(text: str, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="cpu"):
        CpuTimes.parse(text)
    path = tmp_path / "stat"
    path.write_text(text)
    assert read_cpu_times(path) is None
    assert read_cpu_times(tmp_path / "missing") is None


def test_the_busy_share_between_two_readings() -> None:
    start, end = CpuTimes(100, 1000), CpuTimes(250, 1200)
    assert busy_share(start, end) == pytest.approx(0.75)
    assert busy_share(start, start) is None  # no tick passed
    assert usage(start, end) == {"busy": 0.75, "cores": usage(start, end)["cores"]}  # type: ignore[index]
    assert usage(None, end) is None
    assert usage(start, None) is None
    assert usage(start, start) is None


@given(
    busy=st.integers(0, 10**9), idle=st.integers(0, 10**9),
    more_busy=st.integers(0, 10**6), more_idle=st.integers(0, 10**6),
)  # fmt: skip
def test_the_share_is_a_fraction_of_the_ticks_that_passed(
    busy: int, idle: int, more_busy: int, more_idle: int
) -> None:
    start = CpuTimes(busy, busy + idle)
    end = CpuTimes(busy + more_busy, busy + idle + more_busy + more_idle)
    share = busy_share(start, end)
    if more_busy + more_idle == 0:
        assert share is None
    else:
        assert share == pytest.approx(more_busy / (more_busy + more_idle))


@pytest.mark.skipif(not PROC_STAT.exists(), reason="no /proc/stat: not Linux")
def test_a_busy_core_shows_on_this_machine() -> None:
    """A process spinning for 1 s keeps one core busy: at least a share of 1/cores,
    less whatever else the machine did (generous: shared machines are noisy)."""
    start = read_cpu_times()
    subprocess.run(
        [sys.executable, "-c", "import time\nend = time.time() + 1\nwhile time.time() < end: pass"],
        check=True, timeout=30,
    )  # fmt: skip
    time.sleep(0.05)
    view = usage(start, read_cpu_times())
    assert view is not None
    assert view["busy"] >= 0.8 / view["cores"]


def test_cpu_rate_counts_calls_per_second_of_the_clock_it_is_given() -> None:
    ticks = [0.0]

    def work() -> None:  # each call costs 1 ms of the (fake) CPU clock
        ticks[0] += 0.001

    assert cpu_rate(work, 0.5, clock=lambda: ticks[0]) == pytest.approx(1000, rel=0.01)
    for bad in (0.0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="seconds must be positive"):
            cpu_rate(work, bad, clock=lambda: ticks[0])


def test_time_spent_waiting_for_a_core_does_not_count() -> None:
    """CPU time, not wall time: a call that sleeps costs (almost) nothing, so a busy
    machine's wait for a core does not read as a slow core.

    Sleeping still costs the system call and the timer: ~90 µs of CPU a call on CI's
    loaded VM, which made 0.1 ms sleeps count as about as much CPU as wall time. 5 ms
    sleeps keep the two apart by far more than any machine's noise."""
    slept = cpu_rate(lambda: time.sleep(0.005), 0.02)
    assert slept > 10 / 0.005  # ten times the calls that fit in wall time, had it counted


def test_core_speed_issues_real_tokens() -> None:
    speed = core_speed(0.05)
    assert set(speed) == {"token_issues_per_second"}
    assert isinstance(speed["token_issues_per_second"], int)
    assert speed["token_issues_per_second"] > 100  # Ed25519 signs thousands a second
