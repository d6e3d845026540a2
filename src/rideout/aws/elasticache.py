"""ElastiCache: the Global Datastore over the regions' replication groups.

rideout creates the Global Datastore on the primary region's replication group (which
must exist: your VPC, subnets and security groups are yours to choose) or adopts one
that already contains it, and creates the secondary region's replication group into
it. AWS gives a Global Datastore no tags, so rideout marks one it created with a tag on
the primary's replication group (``rideout:global-datastore-of=<deployment>``) and
deletes only such a datastore, retaining the primary group; the secondary group it
created carries ``rideout:deployment`` and is detached before it is deleted.

AWS adds a prefix of its own to the datastore's id (``ldgnf-rideout``): rideout names it
by the suffix (``aws.global_datastore``) and finds it by that. Creating and detaching
take minutes on AWS: apply waits for each step (bounded by ``timeout``) before the next.
"""

from __future__ import annotations

import time
from collections.abc import Callable, MutableMapping
from typing import TYPE_CHECKING, Any

from rideout.aws.desired import DEPLOYMENT_TAG, tags
from rideout.aws.errors import AwsError, AwsPreconditionFailed
from rideout.aws.plan import Change, Resource
from rideout.aws.session import AwsSession, boundary
from rideout.backoff import NoJitter, delays
from rideout.config import Config

if TYPE_CHECKING:
    from mypy_boto3_elasticache.type_defs import (
        GlobalReplicationGroupTypeDef,
        ReplicationGroupTypeDef,
    )

__all__ = [
    "OWNER_TAG",
    "apply_datastore",
    "apply_replication_group",
    "find_datastore",
    "observe_elasticache",
    "wait_for",
]

OWNER_TAG = "rideout:global-datastore-of"
Sleep = Callable[[float], None]
POLL = NoJitter(base=1.0, cap=15.0)
"""How long :func:`wait_for` waits between two checks."""


def wait_for(
    check: Callable[[], bool], what: str, *, timeout: float, sleep: Sleep = time.sleep
) -> None:
    """Poll `check` every few seconds (1 s, doubling up to 15 s) until it holds; AwsError
    after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    for delay in delays(POLL):
        if check():
            return
        if time.monotonic() + delay > deadline:
            raise AwsError(f"timed out after {timeout:g} s waiting for {what}")
        sleep(delay)


def find_datastore(
    session: AwsSession, region: str, suffix: str
) -> GlobalReplicationGroupTypeDef | None:
    """The Global Datastore whose id ends with ``-<suffix>`` (or is `suffix`), if any."""
    client = session.elasticache(region)
    with boundary(f"DescribeGlobalReplicationGroups in {region}"):
        pages = client.get_paginator("describe_global_replication_groups").paginate(
            ShowMemberInfo=True
        )
        for page in pages:
            for group in page.get("GlobalReplicationGroups", []):
                if _named(group.get("GlobalReplicationGroupId", ""), suffix):
                    return group
    return None


def _named(ident: str, suffix: str) -> bool:
    """Whether a datastore id is the one rideout calls `suffix` (AWS adds a prefix)."""
    return ident == suffix or ident.endswith(f"-{suffix}")


def _group(session: AwsSession, region: str, ident: str) -> ReplicationGroupTypeDef | None:
    client = session.elasticache(region)
    try:
        with boundary(f"DescribeReplicationGroups {ident} in {region}"):
            groups = client.describe_replication_groups(ReplicationGroupId=ident)
    except AwsError as exc:
        if getattr(exc, "code", "") == "ReplicationGroupNotFoundFault":
            return None
        raise
    found = groups.get("ReplicationGroups", [])
    return found[0] if found else None


def _tag(session: AwsSession, region: str, arn: str, key: str) -> str | None:
    """The resource's tag `key` (None: no such tag, or no ARN to ask about)."""
    if not arn:
        return None
    with boundary(f"ListTagsForResource {arn}"):
        listed = session.elasticache(region).list_tags_for_resource(ResourceName=arn)
    return {t["Key"]: t["Value"] for t in listed.get("TagList", [])}.get(key)


def observe_elasticache(session: AwsSession, config: Config) -> list[Resource]:
    """The datastore and the secondary's group as they are (empty when not managed)."""
    aws = config.aws
    if not aws.global_datastore:
        return []
    primary = aws.region(config.primary.name)
    secondary = aws.region(config.secondary.name)
    found: list[Resource] = []
    datastore = find_datastore(session, primary.aws_region, aws.global_datastore)
    if datastore is not None:
        members = {
            f"{m.get('ReplicationGroupRegion', '')}:{m.get('ReplicationGroupId', '')}"
            for m in datastore.get("Members", [])
        }
        wanted = f"{primary.aws_region}:{primary.replication_group}"
        group = _group(session, primary.aws_region, primary.replication_group)
        arn = group.get("ARN", "") if group is not None else ""
        owned = _tag(session, primary.aws_region, arn, OWNER_TAG) == aws.deployment
        found.append(
            Resource(
                "elasticache-global-datastore", aws.global_datastore, primary.aws_region,
                {"Member": wanted if wanted in members else ",".join(sorted(members))},
                datastore.get("GlobalReplicationGroupId", ""), owned,
                extra={"status": datastore.get("Status", "")},
            )
        )  # fmt: skip
    group = _group(session, secondary.aws_region, secondary.replication_group)
    if group is not None:
        joined = group.get("GlobalReplicationGroupInfo", {}).get("GlobalReplicationGroupId", "")
        spec: dict[str, Any] = {
            "GlobalDatastore": aws.global_datastore
            if _named(joined, aws.global_datastore)
            else joined
        }
        if secondary.cache_subnet_group:
            spec["CacheSubnetGroup"] = secondary.cache_subnet_group  # not readable back
        arn = group.get("ARN", "")
        owned = _tag(session, secondary.aws_region, arn, DEPLOYMENT_TAG) == aws.deployment
        found.append(
            Resource(
                "elasticache-replication-group", secondary.replication_group,
                secondary.aws_region, spec, arn, owned,
            )
        )  # fmt: skip
    return found


def apply_datastore(
    session: AwsSession,
    config: Config,
    change: Change,
    ids: MutableMapping[str, str],
    *,
    timeout: float = 1800.0,
    sleep: Sleep = time.sleep,
) -> None:
    """Create the Global Datastore on the primary's group, or delete one rideout made."""
    aws = config.aws
    primary = aws.region(config.primary.name)
    client = session.elasticache(change.region)
    suffix = aws.global_datastore or change.name
    if change.action == "delete":
        assert change.actual is not None
        with boundary(f"DeleteGlobalReplicationGroup {change.actual.ident}"):
            client.delete_global_replication_group(
                GlobalReplicationGroupId=change.actual.ident, RetainPrimaryReplicationGroup=True
            )
        group = _group(session, primary.aws_region, primary.replication_group)
        if group is not None and group.get("ARN"):
            with boundary(f"RemoveTagsFromResource {primary.replication_group}"):
                client.remove_tags_from_resource(ResourceName=group["ARN"], TagKeys=[OWNER_TAG])
        return
    if change.action == "update":
        raise AwsPreconditionFailed(
            f"the Global Datastore {change.name!r} exists without the replication group "
            f"{primary.replication_group!r} of {primary.aws_region}: rideout cannot add an "
            "existing group to it; choose another aws.global_datastore or fix the datastore"
        )
    group = _group(session, primary.aws_region, primary.replication_group)
    if group is None:
        raise AwsPreconditionFailed(
            f"the primary's replication group {primary.replication_group!r} does not exist in "
            f"{primary.aws_region}: create it (in your VPC, with your subnet group and security "
            f"groups) or correct aws.regions.{config.primary.name}.replication_group"
        )
    with boundary(f"CreateGlobalReplicationGroup {suffix}"):
        created = client.create_global_replication_group(
            GlobalReplicationGroupIdSuffix=suffix,
            GlobalReplicationGroupDescription=f"rideout {aws.deployment}",
            PrimaryReplicationGroupId=primary.replication_group,
        )
    ident = created["GlobalReplicationGroup"].get("GlobalReplicationGroupId", suffix)
    ids[f"global:{suffix}"] = ident
    with boundary(f"AddTagsToResource {primary.replication_group}"):
        client.add_tags_to_resource(
            ResourceName=group.get("ARN", ""), Tags=[{"Key": OWNER_TAG, "Value": aws.deployment}]
        )

    def available() -> bool:
        found = find_datastore(session, primary.aws_region, suffix)
        return found is not None and found.get("Status") == "available"

    wait_for(
        available, f"the Global Datastore {ident} to be available", timeout=timeout, sleep=sleep
    )


def apply_replication_group(
    session: AwsSession,
    config: Config,
    change: Change,
    ids: MutableMapping[str, str],
    *,
    timeout: float = 3600.0,
    sleep: Sleep = time.sleep,
) -> None:
    """Create the secondary's group into the datastore, or detach and delete it."""
    aws = config.aws
    primary = aws.region(config.primary.name)
    client = session.elasticache(change.region)
    suffix = aws.global_datastore
    if change.action == "update":
        raise AwsPreconditionFailed(
            f"the replication group {change.name!r} in {change.region} exists outside the "
            f"Global Datastore {suffix!r}: AWS adds only a new group to a datastore; delete it "
            f"or choose another aws.regions.{config.secondary.name}.replication_group"
        )
    if change.action == "delete":
        datastore = find_datastore(session, primary.aws_region, suffix) if suffix else None
        if datastore is not None:
            ident = datastore.get("GlobalReplicationGroupId", "")
            with boundary(f"DisassociateGlobalReplicationGroup {change.name}"):
                session.elasticache(primary.aws_region).disassociate_global_replication_group(
                    GlobalReplicationGroupId=ident,
                    ReplicationGroupId=change.name,
                    ReplicationGroupRegion=change.region,
                )

            def detached() -> bool:
                found = find_datastore(session, primary.aws_region, suffix)
                members = found.get("Members", []) if found else []
                return all(m.get("ReplicationGroupId") != change.name for m in members)

            wait_for(detached, f"{change.name} to leave {ident}", timeout=timeout, sleep=sleep)
        with boundary(f"DeleteReplicationGroup {change.name}"):
            client.delete_replication_group(ReplicationGroupId=change.name)
        return
    global_id = ids.get(f"global:{suffix}")
    if global_id is None:
        datastore = find_datastore(session, primary.aws_region, suffix)
        if datastore is None:
            raise AwsPreconditionFailed(f"the Global Datastore {suffix!r} does not exist")
        global_id = datastore.get("GlobalReplicationGroupId", suffix)
    secondary = aws.region(config.secondary.name)
    extra: dict[str, Any] = {}
    if secondary.cache_subnet_group:
        extra["CacheSubnetGroupName"] = secondary.cache_subnet_group
    with boundary(f"CreateReplicationGroup {change.name} in {change.region}"):
        client.create_replication_group(
            ReplicationGroupId=change.name,
            ReplicationGroupDescription=f"rideout {aws.deployment}: {config.secondary.name}",
            GlobalReplicationGroupId=global_id,
            Tags=[{"Key": k, "Value": v} for k, v in tags(config, config.secondary.name).items()],
            **extra,
        )
