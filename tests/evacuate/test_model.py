"""The pure planners and the ledger row merge."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rideout.errors import InvalidArgument, InvalidArgumentType
from rideout.evacuate.model import (
    SKIP_ALREADY_EVACUATED,
    SKIP_GONE,
    SKIP_NO_SUBNET_LEFT,
    Placement,
    Record,
    merge_records,
    network,
    plan_evacuation,
    plan_recovery,
    too_few_zones,
)

ZONE_OF = {"sa": "az1", "sb": "az2", "sc": "az3", "sa2": "az1"}


def test_evacuation_removes_the_zones_subnets_and_keeps_the_rest_in_order() -> None:
    placements = [
        Placement("asg", "web", ("sa", "sb", "sc")),
        Placement("ecs", "api", ("sb", "sa2", "sa")),
        Placement("lambda", "fn", ("sb", "sc")),  # not in az1: left out
    ]
    plan = plan_evacuation(placements, {"sa", "sa2"}, zone_id="az1", zone_of=ZONE_OF)
    assert [(s.kind, s.resource, s.action, s.after, s.changed) for s in plan.steps] == [
        ("asg", "web", "remove", ("sb", "sc"), ("sa",)),
        ("ecs", "api", "remove", ("sb",), ("sa2", "sa")),
    ]
    assert plan.operation == "evacuate"
    assert plan.zone_id == "az1"
    assert all(s.updates for s in plan.actions)


def test_evacuation_never_leaves_a_resource_without_a_subnet() -> None:
    plan = plan_evacuation([Placement("asg", "one", ("sa", "sa2"))], {"sa", "sa2"}, zone_id="az1")
    (step,) = plan.steps
    assert step.action == "skip"
    assert step.reason == SKIP_NO_SUBNET_LEFT
    assert step.after == step.before == ("sa", "sa2")
    assert not plan.actions


def test_min_healthy_zones_counts_the_zones_left_not_the_subnets() -> None:
    placements = [
        Placement("asg", "two", ("sa", "sb", "sb")),
        Placement("asg", "three", ("sa", "sb", "sc")),
    ]
    plan = plan_evacuation(placements, {"sa"}, zone_id="az1", zone_of=ZONE_OF, min_healthy_zones=2)
    by = {s.resource: s for s in plan.steps}
    assert by["two"].action == "skip"
    assert by["two"].reason == too_few_zones(2, 1)
    assert by["three"].action == "remove"


def test_a_resource_already_evacuated_is_reported_as_such() -> None:
    recorded = [Record("az1", "web", "asg", ("sa",), 1.0, "op")]
    plan = plan_evacuation(
        [Placement("asg", "web", ("sb",))], {"sa"}, zone_id="az1", recorded=recorded
    )
    (step,) = plan.steps
    assert (step.action, step.reason) == ("skip", SKIP_ALREADY_EVACUATED)


def test_recovery_merges_back_and_is_idempotent() -> None:
    records = [
        Record("az1", "web", "asg", ("sa",), 1.0, "op"),
        Record("az1", "api", "ecs", ("sa2", "sa"), 1.0, "op"),
        Record("az2", "gone", "lambda", ("sb",), 1.0, "op"),
    ]
    current = {
        ("asg", "web"): Placement("asg", "web", ("sb", "sc")),
        ("ecs", "api"): Placement("ecs", "api", ("sb", "sa")),  # sa is back already
    }
    plan = plan_recovery(records, current)
    steps = {s.resource: s for s in plan.steps}
    assert steps["web"].after == ("sb", "sc", "sa")
    assert steps["web"].changed == ("sa",)
    assert steps["api"].after == ("sb", "sa", "sa2")
    assert steps["api"].changed == ("sa2",)
    assert steps["gone"].action == "skip"
    assert steps["gone"].reason == SKIP_GONE
    # Once applied, recovery again changes nothing but still deletes the records.
    applied = {k: Placement(k[0], k[1], steps[k[1]].after) for k in current}
    again = plan_recovery(records[:2], applied)
    assert all(s.action == "restore" and not s.updates and s.reason for s in again.steps)


def test_recovery_of_one_zone_ignores_the_others() -> None:
    records = [
        Record("az1", "a", "asg", ("sa",), 1.0, "op"),
        Record("az2", "b", "asg", ("sb",), 1.0, "op"),
    ]
    plan = plan_recovery(records, {}, zone_id="az2")
    assert [s.resource for s in plan.steps] == ["b"]


def test_merge_unions_and_never_empties() -> None:
    first = Record("az1", "web", "asg", ("sa",), 1.0, "alice")
    second = Record("az1", "web", "asg", ("sa2", "sa"), 2.0, "bob")
    merged = merge_records(first, second)
    assert merged.removed == ("sa", "sa2")
    assert merged.operator == "bob"
    assert merged.at == 2.0
    assert merge_records(None, first) == first
    with pytest.raises(InvalidArgument):
        merge_records(first, Record("az2", "web", "asg", ("sb",), 1.0, "x"))


def test_the_first_configuration_seen_is_kept() -> None:
    """``before`` and ``seen`` are what the *first* change saw: a later run that saw the
    resource already changed does not overwrite them."""
    groups = network({"SecurityGroupIds": ["sg-2", "sg-1"]})
    first = Record("az1", "fn", "lambda", ("sa",), 1.0, "alice", ("sa", "sb"), seen=groups)
    later = Record("az1", "fn", "lambda", ("sa2",), 2.0, "bob", ("sa2", "sb"), seen=())
    merged = merge_records(first, later)
    assert (merged.before, merged.seen) == (("sa", "sb"), groups)
    # A row written before rows recorded what they saw takes the first that does.
    bare = Record("az1", "fn", "lambda", ("sa",), 1.0, "alice")
    assert merge_records(bare, later).seen == ()
    assert merge_records(bare, first).seen == groups


def test_a_network_configuration_is_normalised() -> None:
    found = network({"securityGroups": ["sg-1"], "assignPublicIp": "ENABLED", "none": []})
    assert found == (("assignPublicIp", ("ENABLED",)), ("securityGroups", ("sg-1",)))
    assert Placement("ecs", "svc", ("sa",), found).network == found
    with pytest.raises(InvalidArgumentType, match="mapping"):
        network([("securityGroups", ["sg-1"])])  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentType):
        network({"securityGroups": 7})
    with pytest.raises(InvalidArgumentType, match="pairs"):
        Record("az1", "fn", "lambda", ("sa",), 1.0, "op", seen=("sg-1",))  # type: ignore[arg-type]


def test_bad_rows_and_placements_are_refused() -> None:
    with pytest.raises(InvalidArgument, match="removed"):
        Record("az1", "web", "asg", (), 1.0, "op")
    with pytest.raises(InvalidArgumentType):
        Placement("asg", "web", "sa")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument):
        Placement("", "web", ())
    with pytest.raises(InvalidArgument):
        plan_evacuation([], (), zone_id="az1", min_healthy_zones=0)


subnet = st.sampled_from(["sa", "sb", "sc", "sa2", "sd"])
placement_lists = st.lists(
    st.builds(
        Placement,
        st.sampled_from(["asg", "ecs"]),
        st.text("xyz", min_size=1, max_size=3),
        st.lists(subnet, max_size=5).map(tuple),
    ),
    max_size=8,
    unique_by=lambda p: (p.kind, p.resource),
)


@given(placement_lists, st.integers(1, 3))
def test_evacuate_then_recover_restores_every_subnet(
    placements: list[Placement], minimum: int
) -> None:
    zone = {"sa", "sa2"}
    plan = plan_evacuation(
        placements, zone, zone_id="az1", zone_of=ZONE_OF, min_healthy_zones=minimum
    )
    after = {(p.kind, p.resource): p for p in placements}
    records = []
    for step in plan.actions:
        assert step.after
        assert not set(step.after) & zone
        assert len({ZONE_OF.get(s, s) for s in step.after}) >= minimum
        after[(step.kind, step.resource)] = Placement(step.kind, step.resource, step.after)
        records.append(Record("az1", step.resource, step.kind, step.changed, 1.0, "op"))
    recovery = plan_recovery(records, after)
    for step in recovery.steps:
        original = next(p for p in placements if (p.kind, p.resource) == (step.kind, step.resource))
        assert set(step.after) == set(original.subnets)


def test_evacuation_follows_the_kind_order_and_recovery_reverses_it() -> None:
    """Traffic is shifted before capacity is removed, and capacity is back before the
    shift ends (the whitepaper's order), whatever the kinds' names sort as."""
    from rideout.evacuate.model import Placement, Record, plan_evacuation, plan_recovery

    order = ("zshift", "asg", "ecs")
    placements = [
        Placement("ecs", "svc", ("s1", "s2")),
        Placement("asg", "grp", ("s1", "s2")),
        Placement("zshift", "lb", ("s1", "s2")),
    ]
    plan = plan_evacuation(placements, {"s1"}, zone_id="z1", kind_order=order)
    assert [s.kind for s in plan.actions] == ["zshift", "asg", "ecs"]
    records = [Record("z1", p.resource, p.kind, ("s1",), 0.0, "op") for p in placements]
    current = {(p.kind, p.resource): Placement(p.kind, p.resource, ("s2",)) for p in placements}
    back = plan_recovery(records, current, zone_id="z1", kind_order=order)
    assert [s.kind for s in back.actions] == ["ecs", "asg", "zshift"]
    unnamed = plan_evacuation(placements, {"s1"}, zone_id="z1")
    assert [s.kind for s in unnamed.actions] == ["asg", "ecs", "zshift"]  # by name
