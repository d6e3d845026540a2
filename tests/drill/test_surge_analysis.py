"""The surge drill's pure parts: its numbers from records and samples, its options, its
Markdown — no deployment."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rideout.drill import DrillError, SurgeOptions
from rideout.drill.surge import _objectives
from rideout.drill.surge_analysis import (
    admitted_per_period,
    check_samples,
    concurrency,
    load_summary,
    outcomes,
    surge_series,
)
from rideout.drill.surge_report import render_surge_markdown
from rideout.drill.visitors import (
    ArrivedRecord,
    ClosedRecord,
    LeftRecord,
    LoadRecord,
    OpenedRecord,
    RefusedRecord,
    ServedRecord,
)


def sample(t: float, queue: int, tokens: int, waiting: int, expired: int = 0,
           abandoned: int = 0, holding: int = 0) -> dict[str, Any]:  # fmt: skip
    counters = {"queue": queue, "tokens": tokens, "waiting": waiting, "expired": expired,
                "abandoned": abandoned, "serving": tokens}  # fmt: skip
    return {"t": t, "region": "east", "counters": counters, "holding": holding}


def test_concurrency_counts_sessions_open_at_once() -> None:
    records = [
        OpenedRecord(1, 1.0, "east"), OpenedRecord(2, 1.5, "east"), ClosedRecord(1, 2.0, False),
        OpenedRecord(3, 2.0, "east"), ClosedRecord(2, 3.0, True), ClosedRecord(3, 3.0, False),
    ]  # fmt: skip
    # A close and an open at the same instant: the close counts first.
    assert concurrency(records) == (2, 1.5)
    assert concurrency([]) == (0, None)


@given(st.lists(st.tuples(st.floats(0, 100), st.floats(0, 10)), max_size=50))
def test_concurrency_never_exceeds_the_sessions(intervals: list[tuple[float, float]]) -> None:
    records: list[Any] = []
    for i, (start, length) in enumerate(intervals):
        records += [OpenedRecord(i, start, "east"), ClosedRecord(i, start + length, False)]
    peak, _ = concurrency(records)
    assert 0 <= peak <= len(intervals)


def test_admitted_per_period_buckets_the_counter_moves() -> None:
    history = [(9.0, 5), (10.1, 15), (10.6, 25), (11.2, 30), (13.0, 40)]
    assert admitted_per_period(history, 1.0, since=10.0) == [20, 5, 0, 10]
    assert admitted_per_period(history, 1.0, since=20.0) == []
    # A counter that never moves back counts nothing negative.
    assert admitted_per_period([(1.0, 10), (1.5, 8), (2.2, 12)], 1.0) == [10, 2]


def test_samples_check_the_identity_and_that_nothing_moves_back() -> None:
    good = [sample(1, 10, 2, 8, holding=5), sample(2, 12, 4, 6, 1, 1, holding=7)]
    result = check_samples(good, capacity=7)
    assert result["identity_holds"]
    assert result["moved_back"] == []
    assert result["held_max"] == 7
    assert result["held_within_capacity"]
    bad = [*good, sample(3, 11, 4, 5, 1, 1), sample(4, 12, 4, 7, 1, 1)]
    result = check_samples(bad, capacity=5)
    assert result["moved_back"] == [{"t": 3, "counter": "queue", "was": 12, "is": 11}]
    assert result["identity_broken"] == [{"t": 4, "queue": 12, "sum": 13}]
    assert not result["identity_holds"]
    assert not result["held_within_capacity"]


def test_outcomes_and_load() -> None:
    records: list[Any] = [
        ArrivedRecord(0, 1.0, "a", 1, "east"), ArrivedRecord(1, 1.0, "b", 2, "east"),
        ArrivedRecord(2, 1.1, "c", 2, "east"), ServedRecord(0, 2.0, 1, "east"),
        OpenedRecord(0, 2.1, "east"), ClosedRecord(0, 3.0, False), LeftRecord(0, 3.1, "done"),
        ServedRecord(1, 2.0, 2, "east"), RefusedRecord(1, 2.2, 403, "east"),
        LeftRecord(1, 2.3, "done"), LoadRecord(0, 4.0, {"/serving_num": 10}, {"/serving_num 200": 10}),
        LoadRecord(5, 4.0, {"/serving_num": 5}, {"/serving_num 200": 4}),
    ]  # fmt: skip
    out = outcomes(records, 4)
    assert out["arrived"] == 3
    assert out["shared_positions"] == 1
    assert out["served"] == 2
    assert out["sessions_opened"] == 1
    assert out["refused"] == 1
    assert out["refused_statuses"] == {"403": 1}
    assert out["left"] == {"done": 2}
    assert out["unfinished"] == 2
    load = load_summary(records, polls=100.0, loads=5.0)
    assert load["requests_sent"] == {"/serving_num": 15}
    assert load["answers"] == {"/serving_num 200": 14}
    assert load["reads_per_poll"] == 0.05
    assert load["reduction"] == 20.0
    assert load_summary([], None, None)["reads_per_poll"] is None
    series = surge_series(records, [sample(2.0, 3, 1, 2)], start=1.0, step=1.0)
    assert series["arrivals_per_second"][0] == 3
    assert max(series["sessions"]) == 1


def test_options_refuse_bad_input() -> None:
    for bad in ({"visitors": 0}, {"inlet": "fifo"}, {"capacity": 0}, {"fault": "freeze"},
                {"period": 0}, {"abandon_share": 1.5}, {"abandon_share": 0.6, "noshow_share": 0.6},
                {"profile": "slow"}):  # fmt: skip
        with pytest.raises(DrillError):
            SurgeOptions(**bad)  # type: ignore[arg-type]
    # Periodic's default increment keeps about `capacity` sessions open at once.
    options = SurgeOptions(inlet="periodic", capacity=60, period=1.0, hold=1.0, poll_interval=1.0)
    assert options.per_period == 20
    assert SurgeOptions(inlet="periodic", increment_by=7).per_period == 7


def surge_result(sessions: int = 30, refused: int = 0) -> dict[str, Any]:
    return {
        "visitors": 100, "processes": 0,
        "inlet": {"kind": "maxsize", "period": 1.0, "capacity": 40, "per_period": None,
                  "bound_per_period": 40},
        "outcomes": {"visitors": 100, "arrived": 100, "distinct_positions": 100,
                     "shared_positions": 0, "served": 90, "sessions_opened": 90,
                     "served_without_session": 0, "refused": refused, "refused_statuses": {},
                     "reconnected": 3, "left": {"done": 90, "abandoned": 10}, "unfinished": 0,
                     "lost": []},
        "admitted_per_period": [40, 10], "admitted_max_per_period": 40,
        "sessions_max": sessions, "sessions_max_at": 2.0,
        "counters": check_samples([sample(1, 100, 90, 0, 0, 10, holding=40)], 40),
        "final_counters": sample(1, 100, 90, 0, 0, 10)["counters"],
        "positions_missing": [],
        "load": load_summary([], 1000.0, 50.0),
        "fault": {"at": 1.0, "message": "killed", "from": "east", "to": "west",
                  "served_before": 20, "waiting_before": 60, "writer_moved_after": 2.5},
        "final_writer": "west", "writer_moves": {"failovers": 1, "failbacks": 0},
        "timeline": [], "series": surge_series([], [], 0.0),
    }  # fmt: skip


def test_objectives_gate_on_capacity_refusals_and_the_failover() -> None:
    options = SurgeOptions(visitors=100, capacity=40, fault="kill")
    assert all(o["ok"] for o in _objectives(options, surge_result()))
    failed = {
        o["name"] for o in _objectives(options, surge_result(sessions=41, refused=2)) if not o["ok"]
    }
    assert failed == {
        "concurrent auction sessions within capacity",
        "admitted tokens refused by /ws",
    }


def test_markdown_names_the_headline_numbers() -> None:
    options = SurgeOptions(visitors=100, capacity=40, fault="kill")
    result = surge_result()
    report = {"drill": "surge", "started_at": 0.0, "ok": True, "options": {"visitors": 100},
              "deployment": {"event_id": "surge"}, "surge": result,
              "objectives": _objectives(options, result)}  # fmt: skip
    text = render_surge_markdown(report)
    assert text.startswith("# Drill: surge")
    assert "| auction sessions at once: most (capacity) | 30 (40) |" in text
    assert "| Redis reads per poll (without the micro-cache: 1) | 0.050 |" in text
    assert "kill east with 20 served" in text
    assert "## Objectives" in text
