"""The drill the way CI runs it: `rideout drill region-outage` in a subprocess, its own
deployment in the fast profile, the primary killed under bidding clients.

Sync replication with ``replica_down = "reject"``: a bid is acknowledged only once the
other region holds it, so "zero acknowledged bids lost" is a guarantee, not luck. (With
``degrade``, a bid acked while the replica lagged past ``sync_timeout`` just before the
kill would exist only in the dead region.) While the primary is down, the new writer has
no replica and refuses bids (``unavailable``): the clients retry, nothing is promised.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from rideout.config import dump_toml, parse_config
from tests.conftest import config_data
from tests.drill.conftest import run_drill_cli

pytestmark = pytest.mark.slow

CLIENTS = int(os.environ.get("DRILL_E2E_CLIENTS", "200"))


SYNC_REJECT = {"replication": "sync", "sync_timeout": 0.5, "replica_down": "reject"}


def run_drill(
    tmp_path: Path,
    *extra: str,
    timeout: float,
    clients: int = CLIENTS,
    failover: dict[str, Any] = SYNC_REJECT,
) -> tuple[str, dict[str, Any]]:
    """`rideout drill region-outage` on its own fast-profile deployment (sync/reject
    unless `failover` says otherwise): its output, and its report.json (the drill must
    have succeeded)."""
    config = parse_config(config_data(tmp_path / ".rideout", failover=failover))
    (tmp_path / "rideout.toml").write_text(dump_toml(config))
    report_dir = tmp_path / "report"
    argv = [
        sys.executable, "-m", "rideout", "drill", "region-outage",
        "--clients", str(clients), "--fault", "kill", "--replication", failover["replication"],
        "--profile", "fast", "--max-rto", "30", "--max-lost", "0",
        "--report", str(report_dir), "--config", "rideout.toml", *extra,
    ]  # fmt: skip
    code, output = run_drill_cli(argv, tmp_path, timeout)
    assert code == 0, output
    assert (report_dir / "report.md").is_file()
    report: dict[str, Any] = json.loads((report_dir / "report.json").read_text())
    assert report["ok"]
    assert "Drill: region outage" in (report_dir / "report.md").read_text()
    return output, report


@pytest.mark.timeout(180)  # the drill's own bound (120 s) plus its start and stop
def test_write_rto_is_reported_and_gated_where_writes_resume(tmp_path: Path) -> None:
    """A small drill where the new region takes writes at once (async replication):
    every client's first accepted bid there is timed, and --max-write-rto gates it."""
    output, report = run_drill(
        tmp_path, "--max-write-rto", "30", timeout=120, clients=40,
        failover={"replication": "async"},
    )  # fmt: skip
    (run,) = report["passes"]
    write = run["failover"]["write"]
    assert write["written"] == write["clients"] == 40, write
    restored, written = run["failover"]["time_to_restored"], write["time_to_write"]
    assert 0 < written["p50"] <= written["p99"] < 30
    assert written["p99"] >= restored["p50"]  # a write follows the client's restore
    names = {o["name"]: o for o in report["objectives"]}
    assert names["full-jitter failover: p99 write RTO (first accepted bid)"]["ok"]
    assert "write RTO p50" in output
    for view in (run["machine"], run["failover"]["machine"]):  # Linux: /proc/stat
        assert 0 < view["busy"] <= 1
        assert view["cores"] == os.cpu_count()


@pytest.mark.timeout(240)  # the drill's own bound (180 s; two phases, each waiting for
# writes after the restores) plus its start and stop
def test_failback_moves_the_clients_back_by_itself_gradually_and_once(tmp_path: Path) -> None:
    """The control plane, not the drill, moves the secondary's clients after failback,
    spread out (no herd toward the primary), and the writer moves once each way."""
    _, report = run_drill(tmp_path, "--failback", timeout=180)
    (run,) = report["passes"]
    # The failover first: every client restored in the secondary, nothing lost.
    failover = run["failover"]
    assert failover["recovered"] == failover["clients"] == CLIENTS
    assert failover["recovered_share"] == 1.0
    assert failover["time_to_dns"] is not None
    assert failover["time_to_dns"] < 20
    assert failover["time_to_restored"]["p99"] < 30
    # Write RTO is measured: this topology has no in-region replicas, so with
    # sync/reject the new writer refuses every bid until the primary is back (issue #11,
    # finding 3), and the report says so instead of hiding it.
    write = failover["write"]
    assert write["clients"] == CLIENTS
    assert write["written"] == 0, write
    assert run["bids"]["acked"] > 0
    # Then the failback.
    failback = run["failback"]
    assert failback["recovered"] == CLIENTS
    assert failback["write"]["written"] == CLIENTS  # writes resume on the primary
    assert failback["drained_by_drill"] is False
    assert run["writer_moves"] == {"failovers": 1, "failbacks": 1}
    assert run["final_writer"] == "us-east-1"
    assert run["bids"]["lost"] == 0
    assert run["bids"]["duplicates"] == 0
    # Before, every client was closed at once: ~90 of 200 reconnects started within
    # 100 ms. Spread over failback_drain_seconds (5 s), about 2 per 100 ms on average.
    assert failback["reconnects"]["total"] >= CLIENTS
    # Which view burst says where (drill.analysis: when each attempt was due by the
    # client's backoff, when it started, when the writer accepted it): a burst in the
    # starts alone is the clients' processes running late, not the drain.
    views = {k: failback[k]["peak_in_window"] for k in ("scheduled", "reconnects", "accepted")}
    assert failback["reconnects"]["peak_in_window"] <= max(10, CLIENTS // 4), views
    names = {o["name"]: o["ok"] for o in report["objectives"]}
    assert names["full-jitter: the writer moved once each way (no flapping)"]
