"""The drill's accounting, from plain lists (no deployment)."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rideout.drill.analysis import (
    AckRecord,
    StreamEntry,
    account_bids,
    bucket_counts,
    compare_herds,
    herd_stats,
    parse_stream_entry,
    peak_in_window,
    percentile,
    recovery_stats,
    summarize,
)


def test_percentile_interpolates() -> None:
    values = [1.0, 2.0, 3.0, 4.0]
    assert percentile(values, 0) == 1.0
    assert percentile(values, 100) == 4.0
    assert percentile(values, 50) == pytest.approx(2.5)
    assert percentile([7.0], 99) == 7.0
    assert percentile([], 50) is None
    assert percentile(list(range(101)), 99) == pytest.approx(99.0)
    with pytest.raises(ValueError, match="q must be"):
        percentile(values, 101)


def test_summarize() -> None:
    data = summarize([3.0, 1.0, 2.0])
    assert (data["count"], data["p50"], data["max"]) == (3, 2.0, 3.0)
    assert data["p90"] == pytest.approx(2.8)
    assert data["p99"] == pytest.approx(2.98)
    assert summarize([]) == {"count": 0, "p50": None, "p90": None, "p99": None, "max": None}


def test_bucket_counts_in_100ms() -> None:
    times = [10.0, 10.05, 10.1, 10.25, 10.99, 11.0, 9.99]
    assert bucket_counts(times, 10.0, 11.0) == [2, 1, 1, 0, 0, 0, 0, 0, 0, 1]
    assert bucket_counts([], 0.0, 0.05) == [0]
    with pytest.raises(ValueError, match="width"):
        bucket_counts(times, 0, 1, 0)


def test_herd_peak_and_rate() -> None:
    herd = herd_stats([0.01, 0.02, 0.03, 0.5, 1.5], 0.0, 1.0)
    assert (herd.total, herd.peak_per_bucket, herd.peak_in_window) == (4, 3, 3)
    assert herd.peak_per_second == pytest.approx(30.0)
    assert len(herd.series) == 10


def test_a_burst_across_a_bucket_edge_counts_whole_in_the_window_peak() -> None:
    burst = [0.06, 0.07, 0.08, 0.11, 0.12, 0.13]  # 60 ms wide, split 3 + 3 by the 0.1 edge
    herd = herd_stats(burst, 0.0, 1.0)
    assert herd.peak_per_bucket == 3
    assert herd.peak_in_window == 6
    assert peak_in_window([0.0, 0.1, 0.2]) == 1  # the span is half-open: [t, t + 0.1)
    assert peak_in_window([]) == 0
    with pytest.raises(ValueError, match="width"):
        peak_in_window([1.0], 0)


@given(st.lists(st.floats(0, 9.99, allow_nan=False), max_size=200))
def test_the_window_peak_is_at_least_the_fullest_bucket_and_at_most_two(
    times: list[float],
) -> None:
    series = bucket_counts(times, 0.0, 10.0)
    peak = peak_in_window(times)
    buckets = max(series, default=0)
    assert buckets <= peak
    assert peak <= max((a + b for a, b in itertools.pairwise(series)), default=buckets)


def test_recovery_counts_first_restore_in_target_after_fault() -> None:
    restores = [
        (0, 5.0, "east"),  # before the fault
        (0, 12.0, "west"),
        (0, 11.0, "west"),  # the first one counts
        (1, 13.0, "east"),  # wrong region
        (2, 50.0, "west"),  # after the timeout
        (9, 11.0, "west"),  # not one of ours
    ]
    stats = recovery_stats(restores, [0, 1, 2], since=10.0, region="west", timeout=30.0)
    assert (stats.clients, stats.recovered, stats.seconds) == (3, 1, [1.0])
    assert stats.share == pytest.approx(1 / 3)
    data = stats.as_dict()
    assert data["time_to_restored"]["max"] == 1.0


def test_parse_stream_entry() -> None:
    fields = {"state": json.dumps({"bid": 12, "bidder": "alice", "bids": 3}), "epoch": "2"}
    assert parse_stream_entry("r", "5-0", fields) == StreamEntry("5-0", "r", "alice", 12)
    assert parse_stream_entry("r", "5-0", {"state": "not json"}) is None
    assert parse_stream_entry("r", "5-0", {}) is None
    assert parse_stream_entry("r", "5-0", {"state": '{"bid": true}'}) is None


def test_account_bids_lost_duplicates_unverifiable() -> None:
    entries = [
        StreamEntry("100-0", "r1", "a", 1),
        StreamEntry("101-0", "r1", "b", 2),
        StreamEntry("102-0", "r1", "b", 2),  # applied twice
        StreamEntry("200-0", "r2", "a", 5),
    ]
    acks = [
        AckRecord("r1", "a", 1, "100-0"),
        AckRecord("r1", "b", 2, "101-0"),
        AckRecord("r1", "b", 2, "101-0"),  # the same bid acked again: counted once
        AckRecord("r1", "a", 3, "103-0"),  # lost
        AckRecord("r2", "a", 4, "150-0"),  # older than r2's first entry: trimmed
        AckRecord("r3", "c", 1, "1-0"),  # no stream at all: lost
    ]
    result = account_bids(acks, entries)
    assert (result.acked, result.found, result.unverifiable) == (5, 2, 1)
    assert result.lost == [AckRecord("r1", "a", 3, "103-0"), AckRecord("r3", "c", 1, "1-0")]
    assert result.duplicates == [("r1", "b", 2, 2)]
    data = result.as_dict()
    assert (data["lost"], data["duplicates"], data["stream_entries"]) == (2, 1, 4)


def test_account_bids_all_found() -> None:
    entries = [StreamEntry(f"{i}-0", "r", "a", i) for i in range(1, 50)]
    acks = [AckRecord("r", "a", i, f"{i}-0") for i in range(1, 50)]
    data = account_bids(acks, entries).as_dict()
    assert (data["acked"], data["lost"], data["duplicates"]) == (49, 0, 0)


def test_compare_herds_gives_each_herds_peaks_and_ratio() -> None:
    def phase(scheduled: int, started: int, accepted: int) -> dict[str, Any]:
        return {
            "scheduled": {"peak_in_window": scheduled},
            "reconnects": {"peak_in_window": started},
            "accepted": {"peak_in_window": accepted},
        }

    cmp = compare_herds(phase(10, 20, 0), phase(60, 80, 9))
    assert (cmp["scheduled_peak_full_jitter_per_100ms"], cmp["scheduled_ratio"]) == (10, 6.0)
    assert (cmp["peak_no_jitter_per_100ms"], cmp["ratio"]) == (80, 4.0)
    assert cmp["accepted_ratio"] is None  # full jitter had none: no ratio
