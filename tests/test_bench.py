"""The benchmarks' own set-up: what they measure must be rideout as it runs."""

from __future__ import annotations

from pathlib import Path

from bench.realtime import Run, Settings

from rideout.store.functions import LIBRARY_NAME


async def test_a_benchmarks_redis_has_rideouts_function_library(tmp_path: Path) -> None:
    """`rideout up` loads the library on every writer it starts; the benchmarks' Redis
    must have it too, or on 7.0+ every bid and probe fails ("function ... is not on the
    redis") and the figures measure refusals (bench.profile_realtime and bench.room did,
    until their shared start-up loaded it)."""
    run = Run(Settings(client_procs=1), tmp_path)
    try:
        await run.start_redis()
        client = run.redis_client()
        try:
            info = await client.info("server")
            if int(str(info.get("redis_version", "7")).split(".")[0]) < 7:
                return  # 6.2 runs scripts with EVALSHA: no library to load
            libraries = await client.execute_command(
                "FUNCTION", "LIST", "LIBRARYNAME", LIBRARY_NAME
            )
        finally:
            await client.aclose()
        assert libraries, "no rideout function library on the benchmark's Redis"
    finally:
        await run.close()
