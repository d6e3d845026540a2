"""The partition scenarios' expectations and the report page, from constructed timelines
(pure: no lab)."""

from __future__ import annotations

from typing import Any

from rideout.drill.partition import _caught_up, histories_of, render_markdown
from rideout.drill.partition_check import BidAttempt
from rideout.drill.partition_scenarios import (
    SCENARIOS,
    events_seen,
    expectations,
    recovery,
    reported_lost,
    write_latency,
)

P, S = "us-east-1", "us-west-2"


def row(t: float, writer: str = P, *, dns: str = P, failovers: int = 0, lost: int = 0,
        evacuated: tuple[str, ...] = (), epoch: int = 1) -> dict[str, Any]:  # fmt: skip
    return {"t": t, "status": 200, "writer": writer, "dns": dns, "failovers": failovers,
            "failbacks": 0, "lost_writes": lost, "evacuated": list(evacuated), "epoch": epoch}  # fmt: skip


ONE_MASTER = {P: {"role": "master"}, S: {"role": "replica"}}


def judge(name: str, rows: list[dict[str, Any]], servers: Any = None) -> tuple[Any, list[str]]:
    return expectations(SCENARIOS[name], rows, servers or ONE_MASTER, primary=P, secondary=S,
                        fault=(10.0, 20.0))  # fmt: skip


def test_a_quiet_replication_cut_passes() -> None:
    observed, problems = judge("replication-cut", [row(t) for t in range(30)])
    assert problems == []
    assert observed["failovers"] == 0
    assert observed["writers_seen"] == [P]
    assert observed["polls_during_fault"] == 11


def test_a_writer_move_where_none_was_expected_is_a_problem() -> None:
    rows = [row(5), row(12, S, dns=S, failovers=1, epoch=2)]
    observed, problems = judge("replication-cut", rows)
    assert observed["writer_moved_after"] == 2.0
    assert problems[0].startswith(
        "the writer moved (1 failovers; writers seen us-east-1, us-west-2)"
    )
    assert f"DNS answered {P}, {S}: only {P} was expected" in problems


def test_split_brain_needs_the_move_and_one_master_after_the_heal() -> None:
    moved = [row(5), row(14, S, dns=S, failovers=1, epoch=2)]
    assert judge("split-brain", moved)[1] == []
    stayed = judge("split-brain", [row(5), row(14)])[1]
    assert stayed == [f"the writer never moved to {S}"]
    two = judge("split-brain", moved, {P: {"role": "master"}, S: {"role": "master"}})[1]
    assert two == [
        "2 Redis servers are masters after the heal (us-east-1, us-west-2): exactly one was expected"
    ]


def test_zone_store_cut_needs_that_zone_evacuated_and_no_other() -> None:
    assert judge("zone-store-cut", [row(5), row(15, evacuated=("use1-az1",))])[1] == []
    assert judge("zone-store-cut", [row(5)])[1] == [
        "use1-az1 was never evacuated (autoshift expected)"
    ]
    wrong = judge("zone-store-cut", [row(15, evacuated=("use1-az1", "use1-az2"))])[1]
    assert wrong == ["zones evacuated that should not have been: use1-az2"]


def test_no_answer_and_unread_servers_are_problems() -> None:
    assert judge("control-plane-isolated", [{"t": 1, "status": None}])[1] == [
        "no control plane answered the drill's polls"
    ]
    servers = {P: {"role": "master"}, S: {"error": "TimeoutError"}}
    assert (
        "servers not read after the heal: us-west-2"
        in judge("replication-cut", [row(1)], servers)[1]
    )


def test_reported_lost_is_the_growth_over_the_drill() -> None:
    assert reported_lost([row(1, lost=2), row(2, lost=2), row(3, lost=5)]) == 3
    assert reported_lost([{"t": 1, "status": None}]) is None


def test_histories_of_and_caught_up() -> None:
    state = '{"bid": 3, "bidder": "b1"}'
    read = {
        P: {"role": "master", "entries": [["r1", "1-0", {"state": state, "epoch": "2"}]]},
        S: {
            "role": "replica",
            "entries": [
                ["r1", "1-0", {"state": state, "epoch": "2"}],
                ["r1", "2-0", {"state": "not json"}],
            ],
        },
        "gone": {"error": "ConnectionError: refused"},
    }
    histories = histories_of(read)
    assert set(histories) == {P, S}
    assert histories[P][0].epoch == 2
    assert histories[P][0].amount == 3
    assert len(histories[S]) == 1  # the unreadable entry is left out
    assert not _caught_up(read, P)  # a server could not be read
    del read["gone"]
    assert _caught_up(read, P)
    assert not _caught_up(read, "elsewhere")


def test_the_page_leads_with_the_verdict() -> None:
    report = {
        "scenario": "split-brain", "what": "the writer region loses the control planes",
        "ok": False, "problems": ["split brain: 3 bids acknowledged in epoch 1"],
        "replication": "async",
        "fault": {"at": 5.0, "seconds": 20.0, "cuts": [[P, "global"]],
                  "direction": "both", "described": f"{P} | global"},
        "acknowledged_by": {f"{P} epoch 1": 10}, "bids_sent_during_fault": {"cuse1": {"acknowledged": 3}},
        "caught_up_in": 1.5, "control_plane": {"failovers": 1, "failbacks": 0},
        "verdict": {"attempts": 12, "acknowledged": 10, "lost": 3, "max_lost": 0,
                    "missing": [{"room": "r", "amount": 4, "bidder": "b", "epoch": 1,
                                 "region": P, "offset": "9-0"}],
                    "split_brain_windows": [{"old_epoch": 1, "new_epoch": 2, "acks": 3,
                                             "seconds": 4.0, "regions": [P]}]},
        "events": ["fail-over: moved"],
    }  # fmt: skip
    page = render_markdown(report)
    assert page.startswith("# Partition drill: split-brain\n")
    assert "**FAILED**" in page
    assert "- split brain: 3 bids acknowledged in epoch 1" in page
    assert "- window: epoch 1 acknowledged 3 bids over 4.00 s after epoch 2" in page
    assert "- r 4 by b (epoch 1, us-east-1, offset 9-0)" in page
    assert "cuse1: 3 acknowledged" in page
    assert f"({P} | global), then healed" in page


def test_the_cuts_are_said_with_their_direction() -> None:
    assert SCENARIOS["split-brain"].describe_fault() == f"{P} | global; {P} | us-west-2"
    one_way = SCENARIOS["one-way"]
    assert (one_way.direction, one_way.failover) == ("a->b", True)
    assert one_way.describe_fault() == f"{P} -> global"


def test_a_standby_control_planes_stale_view_is_left_out() -> None:
    rows = [
        row(5),
        {**row(12), "acting": False},
        {**row(12.1, S, dns=S, failovers=1), "acting": True},
    ]
    observed, problems = judge("split-brain", rows)
    assert problems == []
    assert observed["writer_at_end"] == S


def test_a_steady_row_is_the_primary_at_rest() -> None:
    from rideout.drill.partition_scenarios import steady_row

    ok = {**row(1), "alarms": {P: "OK", S: "OK"}}
    assert steady_row(ok, P)
    assert not steady_row({**ok, "alarms": {P: "OK", S: "ALARM"}}, P)
    assert not steady_row({**ok, "alarms": {}}, P)
    assert not steady_row({**ok, "dns": S}, P)
    assert not steady_row({**ok, "writer": S}, P)


def test_the_pollers_row_of_a_summary() -> None:
    from rideout.drill.partition_agent import _row

    body = {
        "lease": {"role": "active", "holder": "cp-1"},
        "dns": {"region": P},
        "alarms": {P: {"state": "OK"}, S: {"state": "ALARM"}},
        "zones": [{"zone": "use1-az1", "evacuated": True}, {"zone": "use1-az2", "evacuated": False}],
        "failover": {"writer": P, "writer_redis": P, "epoch": 3, "lost_writes": 2,
                     "replication": "async", "failovers": 1, "failbacks": 1,
                     "events": [{"kind": "demote", "message": "us-east-1 was stale"}]},
    }  # fmt: skip
    got = _row(body)
    assert got["acting"] is True
    assert (got["writer"], got["epoch"], got["lost_writes"], got["dns"]) == (P, 3, 2, P)
    assert got["alarms"] == {P: "OK", S: "ALARM"}
    assert got["evacuated"] == ["use1-az1"]
    assert got["events"] == ["demote: us-east-1 was stale"]
    assert _row({**body, "lease": {"role": "standby"}})["acting"] is False
    assert _row({})["acting"] is None


def test_at_rest_needs_a_steady_hold_and_no_recent_move() -> None:
    from rideout.drill.partition_scenarios import at_rest

    ok = {"alarms": {P: "OK", S: "OK"}}
    steady = [{**row(t / 2), **ok} for t in range(10)]  # 0 .. 4.5 s, epoch 1
    assert at_rest(steady, P)
    assert not at_rest(steady[:5], P)  # 2 s only
    assert not at_rest([], P)
    assert not at_rest([*steady, {**row(5), "alarms": {P: "ALARM", S: "OK"}}], P)
    # A move and back (epochs 2, 3): at rest only 15 s after the last epoch appeared.
    moved = [{**row(1, S, dns=S, epoch=2), **ok}] + [
        {**row(2 + t), **ok, "epoch": 3} for t in range(20)
    ]
    assert not at_rest(moved[:15], P)  # 2 .. 15 s: 13 s since epoch 3
    assert at_rest(moved, P)  # 2 .. 21 s
    # Answers before the controller knew an epoch are no move.
    assert at_rest([{**row(0), **ok, "epoch": None}, *steady], P)


def test_events_are_kept_in_the_order_first_seen() -> None:
    rows = [
        {"t": 1.0, "events": ["start: writer us-east-1", "library: loaded"]},
        {"t": 2.0, "events": ["library: loaded", "fail-over: to us-west-2"]},
        {"t": 2.1},  # an answer without events
        {"t": 3.0, "events": ["fail-over: to us-west-2", "demote: us-east-1", "fail-back: back"]},
    ]
    assert events_seen(rows) == [
        "start: writer us-east-1", "library: loaded", "fail-over: to us-west-2",
        "demote: us-east-1", "fail-back: back",
    ]  # fmt: skip


def attempt(client: str, sent: float, acked: float | None, *, region: str = P,
            accepted: bool | None = True, epoch: int = 1) -> BidAttempt:  # fmt: skip
    return BidAttempt(client, "r", client, 1, sent, acked, accepted, region=region, epoch=epoch)


def test_a_kill_is_said_by_its_parts_and_the_wan_scenario_kills_the_writer_region() -> None:
    wan = SCENARIOS["wan"]
    assert wan.cuts == ()
    assert wan.describe_fault() == "kill redis-use1, replica-use1, use1-az1, use1-az2"
    assert (wan.latency, wan.failover) == (0.035, True)


def test_write_latency_compares_the_delayed_window_with_the_baseline() -> None:
    attempts = [
        attempt("a", 1.0, 1.01),  # baseline: 10, 30 ms
        attempt("a", 2.0, 2.03),
        attempt("a", 3.0, 3.08),  # delayed: 80, 100 ms
        attempt("b", 4.0, 4.10),
        attempt("b", 4.5, None, accepted=None),  # no ack: not a latency
        attempt("b", 4.6, 4.9, accepted=False),  # refused: not a write
        attempt("b", 4.9, 7.2),  # in flight when the window ended: the kill's, not the WAN's
        attempt("b", 9.0, 9.5),  # after both windows
    ]
    found = write_latency(attempts, baseline=(0.0, 3.0), delayed=(3.0, 5.0), rtt=0.07)
    assert found["rtt"] == 0.07
    assert found["baseline"]["count"] == 2
    assert found["delayed"]["count"] == 2
    assert abs(found["baseline"]["p50"] - 0.02) < 1e-9
    assert abs(found["delayed"]["p50"] - 0.09) < 1e-9
    assert abs(found["added"]["p50"] - 0.07) < 1e-9
    empty = write_latency([], baseline=(0.0, 1.0), delayed=(1.0, 2.0), rtt=0.07)
    assert empty["added"] == {"p50": None, "p99": None}


def test_recovery_counts_each_clients_first_restore_and_write_in_the_new_region() -> None:
    attempts = [
        attempt("a", 9.0, 9.5),  # the old region, before the fault
        attempt("a", 12.0, 13.0, region=S, epoch=2),
        attempt("a", 14.0, 14.5, region=S, epoch=2),
        attempt("b", 12.0, None, accepted=None),  # b never wrote again
        attempt("b", 9.9, 11.0, region=S),  # sent before the kill, answered from the history
        attempt("c", 15.0, 16.0, region=S, accepted=False, epoch=2),  # refused: no write
    ]
    restores = [
        {"client": "a", "restored": 5.0, "region": P},  # before the fault
        {"client": "a", "restored": 12.5, "region": S},
        {"client": "a", "restored": 11.0, "region": S},
        {"client": "b", "restored": 14.0, "region": S},
        {"client": "c", "restored": 11.0, "region": P},  # back in the old region
    ]
    found = recovery(attempts, restores, fault_at=10.0, region=S)
    assert found["clients"] == 3
    assert (found["restored"]["count"], found["restored"]["max"]) == (2, 4.0)
    assert found["restored"]["p50"] == 2.5
    assert abs(found["restored"]["p99"] - 3.97) < 1e-9
    assert found["write_rto"] == {"count": 1, "p50": 3.0, "p90": 3.0, "p99": 3.0, "max": 3.0}
    none = recovery(attempts, [], fault_at=10.0, region="elsewhere")
    assert none["restored"] == {"count": 0, "p50": None, "p90": None, "p99": None, "max": None}


def test_the_page_gives_the_wan_figures_and_says_killed() -> None:
    report = {
        "scenario": "wan", "what": "35 ms each way, then a kill", "ok": True, "problems": [],
        "replication": "sync",
        "fault": {"at": 12.0, "seconds": 22.8, "cuts": [], "kill": ["redis-use1"],
                  "direction": "both", "described": "kill redis-use1"},
        "acknowledged_by": {}, "bids_sent_during_fault": {}, "caught_up_in": 2.1,
        "control_plane": {}, "verdict": {},
        "write_latency": {"rtt": 0.07, "baseline": {"count": 229, "p50": 0.0047, "p99": 0.0483},
                          "delayed": {"count": 168, "p50": 0.0774, "p99": 0.1198},
                          "added": {"p50": 0.0727, "p99": None}},
        "recovery": {"clients": 8, "restored": {"count": 8, "p50": 1.68, "p99": 3.05, "max": 3.05},
                     "write_rto": {"count": 7, "p50": 2.25, "p99": 3.05, "max": 3.05}},
    }  # fmt: skip
    page = render_markdown(report)
    assert "Killed at +12.0 s for 22.8 s (kill redis-use1), then started again" in page
    assert (
        "| write latency p50 / p99: no delay (229 bids); 35.0 ms each way (168 bids); added "
        "(RTT 70.0 ms) | 4.7 ms / 48.3 ms; 77.4 ms / 119.8 ms; 72.7 ms / - |"
    ) in page
    assert (
        "| write RTO after the kill, p50 / p99 / max (7 of 8 clients) | 2.25 s / 3.05 s / 3.05 s |"
        in page
    )
    assert "state restored after the kill" in page
