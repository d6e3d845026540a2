"""What the epoch's copies cost a failover: Redis server time of one epoch raise.

    .venv/bin/python -m bench.epoch_raise [--rounds 5]

The controller raises the epoch on every promotion, and with it the epoch's 16,384
copies (one per hash slot, which the scripts fence on: ``store.keys.epoch_copy``), in
one script that blocks the server while it runs. Against a baseline in the same run,
round by round in alternating order: the raise of the epoch alone (the single-key
script rideout ran before the copies). Each on a fresh locked Redis (the server
``RIDEOUT_REDIS_SERVER`` names, else the default), timed by Redis's own accounting
(``INFO commandstats``: microseconds the server spent in the call) and end to end from
Python (the request, the server's time, the reply). Also the check the controller runs
once per writer it finds, when every copy is already right (nothing written).
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import redis.asyncio as aioredis
from rich.console import Console
from rich.table import Table

from bench._harness import Child, free_port, locked_redis, wait_for_redis
from rideout.store import keys
from rideout.store.embedded import RedisSpec, find_redis_server, server_info
from rideout.store.replication import bump_epoch, ensure_epoch, sync_epoch_copies

console = Console(highlight=False, width=None if sys.stdout.isatty() else 132)
ADDRESS = "127.0.4.101"

# The raise before the copies: the epoch alone (one key), by EVAL.
EPOCH_ALONE = (
    "local e = tonumber(redis.call('GET', KEYS[1]) or '0') or 0 "
    "local n = tonumber(ARGV[1]) "
    "if e < n then redis.call('SET', KEYS[1], ARGV[1]) return n end "
    "return e"
)


async def _timed(
    client: aioredis.Redis, call: Callable[[], Awaitable[object]]
) -> tuple[float, float]:
    """One call: the server's µs in scripts (EVAL and EVALSHA) and the ms end to end."""
    await client.config_resetstat()
    started = time.perf_counter()
    await call()
    elapsed = (time.perf_counter() - started) * 1000
    stats = await client.info("commandstats")
    usec = sum(float(stats.get(f"cmdstat_{n}", {}).get("usec", 0)) for n in ("eval", "evalsha"))
    return usec, elapsed


async def run(work_dir: Path, rounds: int) -> tuple[str, dict[str, list[tuple[float, float]]]]:
    port = free_port(ADDRESS)
    auth, bench = locked_redis(work_dir / "keys")
    spec = RedisSpec("redis", ADDRESS, port, work_dir / "data", work_dir / "redis.log", auth=auth)
    spec.data_dir.mkdir(parents=True)
    binary = find_redis_server()
    server = Child("redis", spec.argv(binary), spec.log_file)
    found: dict[str, list[tuple[float, float]]] = {"alone": [], "raise": [], "check": []}
    try:
        await server.start()
        client = aioredis.Redis(
            host=ADDRESS, port=port, username=bench.username, password=bench.password
        )
        try:
            await wait_for_redis(server, client)
            await ensure_epoch(client)  # the copies written once, the script loaded
            await sync_epoch_copies(client)

            async def epoch() -> int:
                return int(await client.get(keys.EPOCH) or 0)

            async def alone() -> object:
                return await client.eval(EPOCH_ALONE, 1, keys.EPOCH, await epoch() + 1)

            async def raise_all() -> object:
                return await bump_epoch(client, await epoch())

            async def check() -> object:
                return await sync_epoch_copies(client)

            kinds = {"alone": alone, "raise": raise_all, "check": check}
            for n in range(rounds):
                order = list(kinds) if n % 2 == 0 else list(reversed(kinds))
                for kind in order:
                    found[kind].append(await _timed(client, kinds[kind]))
        finally:
            await client.aclose()
    finally:
        await server.stop()
    return server_info(binary).label, found


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.epoch_raise", description=__doc__)
    parser.add_argument("--rounds", type=int, default=5, help="of each kind (default 5)")
    args = parser.parse_args()
    work_dir = Path(tempfile.mkdtemp(prefix="rideout-epoch-"))
    try:
        label, found = asyncio.run(run(work_dir, max(1, args.rounds)))
    except KeyboardInterrupt:
        return 130
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)
    table = Table(
        title=f"one epoch raise on {label}: medians of {len(found['alone'])} rounds",
        title_justify="left",
    )
    for name in ("call", "server time", "vs the epoch alone", "end to end"):
        table.add_column(name, justify="right")
    base = statistics.median(u for u, _ in found["alone"])
    names = {
        "alone": "the epoch alone (before the copies)",
        "raise": "the epoch and its 16,384 copies",
        "check": "the copies checked, none written",
    }
    for kind, rows in found.items():
        usec = statistics.median(u for u, _ in rows)
        ms = statistics.median(e for _, e in rows)
        table.add_row(names[kind], f"{usec / 1000:.2f} ms", f"{usec / base:,.0f}×", f"{ms:.1f} ms")
    console.print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
