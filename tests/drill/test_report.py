"""Report rendering and writing, from a report dict (no deployment)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rideout.drill.report import default_report_dir, render_markdown, summary_rows, write_report
from rideout.drill.runner import DrillError, DrillOptions, _objectives


def _phase(frm: str, to: str, p99: float) -> dict[str, Any]:
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
    }  # fmt: skip


def _report(p99: float = 5.0, lost: int = 0, duplicates: int = 0) -> dict[str, Any]:
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
            "failover": _phase("east", "west", p99),
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


def test_summary_rows_and_markdown() -> None:
    report = _report()
    rows = summary_rows(report)
    assert len(rows) == 2
    assert rows[0][:4] == ("full-jitter", "failover east → west", "1.50 s", "2.50 s")
    text = render_markdown(report)
    assert "# Drill: region outage" in text
    assert "**PASS**" in text
    assert "**10.0×**" in text
    assert "| scheduled (due) | 5 | 60 | 12.0× |" in text
    assert "| started | 4 | 40 | 10.0× |" in text
    assert "| accepted by the secondary | 3 | 9 | 3.0× |" in text
    assert "west accepted 10 connections, peak 3 within 100 ms" in text
    assert "**0 lost**" in text


def test_markdown_of_a_report_without_accepted_counts() -> None:
    """Reports written before the accepted-connections herd was measured still render."""
    report = _report()
    for p in report["passes"]:
        del p["failover"]["accepted"]
    for key in list(report["jitter_comparison"]):
        if key.startswith(("accepted_", "scheduled_")):
            del report["jitter_comparison"][key]
    text = render_markdown(report)
    assert "| started | 4 | 40 | 10.0× |" in text
    assert "| accepted by the secondary | - | - | - |" in text
    assert "accepted" not in text.split("## Full jitter")[0]


def test_markdown_shows_failure() -> None:
    text = render_markdown(_report(lost=3))
    assert "**FAIL**" in text
    assert "**FAILED**" in text


def test_write_report_files(tmp_path: Path) -> None:
    files = write_report(_report(), tmp_path / "out")
    names = sorted(f.name for f in files)
    assert names == ["report.json", "report.md", "timeline.png"]
    data = json.loads((tmp_path / "out" / "report.json").read_text())
    assert data["timeline_png"] == "timeline.png"
    assert (tmp_path / "out" / "timeline.png").read_bytes()[:4] == b"\x89PNG"


def test_default_report_dir() -> None:
    assert default_report_dir(Path("d"), 0.0).parent == Path("d/drills")


def test_objectives() -> None:
    options = DrillOptions(clients=10, max_rto=4.0, max_lost=0)
    found = _objectives(options, _report(p99=5.0, lost=1)["passes"][:1])
    assert [o["ok"] for o in found] == [False, False, True]
    found = _objectives(options, _report(p99=3.0)["passes"][:1])
    assert all(o["ok"] for o in found)
    # A bid applied twice fails the drill even with no objective asked for.
    found = _objectives(DrillOptions(clients=10), _report(duplicates=2)["passes"][:1])
    assert [(o["name"], o["ok"]) for o in found] == [
        ("full-jitter: bids applied more than once", False)
    ]


def test_options_are_checked() -> None:
    with pytest.raises(DrillError, match="--fault"):
        DrillOptions(fault="nuke")
    with pytest.raises(DrillError, match="--replication"):
        DrillOptions(replication="maybe")
    with pytest.raises(DrillError, match="--clients"):
        DrillOptions(clients=0)


async def test_refuses_a_running_deployment_with_other_replication(
    make_config: Any, tmp_path: Path
) -> None:
    from rideout.cluster.runstate import RunLock
    from rideout.config import dump_toml
    from rideout.drill.runner import run_region_outage

    config = make_config(failover={"replication": "async"})
    path = tmp_path / "rideout.toml"
    path.write_text(dump_toml(config))
    config.run_dir.mkdir(parents=True)
    lock = RunLock(config.run_dir)
    lock.acquire()
    try:
        options = DrillOptions(replication="sync", config_path=path, env={})
        with pytest.raises(DrillError, match="uses async replication, not sync"):
            await run_region_outage(options)
    finally:
        lock.release()
