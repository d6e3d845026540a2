"""`rideout drill zone-outage` the way CI runs it: a subprocess, its own fast-profile
deployment, one zone killed under bidding clients; autoshift must evacuate it without a
regional failover and lose no acknowledged bid."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from rideout.config import dump_toml, parse_config
from rideout.drill import DrillError
from rideout.drill.zone import ZoneDrillOptions, render_zone_markdown
from tests.conftest import config_data

pytestmark = pytest.mark.slow

CLIENTS = int(os.environ.get("ZONE_DRILL_CLIENTS", "20"))


def test_options_are_checked() -> None:
    with pytest.raises(DrillError, match="--fault"):
        ZoneDrillOptions(fault="melt")
    with pytest.raises(DrillError, match="--clients"):
        ZoneDrillOptions(clients=0)


def test_the_drill_measures_autoshift_and_gates_on_its_objectives(tmp_path: Path) -> None:
    config = parse_config(
        config_data(
            tmp_path / ".rideout",
            failover={"replication": "sync", "sync_timeout": 0.5, "replica_down": "reject"},
        )
    )
    (tmp_path / "rideout.toml").write_text(dump_toml(config))
    report_dir = tmp_path / "report"
    argv = [
        sys.executable, "-m", "rideout", "drill", "zone-outage", "--clients", str(CLIENTS),
        "--fault", "kill", "--max-rto", "30",
        "--report", str(report_dir), "--config", "rideout.toml",
    ]  # fmt: skip
    proc = subprocess.Popen(
        argv, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "COLUMNS": "200"},
    )  # fmt: skip
    try:
        output, _ = proc.communicate(timeout=400)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGINT)  # the drill stops its deployment on the way out
        output, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, output
    report = json.loads((report_dir / "report.json").read_text())
    p = report["pass"]
    assert report["ok"], report["objectives"]
    assert p["failovers"] == 0
    assert p["bids"]["lost"] == 0
    assert p["bids"]["duplicates"] == 0
    assert p["disconnected_clients"] > 0
    assert p["recovered_share"] == 1
    assert p["time_to_evacuation"] > 0
    assert p["mend"]["time_to_recovery"] > 0
    assert (report_dir / "report.md").read_text() == render_zone_markdown(report)
    assert (report_dir / "timeline.png").stat().st_size > 1000
    print(render_zone_markdown(report))
