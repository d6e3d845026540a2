"""The sync client's deadline: every connect, read and write capped by the attempt's end.

httpx bounds each phase of a request (pool wait, connect, write, read) by its timeout,
and each socket operation within a phase anew; a blocking client cannot be interrupted
otherwise. Two pieces keep an attempt within its bound: :class:`_DeadlineBackend` under
httpx's default transport (every socket operation), and :func:`_tightener` for a
caller's own client or transport (each phase, when it starts).
"""

from __future__ import annotations

import ssl
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

import httpcore
import httpx

__all__: list[str] = []

_MIN_PHASE = 0.001  # a phase timeout of 0 would make the socket non-blocking


class _Deadlines(threading.local):
    """The attempt in flight on this thread: when it must be over (``time.monotonic``)."""

    at: float | None = None


class _DeadlineStream(httpcore.NetworkStream):
    """A connection whose every read and write stops at the attempt's deadline."""

    def __init__(self, stream: httpcore.NetworkStream, deadlines: _Deadlines) -> None:
        self._stream = stream
        self._deadlines = deadlines

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._stream.read(max_bytes, _capped(self._deadlines, timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._stream.write(buffer, _capped(self._deadlines, timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._stream.close()

    def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.NetworkStream:
        timeout = _capped(self._deadlines, timeout, httpcore.ConnectTimeout)
        return _DeadlineStream(
            self._stream.start_tls(ssl_context, server_hostname, timeout), self._deadlines
        )

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)


class _DeadlineBackend(httpcore.NetworkBackend):
    """httpcore's network backend with every connect, read and write capped by the
    deadline of the attempt in flight on the calling thread.

    httpx bounds each phase (connect, write, read) by its timeout and each socket
    operation within a phase anew, so a server that trickles a response a byte at a
    time, just inside the read timeout, could hold a blocking client past any deadline;
    capped here, the read that would pass the deadline times out instead.
    """

    def __init__(self, inner: httpcore.NetworkBackend, deadlines: _Deadlines) -> None:
        self._inner = inner
        self._deadlines = deadlines

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        timeout = _capped(self._deadlines, timeout, httpcore.ConnectTimeout)
        stream = self._inner.connect_tcp(host, port, timeout, local_address, socket_options)
        return _DeadlineStream(stream, self._deadlines)

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore.NetworkStream:
        timeout = _capped(self._deadlines, timeout, httpcore.ConnectTimeout)
        stream = self._inner.connect_unix_socket(path, timeout, socket_options)
        return _DeadlineStream(stream, self._deadlines)

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


def _capped(deadlines: _Deadlines, timeout: float | None, error: type[Exception]) -> float | None:
    at = deadlines.at
    if at is None:
        return timeout
    left = at - time.monotonic()
    if left <= 0:
        raise error("the attempt's deadline has passed")
    return left if timeout is None or left < timeout else timeout


def _deadline_transport(trust_env: bool, deadlines: _Deadlines) -> httpx.HTTPTransport:
    """httpx's default transport on a :class:`_DeadlineBackend`.

    httpx does not take a network backend, so this sets the one attribute of its
    connection pool that holds it; a test fails if a new httpx moves it.
    """
    transport = httpx.HTTPTransport(trust_env=trust_env)
    pool = getattr(transport, "_pool", None)
    inner = getattr(pool, "_network_backend", None)
    if isinstance(inner, httpcore.NetworkBackend):
        pool._network_backend = _DeadlineBackend(inner, deadlines)  # type: ignore[union-attr]
    return transport


def _tightener(
    clock: Callable[[], float], timeouts: dict[str, float], seconds: float
) -> Callable[[str, Any], None]:
    """An httpcore trace hook that caps each phase's timeout by the time left.

    httpcore reads a phase's timeout when the phase starts; lowering it then keeps
    the phases together within the attempt's bound of ``seconds`` on ``clock`` (used
    when that bound is the deadline's, see :attr:`Send.tight`).
    """
    expires_at = clock() + seconds

    def tighten(event: str, info: Any) -> None:
        if event.endswith(".started"):
            left = max(_MIN_PHASE, expires_at - clock())
            for phase in timeouts:
                timeouts[phase] = min(timeouts[phase], left)

    return tighten
