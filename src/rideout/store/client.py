"""Redis clients with credentials, explicit timeouts and retries: the one place they are made.

redis-py 8's default retry policy (three retries with exponential backoff) turns one
PING against a silent server into ~15 s. A failover loop must notice a dead server in
a bounded time, so every client rideout makes states its own limits.

Every client authenticates as one of the deployment's ACL users
(:class:`~rideout.store.acl.RedisCredentials`). Its connections reword Redis's refusals
so that they can be acted on: ``WRONGPASS`` names the credential file and the server,
``NOPERM`` the user and the command (the error classes stay redis-py's, so pipelines
and callers handle them as before; :mod:`.auction` turns them into
:class:`~rideout.store.acl.StoreAuthError`).
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import AuthenticationError, NoPermissionError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from rideout.config import RedisTLS
from rideout.store.acl import (
    CredentialsUnavailable,
    RedisCredentials,
    denied_message,
    rejected_message,
)
from rideout.store.functions import forget_server

__all__ = [
    "cancel_and_wait",
    "check_cancelled",
    "probe_client",
    "retarget",
    "state_client",
]

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


# A command a Lua script calls was refused (Redis and Valkey word it so, not as NOPERM).
_SCRIPT_DENIED = ("user executing the script can't", "ACL failure in script")


class _Rewording:
    """Rewords authentication and permission errors (see above); mixed into both the
    plain and the TLS connection."""

    _credentials: RedisCredentials
    host: str
    port: int

    async def read_response(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return await super().read_response(*args, **kwargs)  # type: ignore[misc]
        except AuthenticationError as exc:
            where = f"{self.host}:{self.port}"
            raise AuthenticationError(
                rejected_message(self._credentials, where, str(exc))
            ) from None
        except NoPermissionError as exc:
            raise NoPermissionError(denied_message(self._credentials.username, str(exc))) from None
        except ResponseError as exc:
            if any(words in str(exc) for words in _SCRIPT_DENIED):
                raise NoPermissionError(
                    denied_message(self._credentials.username, str(exc))
                ) from None
            raise


class _ClosesWithoutFailing:
    """A close that is not failed by waiting: redis-py closes the socket, then waits
    for its end within the connect timeout and raises TimeoutError past it, which on a
    loaded machine turned a Redis that had answered into a failed readiness check. The
    socket is closed either way; mixed into both the plain and the TLS connection."""

    async def disconnect(self, *args: Any, **kwargs: Any) -> None:
        try:
            await super().disconnect(*args, **kwargs)  # type: ignore[misc]
        except RedisTimeoutError as exc:
            if "closing connection" not in str(exc):
                raise
            log.debug("closing a connection took longer than its timeout: %s", exc)


class _Connection(_ClosesWithoutFailing, _Rewording, aioredis.Connection):
    def __init__(self, *, credentials: RedisCredentials, **kwargs: Any) -> None:
        super().__init__(username=credentials.username, password=credentials.password, **kwargs)
        self._credentials = credentials


class _TLSConnection(_ClosesWithoutFailing, _Rewording, aioredis.SSLConnection):
    def __init__(self, *, credentials: RedisCredentials, **kwargs: Any) -> None:
        super().__init__(username=credentials.username, password=credentials.password, **kwargs)
        self._credentials = credentials


def _tls_kwargs(tls: RedisTLS) -> dict[str, Any]:
    """redis-py's TLS settings for `tls`; every named file must be readable now, so a
    missing mount is reported at start, not as a handshake failure later."""
    for what, file in (("CA", tls.ca_file), ("client cert", tls.cert_file),
                       ("client key", tls.key_file)):  # fmt: skip
        if file and not Path(file).is_file():
            raise CredentialsUnavailable(f"Redis TLS {what} file {file} does not exist")
    return {
        "ssl_ca_certs": tls.ca_file or None,
        "ssl_certfile": tls.cert_file or None,
        "ssl_keyfile": tls.key_file or None,
        "ssl_cert_reqs": "required",
        "ssl_check_hostname": tls.check_hostname,
    }


def _connection_kwargs(
    address: str,
    port: int,
    credentials: RedisCredentials,
    timeout: float,
    retries: int,
    tls: RedisTLS | None = None,
) -> dict[str, Any]:
    if not isinstance(credentials, RedisCredentials):
        raise TypeError(f"credentials must be RedisCredentials, not {type(credentials).__name__}")
    return {
        **(_tls_kwargs(tls) if tls is not None else {}),
        "connection_class": _Connection if tls is None else _TLSConnection,
        "credentials": credentials,
        "host": address,
        "port": port,
        "socket_connect_timeout": timeout,
        "socket_timeout": timeout,
        "retry": Retry(NoBackoff(), retries),
        "decode_responses": True,
        # No CLIENT SETINFO on connect: no user may run CLIENT.
        "driver_info": None,
    }


def probe_client(
    address: str,
    port: int,
    *,
    credentials: RedisCredentials,
    timeout: float = 1.0,
    tls: RedisTLS | None = None,
) -> aioredis.Redis:
    """For health checks and readiness polling: one try, answers within `timeout`.

    With `tls` (a ``rediss://`` region's :attr:`~rideout.config.RedisConfig.tls`), the
    connection is TLS, verified against its CA.
    """
    pool = aioredis.ConnectionPool(
        **_connection_kwargs(address, port, credentials, timeout, 0, tls)
    )
    return aioredis.Redis.from_pool(pool)


def state_client(
    address: str,
    port: int,
    *,
    credentials: RedisCredentials,
    timeout: float = 2.0,
    max_connections: int = 64,
    tls: RedisTLS | None = None,
) -> aioredis.Redis:
    """For application state: one immediate retry on a dropped connection, then fail.

    The pool blocks (up to `timeout`) when all `max_connections` are busy, rather than
    failing at once as redis-py's default pool does past its limit: under a burst,
    requests queue for a connection instead of erroring.
    """
    pool = aioredis.BlockingConnectionPool(
        max_connections=max_connections,
        timeout=timeout,
        **_connection_kwargs(address, port, credentials, timeout, 1, tls),
    )
    return aioredis.Redis.from_pool(pool)


async def retarget(client: aioredis.Redis, address: str, port: int) -> bool:
    """Point `client`'s pool at another server (its region's writer moved to the
    region's other Redis); whether it changed. Open connections are closed: calls in
    flight fail as after a dropped connection, later ones connect to the new server.
    """
    pool = client.connection_pool
    kwargs = pool.connection_kwargs
    if (kwargs.get("host"), kwargs.get("port")) == (address, port):
        return False
    pool.connection_kwargs.update(host=address, port=port)
    # redis-py keeps each connection's own host and port, reconnecting there; the pool's
    # connections are all re-pointed (its lists are redis-py internals, read only here).
    for attr in ("_available_connections", "_in_use_connections"):
        for connection in list(getattr(pool, attr, ())):
            connection.host, connection.port = address, port
    await pool.disconnect(inuse_connections=True)
    forget_server(client)  # the other server may run another version
    return True
