"""The lab's WAN link at 0 ms: the latency and throughput a relay costs, against a direct
connection to the same server.

    .venv/bin/python -m bench.link [--pings N] [--mib M] [--rounds R]

An echo server runs in one child process, a :class:`~rideout.lab.relay.Link` with no
toxics in another (as the lab runs it: plain asyncio, in the caller's namespace, here
the machine's own, so no root is needed); this process is the client. Each round
measures, direct and through the link in alternating order: the round-trip time of N
64-byte messages one after another on one connection (median and p99), and the time
to echo M MiB (written while it is read back; the rate is of the payload). Rows are
medians over rounds; the ratio is the link's over the direct connection's.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import statistics
import sys
import time

from rich.console import Console
from rich.table import Table

from bench._harness import free_port, percentile
from rideout.lab.relay import Link

console = Console(highlight=False, width=None if sys.stdout.isatty() else 132)
HOST = "127.0.0.1"
CHUNK = 65536


async def _echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(CHUNK):
            writer.write(data)
            await writer.drain()
    except ConnectionError:
        pass
    writer.close()


def serve_echo(port: int) -> None:
    """The echo server (a child process)."""

    async def main() -> None:
        server = await asyncio.start_server(_echo, HOST, port)
        await server.serve_forever()

    asyncio.run(main())


def serve_link(port: int, upstream: int) -> None:
    """The link, with no toxics (a child process)."""

    async def main() -> None:
        async with Link("bench", (HOST, port), (HOST, upstream)):
            await asyncio.Event().wait()

    asyncio.run(main())


async def round_trips(port: int, n: int) -> list[float]:
    reader, writer = await asyncio.open_connection(HOST, port)
    message = b"m" * 64
    rtts = []
    try:
        for i in range(n + 50):
            started = time.perf_counter()
            writer.write(message)
            await reader.readexactly(len(message))
            if i >= 50:  # the first 50 warm up
                rtts.append(time.perf_counter() - started)
    finally:
        writer.close()
    return rtts


async def echo_rate(port: int, mib: int) -> float:
    """MiB/s of payload echoed through `port`."""
    reader, writer = await asyncio.open_connection(HOST, port, limit=CHUNK)
    total = mib * 1024 * 1024
    block = b"t" * CHUNK

    async def send() -> None:
        for _ in range(total // CHUNK):
            writer.write(block)
            await writer.drain()

    async def receive() -> None:
        left = total
        while left:
            data = await reader.read(CHUNK)
            if not data:
                raise RuntimeError("the echo closed early")
            left -= len(data)

    started = time.perf_counter()
    await asyncio.gather(send(), receive())
    took = time.perf_counter() - started
    writer.close()
    return mib / took


async def measure(
    ports: dict[str, int], pings: int, mib: int, rounds: int
) -> dict[str, dict[str, list[float]]]:
    got: dict[str, dict[str, list[float]]] = {
        name: {"p50": [], "p99": [], "rate": []} for name in ports
    }
    for i in range(rounds):
        order = list(ports) if i % 2 == 0 else list(reversed(ports))
        for name in order:
            rtts = await round_trips(ports[name], pings)
            got[name]["p50"].append(1e6 * statistics.median(rtts))
            got[name]["p99"].append(1e6 * percentile(rtts, 99))
            got[name]["rate"].append(await echo_rate(ports[name], mib))
    return got


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pings", type=int, default=2000, help="round trips per round and path")
    parser.add_argument("--mib", type=int, default=64, help="MiB echoed per round and path")
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()
    echo_port = free_port(HOST)
    link_port = free_port(HOST)
    spawn = multiprocessing.get_context("spawn")
    children = [
        spawn.Process(target=serve_echo, args=(echo_port,), daemon=True),
        spawn.Process(target=serve_link, args=(link_port, echo_port), daemon=True),
    ]
    for child in children:
        child.start()
    try:
        time.sleep(1.0)  # the children bind
        ports = {"direct": echo_port, "link (0 ms)": link_port}
        got = asyncio.run(measure(ports, args.pings, args.mib, args.rounds))
    finally:
        for child in children:
            child.kill()
            child.join()
    table = Table(
        title=f"the lab's link at 0 ms vs a direct connection (median of {args.rounds} "
        f"alternating rounds; {args.pings} round trips of 64 B, {args.mib} MiB echoed)"
    )
    for column in ("path", "RTT p50 µs", "RTT p99 µs", "echo MiB/s", "p50 ratio", "rate ratio"):
        table.add_column(column, justify="right")
    base = {k: statistics.median(v) for k, v in got["direct"].items()}
    for name in ports:
        row = {k: statistics.median(v) for k, v in got[name].items()}
        table.add_row(
            name,
            f"{row['p50']:.0f}",
            f"{row['p99']:.0f}",
            f"{row['rate']:.0f}",
            f"{row['p50'] / base['p50']:.2f}",
            f"{row['rate'] / base['rate']:.2f}",
        )
    console.print(table)
    added = statistics.median(got["link (0 ms)"]["p50"]) - base["p50"]
    console.print(f"added by the link: {added:.0f} µs per round trip (p50)")


if __name__ == "__main__":
    main()
