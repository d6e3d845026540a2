"""ECS services with ``awsvpc`` networking: their subnets are
``networkConfiguration.awsvpcConfiguration.subnets``.

``UpdateService`` replaces the network configuration whole, so an update sends the
service's security groups and ``assignPublicIp`` back with the new subnets (an omitted
field is dropped, by moto as by AWS). ECS then starts a deployment that replaces the
tasks in the removed subnets. Services deployed by CodeDeploy or an external controller
refuse the update (AWS answers InvalidParameterException): they count as failed.
AWS rejects subnets that do not exist; moto accepts them (the code never sends any it
did not read from the service or the ledger).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from rideout.evacuate.aws._boundary import calling
from rideout.evacuate.aws.errors import AwsNotFound
from rideout.evacuate.model import Placement, network, require_unchanged

if TYPE_CHECKING:
    from mypy_boto3_ecs import ECSClient
    from mypy_boto3_ecs.type_defs import AwsVpcConfigurationTypeDef, ServiceTypeDef

__all__ = ["KIND", "EcsServices", "service_cluster"]

KIND = "ecs"
# DescribeServices takes at most 10 services per call.
_DESCRIBE_BATCH = 10


def service_cluster(arn: str) -> str | None:
    """The cluster named in a service ARN of the long format
    (``...:service/CLUSTER/SERVICE``); None for the old short format."""
    _, _, path = arn.partition(":service/")
    parts = path.split("/")
    return parts[0] if len(parts) == 2 and all(parts) else None


def _placement(service: ServiceTypeDef) -> Placement | None:
    vpc = service.get("networkConfiguration", {}).get("awsvpcConfiguration")
    if not vpc or service.get("status") == "INACTIVE":
        return None
    rest = {k: v for k, v in vpc.items() if k in ("securityGroups", "assignPublicIp")}
    return Placement(KIND, service["serviceArn"], tuple(vpc.get("subnets", [])), network(rest))


class EcsServices:
    """The ``ecs`` kind: every service of every cluster that uses ``awsvpc``."""

    kind = KIND

    def __init__(self, client: ECSClient) -> None:
        self._client = client

    def _clusters(self) -> Iterator[str]:
        with calling("ecs", "ListClusters"):
            for page in self._client.get_paginator("list_clusters").paginate():
                yield from page.get("clusterArns", [])

    def _services(self, cluster: str, arns: list[str]) -> list[ServiceTypeDef]:
        found: list[ServiceTypeDef] = []
        for start in range(0, len(arns), _DESCRIBE_BATCH):
            with calling("ecs", "DescribeServices"):
                answer = self._client.describe_services(
                    cluster=cluster, services=arns[start : start + _DESCRIBE_BATCH]
                )
            found.extend(answer.get("services", []))
        return found

    def placements(self) -> Iterator[Placement]:
        for cluster in self._clusters():
            with calling("ecs", "ListServices"):
                arns = [
                    arn
                    for page in self._client.get_paginator("list_services").paginate(
                        cluster=cluster
                    )
                    for arn in page.get("serviceArns", [])
                ]
            for service in self._services(cluster, arns):
                if (found := _placement(service)) is not None:
                    yield found

    def _find(self, resource: str) -> tuple[str, ServiceTypeDef] | None:
        known = service_cluster(resource)
        for cluster in [known] if known else list(self._clusters()):
            try:
                services = self._services(cluster, [resource])
            except AwsNotFound:  # ClusterNotFoundException: the cluster is gone
                continue
            for service in services:
                if service.get("serviceArn") == resource and service.get("status") != "INACTIVE":
                    return cluster, service
        return None

    def describe(self, resource: str) -> Placement | None:
        found = self._find(resource)
        if found is None:
            return None
        return _placement(found[1]) or Placement(KIND, resource, ())

    def update(
        self, resource: str, subnets: tuple[str, ...], *, expected: tuple[str, ...] | None = None
    ) -> None:
        found = self._find(resource)
        if found is None:
            raise AwsNotFound(f"ecs: no service {resource}")
        cluster, service = found
        current = service.get("networkConfiguration", {}).get("awsvpcConfiguration")
        if current is None:
            raise AwsNotFound(f"ecs: service {resource} does not use awsvpc networking")
        require_unchanged(KIND, resource, tuple(current.get("subnets", [])), expected)
        vpc: AwsVpcConfigurationTypeDef = {"subnets": list(subnets)}
        if "securityGroups" in current:
            vpc["securityGroups"] = list(current["securityGroups"])
        if "assignPublicIp" in current:
            vpc["assignPublicIp"] = current["assignPublicIp"]
        with calling("ecs", "UpdateService"):
            self._client.update_service(
                cluster=cluster,
                service=service["serviceName"],
                networkConfiguration={"awsvpcConfiguration": vpc},
            )
