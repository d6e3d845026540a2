"""LazyDeadline: the connection loop's one timer for many receives (real event loop)."""

from __future__ import annotations

import asyncio
import math

import pytest

from rideout.client.ws._deadline import LazyDeadline


def never() -> asyncio.Future[str]:
    return asyncio.get_running_loop().create_future()


async def test_a_wait_past_the_deadline_times_out() -> None:
    loop = asyncio.get_running_loop()
    deadline = LazyDeadline()
    deadline.at_most(loop.time() + 0.05)
    started = loop.time()
    with pytest.raises(TimeoutError):
        await deadline.wait(never)
    assert 0.04 <= loop.time() - started < 2.0
    assert deadline.when == math.inf  # fired: unset until the next at_most


async def test_the_timer_moves_only_earlier_and_outlives_the_waits_it_bounds() -> None:
    loop = asyncio.get_running_loop()
    deadline = LazyDeadline()
    assert deadline.when == math.inf
    first = loop.time() + 30
    deadline.at_most(first)
    for i in range(100):  # a message every time: no timer is touched
        ready = loop.create_future()
        ready.set_result(f"m{i}")
        assert await deadline.wait(lambda f=ready: f) == f"m{i}"  # type: ignore[misc]
        deadline.at_most(first + 1 + i)  # later wakeups leave the timer where it is
        assert deadline.when == first
    deadline.at_most(first - 10)  # an earlier one moves it
    assert deadline.when == first - 10
    deadline.close()
    assert deadline.when == math.inf


async def test_a_deadline_that_passed_between_waits_ends_the_next_one_before_it_begins() -> None:
    loop = asyncio.get_running_loop()
    deadline = LazyDeadline()
    deadline.at_most(loop.time())
    await asyncio.sleep(0.01)  # it passes while nobody waits (the loop is sending, say)
    started: list[bool] = []

    def start() -> asyncio.Future[str]:
        started.append(True)
        return never()

    with pytest.raises(TimeoutError):
        await deadline.wait(start)
    assert started == []  # no receive was begun only to be cancelled
    deadline.at_most(loop.time() + 30)  # and it can be armed again
    assert deadline.when < math.inf
    deadline.close()


async def test_a_deadline_already_past_when_armed_fires_and_can_be_moved() -> None:
    # A loaded loop arms the deadline for a wakeup that is already due. uvloop's
    # call_at then returns a plain Handle with no when(): the deadline kept asking it,
    # and 186 of a drill's 1,000 clients died of the AttributeError.
    loop = asyncio.get_running_loop()
    deadline = LazyDeadline()
    deadline.at_most(loop.time() - 1.0)
    assert deadline.when < loop.time()
    deadline.at_most(loop.time() - 2.0)  # earlier still: it moves
    assert deadline.when < loop.time() - 1.5
    deadline.at_most(loop.time() + 30)  # later: it stays
    assert deadline.when < loop.time()
    with pytest.raises(TimeoutError):
        await deadline.wait(never)
    assert deadline.when == math.inf
    deadline.close()


async def test_a_cancellation_from_elsewhere_is_not_taken_for_the_deadline() -> None:
    loop = asyncio.get_running_loop()

    async def waiter(early: bool) -> None:
        deadline = LazyDeadline()
        deadline.at_most(loop.time() + (0.0 if early else 30))
        try:
            await deadline.wait(never)
        finally:
            deadline.close()

    for early in (False, True):
        task = asyncio.create_task(waiter(early))
        await asyncio.sleep(0)  # it waits (and, when early, its deadline is due)
        task.cancel()  # ...and is cancelled from outside in the same turn
        with pytest.raises(asyncio.CancelledError):
            await task
        assert task.cancelled()


async def test_it_must_be_made_inside_a_task() -> None:
    loop = asyncio.get_running_loop()
    made: asyncio.Future[BaseException | None] = loop.create_future()

    def make() -> None:
        try:
            LazyDeadline()
        except RuntimeError as exc:
            made.set_result(exc)
        else:
            made.set_result(None)

    loop.call_soon(make)  # a plain callback: no current task
    error = await made
    assert isinstance(error, RuntimeError)
    assert "inside a task" in str(error)
