"""`rideout drill surge` the way CI runs it: a subprocess, its own fast-profile
deployment, a few hundred visitors through the waiting room, the primary killed in the
middle; the exit status and the report are checked."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from rideout.config import dump_toml, parse_config
from tests.conftest import config_data
from tests.drill.conftest import run_drill_cli

pytestmark = pytest.mark.slow

VISITORS = int(os.environ.get("SURGE_E2E_VISITORS", "200"))


def run_surge(tmp_path: Path, *extra: str, timeout: float) -> tuple[int, str, dict[str, Any]]:
    """The drill's exit status, its output and its report.json."""
    config = parse_config(config_data(tmp_path / ".rideout"))
    (tmp_path / "rideout.toml").write_text(dump_toml(config))
    report_dir = tmp_path / "report"
    argv = [
        sys.executable, "-m", "rideout", "drill", "surge", "--visitors", str(VISITORS),
        "--report", str(report_dir), "--config", "rideout.toml", *extra,
    ]  # fmt: skip
    code, output = run_drill_cli(argv, tmp_path, timeout)
    assert "Traceback" not in output, output
    report: dict[str, Any] = json.loads((report_dir / "report.json").read_text())
    assert "Drill: surge" in (report_dir / "report.md").read_text()
    assert (report_dir / "timeline.png").stat().st_size > 0
    return code, output, report


@pytest.mark.timeout(300)
def test_surge_with_a_region_killed_keeps_the_site_within_capacity(tmp_path: Path) -> None:
    code, output, report = run_surge(
        tmp_path, "--capacity", "40", "--period", "0.5", "--hold", "1", "--fault", "kill",
        "--abandon-after", "12", "--expiry", "15", timeout=270,
    )  # fmt: skip
    assert code == 0, output
    assert report["ok"], report["objectives"]
    s = report["surge"]
    out = s["outcomes"]
    assert out["arrived"] == VISITORS
    assert out["distinct_positions"] == VISITORS
    # The site never took more than its capacity, and the inlet never admitted more.
    assert 0 < s["sessions_max"] <= 40
    assert s["admitted_max_per_period"] <= 40
    assert s["counters"]["held_max"] <= 40
    # Every admitted token was accepted by /ws; no position lost across the failover.
    assert out["refused"] == 0
    assert out["served"] == out["sessions_opened"] > 0
    assert out["lost"] == []
    assert s["positions_missing"] == []
    assert s["fault"]["to"] == s["final_writer"] == "us-west-2"
    # queue = served + waiting + expired + abandoned at every sample; nothing moved back.
    assert s["counters"]["identity_holds"]
    assert s["counters"]["samples"] > 10
    assert s["counters"]["moved_back"] == []
    final = s["final_counters"]
    # Every visitor holds one number, and no number was drawn twice: a retry whose
    # stored answer (Idempotency-Key) had not replicated when the writer was killed finds
    # the position its first try made (the request id comes from the key's record). Before
    # that, CI saw 201 of 200 once: an orphan.
    assert final["queue"] == VISITORS
    assert final["tokens"] == out["served"]
    # The micro-cache: fewer Redis reads than polls served (without it, one per poll).
    # How many fewer depends on how often the visitors poll within a TTL, which a
    # starved machine slows: 0.61 in a suite run beside a network lab, under 0.5 in the
    # runs before. The cache's own bound (one read per key per TTL, whatever the surge) is
    # tests/waitingroom/test_api.py's test_the_micro_cache_takes_a_surge_of_polls_with_one_read.
    load = s["load"]
    assert load["counter_polls_served"] > 0
    assert load["reads_per_poll"] < 1


def test_a_refused_option_exits_2_without_a_traceback(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "rideout", "drill", "surge", "--inlet", "fifo"],
        cwd=tmp_path, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 2
    assert "inlet" in proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
