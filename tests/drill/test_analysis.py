"""The drill's accounting, from plain lists (no deployment)."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rideout.drill.analysis import (
    HoldSpan,
    StreamEntry,
    account_bids,
    bucket_counts,
    compare_herds,
    first_time,
    herd_stats,
    hold_spans,
    outbid_before_write,
    parse_stream_entry,
    peak_in_window,
    percentile,
    phase_summary,
    recovery_stats,
    summarize,
    timeline_series,
)
from rideout.drill.records import (
    OUTBID,
    AckRecord,
    AttemptRecord,
    ConnectedRecord,
    DisconnectedRecord,
    DrillRecord,
    RejectedRecord,
    RestoredRecord,
)


def ack(room: str, bidder: str, amount: int, offset: str | None) -> AckRecord:
    """What accounting looks at of an ack (client 0 at time 0)."""
    return AckRecord(0, 0.0, room, bidder, amount, offset, "?")


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
        ack("r1", "a", 1, "100-0"),
        ack("r1", "b", 2, "101-0"),
        ack("r1", "b", 2, "101-0"),  # the same bid acked again: counted once
        ack("r1", "a", 3, "103-0"),  # lost
        ack("r2", "a", 4, "150-0"),  # older than r2's first entry: trimmed
        ack("r3", "c", 1, "1-0"),  # no stream at all: lost
    ]
    result = account_bids(acks, entries)
    assert (result.acked, result.found, result.unverifiable) == (5, 2, 1)
    assert result.lost == [ack("r1", "a", 3, "103-0"), ack("r3", "c", 1, "1-0")]
    assert result.duplicates == [("r1", "b", 2, 2)]
    data = result.as_dict()
    assert (data["lost"], data["duplicates"], data["stream_entries"]) == (2, 1, 4)
    assert data["lost_examples"] == [
        {"room": "r1", "bidder": "a", "amount": 3, "offset": "103-0"},
        {"room": "r3", "bidder": "c", "amount": 1, "offset": "1-0"},
    ]
    assert data["duplicate_examples"] == [["r1", "b", 2, 2]]


def test_account_bids_all_found() -> None:
    entries = [StreamEntry(f"{i}-0", "r", "a", i) for i in range(1, 50)]
    acks = [ack("r", "a", i, f"{i}-0") for i in range(1, 50)]
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


# ----------------------------------------------------------------------------- a phase

TIMELINE = [
    {"t": 9.0, "alarms": {"east": "OK", "west": "OK"}, "dns": "east", "writer": "east"},
    {"t": 11.0, "alarms": {"east": "ALARM", "west": "OK"}, "dns": "east", "writer": "east"},
    {"t": 12.0, "alarms": {"east": "ALARM", "west": "OK"}, "dns": "east", "writer": "west"},
    {"t": 13.5, "alarms": {"east": "ALARM", "west": "OK"}, "dns": "west", "writer": "west"},
    {"t": 30.0, "alarms": {"east": "OK", "west": "OK"}, "dns": "east", "writer": "east"},
]


def test_first_time() -> None:
    assert first_time(TIMELINE, 10.0, lambda row: row["dns"] == "west") == 13.5
    assert first_time(TIMELINE, 0.0, lambda row: row["writer"] == "east") == 9.0
    assert first_time(TIMELINE, 31.0, lambda row: True) is None


def test_a_failover_phase_from_the_clients_records() -> None:
    records: list[DrillRecord] = [
        AttemptRecord(0, 9.5, "west", 9.4),  # before the fault: not in the herd
        AttemptRecord(0, 10.5, "west", 10.4),
        AttemptRecord(1, 10.55, "west", 10.42),
        AttemptRecord(1, 10.6, "east", 10.5),  # toward the lost region
        ConnectedRecord(0, 10.7, "west"),
        ConnectedRecord(1, 10.75, "west"),
        RestoredRecord(0, 11.0, "west"),
        RestoredRecord(1, 12.5, "west"),
        RestoredRecord(2, 11.0, "east"),
        ack("r", "a", 1, "1-0")._replace(client=0, t=9.0, region="east"),  # before the fault
        ack("r", "a", 2, "2-0")._replace(client=0, t=10.2, region="east"),  # the old region
        ack("r", "a", 3, "3-0")._replace(client=0, t=11.5, region="west"),  # first in west
        ack("r", "a", 4, "4-0")._replace(client=0, t=12.0, region="west"),
        ack("r", "b", 5, "5-0")._replace(client=1, t=13.0, region="west"),
        ack("r", "b", 6, "6-0")._replace(client=1, t=45.0, region="west"),  # past the window
    ]
    phase = phase_summary(TIMELINE, records, range(3), 10.0, 14.0, "east", "west", 30.0)
    # Write RTO: fault -> each client's first bid the new region accepted.
    write = phase["write"]
    assert (write["clients"], write["written"]) == (3, 2)
    assert write["written_share"] == pytest.approx(2 / 3)
    assert sorted([write["time_to_write"]["p50"], write["time_to_write"]["max"]]) == [2.25, 3.0]
    assert (phase["from"], phase["to"], phase["at"]) == ("east", "west", 10.0)
    assert (phase["time_to_detect"], phase["time_to_writer"], phase["time_to_dns"]) == (
        1.0, 2.0, 3.5,
    )  # fmt: skip
    assert (phase["clients"], phase["recovered"]) == (3, 2)
    assert phase["time_to_restored"]["max"] == 2.5
    assert phase["scheduled"]["total"] == phase["reconnects"]["total"] == 2
    assert phase["accepted"]["total"] == 2
    assert phase["scheduled"]["peak_in_window"] == 2  # due 20 ms apart
    back = phase_summary(TIMELINE, [], range(3), 20.0, 35.0, "west", "east", 30.0, failback=True)
    assert back["time_to_detect"] == 10.0  # the restored region's alarm cleared
    assert back["recovered"] == 0


def test_the_times_a_client_was_outbid_before_its_first_write_there() -> None:
    records: list[DrillRecord] = [
        RejectedRecord(0, 9.0, OUTBID, "west"),  # before the fault
        RejectedRecord(0, 10.5, OUTBID, "east"),  # refused by another region
        RejectedRecord(0, 11.0, OUTBID, "west"),
        RejectedRecord(0, 11.2, "unavailable", "west"),  # not outbid
        RejectedRecord(0, 11.4, OUTBID, "west"),
        ack("r", "a", 3, "3-0")._replace(client=0, t=11.5, region="west"),  # first in west
        RejectedRecord(0, 12.0, OUTBID, "west"),  # after its write: not counted
        ack("r", "b", 4, "4-0")._replace(client=1, t=11.8, region="west"),  # never outbid
        RejectedRecord(2, 11.0, OUTBID, "west"),  # never wrote: not counted
        RejectedRecord(3, 11.0, OUTBID, "west"),  # not in the population
        ack("r", "c", 5, "5-0")._replace(client=3, t=12.0, region="west"),
    ]
    assert outbid_before_write(records, range(3), 10.0, "west", 30.0) == [0, 2]
    assert outbid_before_write(records, range(3), 10.0, "west", 1.0) == []  # past the window
    phase = phase_summary(TIMELINE, records, range(3), 10.0, 14.0, "east", "west", 30.0)
    outbid = phase["write"]["outbid_before_write"]
    assert (outbid["count"], outbid["p50"], outbid["max"]) == (2, 1.0, 2.0)


def test_the_holds_the_polls_saw() -> None:
    rows = [
        {"t": 1.0, "writer": "east"},  # older rows have no "held"
        {"t": 2.0, "writer": "west", "held": "move-grace"},
        {"t": 2.2, "writer": "west", "held": "move-grace"},
        {"t": 2.4, "writer": "west", "held": "recovering"},  # one rule gives way to another
        {"t": 2.6, "writer": "west", "held": None},
        {"t": 3.0, "writer": "west", "held": "damping"},  # still held at the last poll
    ]
    assert hold_spans(rows) == [
        HoldSpan(2.0, 2.4, "west", "move-grace"),
        HoldSpan(2.4, 2.6, "west", "recovering"),
        HoldSpan(3.0, None, "west", "damping"),
    ]
    assert hold_spans([]) == hold_spans(rows[:1]) == []


def test_the_timeline_series_follows_each_client() -> None:
    records: list[DrillRecord] = [
        ConnectedRecord(0, 100.1, "east"),
        ConnectedRecord(1, 100.2, "east"),
        ack("r", "a", 1, "1-0")._replace(t=100.3),
        DisconnectedRecord(0, 100.6, "east"),
        ConnectedRecord(0, 101.2, "west"),
        RestoredRecord(0, 101.3, "west"),  # not a connection change
    ]
    series = timeline_series(records, ["east", "west"], start=100.0)
    assert series["start"] == 100.0
    assert series["t"][:4] == [0.0, 0.5, 1.0, 1.5]
    assert series["connected"]["east"][:4] == [2, 1, 1, 1]
    assert series["connected"]["west"][:4] == [0, 0, 1, 1]
    assert series["acks_per_second"][:2] == [2.0, 0.0]
    assert timeline_series([], ["east"], start=5.0) == {
        "start": 5.0, "t": [], "connected": {}, "acks": [],
    }  # fmt: skip
