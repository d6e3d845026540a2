"""The overload drill's pure parts: options, metrics deltas, what counts as a refusal,
the abusers' summary, the objectives and the Markdown report. The drill end to end runs
in tests/cluster/test_overload_e2e.py."""

from __future__ import annotations

from typing import Any

import pytest

from rideout.drill.abusers import BEHAVIOURS, behaviour_of
from rideout.drill.errors import DrillError
from rideout.drill.overload import (
    OverloadOptions,
    abuse_summary,
    bid_rtts,
    overload_objectives,
    refusals,
    render_overload_markdown,
    scrape,
    shed_deltas,
)
from rideout.drill.records import AbuseRecord, AckRecord, RejectedRecord

METRICS = """\
# HELP rideout_shed_total Work this server refused
# TYPE rideout_shed_total counter
rideout_shed_total{reason="queue_full",work="replay"} 12.0
rideout_ws_handshakes_total{outcome="accepted"} 40.0
rideout_ws_handshakes_total{outcome="too_many_connections"} 3.0
rideout_ws_messages_total{action="bid",outcome="accepted"} 100.0
rideout_ws_messages_total{action="bid",outcome="rejected"} 7.0
rideout_ws_messages_total{action="bid",outcome="throttled"} 55.0
rideout_ws_closes_total{code="1012"} 2.0
rideout_ws_closes_total{code="1013"} 1.0
rideout_slow_consumers_total 1.0
rideout_epoch 3.0
"""


def test_options_are_checked_before_anything_starts() -> None:
    assert OverloadOptions().behaviours == BEHAVIOURS
    for bad, flag in (({"clients": 0}, "--clients"), ({"abusers": 0}, "--abusers"),
                      ({"duration": 0}, "--duration"), ({"behaviours": ("spin",)}, "--behaviours"),
                      ({"behaviours": ()}, "--behaviours"), ({"profile": "slow"}, "profile")):  # fmt: skip
        with pytest.raises(DrillError, match=flag):
            OverloadOptions(**bad)


def test_behaviours_are_taken_in_turn() -> None:
    assert [behaviour_of(i) for i in range(5)] == [*BEHAVIOURS, BEHAVIOURS[0]]
    assert [behaviour_of(i, ("bid",)) for i in range(2)] == ["bid", "bid"]


def test_only_refusals_count_and_only_what_rose() -> None:
    after = scrape(METRICS)
    assert "rideout_epoch" not in after  # not a counter of refusals
    before = {k: v for k, v in after.items() if "1013" not in k and "slow" not in k}
    before['rideout_ws_messages_total{action="bid",outcome="throttled"}'] = 50.0
    deltas = shed_deltas({"az1": before}, {"az1": after, "az2": {}})
    assert deltas == {"az1": {
        'rideout_slow_consumers_total': 1.0,
        'rideout_ws_closes_total{code="1013"}': 1.0,
        'rideout_ws_messages_total{action="bid",outcome="throttled"}': 5.0,
    }}  # fmt: skip
    fresh = refusals({"az1": after, "az2": after})
    assert fresh == {
        'rideout_shed_total{reason="queue_full",work="replay"}': 24.0,
        "rideout_slow_consumers_total": 2.0,
        'rideout_ws_closes_total{code="1013"}': 2.0,
        'rideout_ws_handshakes_total{outcome="too_many_connections"}': 6.0,
        'rideout_ws_messages_total{action="bid",outcome="throttled"}': 110.0,
    }  # a bid "rejected" (too low), an accepted handshake and a 1012 close are service


def test_the_abuse_summary_counts_who_was_refused() -> None:
    records = [
        AbuseRecord(0, 1.0, "replay", "served"),
        AbuseRecord(0, 2.0, "replay", "throttled"),
        AbuseRecord(4, 2.0, "replay", "served"),  # never refused
        AbuseRecord(1, 1.0, "connect", "refused:429"),
        AbuseRecord(3, 1.0, "slow", "held"),
    ]
    summary = abuse_summary(records, abusers=6, behaviours=BEHAVIOURS)
    assert summary["replay"] == {"abusers": 2, "refused": 1,
                                 "outcomes": {"served": 2, "throttled": 1}}  # fmt: skip
    assert summary["connect"]["refused"] == 1
    assert summary["bid"] == {"abusers": 1, "refused": 0, "outcomes": {}}
    assert summary["slow"] == {"abusers": 1, "refused": 0, "outcomes": {"held": 1}}


def test_round_trips_are_the_answers_after_the_abuse_began() -> None:
    records = [
        AckRecord(1, 9.0, "r", "b", 1, "1-0", "us-east-1", 0.5),  # before: left out
        AckRecord(1, 10.0, "r", "b", 2, "2-0", "us-east-1", 0.2),
        RejectedRecord(2, 11.0, "too_low", "us-east-1", 0.3),
        AckRecord(1, 12.0, "r", "b", 3, "3-0", "us-east-1"),  # no round trip known
        AbuseRecord(1, 12.0, "bid", "served"),
    ]
    assert bid_rtts(records, since=10.0) == [0.2, 0.3]


def _pass(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "region": "us-east-1", "clients": 200, "abusers": 8, "duration": 60.0,
        "bids": {"acked": 900, "lost": 0, "duplicates": 0},
        "bid_rtt": {"count": 900, "p50": 0.01, "p99": 0.2, "max": 0.9},
        "failovers": 0, "evacuations": 0, "alarm_polls": 0, "attack_polls": 600,
        "abuse": abuse_summary([AbuseRecord(i, 1.0, behaviour_of(i), "throttled")
                                for i in range(6)], 8, BEHAVIOURS),
        "refused": {"rideout_shed_total{}": 3.0},
    }  # fmt: skip
    return base | overrides


def test_the_objectives_and_their_limits() -> None:
    options = OverloadOptions()
    # Abusers 6 and 7 (bid, slow) were never refused: the bid flooder fails the gate, the
    # slow reader is reported and not gated.
    found = {o["name"]: o for o in overload_objectives(options, _pass())}
    refused = found["abusers refused at least once (slow readers aside)"]
    assert (refused["limit"], refused["value"], refused["ok"]) == (6, 5, False)
    assert all(o["ok"] for name, o in found.items() if name != refused["name"])
    moved = {o["name"]: o["ok"] for o in overload_objectives(options, _pass(failovers=1))}
    assert moved["regional failovers"] is False
    slow = _pass(bid_rtt={"count": 0, "p50": None, "p99": None, "max": None})
    assert {o["name"]: o["ok"] for o in overload_objectives(options, slow)}[
        "ordinary bid round trip p99 (s)"
    ] is False  # no answer at all is no pass
    unbounded = overload_objectives(OverloadOptions(max_p99=None), slow)
    assert "ordinary bid round trip p99 (s)" not in {o["name"] for o in unbounded}


def test_the_report_says_every_figure() -> None:
    p = _pass()
    report = {"deployment": {"profile": "fast"}, "pass": p,
              "objectives": overload_objectives(OverloadOptions(), p)}  # fmt: skip
    text = render_overload_markdown(report)
    assert "8 abusers beside 200 bidders (us-east-1)" in text
    assert (
        "| ordinary bid round trip p50 / p99 / max | 0.01 s / 0.20 s / 0.90 s (900 bids) |" in text
    )
    assert "| replay | 2 | 2 | throttled 2 |" in text
    assert "| `rideout_shed_total{}` | 3 |" in text
    assert "| abusers refused at least once (slow readers aside) | 6 | 5 | **FAILED** |" in text


def test_the_report_says_when_the_clients_ran_nicer() -> None:
    for nice, said in ((0, False), (10, True)):
        p = _pass(client_nice=nice)
        report = {"deployment": {"profile": "fast"}, "pass": p,
                  "objectives": overload_objectives(OverloadOptions(), p)}  # fmt: skip
        assert ("the clients at nice 10." in render_overload_markdown(report)) is said


def test_a_niceness_outside_what_os_nice_takes_is_refused() -> None:
    with pytest.raises(DrillError, match="--client-nice must be between 0 and 19"):
        OverloadOptions(client_nice=20)
    assert OverloadOptions(client_nice=19).client_nice == 19
