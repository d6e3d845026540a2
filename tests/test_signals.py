"""stop_on_signals: a signal sets the request and is named; the handlers go on exit."""

from __future__ import annotations

import asyncio
import os
import signal

from rideout._signals import STOP_SIGNALS, stop_on_signals


async def test_a_signal_sets_the_request_and_is_named_then_the_handlers_go() -> None:
    loop = asyncio.get_running_loop()
    with stop_on_signals((signal.SIGHUP, signal.SIGUSR1)) as stop:
        assert (stop.event.is_set(), stop.why) == (False, "stop")
        os.kill(os.getpid(), signal.SIGUSR1)
        await asyncio.wait_for(stop.event.wait(), 5)
        os.kill(os.getpid(), signal.SIGHUP)
        await asyncio.sleep(0.05)
        assert stop.received == ["SIGUSR1", "SIGHUP"]
        assert stop.why == "SIGUSR1"
    # Removed: there is no handler left to remove.
    assert not loop.remove_signal_handler(signal.SIGUSR1)
    assert not loop.remove_signal_handler(signal.SIGHUP)


async def test_the_handlers_go_when_the_block_raises() -> None:
    loop = asyncio.get_running_loop()
    try:
        with stop_on_signals():
            raise RuntimeError("boom")
    except RuntimeError:
        pass
    assert not any(loop.remove_signal_handler(s) for s in STOP_SIGNALS)
