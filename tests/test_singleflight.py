"""Singleflight: identical concurrent calls share one; cancellation, errors, freshness."""

from __future__ import annotations

import asyncio

import pytest

from rideout._singleflight import SingleFlight


class Work:
    """A piece of work the test finishes when it wants, counting how often it ran."""

    def __init__(self) -> None:
        self.runs = 0
        self.gate = asyncio.Event()
        self.error: BaseException | None = None

    async def __call__(self) -> int:
        self.runs += 1
        run = self.runs
        await self.gate.wait()
        if self.error is not None:
            raise self.error
        return run


async def test_identical_concurrent_calls_share_one_run() -> None:
    flights: SingleFlight[str, int] = SingleFlight()
    work = Work()
    calls = [asyncio.create_task(flights.do("room", work)) for _ in range(50)]
    other = asyncio.create_task(flights.do("other-room", work))
    for _ in range(2):  # the callers start the flights, then the flights start
        await asyncio.sleep(0)
    assert work.runs == 2
    assert len(flights) == 2
    work.gate.set()
    assert await asyncio.gather(*calls) == [1] * 50
    assert await other == 2
    assert (flights.sequence, flights.shared) == (2, 49)
    assert len(flights) == 0  # landed: the next call runs again
    assert await flights.do("room", work) == 3


async def test_a_cancelled_caller_does_not_cancel_the_flight_for_the_others() -> None:
    flights: SingleFlight[str, int] = SingleFlight()
    work = Work()
    first = asyncio.create_task(flights.do("k", work))  # the one that started it
    second = asyncio.create_task(flights.do("k", work))
    await asyncio.sleep(0)
    first.cancel()
    await asyncio.sleep(0)
    assert first.cancelled()
    work.gate.set()
    assert await second == 1
    assert work.runs == 1


async def test_a_flight_left_by_every_caller_finishes_quietly(
    caplog: pytest.LogCaptureFixture,
) -> None:
    flights: SingleFlight[str, int] = SingleFlight()
    work = Work()
    work.error = RuntimeError("nobody is listening")
    caller = asyncio.create_task(flights.do("k", work))
    await asyncio.sleep(0)
    caller.cancel()
    work.gate.set()
    await asyncio.sleep(0.01)
    assert len(flights) == 0
    assert "never retrieved" not in caplog.text


async def test_an_error_reaches_every_caller_and_the_next_call_runs_again() -> None:
    flights: SingleFlight[str, int] = SingleFlight()
    work = Work()
    work.error = ConnectionError("redis went away")
    calls = [asyncio.create_task(flights.do("k", work)) for _ in range(3)]
    await asyncio.sleep(0)
    work.gate.set()
    outcomes = await asyncio.gather(*calls, return_exceptions=True)
    assert all(isinstance(o, ConnectionError) for o in outcomes)
    work.error = None
    assert await flights.do("k", work) == 2


async def test_after_joins_only_a_flight_started_later() -> None:
    """A caller that needs a read begun after something it did (its subscription) does
    not join an older flight; those that come after it join its newer one."""
    flights: SingleFlight[str, int] = SingleFlight()
    work = Work()
    old = flights.run("k", work)
    mark = flights.sequence
    assert flights.run("k", work) is old  # anyone else joins it
    fresh = flights.run("k", work, after=mark)
    assert fresh is not old and fresh.sequence == mark + 1  # noqa: PT018
    assert flights.current("k") is fresh
    assert flights.run("k", work, after=mark) is fresh
    work.gate.set()
    assert (await old.result(), await fresh.result()) == (1, 2)
    assert flights.current("k") is None
