"""Supervised background tasks: the restart policy (pure), and the supervisor on a real
loop with a fake sleep (no time passes: a held sleep is a restart the test releases)."""

from __future__ import annotations

import asyncio
import logging

import pytest
from prometheus_client import CollectorRegistry

from rideout._tasks import RESTART, RestartPolicy, Restarts, TaskSupervisor
from rideout.backoff import NoJitter
from tests.conftest import HeldSleep, until

# ------------------------------------------------------------------ the policy (pure)


def test_restarts_back_off_from_a_tenth_of_a_second_to_five() -> None:
    restarts = Restarts()
    delays = [restarts.died(ran_for=0.0) for _ in range(8)]
    assert delays == [0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0]
    assert (restarts.in_a_row, restarts.total) == (8, 8)


def test_ten_thousand_deaths_in_a_row_stay_at_the_cap() -> None:
    """The hub's old ``0.05 * 2**failures`` overflowed at the 1,024th: this cannot."""
    restarts = Restarts()
    delays = [restarts.died(ran_for=0.01) for _ in range(10_000)]
    assert max(delays) == delays[-1] == 5.0
    assert restarts.in_a_row == 10_000


def test_a_steady_run_starts_the_count_over() -> None:
    restarts = Restarts(RestartPolicy(NoJitter(base=1.0, cap=60.0), steady=30.0))
    assert [restarts.died(ran_for=1.0) for _ in range(3)] == [1.0, 2.0, 4.0]
    assert restarts.died(ran_for=30.0) == 1.0  # ran long enough: the first of a new run
    assert restarts.died(ran_for=29.9) == 2.0
    assert restarts.total == 5


def test_the_policy_is_immutable_data_and_validated() -> None:
    with pytest.raises(ValueError, match="steady"):
        RestartPolicy(steady=-1.0)
    with pytest.raises(AttributeError):
        RESTART.steady = 1.0  # type: ignore[misc]


# ------------------------------------------------------------------ the supervisor


async def test_a_task_that_dies_is_down_until_its_restart(
    caplog: pytest.LogCaptureFixture,
) -> None:
    registry = CollectorRegistry()
    sleep = HeldSleep()
    tasks = TaskSupervisor(registry=registry, sleep=sleep)
    runs: list[int] = []
    forever = asyncio.Event()

    async def run() -> None:
        runs.append(len(runs))
        if len(runs) == 1:
            raise RuntimeError("a bug in the loop")
        await forever.wait()

    task = tasks.spawn("hub", run)
    assert tasks.down() == ()
    with caplog.at_level(logging.ERROR, "rideout.tasks"):
        await until(lambda: tasks.down() == ("hub",), 5, message="the death")
    assert sleep.asked == [0.1]
    assert "background task hub died" in caplog.text
    assert "RuntimeError: a bug in the loop" in caplog.text  # the traceback is logged
    assert registry.get_sample_value("rideout_task_deaths_total", {"task": "hub"}) == 1
    assert registry.get_sample_value("rideout_task_up", {"task": "hub"}) == 0
    status = tasks.status()["hub"]
    assert status == {
        "up": False,
        "critical": True,
        "deaths": 1,
        "last_error": "RuntimeError: a bug in the loop",
    }
    sleep.release()
    await until(lambda: len(runs) == 2, 5, message="the restart")
    assert tasks.down() == ()
    assert registry.get_sample_value("rideout_task_up", {"task": "hub"}) == 1
    assert not task.done()
    await tasks.stop()
    assert task.done()
    assert task.task.cancelled()
    assert tasks.status() == {}


async def test_a_task_that_is_not_critical_never_counts_as_down() -> None:
    sleep = HeldSleep()
    tasks = TaskSupervisor(sleep=sleep)

    async def run() -> None:
        raise ValueError("the watcher's bug")

    watcher = tasks.spawn("loop-lag", run, critical=False)
    await until(lambda: watcher.down, 5, message="the death")
    assert tasks.down() == ()
    assert tasks.status()["loop-lag"]["up"] is False
    await tasks.stop()


async def test_deaths_in_a_row_back_off_and_a_returning_task_is_done() -> None:
    asked: list[float] = []

    async def sleep(seconds: float) -> None:
        asked.append(seconds)  # no time passes

    tasks = TaskSupervisor(sleep=sleep)
    runs = 0

    async def run() -> str:
        nonlocal runs
        runs += 1
        if runs <= 5:
            raise OSError(f"death {runs}")
        return "finished"  # a finite task (a drain): done, not restarted

    task = tasks.spawn("drain-us-east-1", run, critical=False)
    await asyncio.wait({task.task}, timeout=5)
    assert task.done()
    assert not task.task.cancelled()
    assert asked == [0.1, 0.2, 0.4, 0.8, 1.6]
    assert runs == 6
    again = tasks.spawn("drain-us-east-1", run, critical=False)  # the name is free again
    await asyncio.wait({again.task}, timeout=5)


async def test_a_cancellation_is_a_stop_not_a_death() -> None:
    tasks = TaskSupervisor(sleep=HeldSleep())
    started = asyncio.Event()

    async def run() -> None:
        started.set()
        await asyncio.Event().wait()

    task = tasks.spawn("feed", run)
    with pytest.raises(ValueError, match="already running"):
        tasks.spawn("feed", run)
    await started.wait()
    await task.stop()
    assert task.task.cancelled()
    assert task.restarts.total == 0
    await task.stop()  # twice is harmless
