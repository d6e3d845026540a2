"""Report rendering and writing, from a report dict (no deployment)."""

from __future__ import annotations

import json
from pathlib import Path

from rideout.drill.report import (
    default_report_dir,
    move_lines,
    render_markdown,
    summary_rows,
    write_report,
)
from tests.drill.conftest import sample_report


def test_summary_rows_and_markdown() -> None:
    report = sample_report()
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
    report = sample_report()
    for p in report["passes"]:
        del p["failover"]["accepted"]
    for key in list(report["jitter_comparison"]):
        if key.startswith(("accepted_", "scheduled_")):
            del report["jitter_comparison"][key]
    text = render_markdown(report)
    assert "| started | 4 | 40 | 10.0× |" in text
    assert "| accepted by the secondary | - | - | - |" in text
    assert "accepted" not in text.split("## Full jitter")[0]


def test_markdown_names_the_clients_niceness_when_it_was_set() -> None:
    report = sample_report()
    assert "10 clients in this process(es), 1 rooms" in render_markdown(report)
    report["passes"][0].update(processes=3, client_nice=10)
    assert "10 clients in 3 process(es) at nice 10, 1 rooms" in render_markdown(report)


def test_markdown_shows_failure() -> None:
    text = render_markdown(sample_report(lost=3))
    assert "**FAIL**" in text
    assert "**FAILED**" in text


def test_markdown_names_the_clients_whose_loop_failed() -> None:
    report = sample_report()
    report["passes"][0]["failed_clients"] = [["AttributeError('when')", 186]]
    assert "**186 clients' connection loop failed**: AttributeError('when')" in render_markdown(
        report
    )


def test_write_report_files(tmp_path: Path) -> None:
    files = write_report(sample_report(), tmp_path / "out")
    names = sorted(f.name for f in files)
    assert names == ["report.json", "report.md", "timeline.png"]
    data = json.loads((tmp_path / "out" / "report.json").read_text())
    assert data["timeline_png"] == "timeline.png"
    assert (tmp_path / "out" / "timeline.png").read_bytes()[:4] == b"\x89PNG"


def test_default_report_dir() -> None:
    assert default_report_dir(Path("d"), 0.0).parent == Path("d/drills")


def test_the_summary_shows_write_rto_beside_restored_state() -> None:
    report = sample_report(p99=4.0)
    text = render_markdown(report)
    header = next(line for line in text.splitlines() if line.startswith("| pass |"))
    assert (
        "| restored p50 | p90 | p99 | max | recovered | write RTO p50 | p90 | p99 | wrote |"
        in header
    )
    row = next(line for line in text.splitlines() if line.startswith("| full-jitter | failover"))
    assert "| 3.50 s | 4.50 s | 5.00 s | 10/10 (100.0%) |" in row
    # A report from before write RTO was measured still renders.
    del report["passes"][0]["failover"]["write"]
    assert "| - | - | - | 0/0 (0.0%) |" in render_markdown(report)


def test_markdown_says_how_busy_the_machine_was_when_the_report_knows() -> None:
    report = sample_report()
    assert "the machine's" not in render_markdown(report)  # older reports: no line
    first = report["passes"][0]
    first["machine"] = {"busy": 0.91, "cores": 2}
    first["failover"]["machine"] = {"busy": 0.974, "cores": 2}
    text = render_markdown(report)
    assert (
        "- the machine's 2 cores (the deployment and the clients share them): 91% busy in "
        "the warm-up before the fault, 97% busy in the failover\n" in text
    )
    first["core_speed"] = {"token_issues_per_second": 26457}
    assert (
        "97% busy in the failover; one core issues 26,457 access tokens per second of CPU "
        "(bench.tokens' `issue`: compare machines by it, not by how busy they were)\n"
    ) in render_markdown(report)
    for p in (first, first["failover"]):
        del p["machine"]  # off Linux: the speed alone
    assert "- the machine; one core issues 26,457 access tokens" in render_markdown(report)


def test_markdown_says_how_often_clients_were_outbid_before_their_first_write() -> None:
    report = sample_report()
    assert "outbid" not in render_markdown(report).split("## full-jitter")[1]  # older reports
    assert summary_rows(report)[0][13:15] == ("-", "-")  # outbid p99, cores busy
    report["passes"][0]["failover"]["write"]["outbid_before_write"] = {
        "count": 10, "p50": 2.0, "p90": 6.0, "p99": 12.66, "max": 13.0,
    }  # fmt: skip
    report["passes"][0]["failover"]["machine"] = {"busy": 0.974, "cores": 2}
    assert summary_rows(report)[0][13:15] == ("12.7", "97%")
    text = render_markdown(report)
    assert (
        "; times a client was outbid there before its first accepted bid: median 2, "
        "p99 12.7, most 13" in text
    )


def test_the_moves_list_the_holds_the_drill_saw() -> None:
    report = sample_report()
    first = report["passes"][0]
    first["failover"]["at"] = 100.0
    first["timeline"] = [
        {"t": 101.0, "writer": "west", "held": "move-grace"},
        {"t": 104.5, "writer": "west", "held": None},
        {"t": 110.0, "writer": "west", "held": "damping"},
    ]
    assert move_lines(first) == [
        "   +1.00 s  holding the writer in west (move-grace) until +4.50 s",
        "  +10.00 s  holding the writer in west (damping) until the end",
    ]
    first["timeline"] = [{"t": 101.0, "writer": "west"}]  # a report from before holds
    assert move_lines(first) == []


def test_the_moves_say_how_often_a_step_was_refused_again() -> None:
    report = sample_report()
    first = report["passes"][0]
    first["failover"]["at"] = 100.0
    first["timeline"] = []
    first["control_plane"] = {
        "events": [
            {"at": 106.0, "kind": "wait", "message": "cannot compare a with b: LOADING",
             "repeats": 3, "last_at": 107.5},
            {"at": 108.0, "kind": "demote", "message": "a's Redis was a stale writer"},
        ]
    }  # fmt: skip
    assert move_lines(first) == [
        "   +6.00 s  wait: cannot compare a with b: LOADING (again 3 times over 1.5 s)",
        "   +8.00 s  demote: a's Redis was a stale writer",
    ]
