"""The CloudWatch alarm state machine: the reference's tables, M of N, recovery, state."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, get_args

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rideout.health.alarm import (
    ALARM_STATES,
    INITIAL_REASON,
    Alarm,
    AlarmConfig,
    AlarmState,
    Comparison,
    TreatMissingData,
    canary_alarm,
    evaluate,
)
from rideout.health.metrics import MetricKey, MetricStore
from tests.conftest import examples

KEEP = "keep state"


def config(
    n: int = 3,
    m: int | None = None,
    treat: TreatMissingData = "missing",
    *,
    ok: int | None = None,
    comparison: Comparison = "GreaterThanThreshold",
    threshold: float = 0.5,
    period: float = 60.0,
) -> AlarmConfig:
    return AlarmConfig(
        name="test",
        namespace="App",
        metric_name="Errors",
        period=period,
        evaluation_periods=n,
        datapoints_to_alarm=m,
        threshold=threshold,
        comparison=comparison,
        treat_missing_data=treat,
        ok_datapoints=ok,
    )


def points(text: str) -> list[float | None]:
    """``0`` OK (0.0), ``X`` breaching (1.0), ``-`` missing; oldest first."""
    table = {"0": 0.0, "X": 1.0, "-": None}
    return [table[c] for c in text.split()]


# ------------------------------------------------------------------ reference tables

TREATS: tuple[TreatMissingData, ...] = ("missing", "ignore", "breaching", "notBreaching")

# (M, N, points, MISSING, IGNORE, BREACHING, NOT BREACHING), exactly as the reference.
TABLE: list[tuple[int, int, str, str, str, str, str]] = [
    (3, 3, "0 - X - X", "OK", "OK", "OK", "OK"),
    (3, 3, "0 - - - -", "OK", "OK", "OK", "OK"),
    (3, 3, "- - - - -", "INSUFFICIENT_DATA", KEEP, "ALARM", "OK"),
    (3, 3, "0 X X - X", "ALARM", "ALARM", "ALARM", "ALARM"),
    (3, 3, "- - X - -", "ALARM", KEEP, "ALARM", "OK"),
    (2, 3, "0 - X - X", "ALARM", "ALARM", "ALARM", "ALARM"),
    (2, 3, "0 0 X 0 X", "ALARM", "ALARM", "ALARM", "ALARM"),
    (2, 3, "0 - X - -", "OK", "OK", "ALARM", "OK"),
    (2, 3, "- - - - 0", "OK", "OK", "ALARM", "OK"),
    (2, 3, "- - - X -", "ALARM", KEEP, "ALARM", "OK"),
]

VECTORS = [
    pytest.param(m, n, row, treat, expected, id=f"M{m}N{n}[{row}]-{treat}")
    for m, n, row, *columns in TABLE
    for treat, expected in zip(TREATS, columns, strict=True)
]


@pytest.mark.parametrize(("m", "n", "row", "treat", "expected"), VECTORS)
@pytest.mark.parametrize("current", ALARM_STATES)
def test_reference_table(
    m: int, n: int, row: str, treat: TreatMissingData, expected: str, current: AlarmState
) -> None:
    result = evaluate(config(n, m, treat), points(row), current)
    assert result.state == (current if expected == KEEP else expected), result.reason
    assert result.reason


def test_evaluation_range_is_n_plus_two() -> None:
    assert config(3).evaluation_range == 5
    assert config(2, ok=6).lookback == 6
    assert config(5, ok=3).lookback == 7


# ------------------------------------------------------------------ M of N


@pytest.mark.parametrize(
    ("row", "expected"),
    [
        ("0 0 0 0 0 0", "OK"),
        ("0 X 0 0 0 X", "OK"),  # only one in the last 4
        ("0 0 X 0 X 0", "ALARM"),  # two of the last 4, not consecutive
        ("X X 0 0 0 0", "OK"),  # old breaches out of the window
        ("0 0 0 0 X X", "ALARM"),
    ],
)
def test_m_of_n(row: str, expected: str) -> None:
    assert evaluate(config(4, 2), points(row), "OK").state == expected


def test_most_recent_real_points_when_enough() -> None:
    # 3 real points among 5 periods, N = 3: those 3, TreatMissingData unused.
    for treat in TREATS:
        assert evaluate(config(3, 3, treat), points("X - X - X"), "OK").state == "ALARM"
        assert evaluate(config(3, 3, treat), points("X - 0 - X"), "ALARM").state == "OK"


@pytest.mark.parametrize(
    ("comparison", "value", "breaches"),
    [
        ("GreaterThanThreshold", 1.0, False),
        ("GreaterThanThreshold", 1.5, True),
        ("GreaterThanOrEqualToThreshold", 1.0, True),
        ("GreaterThanOrEqualToThreshold", 0.5, False),
        ("LessThanThreshold", 1.0, False),
        ("LessThanThreshold", 0.0, True),
        ("LessThanOrEqualToThreshold", 1.0, True),
        ("LessThanOrEqualToThreshold", 1.5, False),
    ],
)
def test_comparisons(comparison: Comparison, value: float, breaches: bool) -> None:
    c = config(1, comparison=comparison, threshold=1.0)
    assert c.breaches(value) is breaches
    assert evaluate(c, [value], "OK").state == ("ALARM" if breaches else "OK")


def test_premature_alarm_needs_m_periods_of_age() -> None:
    c = config(3, 2, "missing")
    assert evaluate(c, points("- - - - X"), "OK").state == "OK"  # 1 period old
    assert evaluate(c, points("- - - X -"), "OK").state == "ALARM"  # 2 periods old
    assert evaluate(c, points("- - X - -"), "OK").state == "ALARM"
    # an older good datapoint stops it (the reference's "0 - X - -")
    assert evaluate(c, points("0 X - - -"), "OK").state == "OK"


def test_ignore_needs_evidence_either_way() -> None:
    c = config(3, 2, "ignore")
    for current in ALARM_STATES:
        assert evaluate(c, points("- - - - X"), current).state == current
        assert evaluate(c, points("- - - - -"), current).state == current
        assert evaluate(c, points("- - - X X"), current).state == "ALARM"
        assert evaluate(c, points("- - - - 0"), current).state == "OK"


def test_short_sequences_count_as_missing_at_the_old_end() -> None:
    c = config(3, 3, "breaching")
    assert evaluate(c, points("0"), "OK").state == "OK"
    assert evaluate(c, [], "OK").state == "ALARM"
    assert evaluate(config(3, 3, "missing"), [], "OK").state == "INSUFFICIENT_DATA"
    # a longer sequence is cut to the lookback
    assert evaluate(c, points("X X X X X X X 0 0 0"), "ALARM").state == "OK"


def test_bad_input() -> None:
    with pytest.raises(ValueError, match="finite"):
        evaluate(config(), [float("nan")], "OK")
    with pytest.raises(ValueError, match="current_state"):
        evaluate(config(), [], "BROKEN")  # type: ignore[arg-type]


# ------------------------------------------------------------------ asymmetric recovery


def seed(period: float = 60.0) -> AlarmConfig:
    return canary_alarm("us-east-1", period, failover_datapoints=2, failback_datapoints=6)


def run(
    alarm: Alarm, values: Sequence[float | None], history: list[float | None] | None = None
) -> list[AlarmState]:
    """Feed one datapoint per period (1 healthy, 0 unhealthy); the state after each.

    `history` (the datapoints so far, extended here) lets a run continue an earlier one.
    """
    if history is None:
        history = []
    states: list[AlarmState] = []
    for value in values:
        history.append(value)
        alarm.update(float(len(history)), history[-alarm.config.lookback :])
        states.append(alarm.state)
    return states


def test_seed_alarm_config() -> None:
    c = seed()
    assert (c.namespace, c.metric_name, c.dimensions) == (
        "App",
        "WebSocketHealth",
        (("ApiId", "us-east-1"),),
    )
    assert (c.statistic, c.comparison, c.threshold) == ("Minimum", "LessThanThreshold", 1.0)
    assert (c.evaluation_periods, c.alarm_datapoints, c.ok_datapoints) == (2, 2, 6)
    assert c.treat_missing_data == "breaching"


def test_two_bad_alarm_six_good_clear() -> None:
    alarm = Alarm(seed())
    states = run(alarm, [1, 1, 0, 1, 0, 0, 1, 1, 1, 1, 1, 1, 1])
    assert states[:4] == ["OK", "OK", "OK", "OK"]  # one bad datapoint is not enough
    assert states[5] == "ALARM"  # the second consecutive bad one
    assert states[6:11] == ["ALARM"] * 5  # five good ones are not enough
    assert states[11] == "OK"  # the sixth is
    assert alarm.last_change is not None
    assert (alarm.last_change.old, alarm.last_change.new) == ("ALARM", "OK")


def test_flapping_never_clears() -> None:
    alarm = Alarm(seed())
    states = run(alarm, [0, 0] + [1, 0] * 20)
    assert states[1:] == ["ALARM"] * (len(states) - 1)
    assert alarm.last_evaluation is not None
    assert alarm.last_evaluation.reason.startswith("Recovering")


def recovering(alarm: Alarm, values: Sequence[float | None]) -> list[bool]:
    """Feed datapoints as :func:`run` does; :attr:`Alarm.recovering` after each."""
    history: list[float | None] = []
    seen = []
    for value in values:
        run(alarm, [value], history)
        seen.append(alarm.recovering)
    return seen


def test_recovering_while_held_by_the_recovery_threshold_and_the_newest_is_good() -> None:
    alarm = Alarm(seed())
    flags = recovering(alarm, [1, 1, 0, 0, 1, 1, 0, 1, 1, 1, 1, 1, 1])
    # OK, OK, ALARM (bad, bad), held (good, good), bad again: failing, held (5 good),
    # then the sixth good one: OK, no longer recovering.
    assert flags == [False, False, False, False, True, True, False] + [True] * 5 + [False]
    assert alarm.state == "OK"


def test_a_flapping_or_silent_region_is_not_recovering() -> None:
    flapping = recovering(Alarm(seed()), [0, 0] + [1, 0] * 5)
    assert flapping == [False, False] + [True, False] * 5  # each bad one ends it
    silent = Alarm(seed())  # missing data breaches: a gap is no sign of recovery
    assert recovering(silent, [0, 0, 1, None, None]) == [False, False, True, False, False]
    plain = Alarm(config(2, 2, "breaching"))  # no recovery threshold: never held
    assert recovering(plain, [0, 0, 1, 1]) == [False] * 4


def test_gap_is_no_evidence_of_health() -> None:
    states = run(Alarm(seed()), [0, 0, 0, 0, 1, 1, 1, None, 1, 1, 1, 1, 1, 1])
    assert states[1:13] == ["ALARM"] * 12  # the gap restarts the count of good ones
    assert states[13] == "OK"


def test_not_breaching_gaps_count_as_good() -> None:
    alarm = Alarm(config(2, 2, "notBreaching", ok=4))
    assert run(alarm, [1, 1, 0, None, None, 0]) == ["OK", "ALARM", "ALARM", "ALARM", "ALARM", "OK"]


def test_without_ok_datapoints_cloudwatch_rule_alone() -> None:
    alarm = Alarm(config(2, 2, "breaching"))
    assert run(alarm, [0, 0, 1, 1, 0]) == ["OK", "OK", "OK", "ALARM", "OK"]


def test_alarm_to_insufficient_data_is_not_held() -> None:
    states = run(Alarm(config(2, 2, "missing", ok=6)), [1, 1, None, None, None, None])
    assert states == ["OK", "ALARM", "ALARM", "ALARM", "ALARM", "INSUFFICIENT_DATA"]


# ------------------------------------------------------------------ the stateful alarm


def test_new_alarm_is_insufficient_data() -> None:
    alarm = Alarm(config(3, 3, "missing"))
    assert alarm.state == "INSUFFICIENT_DATA"
    assert alarm.state_reason == INITIAL_REASON
    assert alarm.last_change is None
    assert alarm.update(10.0, points("- - - - -")) is None
    assert alarm.state_reason == INITIAL_REASON
    change = alarm.update(11.0, points("0 0 0 0 0"))
    assert change is not None
    assert (change.timestamp, change.old, change.new) == (11.0, "INSUFFICIENT_DATA", "OK")
    assert alarm.update(12.0, points("- - - - -")) is not None
    assert alarm.state == "INSUFFICIENT_DATA"


def test_ignore_keeps_state() -> None:
    alarm = Alarm(config(3, 3, "ignore"))
    alarm.update(1.0, points("X X X X X"))
    assert alarm.state == "ALARM"
    assert alarm.update(2.0, points("- - - - -")) is None
    assert alarm.state == "ALARM"


def test_history_is_bounded() -> None:
    alarm = Alarm(config(1, 1, "notBreaching"), history_limit=3)
    for i in range(10):
        alarm.update(float(i), [float(i % 2)])
    assert len(alarm.history) == 3
    assert [c.timestamp for c in alarm.history] == [7.0, 8.0, 9.0]


def test_evaluates_complete_periods_from_a_store() -> None:
    c = seed(period=10.0)
    store = MetricStore(retention=3600)
    alarm = Alarm(c)

    def push(t: float, zone: str, value: float) -> None:
        key = MetricKey.of("App", "WebSocketHealth", {"ApiId": "us-east-1", "Zone": zone})
        store.put(key, value, t)

    for t in range(0, 100, 10):  # healthy for 10 periods, both zones
        push(t + 1, "use1-az1", 1.0)
        push(t + 2, "use1-az2", 1.0)
    alarm.evaluate(100.0, store)
    assert alarm.state == "OK"
    assert alarm.window(100.0) == (40.0, 100.0)
    assert alarm.window(109.9) == (40.0, 100.0)
    # az2 fails in two periods: Minimum across zones makes the region's datapoints 0
    push(101, "use1-az1", 1.0)
    push(102, "use1-az2", 0.0)
    push(111, "use1-az1", 1.0)
    push(112, "use1-az2", 0.0)
    assert alarm.evaluate(119.0, store) is None  # the second bad period is not over yet
    change = alarm.evaluate(120.0, store)
    assert change is not None
    assert change.new == "ALARM"
    assert alarm.datapoints(120.0, store) == [1.0, 1.0, 1.0, 1.0, 0.0, 0.0]
    # leaving the failing zone out (evacuated) the region looks healthy
    assert alarm.datapoints(120.0, store, exclude={"Zone": {"use1-az2"}})[-2:] == [1.0, 1.0]
    # another region's or metric's series do not count
    store.put(MetricKey.of("App", "WebSocketHealth", {"ApiId": "us-west-2"}), 0.0, 121)
    store.put(MetricKey.of("App", "Other", {"ApiId": "us-east-1"}), 0.0, 121)
    assert alarm.datapoints(130.0, store)[-1] is None


def test_silence_alarms_after_the_evaluation_range() -> None:
    """The canary dies with the region: CloudWatch keeps using the last real datapoints
    while the range holds N of them, so silence alarms after N + 2 periods."""
    alarm = Alarm(seed(period=1.0))
    pts = [(t + 0.5, 1.0) for t in range(10)]
    alarm.evaluate(10.0, pts)
    assert alarm.state == "OK"
    states = []
    for now in range(11, 16):
        alarm.evaluate(float(now), pts)
        states.append(alarm.state)
    assert states == ["OK", "OK", "OK", "ALARM", "ALARM"]


def test_evaluate_from_raw_points() -> None:
    alarm = Alarm(config(2, 2, "breaching", period=1.0))
    pts = [(0.1, 1.0), (0.9, 0.0), (1.5, 1.0), (5.0, 1.0)]
    assert alarm.datapoints(3.0, pts)[-3:] == [0.5, 1.0, None]  # Average, 5.0 not yet


# ------------------------------------------------------------------ persistence


def test_round_trip_through_json() -> None:
    alarm = Alarm(seed())
    history: list[float | None] = []
    run(alarm, [1, 0, 0, 1], history)
    saved = json.loads(json.dumps(alarm.to_dict()))
    restored = Alarm.from_dict(saved)
    assert restored.config == alarm.config
    assert (restored.state, restored.state_reason) == (alarm.state, alarm.state_reason)
    assert restored.state == "ALARM"
    assert restored.history == alarm.history
    assert restored.last_evaluated_at == alarm.last_evaluated_at
    # the restored alarm goes on where it was: still recovering, not failed back
    assert run(restored, [1, 1, 1, 1, 1], history) == ["ALARM"] * 4 + ["OK"]


def test_restore_onto_a_new_config() -> None:
    alarm = Alarm(seed())
    run(alarm, [0, 0])
    new = canary_alarm("us-east-1", 60.0, failback_datapoints=3)
    restored = Alarm.from_dict(alarm.to_dict(), config=new)
    assert restored.config is new
    assert restored.state == "ALARM"


@pytest.mark.parametrize(
    "broken",
    [
        {},
        {"version": 2},
        {"version": 1, "state": "OK"},
        {"version": 1, "config": {}, "state": "OK", "reason": ""},
        {"version": 1, "config": seed().to_dict(), "state": "BAD", "reason": ""},
        {"version": 1, "config": seed().to_dict(), "state": "OK", "reason": "", "history": [{}]},
        {"version": 1, "config": {**seed().to_dict(), "extra": 1}, "state": "OK", "reason": ""},
    ],
)
def test_restore_refuses_broken_data(broken: dict[str, Any]) -> None:
    with pytest.raises(ValueError):  # noqa: PT011 - each case has its own message
        Alarm.from_dict(broken)


def test_config_round_trip_and_validation() -> None:
    c = config(4, 2, "ignore", ok=7)
    assert AlarmConfig.from_dict(json.loads(json.dumps(c.to_dict()))) == c
    with pytest.raises(ValueError, match="datapoints_to_alarm"):
        config(3, 4)
    with pytest.raises(ValueError, match="comparison"):
        config(comparison="Bigger")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="treat_missing_data"):
        config(treat="maybe")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="period"):
        config(period=0)
    with pytest.raises(ValueError, match="ok_datapoints"):
        config(ok=0)
    with pytest.raises(ValueError, match="threshold"):
        config(threshold=float("inf"))
    with pytest.raises(ValueError, match="evaluation_periods"):
        config(0)
    dims = AlarmConfig(
        "a",
        "App",
        "M",
        1.0,
        1,
        0.0,
        "LessThanThreshold",
        dimensions=(("Zone", "z"), ("ApiId", "r")),
    )
    assert dims.dimensions == (("ApiId", "r"), ("Zone", "z"))
    assert dims.metric_key(Extra="x") == MetricKey.of(
        "App", "M", {"ApiId": "r", "Zone": "z", "Extra": "x"}
    )


# ------------------------------------------------------------------ properties

values = st.one_of(
    st.none(), st.floats(allow_nan=False, allow_infinity=False), st.sampled_from([0.0, 1.0])
)
treats = st.sampled_from(get_args(TreatMissingData))
comparisons = st.sampled_from(get_args(Comparison))


@st.composite
def configs(draw: st.DrawFn, treat: TreatMissingData | None = None) -> AlarmConfig:
    n = draw(st.integers(1, 6))
    return config(
        n,
        draw(st.integers(1, n)),
        treat if treat is not None else draw(treats),
        ok=draw(st.one_of(st.none(), st.integers(1, 9))),
        comparison=draw(comparisons),
        threshold=draw(st.sampled_from([0.5, 1.0, -3.0])),
    )


@settings(max_examples=examples(300), deadline=None)
@given(configs(), st.lists(values, max_size=14), st.sampled_from(ALARM_STATES))
def test_evaluate_never_raises(
    c: AlarmConfig, pts: list[float | None], current: AlarmState
) -> None:
    result = evaluate(c, pts, current)
    assert result.state in ALARM_STATES
    assert isinstance(result.reason, str)
    assert result.reason


@settings(max_examples=examples(100), deadline=None)
@given(configs("breaching"), st.integers(0, 12), st.sampled_from(ALARM_STATES))
def test_breaching_all_missing_is_alarm(c: AlarmConfig, size: int, current: AlarmState) -> None:
    assert evaluate(c, [None] * size, current).state == "ALARM"


@settings(max_examples=examples(300), deadline=None)
@given(configs(), st.lists(values, max_size=10), st.sampled_from(ALARM_STATES))
def test_missing_never_alarms_where_breaching_would_not(
    c: AlarmConfig, pts: list[float | None], current: AlarmState
) -> None:
    def state(treat: TreatMissingData) -> str:
        variant = AlarmConfig.from_dict(
            {**c.to_dict(), "treat_missing_data": treat, "ok_datapoints": None}
        )
        return evaluate(variant, pts, current).state

    if state("notBreaching") == "ALARM":
        assert state("missing") == "ALARM"
    if state("missing") == "ALARM":
        assert state("breaching") == "ALARM"


@settings(max_examples=examples(200), deadline=None)
@given(configs(), st.lists(values, max_size=10))
def test_recovery_threshold_only_delays_leaving_alarm(
    c: AlarmConfig, pts: list[float | None]
) -> None:
    plain = AlarmConfig.from_dict({**c.to_dict(), "ok_datapoints": None})
    for current in ALARM_STATES:
        gated, free = evaluate(c, pts, current), evaluate(plain, pts, current)
        assert gated.state == free.state or (
            current == "ALARM" and gated.state == "ALARM" and free.state == "OK"
        )
        assert not free.recovering  # only the recovery threshold holds a region so
        newest = ([None] * c.lookback + pts)[-1]
        good = newest is not None and not c.breaches(newest)
        if c.treat_missing_data == "notBreaching" and newest is None:
            good = True
        # Recovering: held by the threshold alone, and the newest datapoint good.
        assert gated.recovering == (gated.state != free.state and good)
