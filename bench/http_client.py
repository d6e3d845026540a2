"""Failover HTTP client benchmark: success-path overhead and availability under faults.

    .venv/bin/python -m bench.http_client                  # full run (~2 minutes on 2 cores)
    .venv/bin/python -m bench.http_client --quick          # smoke run (~20 s)
    .venv/bin/python -m bench.http_client --overhead-only  # part 1 only (~30 s)

Two measurements, in one run, against real uvicorn servers in child processes (one
per "domain", each on a loopback address of its own, see :func:`serve`):

1. **Overhead.** Sequential requests to one healthy server through plain httpx and
   through rideout's failover client (default policy, with metrics, a retry budget and
   a retry-rate alarm attached: everything a production client would carry), async
   (``httpx.AsyncClient`` vs :class:`AsyncFailoverClient`) and sync (``httpx.Client``
   vs :class:`FailoverClient`). The plain clients get the settings the failover client
   gives its own httpx client (``trust_env=False``, the policy's attempt timeout,
   default pool limits), so only rideout's work differs. Rounds alternate which client
   goes first; each round's median latency is taken and the table shows the median over
   rounds and their ratio (goal: at most 1.05), and, for reference, the median of the
   per-round ratios (each round's two batches run back to back, so a burst of load from
   elsewhere on the machine shifts both).
2. **Availability.** 10,000 requests (4 at a time) through seed 001's four-domain
   plan with the primary failing every request (503) and the backup failing 20% at
   random (503), on a fast schedule (seed 001's shape in milliseconds: 0, 1, 3, 6,
   10 ms). Scenarios vary the regional domains, the schedule's length and the retry
   budget; the share of requests that succeed is compared with what independent
   failures predict (goal: at least 99.99%).

The servers' behaviour is chosen per request by the path, ``/r/<primary>/<backup>/
<regional1>/<regional2>``, each segment ``ok``, ``fail`` or ``pNN`` (NN% 503), so the
same four processes serve every scenario.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import random
import socket
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from rich.console import Console
from rich.table import Table

from bench._harness import Child, free_port, percentile
from rideout.backoff import FixedSchedule, RetryBudget
from rideout.client.http import (
    AllAttemptsFailed,
    AsyncFailoverClient,
    ClientMetrics,
    DomainPlan,
    FailoverClient,
    RetryPolicy,
    RetryRateAlarm,
)

ADDRESSES = ("127.0.7.1", "127.0.7.2", "127.0.7.3", "127.0.7.4")
ROLES = ("primary", "backup", "regional1", "regional2")
console = Console(width=None if sys.stdout.isatty() else 140)


def quiet_retry_log() -> None:
    """Retries are still logged (records made, as in production), just not printed."""
    log = logging.getLogger("rideout.client.http")
    log.addHandler(logging.NullHandler())
    log.propagate = False


# ------------------------------------------------------------------------- server


def make_app(index: int, seed: int) -> Any:
    """A bare ASGI app: answers per the path segment for domain ``index``."""
    rng = random.Random(seed)
    ok_body = b'{"ok":true}'
    fail_body = b'{"error":"unavailable"}'

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                else:
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        parts = scope["path"].split("/")
        mode = parts[2 + index] if len(parts) > 2 + index else "ok"
        if mode == "fail" or (mode.startswith("p") and rng.random() * 100 < int(mode[1:])):
            status, body = 503, fail_body
        else:
            status, body = 200, ok_body
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})

    return app


def serve(address: str, port: int, index: int, seed: int) -> None:
    import uvicorn

    uvicorn.run(
        make_app(index, seed),
        host=address,
        port=port,
        log_level="warning",
        access_log=False,
        lifespan="on",
    )


async def wait_listening(address: str, port: int, child: Child, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        with (
            contextlib.suppress(OSError),
            socket.create_connection((address, port), timeout=0.2),
        ):
            return
        if not child.running:
            raise RuntimeError(f"{child.name} exited while starting:\n{child.log_tail()}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{child.name} did not listen within {timeout:g} s")
        await asyncio.sleep(0.05)


@contextlib.asynccontextmanager
async def servers(work_dir: Path) -> AsyncIterator[tuple[str, ...]]:
    port = free_port(*ADDRESSES)
    children: list[Child] = []
    try:
        for index, address in enumerate(ADDRESSES):
            argv = [sys.executable, "-m", "bench.http_client", "serve", address, str(port),
                    str(index), str(1000 + index)]  # fmt: skip
            child = Child(ROLES[index], argv, work_dir / f"{ROLES[index]}.log")
            children.append(child)
            await child.start()
        for child, address in zip(children, ADDRESSES, strict=True):
            await wait_listening(address, port, child)
        yield tuple(f"http://{address}:{port}" for address in ADDRESSES)
    finally:
        for child in children:
            await child.stop()


# ----------------------------------------------------------------------- overhead


def plain_client_kwargs() -> dict[str, Any]:
    """What the failover client passes to the httpx client it makes (see its __init__)."""
    return {"trust_env": False, "timeout": RetryPolicy().attempt_timeout}


def full_client_kwargs() -> dict[str, Any]:
    return {
        "metrics": ClientMetrics(),
        "budget": RetryBudget(),
        "alarm": RetryRateAlarm(lambda alert: None),
        "trust_env": False,
    }


async def latency_async(
    send: Callable[[], Awaitable[httpx.Response]], n: int
) -> tuple[float, float]:
    """Median wall-clock latency and this process's CPU seconds per request."""
    samples = []
    cpu = time.process_time()
    for _ in range(n):
        started = time.perf_counter()
        response = await send()
        samples.append(time.perf_counter() - started)
        if response.status_code != 200:
            raise RuntimeError(f"unexpected {response.status_code}")
    return statistics.median(samples), (time.process_time() - cpu) / n


def latency_sync(send: Callable[[], httpx.Response], n: int) -> tuple[float, float]:
    """Median wall-clock latency and this process's CPU seconds per request."""
    samples = []
    cpu = time.process_time()
    for _ in range(n):
        started = time.perf_counter()
        response = send()
        samples.append(time.perf_counter() - started)
        if response.status_code != 200:
            raise RuntimeError(f"unexpected {response.status_code}")
    return statistics.median(samples), (time.process_time() - cpu) / n


@dataclass
class Overhead:
    """Per round: (median latency, client CPU per request) of each client."""

    mode: str
    plain: list[tuple[float, float]]
    failover: list[tuple[float, float]]

    def median(self, which: str, part: int) -> float:
        rounds = self.plain if which == "plain" else self.failover
        return statistics.median(r[part] for r in rounds)

    @property
    def ratio(self) -> float:
        return self.median("failover", 0) / self.median("plain", 0)

    @property
    def cpu_ratio(self) -> float:
        return self.median("failover", 1) / self.median("plain", 1)

    @property
    def paired_ratio(self) -> float:
        """The median over rounds of the round's latency ratio."""
        return statistics.median(
            f[0] / p[0] for p, f in zip(self.plain, self.failover, strict=True)
        )


async def measure_overhead(urls: tuple[str, ...], rounds: int, n: int) -> list[Overhead]:
    path = "/r/ok/ok/ok/ok"
    plan = DomainPlan({"bench": urls})
    results = []

    plain_a = httpx.AsyncClient(**plain_client_kwargs())
    failover_a = AsyncFailoverClient(plan, "bench", **full_client_kwargs())
    async_result = Overhead("async", [], [])
    try:
        for run in (plain_a.get(urls[0] + path), failover_a.get(path)):  # warm up
            await run
        for r in range(rounds):
            order = ["plain", "failover"] if r % 2 == 0 else ["failover", "plain"]
            for which in order:
                if which == "plain":
                    async_result.plain.append(
                        await latency_async(lambda: plain_a.get(urls[0] + path), n)
                    )
                else:
                    async_result.failover.append(
                        await latency_async(lambda: failover_a.get(path), n)
                    )
    finally:
        await plain_a.aclose()
        await failover_a.aclose()
    results.append(async_result)

    def sync_rounds() -> Overhead:
        result = Overhead("sync", [], [])
        with (
            httpx.Client(**plain_client_kwargs()) as plain_s,
            FailoverClient(plan, "bench", **full_client_kwargs()) as failover_s,
        ):
            plain_s.get(urls[0] + path)
            failover_s.get(path)
            for r in range(rounds):
                order = ["plain", "failover"] if r % 2 == 0 else ["failover", "plain"]
                for which in order:
                    if which == "plain":
                        result.plain.append(latency_sync(lambda: plain_s.get(urls[0] + path), n))
                    else:
                        result.failover.append(latency_sync(lambda: failover_s.get(path), n))
        return result

    results.append(await asyncio.to_thread(sync_rounds))
    return results


# ------------------------------------------------------------------- availability


@dataclass
class Scenario:
    name: str
    path: str
    schedule: tuple[float, ...]
    budget: bool
    expected: float
    share: float = 1.0  # of the run's request count (the budget row only shows a point)


@dataclass
class Availability:
    scenario: Scenario
    requests: int
    ok: int
    attempts: int
    p99_ms: float
    failures: dict[str, int]

    @property
    def share(self) -> float:
        return self.ok / self.requests


# httpx.AsyncClient's pool costs more CPU per request the more requests share it (on
# this machine 0.9 ms at 1 in flight, 2.4 ms at 32): 4 in flight gives the most
# requests per second, so the 10,000 requests fit the time budget.
CONCURRENCY = 4
FAST = (0.0, 0.001, 0.003, 0.006, 0.010)
FAST8 = (*FAST, 0.010, 0.010, 0.010)


def scenarios() -> list[Scenario]:
    return [
        Scenario("regionals healthy", "/r/fail/p20/ok/ok", FAST, False, 1.0),
        Scenario("regionals 20% 503", "/r/fail/p20/p20/p20", FAST, False, 1 - 0.2**4),
        Scenario("regionals 20% 503, 8 attempts", "/r/fail/p20/p20/p20", FAST8, False, 1 - 0.2**7),
        Scenario(
            "regionals healthy + AWS-default budget", "/r/fail/p20/ok/ok", FAST, True, 1.0, 0.2
        ),
    ]


async def measure_availability(
    urls: tuple[str, ...], scenario: Scenario, requests: int, concurrency: int
) -> Availability:
    plan = DomainPlan({"bench": urls})
    policy = RetryPolicy(
        schedule=FixedSchedule(scenario.schedule), attempt_timeout=2.0, total_timeout=10.0
    )
    attempts = 0

    def count(_: object) -> None:
        nonlocal attempts
        attempts += 1

    client = AsyncFailoverClient(
        plan,
        "bench",
        policy=policy,
        budget=RetryBudget() if scenario.budget else None,
        on_attempt=count,
        trust_env=False,
    )
    gate = asyncio.Semaphore(concurrency)
    latencies: list[float] = []
    failures: dict[str, int] = {}
    ok = 0

    async def one() -> None:
        nonlocal ok
        async with gate:
            started = time.perf_counter()
            try:
                response = await client.get(scenario.path)
            except AllAttemptsFailed as exc:
                failures[exc.reason.value] = failures.get(exc.reason.value, 0) + 1
            else:
                if response.status_code == 200:
                    ok += 1
                else:
                    failures[str(response.status_code)] = (
                        failures.get(str(response.status_code), 0) + 1
                    )
            latencies.append(time.perf_counter() - started)

    try:
        await asyncio.gather(*(one() for _ in range(requests)))
    finally:
        await client.aclose()
    return Availability(
        scenario, requests, ok, attempts, percentile(latencies, 99) * 1000, failures
    )


# -------------------------------------------------------------------------- report


def report(
    overheads: list[Overhead], availability: list[Availability], rounds: int, n: int, seconds: float
) -> None:
    table = Table(
        title=f"success-path latency, one healthy local server (median of {rounds} "
        f"interleaved rounds x {n} sequential requests)"
    )
    for column in (
        "client", "plain httpx", "rideout failover", "latency ratio", "goal", "paired",
        "client CPU/req plain", "failover", "CPU ratio",
    ):  # fmt: skip
        table.add_column(column, justify="right" if column != "client" else "left")
    for o in overheads:
        ratio = o.ratio
        table.add_row(
            o.mode,
            f"{o.median('plain', 0) * 1e6:.0f} µs",
            f"{o.median('failover', 0) * 1e6:.0f} µs",
            f"{ratio:.3f}",
            "≤ 1.05 " + ("[green]met[/]" if ratio <= 1.05 else "[red]missed[/]"),
            f"{o.paired_ratio:.3f}",
            f"{o.median('plain', 1) * 1e6:.0f} µs",
            f"{o.median('failover', 1) * 1e6:.0f} µs",
            f"{o.cpu_ratio:.3f}",
        )
    console.print(table)
    if not availability:
        console.print(
            f"{seconds:.0f} s (overhead only); client and servers share {os.cpu_count()} cores"
        )
        return
    table = Table(
        title=f"availability: primary 100% 503, backup 20% 503 (seed-001 plan, async, "
        f"{CONCURRENCY} in flight)"
    )
    for column in (
        "scenario",
        "schedule",
        "requests",
        "succeeded",
        "expected",
        "attempts/req",
        "p99",
        "failures",
    ):
        table.add_column(
            column, justify="left" if column in ("scenario", "failures", "schedule") else "right"
        )
    for a in availability:
        table.add_row(
            a.scenario.name,
            "+".join(f"{d * 1000:g}" for d in a.scenario.schedule) + " ms",
            f"{a.requests:,}",
            f"{a.share * 100:.3f}%" + (" [green]✓[/]" if a.share >= 0.9999 else ""),
            f"{a.scenario.expected * 100:.3f}%",
            f"{a.attempts / a.requests:.2f}",
            f"{a.p99_ms:.1f} ms",
            ", ".join(f"{k}: {v}" for k, v in sorted(a.failures.items())) or "-",
        )
    console.print(table)
    console.print(
        f"{seconds:.0f} s in all; client and servers share {os.cpu_count()} cores "
        "(servers: one uvicorn process per domain)"
    )


async def run(quick: bool, work_dir: Path, overhead_only: bool = False) -> None:
    # 30 rounds: on a shared 2-core machine, 10 left the ratio a few percent adrift.
    rounds, n, requests = (4, 100, 2000) if quick else (30, 300, 10_000)
    quiet_retry_log()
    started = time.monotonic()
    async with servers(work_dir) as urls:
        overheads = await measure_overhead(urls, rounds, n)
        console.print(f"overhead measured after {time.monotonic() - started:.0f} s")
        availability = []
        for scenario in [] if overhead_only else scenarios():
            count = round(requests * scenario.share)
            availability.append(await measure_availability(urls, scenario, count, CONCURRENCY))
            console.print(f"{scenario.name}: done after {time.monotonic() - started:.0f} s")
    report(overheads, availability, rounds, n, time.monotonic() - started)


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["serve"]:
        address, port, index, seed = args[1:5]
        serve(address, int(port), int(index), int(seed))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="small, fast smoke run")
    parser.add_argument(
        "--overhead-only", action="store_true", help="measure the overhead, skip availability"
    )
    parsed = parser.parse_args(args)
    with tempfile.TemporaryDirectory(prefix="rideout-bench-http-") as work_dir:
        asyncio.run(run(parsed.quick, Path(work_dir), parsed.overhead_only))
    return 0


if __name__ == "__main__":
    sys.exit(main())
