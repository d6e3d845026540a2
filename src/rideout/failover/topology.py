"""Which Redis follows which: the replication topology around the writer (pure).

Each region has a main Redis (its first zone) and, optionally, an in-region replica (its
second zone). Around the writer:

- the other Redis of the writer's region follows the writer (a replica in another zone:
  a zone outage, or sync mode after a region failover, relies on it);
- the other region's *head* (its main Redis, or its replica when the main one is down)
  follows the writer: the cross-region replica a region failover promotes;
- the other region's other Redis follows its head (chained: replication across regions
  once, not twice).

When the writer's Redis is lost but its region's other Redis is up and holds at least
what every reachable replica holds, that one is promoted in the region
(:func:`in_region_candidate`): no DNS change, the same epoch fence. In sync mode every
acknowledged write is on every replica that was online when it was acknowledged and on
one in the required failure domain (:mod:`rideout.store.sync`), so a candidate whose
offset is at or past every other reachable replica's holds every acknowledged write.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from rideout.config import Config

__all__ = [
    "Node",
    "NodeView",
    "desired_masters",
    "head",
    "in_region_candidate",
    "nodes",
    "replica_key",
]


@dataclass(frozen=True, slots=True)
class Node:
    """One Redis of the topology; `key` is the region's name for its main Redis."""

    key: str
    region: str
    zone: str
    address: str
    port: int
    in_region: bool  # the region's in-region replica (its second zone)

    @property
    def endpoint(self) -> str:
        return f"{self.address}:{self.port}"


@dataclass(frozen=True, slots=True)
class NodeView:
    """What the controller needs of a Redis's own replication view."""

    reachable: bool
    role: str  # master | replica | unknown
    offset: int | None


def replica_key(region: str) -> str:
    """The node key of `region`'s in-region replica."""
    return f"{region}/replica"


def nodes(config: Config) -> dict[str, Node]:
    """Every Redis of `config`, main ones first."""
    found: dict[str, Node] = {}
    for r in config.regions:
        found[r.name] = Node(r.name, r.name, r.zones[0].name, r.redis.address, r.redis.port, False)
    for r in config.regions:
        if r.replica is not None:
            key = replica_key(r.name)
            zone = r.zones[1].name
            found[key] = Node(key, r.name, zone, r.replica.address, r.replica.port, True)
    return found


def head(region: str, topology: Mapping[str, Node], reachable: Mapping[str, bool]) -> str:
    """The node of `region` that follows (or becomes) the writer from another region:
    its main Redis unless that is unreachable and its replica is not."""
    replica = replica_key(region)
    if replica in topology and not reachable.get(region, False) and reachable.get(replica, False):
        return replica
    return region


def desired_masters(
    writer: str, topology: Mapping[str, Node], reachable: Mapping[str, bool]
) -> dict[str, str]:
    """node → the node it should follow, for every node but the writer."""
    wanted: dict[str, str] = {}
    w_region = topology[writer].region
    for key, node in topology.items():
        if key == writer:
            continue
        if node.region == w_region:
            wanted[key] = writer
            continue
        top = head(node.region, topology, reachable)
        wanted[key] = writer if key == top else top
    return wanted


def in_region_candidate(
    writer: str, topology: Mapping[str, Node], views: Mapping[str, NodeView]
) -> str | None:
    """The Redis to promote in the writer's region when the writer's is lost, or None.

    It must be reachable, a replica, and at or past the offset of every other reachable
    replica (the ones an acknowledged write may be on); the writer's own Redis must be
    unreachable (a live writer hands over only through a coordinated move).
    """
    w = views.get(writer)
    if w is not None and w.reachable:
        return None
    w_region = topology[writer].region
    mine = [k for k, n in topology.items() if n.region == w_region and k != writer]
    for key in mine:
        view = views.get(key)
        if view is None or not view.reachable or view.role != "replica" or view.offset is None:
            continue
        others = [
            v
            for k, v in views.items()
            if k not in (key, writer) and v.reachable and v.role == "replica"
        ]
        if all(v.offset is not None and view.offset >= v.offset for v in others):
            return key
    return None
