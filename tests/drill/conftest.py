"""A drill's report as the runner writes it, for the tests that render or judge one; a
deployment that looks as if `rideout up` ran it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from rideout.cluster.runstate import RunLock
from rideout.config import Config, dump_toml


@pytest.fixture
def running_async(make_config: Callable[..., Config], tmp_path: Path) -> Iterator[Path]:
    """The config file of a deployment `rideout up` runs (its run lock held) with async
    replication: a drill asked for sync must refuse it."""
    config = make_config(failover={"replication": "async"})
    path = tmp_path / "rideout.toml"
    path.write_text(dump_toml(config))
    config.run_dir.mkdir(parents=True)
    lock = RunLock(config.run_dir)
    lock.acquire()
    try:
        yield path
    finally:
        lock.release()


def sample_phase(frm: str, to: str, p99: float) -> dict[str, Any]:
    return {
        "from": frm, "to": to, "at": 100.0, "time_to_detect": 1.5, "time_to_writer": 2.0,
        "time_to_dns": 2.5, "clients": 10, "recovered": 10, "recovered_share": 1.0,
        "time_to_restored": {"count": 10, "p50": 3.0, "p90": 4.0, "p99": p99, "max": p99},
        "reconnects": {"total": 30, "peak_per_bucket": 4, "peak_per_second": 40.0,
                       "bucket": 0.1, "series": [1, 4, 2]},
        "accepted": {"total": 10, "peak_per_bucket": 3, "peak_per_second": 30.0,
                     "bucket": 0.1, "series": [3, 3, 3, 1]},
        "scheduled": {"total": 30, "peak_per_bucket": 5, "peak_per_second": 50.0,
                      "bucket": 0.1, "series": [5, 0, 2]},
        "write": {"clients": 10, "written": 10, "written_share": 1.0,
                  "time_to_write": {"count": 10, "p50": 3.5, "p90": 4.5, "p99": p99 + 1,
                                    "max": p99 + 1}},
    }  # fmt: skip


def sample_report(p99: float = 5.0, lost: int = 0, duplicates: int = 0) -> dict[str, Any]:
    bids = {"acked": 50, "found": 50 - lost, "lost": lost, "unverifiable": 0, "duplicates": duplicates,
            "stream_entries": 50, "lost_examples": [], "duplicate_examples": [], "rejected": {}}  # fmt: skip
    passes = [
        {
            "name": name,
            "backoff": name,
            "clients": 10,
            "processes": 0,
            "rooms": 1,
            "bid_interval": 1.0,
            "ready_clients": 10,
            "ready_after": 1.0,
            "fault_message": "killed",
            "final_writer": "west",
            "gave_up": 0,
            "failover": sample_phase("east", "west", p99),
            "failback": None,
            "bids": bids,
            "timeline": [
                {"t": 99.0, "alarms": {"east": "OK"}, "dns": "east", "writer": "east", "epoch": 1},
                {
                    "t": 102.0,
                    "alarms": {"east": "ALARM"},
                    "dns": "west",
                    "writer": "west",
                    "epoch": 2,
                },
            ],
            "series": {
                "start": 98.0,
                "step": 0.5,
                "t": [0.0, 0.5],
                "connected": {"east": [10, 0], "west": [0, 10]},
                "acks_per_second": [4.0, 2.0],
            },
        }
        for name in ("full-jitter", "no-jitter")
    ]
    return {
        "drill": "region-outage", "started_at": 0.0, "ok": lost == 0,
        "options": {"clients": 10, "fault": "kill"},
        "deployment": {"primary": "east", "secondary": "west", "replication": "sync",
                       "replica_down": "reject", "profile": "fast", "own_cluster": True},
        "passes": passes,
        "jitter_comparison": {"peak_full_jitter_per_100ms": 4, "peak_no_jitter_per_100ms": 40,
                              "ratio": 10.0, "accepted_peak_full_jitter_per_100ms": 3,
                              "accepted_peak_no_jitter_per_100ms": 9, "accepted_ratio": 3.0,
                              "scheduled_peak_full_jitter_per_100ms": 5,
                              "scheduled_peak_no_jitter_per_100ms": 60, "scheduled_ratio": 12.0},
        "objectives": [{"name": "lost", "limit": 0, "value": lost, "ok": lost == 0}],
    }  # fmt: skip
