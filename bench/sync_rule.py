"""The cost of sync replication's rule on the bid path: ``INFO replication`` around WAIT.

    .venv/bin/python -m bench.sync_rule            # --rounds 6 --seconds 2 --concurrency 64

Three real redis-servers in the shape `rideout up` gives a primary's writer: A1 (the
writer), A2 (its in-region replica), B1 (the other region's replica). Bids go through
rideout's own path (:class:`~rideout.store.auction.AuctionStore`, pipelined per event
loop iteration) from `concurrency` concurrent callers, in alternating rounds:

- baseline: ``WAIT 2`` after each pipeline (counting both replicas, as a plain rule would);
- the rule: ``INFO replication; WAIT n; INFO replication`` and :mod:`rideout.store.sync`'s
  verdict (the right replicas, not just how many).

Prints bids per second of each and the ratio (rule / baseline, median of per-round
ratios: the machine's load moves between rounds more than the code's speed does).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from bench._harness import free_port, locked_redis
from rideout.config import Config, RedisConfig, RegionConfig, ZoneConfig
from rideout.store.auction import AuctionSettings, AuctionStore
from rideout.store.client import state_client
from rideout.store.embedded import EmbeddedRedis, RedisSpec
from rideout.store.replication import ensure_epoch
from rideout.store.sync import rule_for

console = Console(highlight=False, width=None if sys.stdout.isatty() else 132)
A1, A2, B1 = "127.0.4.100", "127.0.4.101", "127.0.5.100"


def _config(port: int) -> Config:
    def region(name: str, role: str, prefix: str, replica: bool) -> RegionConfig:
        return RegionConfig(
            name, role,  # type: ignore[arg-type]
            (ZoneConfig(f"{name}-az1", f"{prefix}.1"), ZoneConfig(f"{name}-az2", f"{prefix}.2")),
            RedisConfig(f"{prefix}.100", port),
            RedisConfig(f"{prefix}.101", port) if replica else None,
        )  # fmt: skip

    return Config(
        regions=(
            region("east", "primary", "127.0.4", True),
            region("west", "secondary", "127.0.5", False),
        )
    )


async def _round(
    store: AuctionStore, tag: str, seconds: float, concurrency: int, rule: object
) -> float:
    done = 0
    end = time.monotonic() + seconds

    async def caller(i: int) -> None:
        nonlocal done
        n = 0
        while time.monotonic() < end:
            n += 1
            if rule is None:
                result = await store.bid(f"r-{tag}-{i}", f"u{i}", n, f"{tag}-{i}-{n}", epoch=1,
                                         wait_replicas=2, wait_timeout=1.0)  # fmt: skip
                ok = (result.replicas or 0) >= 2
            else:
                result = await store.bid(f"r-{tag}-{i}", f"u{i}", n, f"{tag}-{i}-{n}", epoch=1,
                                         wait_timeout=1.0, sync=rule)  # type: ignore[arg-type]  # fmt: skip
                ok = result.sync is not None and result.sync.replicated
            if not (result.accepted and ok):
                raise RuntimeError(f"a bid was not accepted and replicated: {result}")
            done += 1

    start = time.monotonic()
    await asyncio.gather(*(caller(i) for i in range(concurrency)))
    return done / (time.monotonic() - start)


async def run(
    work: Path, rounds: int, seconds: float, concurrency: int
) -> list[tuple[float, float]]:
    port = free_port(A1, A2, B1)
    config = _config(port)
    auth, bench = locked_redis(work / "keys")

    def spec(name: str, address: str, follows: str | None) -> RedisSpec:
        return RedisSpec(
            name, address, port, work / name, work / f"{name}.log",
            replica_of=(follows, port) if follows else None, auth=auth,
        )  # fmt: skip

    results: list[tuple[float, float]] = []
    async with contextlib.AsyncExitStack() as stack:
        for name, address, follows in (("a1", A1, None), ("a2", A2, A1), ("b1", B1, A1)):
            await stack.enter_async_context(EmbeddedRedis(spec(name, address, follows)))
        client = state_client(A1, port, credentials=bench)
        stack.push_async_callback(client.aclose)
        await ensure_epoch(client)
        store = AuctionStore(client, AuctionSettings(), "east")
        stack.push_async_callback(store.close)
        rule = rule_for(config, config.primary)
        for r in range(rounds):
            base = await _round(store, f"b{r}", seconds, concurrency, None)
            ruled = await _round(store, f"s{r}", seconds, concurrency, rule)
            results.append((base, ruled))
    return results


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.sync_rule", description=__doc__)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--seconds", type=float, default=2.0, help="per round and variant")
    parser.add_argument("--concurrency", type=int, default=64)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="rideout-syncrule-"))
    try:
        rows = asyncio.run(run(work, args.rounds, args.seconds, args.concurrency))
    except KeyboardInterrupt:
        return 130
    finally:
        shutil.rmtree(work, ignore_errors=True)
    table = Table(title=f"sync bids/s, {args.concurrency} concurrent callers, writer + 2 replicas",
                  title_justify="left")  # fmt: skip
    for name in ("round", "WAIT 2 (baseline)", "INFO + WAIT n + INFO (the rule)", "ratio"):
        table.add_column(name, justify="right")
    for i, (base, ruled) in enumerate(rows, 1):
        table.add_row(str(i), f"{base:,.0f}", f"{ruled:,.0f}", f"{ruled / base:.2f}")
    ratio = statistics.median(r / b for b, r in rows)
    table.add_row("median", f"{statistics.median(b for b, _ in rows):,.0f}",
                  f"{statistics.median(r for _, r in rows):,.0f}", f"[bold]{ratio:.2f}[/]")  # fmt: skip
    console.print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
