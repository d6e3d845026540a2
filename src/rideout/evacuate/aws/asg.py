"""EC2 Auto Scaling groups: their subnets are ``VPCZoneIdentifier``.

Removing a zone's subnets makes Auto Scaling rebalance: it launches instances in the
remaining zones and terminates those in the removed one (moto records the new subnets but
never moves an instance; the tests check the configuration, as AWS documents it).
``AvailabilityZones`` is not sent: AWS derives it from the subnets.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from rideout.evacuate.aws._boundary import calling
from rideout.evacuate.aws.errors import AwsNotFound
from rideout.evacuate.model import Placement, require_unchanged

if TYPE_CHECKING:
    from mypy_boto3_autoscaling import AutoScalingClient
    from mypy_boto3_autoscaling.type_defs import AutoScalingGroupTypeDef

__all__ = ["KIND", "AutoScalingGroups", "group_name"]

KIND = "asg"


def group_name(arn_or_name: str) -> str:
    """The group's name from its ARN (``...:autoScalingGroupName/NAME``), or the name."""
    marker = ":autoScalingGroupName/"
    return arn_or_name.split(marker, 1)[1] if marker in arn_or_name else arn_or_name


def _placement(group: AutoScalingGroupTypeDef) -> Placement | None:
    subnets = tuple(s.strip() for s in group.get("VPCZoneIdentifier", "").split(",") if s.strip())
    if not subnets:
        return None  # placed by zone names only (EC2-Classic style): nothing to remove
    resource = group.get("AutoScalingGroupARN") or group["AutoScalingGroupName"]
    return Placement(KIND, resource, subnets)


class AutoScalingGroups:
    """The ``asg`` kind: list, describe and update groups' subnets."""

    kind = KIND

    def __init__(self, client: AutoScalingClient) -> None:
        self._client = client

    def placements(self) -> Iterator[Placement]:
        with calling("autoscaling", "DescribeAutoScalingGroups"):
            pages = self._client.get_paginator("describe_auto_scaling_groups").paginate()
            for page in pages:
                for group in page.get("AutoScalingGroups", []):
                    if (found := _placement(group)) is not None:
                        yield found

    def describe(self, resource: str) -> Placement | None:
        with calling("autoscaling", "DescribeAutoScalingGroups"):
            answer = self._client.describe_auto_scaling_groups(
                AutoScalingGroupNames=[group_name(resource)]
            )
        for group in answer.get("AutoScalingGroups", []):
            if resource in (group.get("AutoScalingGroupARN"), group["AutoScalingGroupName"]):
                return _placement(group) or Placement(KIND, resource, ())
        return None

    def update(
        self, resource: str, subnets: tuple[str, ...], *, expected: tuple[str, ...] | None = None
    ) -> None:
        now = self.describe(resource)
        if now is None:
            raise AwsNotFound(f"autoscaling: no Auto Scaling group {resource}")
        require_unchanged(KIND, resource, now.subnets, expected)  # no conditional write
        with calling("autoscaling", "UpdateAutoScalingGroup"):
            self._client.update_auto_scaling_group(
                AutoScalingGroupName=group_name(resource), VPCZoneIdentifier=",".join(subnets)
            )
