"""run_eagerly: a coroutine runs on the spot until it has to wait, then in a task."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

import pytest

from rideout._eager import run_eagerly


async def test_a_coroutine_that_never_waits_finishes_on_the_spot() -> None:
    done: list[str] = []

    ready = asyncio.Event()
    ready.set()

    async def quick() -> None:
        await ready.wait()  # an await that does not suspend
        done.append("quick")

    assert run_eagerly(quick()) is None
    assert done == ["quick"]


async def test_an_error_before_the_first_wait_reaches_the_caller() -> None:
    async def broken() -> None:
        raise OSError("gone")

    with pytest.raises(OSError, match="gone"):
        run_eagerly(broken())


async def test_a_coroutine_that_waits_is_finished_by_whoever_awaits_the_rest() -> None:
    gate = asyncio.Event()
    steps: list[str] = []

    async def slow() -> None:
        steps.append("before")
        await gate.wait()
        steps.append("after gate")
        await asyncio.sleep(0)  # a bare yield to the loop is passed through too
        steps.append("done")

    rest = run_eagerly(slow())
    assert rest is not None
    assert steps == ["before"]

    async def finish() -> None:
        await rest

    task = asyncio.create_task(finish())
    await asyncio.sleep(0)  # one turn of the loop: the task starts and waits on the gate
    assert steps == ["before"]
    gate.set()
    await task
    assert steps == ["before", "after gate", "done"]


async def test_an_error_after_the_first_wait_reaches_the_awaiter() -> None:
    gate = asyncio.Event()

    async def fails_later() -> None:
        await gate.wait()
        raise OSError("later")

    rest = run_eagerly(fails_later())
    assert rest is not None
    gate.set()
    with pytest.raises(OSError, match="later"):
        await rest


async def started_then_cancelled(coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
    """Run `coro` eagerly up to its wait, finish it in a task, and cancel that task."""
    rest = run_eagerly(coro)
    assert rest is not None

    async def finish() -> None:
        await rest

    task = asyncio.create_task(finish())
    await asyncio.sleep(0)
    task.cancel()
    return task


async def test_cancelling_the_task_cancels_the_coroutine_where_it_waits() -> None:
    cleaned: list[str] = []

    async def waits_forever() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            cleaned.append("finally ran")

    task = await started_then_cancelled(waits_forever())
    with pytest.raises(asyncio.CancelledError):
        await task
    assert cleaned == ["finally ran"]


async def test_a_coroutine_that_catches_the_cancellation_may_finish_normally() -> None:
    async def shrugs() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            return

    task = await started_then_cancelled(shrugs())
    await task  # the coroutine swallowed it; the task ends without error
    assert not task.cancelled()
