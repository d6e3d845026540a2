"""Automatic pipelining: the script calls made in one event-loop iteration go to Redis
as one pipeline (``FCALL`` where the server has functions, else ``EVALSHA``:
:mod:`.functions`).

Hundreds of connections bidding at once each await one script's reply. Sent one by
one, every call pays redis-py's whole per-command path (a pooled connection, a write,
a read) and a round trip; batched, those costs are paid once per batch, as a pipelined
client pays them. The calls of one pipeline run in the order they were made (pipelines
run side by side on their own connections), and every caller gets its own reply or
error. A batch with ``WAIT`` ends with a single
``WAIT``: it covers every write before it on that connection. An observed WAIT (sync
replication's rule, :mod:`.sync`) is framed by ``INFO replication`` before and after.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, ReadOnlyError

from rideout.store.functions import (
    StoreFunction,
    as_replica_refusal,
    missing_library,
    runs_functions,
)

__all__ = ["ScriptPipeliner", "WaitReply"]

_Arg = str | int | bytes
# WAIT numreplicas timeout-ms, and whether INFO replication frames it.
_Wait = tuple[int, int] | tuple[int, int, bool]


@dataclass(frozen=True, slots=True)
class WaitReply:
    """WAIT's count; with an observed WAIT, ``INFO replication`` just before and after it."""

    acked: int
    before: dict[str, Any] | None = None
    after: dict[str, Any] | None = None


@dataclass(slots=True)
class _Call:
    keys: Sequence[_Arg]
    args: Sequence[_Arg]
    future: asyncio.Future[Any]


@dataclass(slots=True)
class _Batch:
    wait: _Wait | None  # WAIT after the scripts
    calls: list[_Call] = field(default_factory=list)
    waited: asyncio.Future[WaitReply] | None = None
    launched: bool = False


class ScriptPipeliner:
    """Runs one routine for many concurrent callers, a pipeline per loop iteration.

    `max_batch` bounds how many calls share one pipeline (a larger burst is split).
    """

    def __init__(self, client: aioredis.Redis, function: StoreFunction, *, max_batch: int = 256):
        if max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, not {max_batch!r}")
        self._client = client
        self._function = function
        self._max_batch = max_batch
        self._open: dict[_Wait | None, _Batch] = {}
        self._running: set[asyncio.Task[None]] = set()
        self._closed = False

    async def call(
        self, keys: Sequence[_Arg], args: Sequence[_Arg], *, wait: _Wait | None = None
    ) -> tuple[Any, WaitReply | None]:
        """The script's reply for `keys` and `args`, and with ``wait=(replicas,
        timeout_ms)`` how many replicas acknowledged it (``WAIT``) — else None;
        ``wait=(replicas, timeout_ms, True)`` also reads INFO replication around it.

        Raises what redis-py raises for this call (a failed batch fails every call in it),
        and redis-py's ConnectionError once :meth:`close` has been called.
        """
        if self._closed:
            raise RedisConnectionError("the script pipeline is closed (the server is stopping)")
        loop = asyncio.get_running_loop()
        batch = self._open.get(wait)
        if batch is None:
            batch = self._open[wait] = _Batch(wait)
            if wait is not None:
                batch.waited = loop.create_future()
            loop.call_soon(self._launch, batch)
        call = _Call(keys, args, loop.create_future())
        batch.calls.append(call)
        if len(batch.calls) >= self._max_batch:
            del self._open[wait]  # full: the next call opens another
        reply = await call.future
        if batch.waited is None:
            return reply, None
        return reply, await asyncio.shield(batch.waited)

    def _launch(self, batch: _Batch) -> None:
        if batch.launched:  # by close(), before its turn in the loop came
            return
        batch.launched = True
        if self._open.get(batch.wait) is batch:
            del self._open[batch.wait]
        task = asyncio.get_running_loop().create_task(self._run(batch))
        self._running.add(task)
        task.add_done_callback(self._running.discard)

    async def close(self) -> None:
        """Send the batches still open and wait for every batch sent (callers get their
        replies); later calls fail. (A batch left open would be sent after the caller
        has closed the client, on a connection nobody closes.)"""
        self._closed = True
        for batch in list(self._open.values()):
            self._launch(batch)
        if self._running:
            await asyncio.wait(set(self._running))

    async def _run(self, batch: _Batch) -> None:
        calls = batch.calls
        routine = self._function.routine
        try:
            name = routine.name if await runs_functions(self._client) else None
            replies, acked = await self._execute(calls, batch.wait, name)
            # Calls refused before they ran (so running them again is safe): EVALSHA's
            # script cache was flushed (a restart, a failover): load it; or a replica
            # refused a function that may write: its read-only twin (.functions).
            refused = NoScriptError if name is None else ReadOnlyError
            again_name = None if name is None else routine.replica_name
            missing = [i for i, reply in enumerate(replies) if isinstance(reply, refused)]
            if missing and (name is None or again_name != name):
                if name is None:
                    await self._client.script_load(self._function.script.script)
                again, acked = await self._execute(
                    [calls[i] for i in missing], batch.wait, again_name
                )
                for i, reply in zip(missing, again, strict=True):
                    replies[i] = reply
            replies = [
                as_replica_refusal(missing_library(r, routine, self._client))
                if isinstance(r, Exception) else r
                for r in replies
            ]  # fmt: skip
        except BaseException as exc:
            for future in [call.future for call in calls] + [batch.waited]:
                _settle(future, exc)
            if not isinstance(exc, Exception):
                raise
            return
        for call, reply in zip(calls, replies, strict=True):
            _settle(call.future, reply)
        _settle(batch.waited, acked)

    async def _execute(
        self, calls: list[_Call], wait: _Wait | None, function: str | None
    ) -> tuple[list[Any], Any]:
        """One pipeline: the calls' replies (exceptions in place) and WAIT's reply;
        ``FCALL function``, or with None ``EVALSHA`` of the routine's script."""
        command, target = (
            ("FCALL", function) if function else ("EVALSHA", self._function.script.sha)
        )
        observed = wait is not None and len(wait) == 3 and bool(wait[2])
        async with self._client.pipeline(transaction=False) as pipe:
            for call in calls:
                pipe.execute_command(command, target, len(call.keys), *call.keys, *call.args)
            if wait is not None:
                if observed:
                    pipe.info("replication")
                pipe.execute_command("WAIT", wait[0], wait[1])
                if observed:
                    pipe.info("replication")
            replies = list(await pipe.execute(raise_on_error=False))
        if wait is None:
            return replies, None
        after = replies.pop() if observed else None
        acked = replies.pop()
        before = replies.pop() if observed else None
        for part in (acked, before, after):
            if isinstance(part, Exception):
                return replies, part
        return replies, WaitReply(int(acked or 0), before, after)


def _settle(future: asyncio.Future[Any] | None, outcome: Any) -> None:
    """Resolve `future` with `outcome` (an exception is raised to its awaiter)."""
    if future is None or future.done():  # no WAIT, or its caller was cancelled
        return
    if isinstance(outcome, asyncio.CancelledError):
        future.cancel()
    elif isinstance(outcome, BaseException):
        future.set_exception(outcome)
        future.exception()  # marked retrieved: a caller whose call failed never reads it
    else:
        future.set_result(outcome)
