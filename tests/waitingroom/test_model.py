"""The room's pure core: settings, counter arithmetic and the decisions, table-driven."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rideout.waitingroom.model import (
    ALARM,
    REQUEST_ID_RE,
    Counters,
    EventSettings,
    InletKind,
    InletSettings,
    abandon_slack,
    check_event_id,
    check_request_id,
    estimated_wait,
    expires_in,
    is_abandoned,
    keyed_request_id,
    max_size_increment,
    periodic_increment,
    queue_cap,
    queue_time,
    serving_rate,
    tick_of,
    waiting_count,
)


def test_settings_round_trip_through_json_data() -> None:
    event = EventSettings(
        "launch", validity=120, expiry=0, abandon_after=300, open=False, max_session=7200,
        inlet=InletSettings("max_size", max_size=50, period=5),
    )  # fmt: skip
    assert EventSettings.from_dict(event.to_dict()) == event
    assert event.inlet.kind is InletKind.MAX_SIZE
    changed = event.changed(open=True, inlet={"max_size": 60})
    assert (changed.open, changed.inlet.max_size, changed.inlet.period) == (True, 60, 5)


@pytest.mark.parametrize(
    "data",
    [
        {},
        {"event_id": ""},
        {"event_id": "has space"},
        {"event_id": "x" * 65},
        {"event_id": "ok", "validity": 0},
        {"event_id": "ok", "validity": True},
        {"event_id": "ok", "expiry": -1},
        {"event_id": "ok", "expiry": float("nan")},
        {"event_id": "ok", "open": 1},
        {"event_id": "ok", "pow_bits": 33},
        {"event_id": "ok", "max_session": -1},
        {"event_id": "ok", "max_session": "1h"},
        {"event_id": "ok", "max_session": 1e10},
        {"event_id": "ok", "auto_open_threshold": -1},
        {"event_id": "ok", "surprise": 1},
        {"event_id": "ok", "inlet": []},
        {"event_id": "ok", "inlet": {"kind": "sometimes"}},
        {"event_id": "ok", "inlet": {"kind": "max_size"}},
        {"event_id": "ok", "inlet": {"kind": "periodic", "increment_by": 0}},
        {"event_id": "ok", "inlet": {"start": 10, "end": 5}},
        {"event_id": "ok", "inlet": {"alarm": "bad name!"}},
        {"event_id": "ok", "inlet": {"period": 0}},
    ],
)
def test_bad_settings_are_refused_with_the_field_named(data: dict[str, object]) -> None:
    with pytest.raises(ValueError, match=r"\w"):
        EventSettings.from_dict(data)


def test_request_ids_are_matched_in_full() -> None:
    good = "0123abcd-0123-4567-89ab-0123456789ab"
    assert check_request_id(good) == good
    for bad in (good + "x", good + "\n", "_" * 8 + good[8:], good[:-1], " " + good, ""):
        with pytest.raises(ValueError, match="request_id"):
            check_request_id(bad)
    assert check_event_id("Sample") == "Sample"


@pytest.mark.parametrize(
    ("queue", "tokens", "expired", "abandoned", "waiting"),
    [(0, 0, 0, 0, 0), (10, 3, 2, 1, 4), (5, 5, 0, 0, 0), (3, 2, 2, 0, 0)],
)
def test_waiting_is_never_negative(
    queue: int, tokens: int, expired: int, abandoned: int, waiting: int
) -> None:
    assert waiting_count(queue, tokens, expired, abandoned) == waiting


@given(st.integers(0, 10**6), st.integers(0, 10**6), st.integers(0, 10**6), st.integers(0, 10**6))
def test_counters_add_up_when_consistent(
    tokens: int, waiting: int, expired: int, abandoned: int
) -> None:
    c = Counters(
        queue=tokens + waiting + expired + abandoned,
        tokens=tokens,
        expired=expired,
        abandoned=abandoned,
    )
    assert c.waiting == waiting
    assert c.to_dict()["waiting"] == waiting


@pytest.mark.parametrize(
    ("now", "entry", "servable", "period", "left"),
    [
        (100.0, 0.0, None, 900.0, None),  # not servable yet
        (100.0, 0.0, 50.0, 900.0, 850.0),  # servable later than entry: from then
        (100.0, 80.0, 50.0, 900.0, 880.0),  # entered after it became servable
        (1000.0, 0.0, 50.0, 900.0, -50.0),  # expired
        (1000.0, 0.0, 50.0, 0.0, None),  # expiry off
    ],
)
def test_expiry_counts_from_the_later_of_entry_and_servable(
    now: float, entry: float, servable: float | None, period: float, left: float | None
) -> None:
    assert expires_in(now, entry, servable, period) == left
    assert queue_time(entry, None) is None


@pytest.mark.parametrize(
    ("now", "seen", "hold", "abandoned"),
    [
        (100_000, 0, 0, False),  # off
        (100_000, 0, 100_000, False),
        (110_000, 0, 100_000, False),  # within the slack: a tenth of the hold
        (110_001, 0, 100_000, True),
        (50_000, 0, 100_000, False),
        (330_000, 0, 300_000, False),  # the slack is at most 30 s
        (330_001, 0, 300_000, True),
        (1_030_001, 0, 1_000_000, True),
        (2, 0, 1, False),  # a tenth of a millisecond is a whole one
        (3, 0, 1, True),
    ],
)
def test_abandonment_after_the_hold_and_its_slack(
    now: int, seen: int, hold: int, abandoned: bool
) -> None:
    assert is_abandoned(now, seen, hold) is abandoned
    assert abandon_slack(hold) <= 30_000


@pytest.mark.parametrize(
    ("max_size", "held", "queue", "serving", "admit"),
    [
        (10, 0, 100, 0, 10),
        (10, 4, 100, 0, 6),
        (10, 10, 100, 0, 0),
        (10, 15, 100, 0, 0),  # never negative (AWS's decrements the counter)
        (10, 0, 5, 2, 3),  # never past the queue
        (10, 0, 5, 9, 0),
    ],
)
def test_max_size_admits_never_negative_nor_past_the_queue(
    max_size: int, held: int, queue: int, serving: int, admit: int
) -> None:
    assert max_size_increment(max_size, held, queue, serving) == admit


@pytest.mark.parametrize(
    ("now", "alarm_state", "admit"),
    [
        (50.0, None, 0),  # before the start
        (100.0, None, 10),
        (150.0, "OK", 10),
        (150.0, "INSUFFICIENT_DATA", 10),
        (150.0, ALARM, 0),
        (200.0, None, 0),  # at the end
    ],
)
def test_periodic_admits_inside_the_window_unless_in_alarm(
    now: float, alarm_state: str | None, admit: int
) -> None:
    inlet = InletSettings("periodic", increment_by=10, start=100, end=200, alarm="site-latency")
    assert periodic_increment(inlet, now, alarm_state) == admit
    no_alarm = InletSettings("periodic", increment_by=10)
    assert periodic_increment(no_alarm, now, ALARM) == 10


@pytest.mark.parametrize(
    ("queue", "serving", "admit"),
    [(50, 220, 0), (50, 50, 0), (50, 45, 5), (50, 0, 10), (0, 0, 0)],
)
def test_inlets_never_admit_past_the_queue(queue: int, serving: int, admit: int) -> None:
    assert queue_cap(10, queue, serving) == admit


def test_ticks_number_periods() -> None:
    assert tick_of(59.9, 60) == 0
    assert tick_of(60.0, 60) == 1


def test_estimated_wait_from_the_serving_rate() -> None:
    history = [(0.0, 0), (60.0, 10), (120.0, 20)]
    rate = serving_rate(history, now=120.0, window=120.0)
    assert rate == pytest.approx(20 / 120)
    assert estimated_wait(10, rate) == pytest.approx(60.0)
    assert estimated_wait(0, 0.0) == 0.0
    assert estimated_wait(5, 0.0) is None
    assert serving_rate([], 10.0, 60.0) == 0.0
    assert serving_rate([(0.0, 5)], 100.0, 60.0) == 0.0  # nothing moved in the window
    assert serving_rate([(30.0, 5), (90.0, 15)], 120.0, 300.0) == pytest.approx(10 / 90)


def test_proof_of_work_stamps() -> None:
    from rideout.waitingroom.model import pow_digest, pow_valid, solve_pow

    stamp = solve_pow("launch", 12, 1000.0)
    assert int.from_bytes(pow_digest("launch", stamp), "big") >> (256 - 12) == 0
    assert pow_valid("launch", stamp, 12, 1000.0)
    assert not pow_valid("launch", stamp, 12, 1000.0 + 301)  # too old
    for bad in (None, 5, "", "x:y", "1000:" + "a" * 65, "1000:a-b", stamp + "\n"):
        assert not pow_valid("launch", bad, 12, 1000.0)
    assert pow_valid("launch", None, 0, 1000.0)  # no proof asked for


def test_a_keyed_request_id_is_the_same_for_the_same_record_and_secret_alone() -> None:
    rid = keyed_request_id(b"s" * 32, "launch", "rideout:idem:waitingroom:-:k1")
    assert REQUEST_ID_RE.fullmatch(rid)
    assert rid == keyed_request_id(b"s" * 32, "launch", "rideout:idem:waitingroom:-:k1")
    others = {
        keyed_request_id(b"t" * 32, "launch", "rideout:idem:waitingroom:-:k1"),  # secret
        keyed_request_id(b"s" * 32, "launch2", "rideout:idem:waitingroom:-:k1"),  # event
        keyed_request_id(b"s" * 32, "launch", "rideout:idem:waitingroom:-:k2"),  # key
    }
    assert rid not in others
    assert len(others) == 3
