"""The region-outage drill at scale: N = 1,000 and 5,000 clients, fast profile, the
primary killed, once with full jitter and once with no jitter.

    .venv/bin/python -m bench.drill [--clients 1000 5000] [--report-root DIR]

Each run starts a deployment of its own on free ports (sync replication, replica_down
``reject``) and spreads the clients over spawned worker processes (400 per process).
Prints one table: time to alarm and DNS, per-client time to restored state
(p50/p90/p99/max), share recovered, acknowledged bids lost and duplicated, and the most
reconnects within any 100 ms toward the secondary as scheduled by the backoff policy, as
started by the clients and as accepted by the secondary, with and without jitter (their
ratios are measured within one run). Clients and servers share the machine's cores: the
started and accepted herds are smeared by CPU contention, so their ratios here are a
floor of what separate client machines would see.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from bench._harness import free_port
from rideout.config import dump_toml, parse_config
from rideout.drill import DrillOptions, run_region_outage, write_report
from rideout.drill.analysis import HERDS

ZONES = ("127.0.1.1", "127.0.1.2", "127.0.2.1", "127.0.2.2")


def write_config(directory: Path, *, canary_placement: str = "outside") -> Path:
    redis_port = free_port("127.0.1.100", "127.0.2.100")
    data: dict[str, Any] = {
        "data_dir": str(directory / ".rideout"),
        "app_port": free_port(*ZONES),
        "profile": "fast",
        "control_plane": {
            "port": free_port("127.0.0.1"),
            "dns_port": free_port("127.0.0.1", udp=True),
        },
        "failover": {"replication": "sync", "sync_timeout": 0.5, "replica_down": "reject",
                     "canary_placement": canary_placement},
        "regions": [
            {"name": "us-east-1", "role": "primary",
             "redis": {"address": "127.0.1.100", "port": redis_port},
             "zones": [{"name": "use1-az1", "address": "127.0.1.1"},
                       {"name": "use1-az2", "address": "127.0.1.2"}]},
            {"name": "us-west-2", "role": "secondary",
             "redis": {"address": "127.0.2.100", "port": redis_port},
             "zones": [{"name": "usw2-az1", "address": "127.0.2.1"},
                       {"name": "usw2-az2", "address": "127.0.2.2"}]},
        ],
    }  # fmt: skip
    path = directory / "rideout.toml"
    path.write_text(dump_toml(parse_config(data)))
    return path


def s(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def ratio(row: dict[str, Any], value: float | None) -> str:
    """No jitter's peak over full jitter's, shown on the no-jitter row."""
    return "" if row["name"] == "full-jitter" or value is None else f"{value:.1f}×"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, nargs="+", default=[1000, 5000])
    parser.add_argument("--report-root", type=Path, default=None)
    args = parser.parse_args()
    console = Console(highlight=False, width=max(160, Console().width))
    root = args.report_root or Path(tempfile.mkdtemp(prefix="rideout-bench-drill-"))
    table = Table(
        title="region outage drill, fast profile, kill, sync/reject", title_justify="left"
    )
    for column in ("N", "backoff", "alarm s", "DNS s", "p50 s", "p90 s", "p99 s", "max s",
                   "recovered", "acked", "lost", "dup",
                   "reconnects within 100 ms: scheduled", "÷", "started", "÷", "accepted",
                   "÷"):  # fmt: skip
        table.add_column(column, justify="right")
    for n in args.clients:
        workdir = root / f"n{n}"
        workdir.mkdir(parents=True, exist_ok=True)
        config = write_config(workdir)
        options = DrillOptions(
            clients=n, fault="kill", replication="sync", profile="fast", compare_jitter=True,
            config_path=config, report_dir=workdir / "report", env={},
        )  # fmt: skip
        with console.status(f"N={n}") as status:
            report = asyncio.run(
                run_region_outage(options, lambda m, st=status, k=n: st.update(f"N={k}: {m}"))
            )
        write_report(report, workdir / "report")
        cmp = report.get("jitter_comparison") or {}
        for p in report["passes"]:
            f = p["failover"]
            r = f["time_to_restored"]
            table.add_row(
                str(n), p["backoff"], s(f["time_to_detect"]), s(f["time_to_dns"]),
                s(r["p50"]), s(r["p90"]), s(r["p99"]), s(r["max"]),
                f"{100 * f['recovered_share']:.1f}%", str(p["bids"]["acked"]),
                str(p["bids"]["lost"]), str(p["bids"]["duplicates"]),
                *(cell for key, prefix, _ in HERDS
                  for cell in (str(f[key]["peak_in_window"]), ratio(p, cmp.get(f"{prefix}ratio")))),
            )  # fmt: skip
        console.print(f"N={n}: report in {workdir / 'report'}")
    console.print(table)


if __name__ == "__main__":
    main()
