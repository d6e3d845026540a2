"""Sync replication's rule: when a write counts as being in two failure domains.

Redis ``WAIT n`` counts *any* n replicas, and a writer can have two: its in-region
replica (the region's other zone) and the other region's Redis. ``WAIT 1`` answered by
the in-region replica says nothing about the other region. So a sync write is judged
on what the writer itself reports per replica, read in the same pipeline as the write:

1. ``INFO replication`` right after the write: ``master_repl_offset`` (at or past the
   write's own offset) and the replicas online then;
2. ``WAIT n timeout``;
3. ``INFO replication`` again: the offset each replica has acknowledged (WAIT's
   ``GETACK`` refreshes it).

The write is *replicated* when every replica online in (1) has acknowledged at least
the offset of (1) in (3), and one of them is in the required failure domain: the other
region while the writer is in the primary region (before a failover: a region outage
loses nothing acknowledged), any other zone while the writer is in the secondary
(after a failover, the surviving region's two zones). A replica that drops between
(1) and (3) fails the write (it is retried), one that joins meanwhile is not needed:
the rule errs only towards refusing. Replicas are told apart by the address they
announce (their bind address); an address the topology does not know counts for
nothing. Pure: :func:`judge` takes the two INFO views and no I/O happens here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from rideout.config import Config, RegionConfig

__all__ = [
    "Placement",
    "ReplicaAck",
    "SyncRule",
    "SyncVerdict",
    "judge",
    "placements",
    "replica_acks",
    "rule_for",
]


@dataclass(frozen=True, slots=True)
class Placement:
    """Where one Redis server lives."""

    region: str
    zone: str


@dataclass(frozen=True, slots=True)
class ReplicaAck:
    """One replica as its writer reports it (``INFO replication``'s ``slaveN``)."""

    address: str  # host:port it announces
    offset: int  # the replication offset it last acknowledged
    online: bool


@dataclass(frozen=True, slots=True)
class SyncVerdict:
    """Whether a sync write may be acknowledged, and why (``reason`` for metrics/logs)."""

    replicated: bool
    reason: Literal["replicated", "no-replica", "not-acknowledged"]
    acked: int  # replicas that hold the write
    detail: str = ""


def replica_acks(info: Mapping[str, Any]) -> tuple[int | None, list[ReplicaAck]]:
    """``master_repl_offset`` and the replicas of a parsed ``INFO replication`` reply."""
    raw = info.get("master_repl_offset")
    replicas = []
    for name, entry in info.items():
        if not (name.startswith("slave") and name[5:].isdigit() and isinstance(entry, Mapping)):
            continue
        try:
            address = f"{entry['ip']}:{entry['port']}"
            replicas.append(
                ReplicaAck(address, int(entry["offset"]), entry.get("state") == "online")
            )
        except (KeyError, TypeError, ValueError):
            continue  # a malformed entry counts for nothing
    return (raw if isinstance(raw, int) else None), replicas


def judge(
    write_offset: int | None,
    before: list[ReplicaAck],
    after: list[ReplicaAck],
    *,
    writer: Placement,
    writer_is_primary: bool,
    placements: Mapping[str, Placement],
) -> SyncVerdict:
    """The module's rule, for one write (or one pipeline of writes)."""
    required = [r for r in before if r.online]
    acked_at = {r.address: r.offset for r in after}
    if write_offset is None:
        return SyncVerdict(False, "not-acknowledged", 0, "no replication offset")
    holding = [r for r in required if acked_at.get(r.address, -1) >= write_offset]
    missing = [r.address for r in required if r not in holding]

    def counts(address: str) -> bool:
        where = placements.get(address)
        if where is None:
            return False
        if writer_is_primary:
            return where.region != writer.region
        return where.zone != writer.zone

    domain = "the other region" if writer_is_primary else "another zone"
    if not any(counts(r.address) for r in required):
        return SyncVerdict(False, "no-replica", len(holding), f"no replica online in {domain}")
    if missing:
        return SyncVerdict(
            False, "not-acknowledged", len(holding), f"not acknowledged by {', '.join(missing)}"
        )
    return SyncVerdict(True, "replicated", len(holding))


class SyncRule:
    """:func:`judge` bound to one writer's place in the topology, and the ``WAIT n``
    to ask next (the replicas online at the last write: WAIT then returns as soon as
    they all answered, rather than after its timeout)."""

    def __init__(
        self,
        *,
        writer: Placement,
        writer_is_primary: bool,
        placements: Mapping[str, Placement],
        expected: int = 1,
    ) -> None:
        self.writer = writer
        self.writer_is_primary = writer_is_primary
        self.placements = dict(placements)
        self.expected = max(1, expected)

    def judge(self, before: Mapping[str, Any], after: Mapping[str, Any]) -> SyncVerdict:
        """The verdict for the INFO views around a WAIT; remembers how many to wait for."""
        offset, replicas_before = replica_acks(before)
        _, replicas_after = replica_acks(after)
        self.expected = max(1, sum(r.online for r in replicas_before))
        return judge(
            offset, replicas_before, replicas_after, writer=self.writer,
            writer_is_primary=self.writer_is_primary, placements=self.placements,
        )  # fmt: skip


def placements(config: Config) -> dict[str, Placement]:
    """Every Redis of the topology by ``host:port``: a region's main Redis lives in its
    first zone, its in-region replica in its second."""
    found = {}
    for region in config.regions:
        for i, node in enumerate(region.redis_nodes):
            zone = region.zones[min(i, len(region.zones) - 1)].name
            found[f"{node.address}:{node.port}"] = Placement(region.name, zone)
    return found


def rule_for(config: Config, region: RegionConfig) -> SyncRule:
    """The rule for writes through `region`'s main Redis (the app servers' writer)."""
    return SyncRule(
        writer=Placement(region.name, region.zones[0].name),
        writer_is_primary=region.role == "primary",
        placements=placements(config),
        # Its direct replicas when all is well: its in-region one and the other region's.
        expected=len(region.redis_nodes),
    )
