"""Redis server time of rideout's bid script against the length of the room's stream.

    .venv/bin/python -m bench.bid_script

Fills one room's stream to a given length and keeps it there (``history_size``, the
number of entries the script trims the stream to; rideout's default is 1,000), runs the
bid script (EVALSHA, pipelined by 16) for a few seconds and reads Redis's own
accounting (``INFO commandstats``: microseconds per call of the script and of each
command it runs). Once with the script's arguments as rideout sends them, once with the
age-based trim disabled (a ``history_ttl`` longer than the epoch, so the cut-off is
negative and the script skips its ``XREVRANGE``). Server time, not client throughput:
the figures do not depend on the client's speed.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis
from rich.console import Console
from rich.table import Table

from bench._harness import Child, free_port, locked_redis, wait_for_redis
from rideout.store import keys, scripts
from rideout.store.auction import AuctionSettings, bid_call
from rideout.store.embedded import RedisSpec, find_redis_server
from rideout.store.replication import ensure_epoch

console = Console(highlight=False, width=None if sys.stdout.isatty() else 132)
ADDRESS = "127.0.4.100"
TTL_MS = "3600000"  # rideout's default history_ttl (1 h)
NO_AGE_MS = "10000000000000"  # longer than the epoch: the age check is skipped


async def measure(
    client: aioredis.Redis, sha: str, length: int, ttl_ms: str, seconds: float, tag: str
) -> dict[str, Any]:
    epoch = str(int(await client.get(keys.EPOCH) or 0))
    room, sub = f"script-{tag}", f"script-sub-{tag}"
    amount = 0

    settings = AuctionSettings(
        min_bid=1, max_bid=1_000_000_000, min_increment=1, history_size=length,
        history_ttl=int(ttl_ms) / 1000, ack_ttl=86400.0,
    )  # fmt: skip

    def args(n: int) -> tuple[int, list[str]]:
        """EVALSHA's arguments after the SHA: the number of keys, then keys and ARGV."""
        script_keys, script_args = bid_call(room, sub, n, f"b{n}", int(epoch), settings)
        return len(script_keys), [*script_keys, *script_args]

    async def batch() -> None:
        nonlocal amount
        pipe = client.pipeline(transaction=False)
        for _ in range(16):
            amount += 1
            numkeys, rest = args(amount)
            pipe.evalsha(sha, numkeys, *rest)
        replies = await pipe.execute()
        if not all('"accepted":true' in r[1] for r in replies):
            raise RuntimeError(f"a bid was not accepted: {replies[0]}")

    while amount < length:  # fill the stream; the script keeps it at history_size = length
        await batch()
    await client.config_resetstat()
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        await batch()
    stats = await client.info("commandstats")
    xlen = await client.xlen(keys.room_stream(room))

    def us(name: str) -> float:
        return float(stats.get(f"cmdstat_{name}", {}).get("usec_per_call", 0.0))

    return {"stream": xlen, "evalsha": us("evalsha"), "xrevrange": us("xrevrange")}


async def run(work_dir: Path, seconds: float) -> list[dict[str, Any]]:
    port = free_port(ADDRESS)
    auth, bench = locked_redis(work_dir / "keys")
    spec = RedisSpec("redis", ADDRESS, port, work_dir / "data", work_dir / "redis.log", auth=auth)
    spec.data_dir.mkdir(parents=True)
    redis_server = Child("redis", spec.argv(find_redis_server()), spec.log_file)
    rows: list[dict[str, Any]] = []
    try:
        await redis_server.start()
        client = aioredis.Redis(
            host=ADDRESS,
            port=port,
            decode_responses=True,
            username=bench.username,
            password=bench.password,
        )
        try:
            await wait_for_redis(redis_server, client)
            await ensure_epoch(client)
            sha = await client.script_load(scripts.BID)
            for length in (10, 100, 1000, 5000):
                with_age = await measure(client, sha, length, TTL_MS, seconds, f"a{length}")
                no_age = await measure(client, sha, length, NO_AGE_MS, seconds, f"n{length}")
                rows.append({"length": length, "with_age": with_age, "no_age": no_age})
        finally:
            await client.aclose()
    finally:
        await redis_server.stop()
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.bid_script", description=__doc__)
    parser.add_argument("--seconds", type=float, default=2.0, help="per measurement")
    args = parser.parse_args()
    work_dir = Path(tempfile.mkdtemp(prefix="rideout-script-"))
    try:
        rows = asyncio.run(run(work_dir, args.seconds))
    except KeyboardInterrupt:
        return 130
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)
    table = Table(
        title="rideout bid script: Redis server time per call (INFO commandstats)",
        title_justify="left",
    )
    for name in ("history_size = stream length", "bid script", "of which XREVRANGE",
                 "bid script without the age check"):  # fmt: skip
        table.add_column(name, justify="right")
    for row in rows:
        a, n = row["with_age"], row["no_age"]
        table.add_row(
            f"{a['stream']:,}", f"{a['evalsha']:.1f} µs", f"{a['xrevrange']:.1f} µs",
            f"{n['evalsha']:.1f} µs",
        )  # fmt: skip
    console.print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
