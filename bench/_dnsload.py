"""A burst of UDP DNS queries, as fast as a few sockets can send them (bench.dns and the tests).

:func:`burst` sends query ``i`` with DNS id ``i`` (so at most 65,536 queries), round-robin
over `sockets` connected sockets with large receive buffers, reading replies whenever a
send would block and after the last send, until every query has its reply or
`timeout` seconds have passed. Real packets on loopback; no DNS library on the hot path.
"""

from __future__ import annotations

import contextlib
import select
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["Burst", "burst"]


@dataclass(frozen=True, slots=True)
class Burst:
    """What came back: replies by id, and when (seconds from the first send)."""

    replies: dict[int, bytes]
    sent_in: float
    last_reply_at: float

    @property
    def rate(self) -> float:
        """Replies per second, first send to last reply."""
        return len(self.replies) / self.last_reply_at if self.last_reply_at > 0 else 0.0


def burst(
    port: int,
    count: int,
    templates: Sequence[bytes],
    *,
    sockets: int = 8,
    host: str = "127.0.0.1",
    timeout: float = 60.0,
) -> Burst:
    """Send `count` queries (query ``i`` is ``templates[i % len(templates)]`` with id ``i``)."""
    if not 0 < count <= 0x10000:
        raise ValueError("count must be 1..65536 (one DNS id each)")
    socks = []
    replies: dict[int, bytes] = {}
    start = last = time.perf_counter()
    try:
        for _ in range(sockets):
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            socks.append(s)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
            s.connect((host, port))
            s.setblocking(False)

        def read(wait: float) -> None:
            nonlocal last
            ready, _, _ = select.select(socks, [], [], wait)
            for s in ready:
                with contextlib.suppress(BlockingIOError, ConnectionRefusedError):
                    while True:
                        data = s.recv(65535)
                        replies[int.from_bytes(data[:2], "big")] = data
                        last = time.perf_counter()

        start = time.perf_counter()
        for i in range(count):
            packet = i.to_bytes(2, "big") + templates[i % len(templates)][2:]
            while True:
                try:
                    socks[i % sockets].send(packet)
                    break
                except BlockingIOError:
                    read(0.01)
        sent = time.perf_counter() - start
        deadline = time.monotonic() + timeout
        while len(replies) < count and time.monotonic() < deadline:
            read(0.2)
    finally:
        for s in socks:
            s.close()
    return Burst(replies, sent, last - start)
