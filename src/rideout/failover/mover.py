"""How the writer moves: the controller's port to the replication it acts on.

:class:`FailoverController` decides *when* the writer moves and does the bookkeeping
(epoch, counters, damping, events); a :class:`WriterMover` does the move itself. The
default, :class:`ReplicationMover`, acts on self-managed Redis replication (the local
deployment, or any Redis whose roles rideout may change). A managed service (ElastiCache
Global Datastore's ``FailoverGlobalReplicationGroup``, say) is another implementation of
the same two methods; the epoch fence that follows is the controller's either way.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

import redis.asyncio as aioredis

from rideout.store.replication import promote, switch_over

__all__ = ["ManagedWriter", "ReplicationMover", "WriterMover"]


class Endpoint(Protocol):
    """Where a Redis listens (a :class:`rideout.failover.topology.Node`, say)."""

    @property
    def address(self) -> str: ...

    @property
    def port(self) -> int: ...


class WriterMover(Protocol):
    """Moves the writer from one region's Redis to another's."""

    async def hand_over(self, old: str, new: str, *, timeout: float) -> None:
        """Coordinated: the old writer (alive, a master) stops taking writes, `new`
        catches up, then `new` is the writer; no acknowledged write is lost. Raises
        :class:`~rideout.store.replication.ReplicationError` if it did not happen within
        `timeout` seconds (the old writer keeps writing then)."""

    async def promote(self, new: str) -> None:
        """Forced: `new` becomes a writer now, whatever the old one had not replicated
        (the old writer is gone). Raises ``ReplicationError`` when it cannot."""


class ReplicationMover:
    """:class:`WriterMover` over Redis replication: ``FAILOVER TO`` and ``REPLICAOF NO ONE``."""

    def __init__(
        self, topology: Mapping[str, Endpoint], clients: Mapping[str, aioredis.Redis]
    ) -> None:
        self.topology = topology  # every Redis by node key (failover.topology.nodes)
        self.clients = clients

    async def hand_over(self, old: str, new: str, *, timeout: float) -> None:
        target = self.topology[new]
        await switch_over(
            self.clients[old], self.clients[new], target.address, target.port, timeout
        )

    async def promote(self, new: str) -> None:
        await promote(self.clients[new])


class ManagedWriter(Protocol):
    """Moves the writer when a managed service owns replication (ElastiCache Global
    Datastore: :class:`rideout.aws.writer.ElastiCacheWriter`).

    :meth:`move` makes `new`'s Redis the writer and returns how (for the event log); it
    raises :class:`~rideout.store.replication.ReplicationError` when it cannot.
    `old_reachable` says whether the old writer's Redis answers (a planned move) or not
    (a regional failure). The controller then raises the epoch on `new`'s Redis, as after
    its own moves, and issues no ``REPLICAOF`` or ``FAILOVER`` itself.
    """

    async def move(self, old: str, new: str, *, old_reachable: bool) -> str: ...
