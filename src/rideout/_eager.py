"""Run a coroutine synchronously until it first has to wait.

Sending on a WebSocket whose transport is not paused never waits, so most sends finish
on the spot; only a send that meets back-pressure needs a task of its own. Doing the
rest in a task is what Python 3.12's eager tasks do; this works on 3.11 and creates no
task at all in the common case (a task per send costs a trip through the event loop and
~1 KB while it lives).
"""

from __future__ import annotations

from collections.abc import Awaitable, Generator
from typing import Any

__all__ = ["Resumption", "run_eagerly"]


def run_eagerly(awaitable: Awaitable[None]) -> Resumption | None:
    """Step `awaitable` (a coroutine, usually) until it finishes or suspends.

    Returns None when it finished (an exception it raised propagates to the caller), or,
    when it suspended, a :class:`Resumption`: await it (in a task) to run the rest.
    """
    coro = awaitable.__await__()
    try:
        waiting = coro.send(None)
    except StopIteration:
        return None
    return Resumption(coro, waiting)


class Resumption:
    """The rest of a suspended coroutine, as an awaitable: it hands the future the
    coroutine waits on to the awaiting task, then resumes the coroutine each time the
    task wakes up, forwarding what is thrown in (cancellation)."""

    __slots__ = ("_coro", "_waiting")

    def __init__(self, coro: Generator[Any, None, None], waiting: Any) -> None:
        self._coro = coro
        self._waiting = waiting

    def __await__(self) -> Generator[Any, None, None]:
        coro, waiting = self._coro, self._waiting
        while True:
            try:
                yield waiting
            except BaseException as exc:  # every throw (cancellation) belongs to coro
                try:
                    waiting = coro.throw(exc)
                except StopIteration:
                    return
            else:
                try:
                    waiting = coro.send(None)
                except StopIteration:
                    return
