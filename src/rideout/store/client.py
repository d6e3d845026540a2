"""Redis clients with explicit timeouts and retries: the one place they are made.

redis-py 8's default retry policy (three retries with exponential backoff) turns one
PING against a silent server into ~15 s. A failover loop must notice a dead server in
a bounded time, so every client rideout makes states its own limits.
"""

from __future__ import annotations

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

__all__ = ["probe_client", "state_client"]


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
