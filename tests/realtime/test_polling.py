"""The loop the epoch tracker, the revocation follower and the store prober run on."""

from __future__ import annotations

import asyncio
import itertools

from rideout.realtime.polling import Polling
from tests.conftest import until


async def test_the_step_repeats_every_interval_until_stopped() -> None:
    steps: list[float] = []
    loop = asyncio.get_running_loop()

    async def step() -> None:
        steps.append(loop.time())

    polling = Polling(step, 0.05, "test-polling")
    polling.start()
    polling.start()  # a second start is the same loop
    tasks = [t for t in asyncio.all_tasks() if t.get_name() == "rideout-test-polling"]
    assert len(tasks) == 1
    await until(lambda: len(steps) >= 3, 10)
    await polling.stop()
    assert all(b - a >= 0.045 for a, b in itertools.pairwise(steps))
    count = len(steps)
    await asyncio.sleep(0.1)
    assert len(steps) == count  # stopped
    assert tasks[0].done()
    await polling.stop()  # stopping twice is harmless
