"""One name resolution's CPU: rideout's NameserverResolver against dnspython's resolver.

    .venv/bin/python -m bench.resolve [--resolves N] [--rounds R]

Every reconnect attempt of a WebSocket client resolves the service's name (that is how
a failover reaches it), so in a failover's herd a process running many clients spends
much of its CPU there. A name server in a child process answers every query with the
same two A records (built once with dnslib); this process resolves against it with
:class:`~rideout.client.resolve.NameserverResolver` (its own wire code) and with
dnspython's ``dns.asyncresolver.Resolver`` configured as rideout used it before
(one nameserver, no cache, no search list), in alternating rounds, on uvloop as the
clients run. Rows are medians; the ratio is rideout's over dnspython's.
"""

from __future__ import annotations

import argparse
import multiprocessing
import socket
import statistics
import sys
import time
from collections.abc import Awaitable, Callable

import dns.asyncresolver
import uvloop
from dnslib import QTYPE, RR, A, DNSRecord
from rich.console import Console
from rich.table import Table

from bench._harness import free_port
from rideout.client.resolve import NameserverResolver

console = Console(highlight=False, width=None if sys.stdout.isatty() else 132)
NAME = "auction.rideout.test"
ADDRESSES = ("127.0.1.1", "127.0.1.2")


def serve(port: int) -> None:
    """A name server answering every A query for NAME (a child process)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", port))
    while True:
        data, peer = sock.recvfrom(4096)
        request = DNSRecord.parse(data)
        reply = request.reply()
        for address in ADDRESSES:
            reply.add_answer(RR(NAME + ".", QTYPE.A, rdata=A(address), ttl=1))
        sock.sendto(reply.pack(), peer)


def dnspython_resolver(port: int) -> Callable[[], Awaitable[object]]:
    resolver = dns.asyncresolver.Resolver(configure=False)
    resolver.nameservers = ["127.0.0.1"]
    resolver.port = port
    resolver.timeout = resolver.lifetime = 2.0
    resolver.cache = None
    return lambda: resolver.resolve(NAME, "A", search=False)


async def cost(resolve: Callable[[], Awaitable[object]], n: int) -> tuple[float, float]:
    """CPU and wall milliseconds per resolve, over `n` resolves one after another."""
    for _ in range(20):  # warm up
        await resolve()
    cpu, wall = time.process_time(), time.perf_counter()
    for _ in range(n):
        await resolve()
    return 1e3 * (time.process_time() - cpu) / n, 1e3 * (time.perf_counter() - wall) / n


async def measure(port: int, n: int, rounds: int) -> dict[str, list[tuple[float, float]]]:
    ours = NameserverResolver("127.0.0.1", port)
    runs: dict[str, Callable[[], Awaitable[object]]] = {
        "rideout": lambda: ours.resolve(NAME),
        "dnspython": dnspython_resolver(port),
    }
    got: dict[str, list[tuple[float, float]]] = {name: [] for name in runs}
    for i in range(rounds):
        order = list(runs) if i % 2 == 0 else list(reversed(runs))
        for name in order:
            got[name].append(await cost(runs[name], n))
    return got


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--resolves", type=int, default=1000, help="per round and resolver")
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()
    port = free_port("127.0.0.1", udp=True)
    server = multiprocessing.get_context("spawn").Process(target=serve, args=(port,), daemon=True)
    server.start()
    try:
        time.sleep(0.5)  # the child binds
        got = uvloop.run(measure(port, args.resolves, args.rounds))
    finally:
        server.kill()
        server.join()
    table = Table(title=f"one resolve (median of {args.rounds} alternating rounds, uvloop)")
    for column in ("resolver", "CPU ms", "wall ms", "CPU ratio"):
        table.add_column(column, justify="right")
    base = statistics.median(c for c, _ in got["dnspython"])
    for name in ("dnspython", "rideout"):
        cpu = statistics.median(c for c, _ in got[name])
        wall = statistics.median(w for _, w in got[name])
        table.add_row(name, f"{cpu:.3f}", f"{wall:.3f}", f"{cpu / base:.2f}")
    console.print(table)


if __name__ == "__main__":
    main()
