"""Stop on a signal: what a command that runs in the foreground until told to stop
(``rideout up``, ``rideout lab up``) does with SIGINT, SIGTERM and SIGHUP. One place, so
every such command stops alike and says which signal stopped it."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Iterator, Sequence
from typing import Final

__all__ = ["STOP_SIGNALS", "StopRequest", "stop_on_signals"]

STOP_SIGNALS: Final = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class StopRequest:
    """Set by the first stop signal (and any after it): `event`, and the signals' names."""

    def __init__(self) -> None:
        self.event = asyncio.Event()
        self.received: list[str] = []

    @property
    def why(self) -> str:
        """The first signal's name (``SIGTERM``), or ``stop`` if the event was set
        otherwise."""
        return self.received[0] if self.received else "stop"

    def _on_signal(self, signum: int) -> None:
        self.received.append(signal.Signals(signum).name)
        self.event.set()


@contextlib.contextmanager
def stop_on_signals(signals: Sequence[signal.Signals] = STOP_SIGNALS) -> Iterator[StopRequest]:
    """Within the block, `signals` set the returned request's event instead of their
    default action; the handlers are removed on the way out. Call it with the event loop
    running (it installs loop signal handlers)."""
    loop = asyncio.get_running_loop()
    request = StopRequest()
    for signum in signals:
        loop.add_signal_handler(signum, request._on_signal, signum)
    try:
        yield request
    finally:
        for signum in signals:
            loop.remove_signal_handler(signum)
