"""What a zone's app server costs to start: through the CLI, and as `rideout up` starts it.

    .venv/bin/python -m bench.startup [--rounds 8]

A local deployment runs for its Redis servers and keys; beside it, on a port of its own,
one more app server for us-east-1's first zone is started and stopped again, each round
twice: as ``rideout serve`` (typer, every command group imported: the baseline) and as
``python -m rideout.processes serve`` (the same function without the CLI, what `rideout
up` runs since 2026-12-02). Each start is measured from exec until ``/live`` answers: its
CPU time (utime + stime from /proc) and wall time. The order flips every round; the
table shows medians and the ratio. A deployment starts nine Python processes (four app
servers, two canaries, the control plane, the name server and `up` itself), all but
`up` by the path measured here.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from rich.console import Console
from rich.table import Table

from bench._harness import bench_env, cpu_seconds, free_port, median
from bench.drill import write_config
from rideout.cluster.supervisor import LocalCluster
from rideout.config import dump_toml, load_config

console = Console(highlight=False, width=None if sys.stdout.isatty() else 132)
VARIANTS = {
    "rideout serve (CLI, baseline)": ["-m", "rideout", "serve"],
    "python -m rideout.processes serve": ["-m", "rideout.processes", "serve"],
}
LIVE_WITHIN = 30.0


def start_once(argv: list[str], url: str) -> tuple[float, float]:
    """(CPU seconds, wall seconds) from exec until `url` answers 200; the process stopped."""
    began = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, *argv],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=bench_env(),
    )
    try:
        with httpx.Client(timeout=0.5, trust_env=False) as http:
            while True:
                if proc.poll() is not None:
                    raise RuntimeError(f"{' '.join(argv)} exited with {proc.returncode}")
                if time.monotonic() - began > LIVE_WITHIN:
                    raise RuntimeError(f"{' '.join(argv)}: /live not within {LIVE_WITHIN} s")
                try:
                    if http.get(url).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                time.sleep(0.01)
        return cpu_seconds([proc.pid]), time.monotonic() - began
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=8, help="starts of each variant")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="rideout-bench-startup-") as tmp:
        directory = Path(tmp)
        config = load_config(write_config(directory), env={})
        zone = config.regions[0].zones[0]
        # The extra server: the same deployment's config on a port nobody else uses.
        port = free_port(zone.address)
        extra = directory / "extra.toml"
        extra.write_text(dump_toml(dataclasses.replace(config, app_port=port)))
        url = f"http://{zone.address}:{port}/live"
        where = ["--config", str(extra), "--region", config.regions[0].name, "--zone", zone.name]
        cluster = LocalCluster(config)
        await cluster.start()
        figures: dict[str, list[tuple[float, float]]] = {name: [] for name in VARIANTS}
        try:
            names = list(VARIANTS)
            for round_ in range(args.rounds):
                for name in names if round_ % 2 == 0 else names[::-1]:
                    figure = await asyncio.to_thread(start_once, [*VARIANTS[name], *where], url)
                    figures[name].append(figure)
                console.print(f"round {round_ + 1}/{args.rounds} done", style="dim")
        finally:
            await cluster.stop()
    table = Table(title=f"one app server's start, until /live ({args.rounds} rounds, "
                        f"{os.cpu_count()} cores)")  # fmt: skip
    for column in ("how it is started", "CPU s (median)", "wall s (median)", "CPU ratio"):
        table.add_column(column, justify="left" if column.startswith("how") else "right")
    base = median([cpu for cpu, _ in figures[names[0]]])
    for name, rows in figures.items():
        cpu = median([c for c, _ in rows])
        table.add_row(name, f"{cpu:.2f}", f"{median([w for _, w in rows]):.2f}",
                      f"{cpu / base:.2f}")  # fmt: skip
    console.print(table)


if __name__ == "__main__":
    asyncio.run(main())
