"""Profiles of one rideout app server, run inside this process (uvicorn with uvloop,
httptools and the sans-I/O websockets protocol, as ``rideout serve`` runs it), with
client processes from :mod:`bench._client` and a real redis-server.

    .venv/bin/python -m bench.profile_realtime memory [--conns 2500]
    .venv/bin/python -m bench.profile_realtime fanout [--conns 2500] [--bids 5]
    .venv/bin/python -m bench.profile_realtime heartbeat     # 50 connections

``memory`` diffs tracemalloc snapshots taken before `conns` authenticated connections
open, after (plain), and after each sent one ``getState`` (subscribed), and prints the
Python heap per connection by the layer that allocated it (rideout, uvicorn, starlette,
websockets), by file and by line. RSS grows a little more than the traced heap
(allocator slack, C buffers); the RSS figures come from ``bench.realtime``, this says
which code holds the memory.

``fanout`` subscribes `conns` connections (one worker's share of bench.realtime's
5,000) to a room, places bids through the store (the hub delivers them as in
production), and prints server CPU per delivered update, the garbage collections that
ran meanwhile, and a cProfile of the fan-out.

``heartbeat`` runs 50 connections' heartbeat loops and prints server CPU per round
trip, then a cProfile of the same load.

``handshake`` opens `conns` connections with the auction's tokens (32 in flight per
client process, as a herd arrives), closes them, and prints server CPU per handshake;
then the same under cProfile, sorted by own time and by cumulative time: where a
handshake's CPU goes besides the token's verification (issue #29's herd).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import gc
import io
import os
import pstats
import shutil
import sys
import tempfile
import time
import tracemalloc
from collections.abc import AsyncIterator
from pathlib import Path

import uvicorn
from rich.console import Console
from rich.table import Table

from bench._harness import percentile, rss_kib
from bench.realtime import FANOUT_ZONE, REGION, Run, Settings
from rideout._serve import uvicorn_config
from rideout.realtime.app import ZoneApp, create_app
from rideout.realtime.zone import ZoneServer

console = Console(highlight=False, width=None if sys.stdout.isatty() else 132)


def _short(path: str) -> str:
    for marker in ("site-packages/", "/src/", "/lib/python3"):
        if marker in path:
            return path.split(marker, 1)[1]
    return path


_LAYERS = ("rideout", "starlette", "uvicorn", "websockets", "redis", "jwt")


def _layer(traceback: tracemalloc.Traceback) -> str:
    """The innermost library (or rideout) on the allocating stack: who asked for it."""
    for frame in reversed(traceback):  # innermost first
        for layer in _LAYERS:
            if f"/{layer}/" in frame.filename:
                return layer
    return "other (asyncio/uvloop C code reached from the loop)"


def _rideout_line(traceback: tracemalloc.Traceback) -> str:
    for frame in reversed(traceback):
        if "/rideout/" in frame.filename:
            return f"{_short(frame.filename)}:{frame.lineno}"
    return "?"


def _by_layer(
    title: str, before: tracemalloc.Snapshot, after: tracemalloc.Snapshot, conns: int
) -> None:
    sizes: dict[str, list[int]] = {}
    own: dict[str, list[int]] = {}
    for stat in after.compare_to(before, "traceback"):
        layer = _layer(stat.traceback)
        for key, into in ((layer, sizes), (_rideout_line(stat.traceback), own)):
            if into is own and layer != "rideout":
                continue
            entry = into.setdefault(key, [0, 0])
            entry[0] += stat.size_diff
            entry[1] += stat.count_diff
    for heading, table_data, top in (
        ("by the code that allocated it", sizes, 10),
        ("rideout's share, by the innermost rideout line", own, 10),
    ):
        table = Table(title=f"{title}: {heading}", title_justify="left")
        table.add_column("where")
        table.add_column("bytes/conn", justify="right")
        table.add_column("blocks/conn", justify="right")
        ranked = sorted(table_data.items(), key=lambda kv: -kv[1][0])
        for key, (size, count) in ranked[:top]:
            table.add_row(key, f"{size / conns:,.0f}", f"{count / conns:.1f}")
        console.print(table)


def _report(
    title: str, before: tracemalloc.Snapshot, after: tracemalloc.Snapshot, conns: int
) -> None:
    _by_layer(title, before, after, conns)
    for key, top in (("filename", 12), ("lineno", 15)):
        stats = after.compare_to(before, key)
        total = sum(s.size_diff for s in stats)
        table = Table(
            title=f"{title}: {total / conns / 1024:.1f} KiB traced per connection, by {key}",
            title_justify="left",
        )
        table.add_column("where")
        table.add_column("bytes/conn", justify="right")
        table.add_column("blocks/conn", justify="right")
        for stat in stats[:top]:
            frame = stat.traceback[0]
            where = _short(frame.filename) + (f":{frame.lineno}" if key == "lineno" else "")
            table.add_row(where, f"{stat.size_diff / conns:,.0f}", f"{stat.count_diff / conns:.1f}")
        console.print(table)


@contextlib.asynccontextmanager
async def in_process_server(run: Run) -> AsyncIterator[tuple[ZoneApp, str]]:
    """One zone's app server in this event loop, as ``rideout serve`` runs it."""
    app = create_app(run.config, REGION, FANOUT_ZONE[0])
    server = uvicorn.Server(
        uvicorn_config(app, FANOUT_ZONE[1], run.config.app_port, log_level="warning")
    )
    server.config.setup_event_loop = lambda: None  # type: ignore[method-assign]
    serving = asyncio.create_task(server.serve())
    try:
        while not server.started:
            if serving.done():
                serving.result()
                raise RuntimeError("uvicorn exited before it started")
            await asyncio.sleep(0.05)
        gc.freeze()  # as rideout serve does after start-up
        url = run.rideout_url(FANOUT_ZONE)
        await run.open(run.clients, url, 20, "warm-", rideout=True, listen=True)
        await run.clients[0].call("subscribe", room="warm")
        await run.close_all(run.clients)
        await asyncio.sleep(0.5)
        yield app, url
    finally:
        server.should_exit = True
        await serving


async def profile_memory(run: Run, url: str, conns: int) -> None:
    workers = run.clients
    tracemalloc.start(30)
    gc.collect()
    snap0, rss0 = tracemalloc.take_snapshot(), rss_kib(os.getpid())
    await run.open(workers, url, conns, "mem-", rideout=True, listen=True)
    await asyncio.sleep(1)
    gc.collect()
    snap1, rss1 = tracemalloc.take_snapshot(), rss_kib(os.getpid())
    await asyncio.gather(*(w.call("subscribe", room="mem", concurrency=8) for w in workers))
    await asyncio.sleep(1)
    gc.collect()
    snap2, rss2 = tracemalloc.take_snapshot(), rss_kib(os.getpid())
    tracemalloc.stop()
    console.print(
        f"{conns} connections; RSS growth (inflated by tracemalloc's bookkeeping): "
        f"{(rss1 - rss0) / conns:.1f} KiB/conn plain, {(rss2 - rss0) / conns:.1f} KiB/conn "
        "subscribed"
    )
    _report("plain (authenticated, idle)", snap0, snap1, conns)
    _report("subscribe (one getState) on top of plain", snap1, snap2, conns)
    await run.close_all(workers)


async def profile_fanout(run: Run, app: ZoneApp, url: str, conns: int, bids: int) -> None:
    """CPU per delivered update, GC pauses during the fan-out, then a cProfile of it."""
    workers = run.clients
    zone: ZoneServer = app.state.zone
    tracked0 = len(gc.get_objects())
    await run.open(workers, url, conns, "fan-", rideout=True, listen=True)
    await asyncio.gather(*(w.call("subscribe", room="fan", concurrency=32) for w in workers))
    tracked = len(gc.get_objects())
    console.print(
        f"objects the collector tracks: {tracked:,} ({(tracked - tracked0) / conns:.0f} per "
        f"connection; frozen at start-up: {gc.get_freeze_count():,})"
    )
    epoch = zone.epoch.value if zone.epoch.value is not None else await zone.epoch.refresh()
    assert epoch is not None
    collections: list[tuple[int, float]] = []
    started: list[float] = []

    def on_gc(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started.append(time.perf_counter())
        elif started:
            collections.append((info["generation"], time.perf_counter() - started.pop()))

    amount = 0
    sent: dict[int, float] = {}

    async def fan_out(count: int) -> float:
        nonlocal amount
        cpu = 0.0
        for _ in range(count):
            amount += 1
            t0, c0 = time.monotonic(), time.process_time()
            sent[amount] = t0
            await zone.store.bid("fan", "bidder", amount, f"p{amount}", epoch=epoch)
            # every subscriber is served well within a second
            await asyncio.sleep(max(0.0, 1.0 - (time.monotonic() - t0)))
            cpu += time.process_time() - c0
        return cpu

    await fan_out(1)  # warm-up
    gc.callbacks.append(on_gc)
    try:
        cpu = await fan_out(bids)
    finally:
        gc.callbacks.remove(on_gc)
    collected = await asyncio.gather(*(w.call("collect") for w in workers))
    latencies = [t - sent[a] for x in collected for t, a in x["updates"] if a > 1]
    delivered = len(latencies)
    console.print(
        f"{conns} subscribers, {bids} bids: {delivered} updates delivered; server CPU "
        f"{cpu / max(delivered, 1) * 1e6:.1f} µs per delivered update (idle time included); "
        f"latency p50 {percentile(latencies, 50) * 1000:.0f} ms, "
        f"p99 {percentile(latencies, 99) * 1000:.0f} ms, max {max(latencies) * 1000:.0f} ms"
    )
    per_bid = [
        max((t - sent[a] for x in collected for t, a in x["updates"] if a == b), default=0.0)
        for b in sorted(sent)
        if b > 1
    ]
    console.print(
        "  slowest delivery per bid (ms): " + ", ".join(f"{m * 1000:.0f}" for m in per_bid)
    )
    for generation in (0, 1, 2):
        times = [d for g, d in collections if g == generation]
        if times:
            console.print(
                f"  gen{generation} collections during the fan-out: {len(times)}, "
                f"longest {max(times) * 1000:.1f} ms, total {sum(times) * 1000:.1f} ms"
            )
    profiler = cProfile.Profile()
    profiler.enable()
    try:
        await fan_out(bids)
    finally:
        profiler.disable()
    await asyncio.gather(*(w.call("collect") for w in workers))
    _print_profile(profiler, f"cProfile of {bids} more bids (sorted by own time):")
    await run.close_all(workers)


def _print_profile(profiler: cProfile.Profile, heading: str, top: int = 22) -> None:
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(top)
    console.print(heading)
    console.print("   ncalls" + out.getvalue().split("ncalls", 1)[-1], markup=False)


async def profile_heartbeat(run: Run, url: str, conns: int, seconds: float = 3.0) -> None:
    """Server CPU per heartbeat round trip, then a cProfile of the same load."""
    workers = run.clients
    await run.open(workers, url, conns, "hb-", rideout=True)
    for profiled in (False, True):
        profiler = cProfile.Profile()
        start = time.monotonic() + 0.5
        end = start + seconds
        loops = asyncio.gather(
            *(w.call("loop", kind="heartbeat", start=start, end=end) for w in workers)
        )
        await asyncio.sleep(max(0.0, start - time.monotonic()))
        c0 = time.process_time()
        if profiled:
            profiler.enable()
        await asyncio.sleep(max(0.0, end - time.monotonic()))
        profiler.disable()
        cpu = time.process_time() - c0
        count = sum(x["count"] for x in await loops)
        if profiled:
            _print_profile(profiler, f"cProfile of {count:,} heartbeats (sorted by own time):")
        else:
            console.print(
                f"{conns} connections: {count / seconds:,.0f} round trips/s, server CPU "
                f"{cpu / max(count, 1) * 1e6:.1f} µs per round trip"
            )
    await run.close_all(workers)


def _own_time_by_layer(profiler: cProfile.Profile, conns: int) -> None:
    """Each function's own time summed by the library it is in (C functions: by name),
    per handshake and as a share: which layer a handshake's CPU goes to."""
    stats = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
    layers: dict[str, float] = {}
    for (filename, _, name), (_, _, own, _, _) in stats.items():
        if filename == "~":  # a built-in: the crypto's own verify, the loop's writes
            layer = "ed25519 verify (C)" if "ed25519" in name.lower() else "built-ins (C)"
        else:
            layer = next((x for x in (*_LAYERS, "cryptography", "prometheus_client")
                          if f"/{x}/" in filename), "stdlib and other")  # fmt: skip
        layers[layer] = layers.get(layer, 0.0) + own
    total = sum(layers.values())
    table = Table(title="own time by layer, under cProfile", title_justify="left")
    for column in ("layer", "µs per handshake", "share"):
        table.add_column(column, justify="left" if column == "layer" else "right")
    for layer, own in sorted(layers.items(), key=lambda item: -item[1]):
        table.add_row(layer, f"{own / conns * 1e6:,.0f}", f"{own / total:.0%}")
    console.print(table)


async def profile_handshake(run: Run, url: str, conns: int) -> None:
    """Server CPU per handshake of `conns` connections opened at once, then a cProfile."""
    workers = run.clients
    for profiled in (False, True):
        profiler = cProfile.Profile()
        c0 = time.process_time()
        if profiled:
            profiler.enable()
        opened = await run.open(workers, url, conns, f"hs{int(profiled)}-", rideout=True)
        profiler.disable()
        cpu = time.process_time() - c0
        await run.close_all(workers)
        await asyncio.sleep(0.5)
        if profiled:
            _own_time_by_layer(profiler, conns)
            _print_profile(profiler, f"cProfile of {conns:,} handshakes (sorted by own time):")
            out = io.StringIO()
            pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(30)
            console.print("by cumulative time:")
            console.print("   ncalls" + out.getvalue().split("ncalls", 1)[-1], markup=False)
        else:
            console.print(
                f"{conns} handshakes in {opened['seconds']:.2f} s "
                f"({conns / opened['seconds']:,.0f}/s), server CPU "
                f"{cpu / conns * 1e6:.0f} µs per handshake (this process: the client "
                "processes are apart)"
            )


async def profile(what: str, conns: int, bids: int, work_dir: Path) -> None:
    run = Run(Settings(client_procs=2), work_dir)
    try:
        await run.start_redis()
        await run.start_clients()
        async with in_process_server(run) as (app, url):
            if what == "memory":
                await profile_memory(run, url, conns)
            elif what == "heartbeat":
                await profile_heartbeat(run, url, min(conns, 50))
            elif what == "handshake":
                await profile_handshake(run, url, conns)
            else:
                await profile_fanout(run, app, url, conns, bids)
    finally:
        await run.close()


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.profile_realtime", description=__doc__)
    parser.add_argument("what", choices=["memory", "fanout", "heartbeat", "handshake"])
    parser.add_argument("--conns", type=int, default=2500)
    parser.add_argument("--bids", type=int, default=5)
    args = parser.parse_args()
    work_dir = Path(tempfile.mkdtemp(prefix="rideout-profile-"))
    try:
        import uvloop

        uvloop.run(profile(args.what, args.conns, args.bids, work_dir))
    except KeyboardInterrupt:
        return 130
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
