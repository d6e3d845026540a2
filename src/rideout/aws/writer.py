"""The controller's ElastiCache provider: the writer moves with the Global Datastore.

``rideout control-plane --provider aws`` gives the failover controller this
:class:`~rideout.failover.mover.ManagedWriter`: a move calls
``FailoverGlobalReplicationGroup`` to make the target region's replication group the
datastore's primary, then waits (bounded) until AWS reports it so; the controller then
raises the epoch on the new writer, as after its own moves, which fences bids that were
on their way to the old one. When the old primary's region is down and AWS refuses the
failover, the target's group is detached from the datastore
(``DisassociateGlobalReplicationGroup``), AWS's path in a regional outage, which makes it
a standalone primary; rejoining the old region is then an operator's step (``rideout aws
apply`` recreates the secondary). ElastiCache replication is asynchronous: in a regional
failure the last writes may be lost (AWS quotes RPO under a second), as in rideout's
``async`` mode; ``sync`` mode's WAIT still applies before each acknowledgement.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from rideout.aws.elasticache import find_datastore, wait_for
from rideout.aws.errors import AwsError, AwsRequestFailed
from rideout.aws.session import AwsSession, boundary
from rideout.config import Config
from rideout.store.replication import ReplicationError

__all__ = ["ElastiCacheWriter"]


class ElastiCacheWriter:
    """Moves the writer by failing the Global Datastore over (module docstring)."""

    def __init__(
        self,
        config: Config,
        session: AwsSession | None = None,
        *,
        timeout: float = 600.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if not config.aws.global_datastore:
            raise AwsError("--provider aws needs aws.global_datastore in the configuration")
        self.config = config
        self.session = session or AwsSession()
        self.timeout = timeout
        self._sleep = sleep

    async def move(self, old: str, new: str, *, old_reachable: bool) -> str:
        """Make `new`'s replication group the primary; how it was done."""
        try:
            return await asyncio.to_thread(self._move, old, new, old_reachable)
        except AwsError as exc:
            raise ReplicationError(f"cannot move the writer to {new}: {exc}") from exc

    def _role(self, region: str, group: str) -> str | None:
        """`group`'s role in the datastore (PRIMARY, SECONDARY), None when not a member."""
        datastore = find_datastore(self.session, region, self.config.aws.global_datastore)
        for member in datastore.get("Members", []) if datastore else []:
            if member.get("ReplicationGroupId") == group:
                return member.get("Role", "").upper()
        return None

    def _move(self, old: str, new: str, old_reachable: bool) -> str:
        target = self.config.aws.region(new)
        region, group = target.aws_region, target.replication_group
        suffix = self.config.aws.global_datastore
        datastore = find_datastore(self.session, region, suffix)
        if datastore is None:
            raise AwsError(f"no Global Datastore {suffix!r} seen from {region}")
        ident = datastore.get("GlobalReplicationGroupId", suffix)
        if self._role(region, group) == "PRIMARY":
            return f"the Global Datastore {ident} (already primary in {region})"
        client = self.session.elasticache(region)
        try:
            with boundary(f"FailoverGlobalReplicationGroup {ident} to {region}"):
                client.failover_global_replication_group(
                    GlobalReplicationGroupId=ident,
                    PrimaryRegion=region,
                    PrimaryReplicationGroupId=group,
                )
        except AwsRequestFailed:
            if old_reachable:
                raise
            with boundary(f"DisassociateGlobalReplicationGroup {group} from {ident}"):
                client.disassociate_global_replication_group(
                    GlobalReplicationGroupId=ident,
                    ReplicationGroupId=group,
                    ReplicationGroupRegion=region,
                )
            wait_for(
                lambda: self._role(region, group) is None,
                f"{group} to leave {ident}",
                timeout=self.timeout,
                sleep=self._sleep,
            )
            return (
                f"DisassociateGlobalReplicationGroup ({old} unreachable: {group} in {region} "
                f"is now a standalone primary)"
            )
        wait_for(
            lambda: self._role(region, group) == "PRIMARY",
            f"{group} to become the primary of {ident}",
            timeout=self.timeout,
            sleep=self._sleep,
        )
        return f"FailoverGlobalReplicationGroup ({ident}: primary now {group} in {region})"
