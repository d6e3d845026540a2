"""One received message's CPU in the client's loop: a timeout scope per receive against
the lazily re-armed deadline (:class:`~rideout.client.ws._deadline.LazyDeadline`).

    .venv/bin/python -m bench.receive [--clients C] [--messages N] [--rounds R]

The WebSocket client waits for each message until its next wakeup (a heartbeat due).
``asyncio.timeout_at`` around every ``recv()`` schedules and cancels a timer per
message; the lazy deadline keeps one timer and moves it only when the wakeup comes
earlier. A websockets server in a child process sends each of C connections N small
messages on request; this process receives them both ways, in alternating rounds, on
uvloop as the drill's fleet runs, and counts its own CPU (the server's is not in it).
Rows are medians; the ratio is the lazy deadline's over the scopes'.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import statistics
import sys
import time
from collections.abc import Awaitable, Callable

import uvloop
from rich.console import Console
from rich.table import Table
from websockets.asyncio.client import ClientConnection, connect
from websockets.asyncio.server import ServerConnection, serve

from bench._harness import free_port
from rideout.client.ws._deadline import LazyDeadline

console = Console(highlight=False, width=None if sys.stdout.isatty() else 132)
MESSAGE = '{"type":"update","room":"lot-1","state":{"bid":1234},"offset":"1-0"}'
HEARTBEAT_DUE = 30.0  # the wakeup every receive is bounded by (it never comes here)


def server(port: int) -> None:
    """Send N messages to a connection each time it asks with "N" (a child process)."""

    async def handler(ws: ServerConnection) -> None:
        async for ask in ws:
            for _ in range(int(ask)):
                await ws.send(MESSAGE)

    async def main() -> None:
        async with serve(handler, "127.0.0.1", port, compression=None):
            await asyncio.Future()

    uvloop.run(main())


Receiver = Callable[[ClientConnection, int], Awaitable[None]]


async def with_scopes(ws: ClientConnection, n: int) -> None:
    wakeup = asyncio.get_running_loop().time() + HEARTBEAT_DUE
    for _ in range(n):
        async with asyncio.timeout_at(wakeup):
            await ws.recv()


async def with_lazy_deadline(ws: ClientConnection, n: int) -> None:
    wakeup = asyncio.get_running_loop().time() + HEARTBEAT_DUE
    deadline = LazyDeadline()
    try:
        for _ in range(n):
            deadline.at_most(wakeup)
            await deadline.wait(ws.recv)
    finally:
        deadline.close()


async def cost(conns: list[ClientConnection], receive: Receiver, n: int) -> float:
    """CPU microseconds per message, every connection receiving `n` at once."""

    async def one(ws: ClientConnection) -> None:
        await ws.send(str(n))
        await receive(ws, n)

    cpu = time.process_time()
    await asyncio.gather(*(one(ws) for ws in conns))
    return 1e6 * (time.process_time() - cpu) / (n * len(conns))


async def measure(port: int, clients: int, n: int, rounds: int) -> dict[str, list[float]]:
    uri = f"ws://127.0.0.1:{port}"
    conns = [await connect(uri, compression=None, ping_interval=None) for _ in range(clients)]
    runs: dict[str, Receiver] = {"timeout scopes": with_scopes, "lazy deadline": with_lazy_deadline}
    got: dict[str, list[float]] = {name: [] for name in runs}
    try:
        for name in runs:  # warm up
            await cost(conns, runs[name], 50)
        for i in range(rounds):
            order = list(runs) if i % 2 == 0 else list(reversed(runs))
            for name in order:
                got[name].append(await cost(conns, runs[name], n))
    finally:
        await asyncio.gather(*(ws.close() for ws in conns))
    return got


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=200, help="connections, concurrently")
    parser.add_argument("--messages", type=int, default=500, help="per connection and round")
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()
    port = free_port("127.0.0.1")
    child = multiprocessing.get_context("spawn").Process(target=server, args=(port,), daemon=True)
    child.start()
    try:
        time.sleep(1.0)  # the child binds
        got = uvloop.run(measure(port, args.clients, args.messages, args.rounds))
    finally:
        child.kill()
        child.join()
    table = Table(
        title=f"one received message, {args.clients} connections "
        f"(median of {args.rounds} alternating rounds, uvloop, this process's CPU)"
    )
    for column in ("receive", "CPU µs / message", "ratio"):
        table.add_column(column, justify="right")
    base = statistics.median(got["timeout scopes"])
    for name, values in got.items():
        cpu = statistics.median(values)
        table.add_row(name, f"{cpu:.1f}", f"{cpu / base:.2f}")
    console.print(table)


if __name__ == "__main__":
    main()
