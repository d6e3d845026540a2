"""The pure parts: the diff, the desired state, and what the alarm's M-of-N does."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rideout.aws.desired import alarm_region, desired_state
from rideout.aws.plan import APPLY_ORDER, Plan, Resource, diff
from rideout.config import Config, parse_config
from rideout.health.alarm import AlarmConfig, canary_alarm, evaluate
from tests.conftest import config_data, examples

# A loaded machine (two cores, many test runs) makes generation slow, not wrong.
PROPERTY = settings(
    max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


def _resources(rows: list[tuple[Any, str, str, int, bool]]) -> list[Resource]:
    found: dict[tuple[str, str, str], Resource] = {}
    for kind, name, region, ttl, owned in rows:
        r = Resource(kind, name, region, {"TTL": ttl, "Type": "A"}, owned=owned)
        found.setdefault(r.key, r)
    return list(found.values())


resources = st.lists(
    st.tuples(
        st.sampled_from(APPLY_ORDER),
        st.sampled_from(["a", "b"]),
        st.sampled_from(["us-east-1", "global"]),
        st.integers(0, 2),
        st.booleans(),
    ),
    max_size=8,
).map(_resources)


@PROPERTY
@given(resources)
def test_a_state_against_itself_is_no_change(state: list[Resource]) -> None:
    assert diff(state, state).empty


@PROPERTY
@given(resources)
def test_from_nothing_everything_is_created_in_apply_order(state: list[Resource]) -> None:
    plan = diff(state, [])
    assert plan.counts() == {"create": len(state), "update": 0, "delete": 0}
    order = [APPLY_ORDER.index(c.kind) for c in plan.changes]
    assert order == sorted(order)


@PROPERTY
@given(resources)
def test_destroy_deletes_only_what_rideout_owns_records_first(state: list[Resource]) -> None:
    plan = diff([], state)
    assert {(c.kind, c.name, c.region) for c in plan.changes} == {r.key for r in state if r.owned}
    order = [APPLY_ORDER.index(c.kind) for c in plan.changes]
    assert order == sorted(order, reverse=True)


@PROPERTY
@given(resources, resources)
def test_plan_then_apply_reaches_the_desired_state(
    desired: list[Resource], actual: list[Resource]
) -> None:
    """Simulate apply on the data: the result diffs empty against the desired state,
    and nothing rideout does not own was deleted."""
    plan = diff(desired, actual)
    state = {r.key: r for r in actual}
    for change in plan.changes:
        key = (change.kind, change.name, change.region)
        if change.action == "delete":
            assert state[key].owned
            del state[key]
        else:
            assert change.desired is not None
            state[key] = change.desired
    after = list(state.values())
    assert diff(desired, [r for r in after if r.key in {d.key for d in desired}]).empty
    for r in actual:
        if not r.owned:
            assert r.key in state


def test_update_lists_each_changed_field_old_and_new() -> None:
    old = Resource("route53-records", "x", "global", {"TTL": 60, "Type": "A"})
    new = Resource("route53-records", "x", "global", {"TTL": 120, "Type": "A"})
    plan = diff([new], [old])
    assert [(f.field, f.old, f.new) for f in plan.changes[0].fields] == [("TTL", 60, 120)]
    assert plan.to_dict()["summary"] == {"create": 0, "update": 1, "delete": 0}
    assert Plan(()).empty


@functools.cache
def seed_config() -> Config:
    """The seed profile with Route 53 managed (nothing is written: no data dir used)."""
    return parse_config(
        config_data(
            Path("/nonexistent/rideout"),
            profile="seed",
            aws={
                "hosted_zone_id": "Z1",
                "regions": {
                    "us-east-1": {"addresses": ["203.0.113.1"]},
                    "us-west-2": {"addresses": ["203.0.113.2"]},
                },
            },
        )
    )


def test_the_alarms_live_in_the_standby_region() -> None:
    config = seed_config()
    assert alarm_region(config) == "us-west-2"
    alarms = [r for r in desired_state(config) if r.kind == "cloudwatch-alarm"]
    assert {r.region for r in alarms} == {"us-west-2"}
    assert {r.spec["Dimensions"] for r in alarms} == {"ApiId=us-east-1", "ApiId=us-west-2"}
    checks = [r for r in desired_state(config) if r.kind == "route53-health-check"]
    assert {r.spec["InsufficientDataHealthStatus"] for r in checks} == {"Unhealthy"}
    assert {r.spec["AlarmRegion"] for r in checks} == {"us-west-2"}


def _cloudwatch_alarm(spec: dict[str, Any]) -> AlarmConfig:
    return AlarmConfig(
        name="x", namespace="App", metric_name="WebSocketHealth", period=60.0,
        evaluation_periods=spec["EvaluationPeriods"], datapoints_to_alarm=spec["DatapointsToAlarm"],
        threshold=spec["Threshold"], comparison="LessThanThreshold", statistic="Minimum",
        treat_missing_data="breaching",
    )  # fmt: skip


def _states(alarm: AlarmConfig, points: list[float | None]) -> list[str]:
    state = "INSUFFICIENT_DATA"
    states = []
    for i in range(len(points)):
        state = evaluate(alarm, points[: i + 1], state).state  # type: ignore[arg-type]
        states.append(state)
    return states


@PROPERTY
@given(
    bad=st.integers(2, 12),
    good=st.integers(0, 12),
    missing=st.booleans(),
)
def test_the_aws_alarm_fails_over_after_two_and_back_after_six_like_the_local_one(
    bad: int, good: int, missing: bool
) -> None:
    """CloudWatch does not run here (moto never evaluates an alarm), so rideout's own
    CloudWatch semantics (health.alarm.evaluate, tested on the reference's tables) run
    the alarm apply creates. An outage of `bad` bad datapoints raises it at the second;
    silence (a region that died with its canary) later, since CloudWatch fills missing
    datapoints only once fewer than N real ones are left in the evaluation range; and
    it clears at the sixth good datapoint. In every case exactly when the local alarm
    (2 in a row, a separate failback threshold of 6) changes state."""
    spec = next(r.spec for r in desired_state(seed_config()) if r.kind == "cloudwatch-alarm")
    aws = _cloudwatch_alarm(dict(spec))
    local = canary_alarm("us-east-1", 60.0)
    outage: float | None = None if missing else 0.0
    points: list[float | None] = [1.0] * 8 + [outage] * bad + [1.0] * good
    aws_states, local_states = _states(aws, points), _states(local, points)
    assert aws_states[8:] == local_states[8:]
    assert aws_states[8] == "OK"  # never on the first bad datapoint
    if not missing:
        assert aws_states[8 + 1] == "ALARM"  # the second
    if "ALARM" in aws_states[8:]:
        assert aws_states[-1] == ("OK" if good >= 6 else "ALARM")


def test_a_flapping_region_counts_as_down_on_aws() -> None:
    """Where the two differ: two isolated bad datapoints within seven periods raise the
    AWS alarm (2 of 7), not the local one (2 in a row). A region that fails every few
    minutes is not one to send clients to; this is stated in docs/aws.md."""
    spec = next(r.spec for r in desired_state(seed_config()) if r.kind == "cloudwatch-alarm")
    points: list[float | None] = [1.0] * 8 + [0.0, 1.0, 1.0, 0.0]
    assert _states(_cloudwatch_alarm(dict(spec)), points)[-1] == "ALARM"
    assert _states(canary_alarm("us-east-1", 60.0), points)[-1] == "OK"


def test_alias_records_carry_no_ttl(make_config: Callable[..., Config]) -> None:
    config = make_config(
        aws={
            "hosted_zone_id": "Z1",
            "record_type": "alias",
            "regions": {
                r: {
                    "alias_dns_name": f"d-1.execute-api.{r}.amazonaws.com",
                    "alias_hosted_zone_id": "Z2",
                }
                for r in ("us-east-1", "us-west-2")
            },
        }
    )
    records = next(r for r in desired_state(config) if r.kind == "route53-records")
    assert "TTL" not in records.spec
    assert records.spec["PRIMARY.AliasDNSName"] == "d-1.execute-api.us-east-1.amazonaws.com."
