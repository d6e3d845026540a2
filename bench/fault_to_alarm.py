"""Where the time from a fault to the alarm (and on to DNS) goes, fast profile.

    .venv/bin/python -m bench.fault_to_alarm [--trials 3] [--faults kill kill-redis]
        [--placements outside in-region]

Each trial starts a local deployment of its own on free ports, waits until both alarms
are OK, waits a random fraction of a canary period (so that faults land anywhere in
the period grid), breaks the primary (``kill``: the whole region; its canary, placed
outside, sees its probes fail, placed in the region it falls silent with it;
``kill-redis``: its writer Redis alone, the canary's store probe fails), then
records, on this machine's wall clock: the fault, the last good and first bad canary
datapoint (their scheduled stamps), the end of the period that completed the alarm's
condition, the evaluation round that raised the alarm, the writer's move, and the first
DNS answer (UDP, polled every 20 ms) naming the secondary. Prints a table of the steps
(median over the trials, and each trial) and a baseline in the same run: the floor the
alarm's rules allow (M bad periods, or for silence the whole evaluation range).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import dns.asyncquery
import dns.exception
import dns.message
import dns.rdatatype
import httpx
from rich.console import Console
from rich.table import Table

from bench.drill import write_config
from rideout import routes
from rideout.cluster.supervisor import LocalCluster
from rideout.config import Config, load_config
from rideout.health.alarm import canary_alarm


async def _summary(http: httpx.AsyncClient, config: Config) -> dict[str, Any]:
    body: dict[str, Any] = (await http.get(routes.control_plane_url(config, routes.SUMMARY))).json()
    return body


async def _dashboard(http: httpx.AsyncClient, config: Config) -> dict[str, Any]:
    """One frame of the dashboard's feed: the summary plus the canary datapoints."""
    url = routes.control_plane_url(config, routes.STREAM)
    host = f"{config.control_plane.address}:{config.control_plane.port}"
    async with http.stream("GET", url, headers={"Host": host}) as response:
        async for line in response.aiter_lines():
            if line.startswith("data: "):
                frame: dict[str, Any] = json.loads(line[6:])
                return frame
    raise RuntimeError("the dashboard feed ended")


async def _dns_answers(config: Config, addresses: set[str]) -> bool:
    query = dns.message.make_query(config.app_domain, dns.rdatatype.A)
    cp = config.control_plane
    try:
        response = await dns.asyncquery.udp(query, cp.address, port=cp.dns_port, timeout=0.5)
    except (dns.exception.DNSException, OSError):
        return False
    return {str(r) for rrset in response.answer for r in rrset} == addresses


async def trial(directory: Path, fault: str, placement: str) -> dict[str, float | None]:
    config = load_config(write_config(directory, canary_placement=placement), env={})
    period = config.timing.canary_interval
    primary = config.primary.name
    target = {z.address for z in config.secondary.zones}
    cluster = LocalCluster(config)
    await cluster.start()
    try:
        async with httpx.AsyncClient(trust_env=False, timeout=2) as http:
            deadline = time.monotonic() + 60
            while True:
                body = await _summary(http, config)
                if {a["state"] for a in body["alarms"].values()} == {"OK"}:
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError("the alarms never got OK")
                await asyncio.sleep(0.1)
            await asyncio.sleep(2 * period + random.random() * period)
            at = time.time()
            await (cluster.kill(primary) if fault == "kill" else cluster.kill_redis(primary))
            dns_at = None
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                if await _dns_answers(config, target):
                    dns_at = time.time()
                    break
                await asyncio.sleep(0.02)
            frame = await _dashboard(http, config)
    finally:
        await cluster.stop()
    points = sorted(frame["canary"].get(primary, []))
    # One point per zone and period: the alarm's Minimum makes a period bad if any is.
    by_period: dict[float, float] = {}
    for t, v in points:
        by_period[t] = min(v, by_period.get(t, v))
    good = [t for t, v in sorted(by_period.items()) if v >= 1 and t <= at + period]
    bad = [t for t, v in sorted(by_period.items()) if v < 1 and t >= at - period]
    alarm_at = next(
        (c["timestamp"] for c in frame["alarms"][primary]["history"] if c["new"] == "ALARM"),
        None,
    )
    moved_at = next(
        (e["at"] for e in frame["failover"]["events"] if e["kind"] == "fail-over"), None
    )
    last_good = max((t for t in good if t <= at), default=None)
    first_bad = bad[0] if bad else None
    alarm = canary_alarm(primary, period, failover_datapoints=config.timing.failover_datapoints)
    n = alarm.evaluation_periods
    if first_bad is not None and len(bad) >= n:  # probes that fail: M bad periods
        condition = (math.floor(bad[n - 1] / period) + 1) * period
    elif last_good is not None:  # silence: the whole range without a real datapoint
        condition = (math.floor(last_good / period) + 1 + alarm.evaluation_range) * period
    else:
        condition = None

    def since(t: float | None) -> float | None:
        return None if t is None else t - at

    return {
        "last good datapoint": since(last_good),
        "first bad datapoint": since(first_bad),
        "alarm condition complete (period end)": since(condition),
        "alarm raised (evaluation round)": since(alarm_at),
        "writer moved": since(moved_at),
        "DNS answers the secondary": since(dns_at),
        "_evaluation wait": None if alarm_at is None or condition is None else alarm_at - condition,
    }


def fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:+.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--faults", nargs="+", default=["kill", "kill-redis"])
    parser.add_argument(
        "--placements", nargs="+", default=["outside", "in-region"],
        choices=["outside", "in-region"], help="failover.canary_placement: each is run",
    )  # fmt: skip
    args = parser.parse_args()
    console = Console(highlight=False)
    for fault, placement in [(f, p) for f in args.faults for p in args.placements]:
        results = []
        for i in range(args.trials):
            with tempfile.TemporaryDirectory(prefix="rideout-bench-alarm-") as tmp:
                results.append(asyncio.run(trial(Path(tmp), fault, placement)))
            console.print(f"{fault}, canary {placement}, trial {i + 1}: alarm after "
                          f"{fmt(results[-1]['alarm raised (evaluation round)'])} s")  # fmt: skip
        table = Table(title=f"fault → alarm → DNS, fast profile, fault {fault}, canary "
                      f"{placement} (seconds after the fault)", title_justify="left")  # fmt: skip
        table.add_column("step")
        table.add_column("median", justify="right")
        for i in range(len(results)):
            table.add_column(f"#{i + 1}", justify="right")
        for key in [k for k in results[0] if not k.startswith("_")] + ["_evaluation wait"]:
            values = [r[key] for r in results]
            known = [v for v in values if v is not None]
            middle = statistics.median(known) if known else None
            table.add_row(key.lstrip("_"), fmt(middle), *(fmt(v) for v in values))
        console.print(table)


if __name__ == "__main__":
    main()
