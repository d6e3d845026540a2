"""The replication topology around the writer, and when to promote in the region (pure)."""

from __future__ import annotations

import pytest

from rideout.config import Config
from rideout.failover.controller import decide
from rideout.failover.topology import (
    NodeView,
    desired_masters,
    head,
    in_region_candidate,
    nodes,
    replica_key,
)

E, W = "us-east-1", "us-west-2"
E2, W2 = replica_key(E), replica_key(W)
TOPOLOGY = nodes(Config())
UP = {E: True, E2: True, W: True, W2: True}


def test_the_default_topology_has_four_redis_servers_in_four_zones() -> None:
    assert [(n.key, n.zone, n.in_region) for n in TOPOLOGY.values()] == [
        (E, "use1-az1", False),
        (W, "usw2-az1", False),
        (E2, "use1-az2", True),
        (W2, "usw2-az2", True),
    ]
    assert TOPOLOGY[E2].endpoint == "127.0.1.101:6390"


@pytest.mark.parametrize(
    ("writer", "reachable", "wanted"),
    [
        # all up, writer in the primary: its zone-2 replica and the other region's head
        # follow it; the other region's replica follows its head (chained)
        (E, UP, {E2: E, W: E, W2: W}),
        # failed over to the secondary
        (W, UP, {W2: W, E: W, E2: E}),
        # promoted in the region: the old writer follows the new one
        (E2, UP, {E: E2, W: E2, W2: W}),
        # the other region's main Redis down: its replica follows the writer directly
        (E, {**UP, W: False}, {E2: E, W: W2, W2: E}),
        (W2, {**UP, E: False}, {W: W2, E: E2, E2: W2}),
    ],
)
def test_who_follows_whom(writer: str, reachable: dict[str, bool], wanted: dict[str, str]) -> None:
    assert desired_masters(writer, TOPOLOGY, reachable) == wanted


def test_a_region_head_is_its_main_redis_unless_only_its_replica_answers() -> None:
    assert head(W, TOPOLOGY, UP) == W
    assert head(W, TOPOLOGY, {**UP, W: False}) == W2
    assert head(W, TOPOLOGY, {**UP, W: False, W2: False}) == W


def view(reachable: bool = True, role: str = "replica", offset: int | None = 100) -> NodeView:
    return NodeView(reachable, role, offset)


@pytest.mark.parametrize(
    ("views", "candidate"),
    [
        # the writer's Redis lost, its in-region replica as far as the other region's
        ({E: view(False), E2: view(offset=100), W: view(offset=100)}, E2),
        # ahead of it (it also had what the other region had not acknowledged yet)
        ({E: view(False), E2: view(offset=120), W: view(offset=100)}, E2),
        # behind the other region: it may lack acknowledged writes; fail over instead
        ({E: view(False), E2: view(offset=90), W: view(offset=100)}, None),
        # the writer answers: no promotion behind its back (a coordinated move only)
        ({E: view(True, "master"), E2: view(), W: view()}, None),
        # the in-region replica is down too (a region outage)
        ({E: view(False), E2: view(False), W: view()}, None),
        # it is a master already (someone promoted it): not a candidate
        ({E: view(False), E2: view(role="master"), W: view()}, None),
        # the other region unreachable: compared with what answers
        ({E: view(False), E2: view(offset=100), W: view(False)}, E2),
        # its offset is unknown
        ({E: view(False), E2: view(offset=None), W: view()}, None),
    ],
)
def test_in_region_candidate(views: dict[str, NodeView], candidate: str | None) -> None:
    assert in_region_candidate(E, TOPOLOGY, views) == candidate


def test_a_region_without_a_replica_has_no_candidate() -> None:
    topology = {k: n for k, n in TOPOLOGY.items() if not n.in_region}
    assert in_region_candidate(E, topology, {E: view(False), W: view()}) is None


@pytest.mark.parametrize(
    ("healthy", "in_region", "grace", "move", "target"),
    [
        # the writer's Redis lost, a candidate in the region: promote there, no DNS move
        ({E: False, W: True}, True, False, "promote-in-region", E),
        # no candidate: the whole region fails over
        ({E: False, W: True}, False, False, "fail-over", W),
        # just promoted in the region: its alarm clears on the new writer; stay
        ({E: False, W: True}, False, True, "none", None),
        # healthy again: nothing to do, grace or not
        ({E: True, W: True}, False, True, "none", None),
    ],
)
def test_the_decision_prefers_the_region_when_it_can(
    healthy: dict[str, bool], in_region: bool, grace: bool, move: str, target: str | None
) -> None:
    decision = decide(
        writer=E, primary=E, secondary=W, healthy=healthy, auto_failback=True,
        in_region_replica={E: in_region}, in_region_grace=grace,
    )  # fmt: skip
    assert (decision.move, decision.target) == (move, target)
