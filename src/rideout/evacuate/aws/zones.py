"""Availability Zone ids, names and subnets, from EC2.

Evacuation takes an AZ *id* (``use1-az2``): names (``us-east-1a``) map to different
physical zones in different accounts. The id is resolved with
``DescribeAvailabilityZones`` (``zone-id`` filter) and its subnets found with
``DescribeSubnets`` (``availability-zone-id`` filter, paginated), optionally limited to
some VPCs: an unscoped lookup also returns every default VPC subnet in the zone.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from rideout.evacuate.aws._boundary import calling
from rideout.evacuate.aws.errors import AwsNotFound

if TYPE_CHECKING:
    from mypy_boto3_ec2 import EC2Client
    from mypy_boto3_ec2.type_defs import FilterTypeDef

__all__ = ["ZONE_NOT_FOUND", "ZoneDirectory"]

ZONE_NOT_FOUND = "InvalidAvailabilityZone"  # the code of the AwsNotFound for an unknown id

# DescribeSubnets takes at most 200 values per filter.
_FILTER_VALUES = 200


class ZoneDirectory:
    """Zone ids <-> names and subnets of one region, looked up once and remembered."""

    def __init__(self, ec2: EC2Client, *, vpc_ids: Iterable[str] = ()) -> None:
        self._ec2 = ec2
        self._vpc_ids = tuple(vpc_ids)
        self._names: dict[str, str] | None = None  # zone id -> zone name
        self._subnets: dict[str, str] = {}  # subnet id -> zone id, as learnt

    def _zones(self) -> dict[str, str]:
        if self._names is None:
            with calling("ec2", "DescribeAvailabilityZones"):
                answer = self._ec2.describe_availability_zones(AllAvailabilityZones=False)
            self._names = {
                z["ZoneId"]: z["ZoneName"]
                for z in answer.get("AvailabilityZones", [])
                if "ZoneId" in z and "ZoneName" in z
            }
        return self._names

    def zone_ids(self) -> frozenset[str]:
        """Every zone id of the region."""
        return frozenset(self._zones())

    def name_of(self, zone_id: str) -> str:
        """The zone's name in this account (``use1-az2`` -> ``us-east-1c``, say)."""
        names = self._zones()
        if zone_id not in names:
            # Ask for it by id: the cached list holds only the zones opted in.
            with calling("ec2", "DescribeAvailabilityZones"):
                answer = self._ec2.describe_availability_zones(
                    Filters=[{"Name": "zone-id", "Values": [zone_id]}], AllAvailabilityZones=True
                )
            found = [z for z in answer.get("AvailabilityZones", []) if z.get("ZoneId") == zone_id]
            if not found:
                known = ", ".join(sorted(names)) or "none"
                raise AwsNotFound(
                    f"no availability zone with id {zone_id!r} in this region (known: {known})",
                    code=ZONE_NOT_FOUND,
                )
            names[zone_id] = found[0]["ZoneName"]
        return names[zone_id]

    def id_of(self, zone_name: str) -> str | None:
        """The id of the zone named ``zone_name``, or None if the region has none."""
        for zone_id, name in self._zones().items():
            if name == zone_name:
                return zone_id
        return None

    def _describe_subnets(self, filters: list[FilterTypeDef]) -> dict[str, str]:
        if self._vpc_ids:
            filters = [*filters, {"Name": "vpc-id", "Values": list(self._vpc_ids)}]
        found: dict[str, str] = {}
        with calling("ec2", "DescribeSubnets"):
            for page in self._ec2.get_paginator("describe_subnets").paginate(Filters=filters):
                for subnet in page.get("Subnets", []):
                    if "SubnetId" in subnet and "AvailabilityZoneId" in subnet:
                        found[subnet["SubnetId"]] = subnet["AvailabilityZoneId"]
        self._subnets.update(found)
        return found

    def subnets_in_zone(self, zone_id: str) -> frozenset[str]:
        """The subnets in ``zone_id`` (of the configured VPCs, if any)."""
        self.name_of(zone_id)  # an unknown id is an error, not an empty zone
        return frozenset(
            self._describe_subnets([{"Name": "availability-zone-id", "Values": [zone_id]}])
        )

    def zones_of(self, subnets: Iterable[str]) -> dict[str, str]:
        """subnet -> zone id for the subnets EC2 knows; a zone id maps to itself (kinds
        placed by zone). Unknown names are left out, never an error."""
        wanted = list(dict.fromkeys(subnets))
        zone_ids = self.zone_ids()
        result = {s: s for s in wanted if s in zone_ids}
        missing = [s for s in wanted if s not in result and s not in self._subnets]
        for start in range(0, len(missing), _FILTER_VALUES):
            chunk = missing[start : start + _FILTER_VALUES]
            self._describe_subnets([{"Name": "subnet-id", "Values": chunk}])
        result.update({s: self._subnets[s] for s in wanted if s in self._subnets})
        return result
