"""Redis clients with explicit timeouts and retries: the one place they are made.

redis-py 8's default retry policy (three retries with exponential backoff) turns one
PING against a silent server into ~15 s. A failover loop must notice a dead server in
a bounded time, so every client rideout makes states its own limits.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

__all__ = ["cancel_and_wait", "check_cancelled", "probe_client", "state_client"]

log = logging.getLogger("rideout.store")


def check_cancelled() -> None:
    """Raise CancelledError if the current task has a cancellation pending.

    redis-py can lose a cancellation that lands while it is inside one of its timeout
    blocks (redis/redis-py#2028, #2551); the request is still counted on the task. Every
    loop that calls redis-py checks this once per iteration, so it cannot outlive its
    cancellation.
    """
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


async def cancel_and_wait(task: asyncio.Task[Any], timeout: float = 5.0) -> None:
    """Cancel `task` and wait for it, at most `timeout` seconds (then log and move on)."""
    task.cancel()
    done, _ = await asyncio.wait({task}, timeout=timeout)
    if not done:
        log.error("%s did not stop within %g s of being cancelled", task.get_name(), timeout)
    elif not task.cancelled() and task.exception() is not None:
        log.error("%s failed: %r", task.get_name(), task.exception())


def probe_client(address: str, port: int, *, timeout: float = 1.0) -> aioredis.Redis:
    """For health checks and readiness polling: one try, answers within `timeout`."""
    return aioredis.Redis(
        host=address,
        port=port,
        socket_connect_timeout=timeout,
        socket_timeout=timeout,
        retry=Retry(NoBackoff(), 0),
        decode_responses=True,
    )


def state_client(
    address: str, port: int, *, timeout: float = 2.0, max_connections: int = 64
) -> aioredis.Redis:
    """For application state: one immediate retry on a dropped connection, then fail.

    The pool blocks (up to `timeout`) when all `max_connections` are busy, rather than
    failing at once as redis-py's default pool does past its limit: under a burst,
    requests queue for a connection instead of erroring.
    """
    pool = aioredis.BlockingConnectionPool(
        max_connections=max_connections,
        timeout=timeout,
        host=address,
        port=port,
        socket_connect_timeout=timeout,
        socket_timeout=timeout,
        retry=Retry(NoBackoff(), 1),
        decode_responses=True,
    )
    return aioredis.Redis.from_pool(pool)
