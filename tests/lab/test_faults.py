"""Partitions as cuts, and the router rules that make them (pure)."""

from __future__ import annotations

import pytest

from rideout.errors import InvalidArgument
from rideout.lab.faults import Cut, cuts_for, describe, rule_command
from rideout.lab.topology import plan_topology

TOPO = plan_topology("f1", {"r1": ["a", "b"], "r2": ["c"]})


@pytest.mark.parametrize(
    ("direction", "cuts"),
    [
        ("both", [Cut("r1", "r2"), Cut("r2", "r1")]),
        ("a->b", [Cut("r1", "r2")]),
        ("b->a", [Cut("r2", "r1")]),
    ],
)
def test_directions(direction: str, cuts: list[Cut]) -> None:
    assert cuts_for(TOPO, "r1", "r2", direction) == cuts


def test_a_cut_is_a_silent_blackhole_rule_on_prefixes() -> None:
    assert rule_command(TOPO, Cut("a", "r2"), "add") == (
        "ip", "-n", "rdo-f1-router", "rule", "add", "from", "127.100.1.1/32",
        "to", "127.100.2.0/24", "pref", "100", "blackhole",
    )  # fmt: skip
    assert rule_command(TOPO, Cut("r2", "b"), "del")[4:10] == (
        "del", "from", "127.100.2.0/24", "to", "127.100.1.2/32", "pref",
    )  # fmt: skip


@pytest.mark.parametrize(
    ("a", "b", "direction", "message"),
    [
        ("a", "a", "both", "itself"),
        ("a", "r1", "both", "overlap"),
        ("a", "nowhere", "both", "neither a host nor a region"),
        ("a", "c", "sideways", "direction must be one of"),
    ],
)
def test_bad_partitions_are_refused(a: str, b: str, direction: str, message: str) -> None:
    with pytest.raises(InvalidArgument, match=message):
        cuts_for(TOPO, a, b, direction)


def test_describe_lists_each_cut_once_sorted() -> None:
    assert describe([Cut("r2", "r1"), Cut("a", "c"), Cut("r2", "r1")]) == ["a -> c", "r2 -> r1"]
