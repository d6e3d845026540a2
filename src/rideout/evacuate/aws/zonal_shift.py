"""ARC zonal shift (``arc-zonal-shift``): move a managed resource's traffic away from a zone.

The data-plane half of an evacuation: load balancers (and other managed resources) stop
sending traffic to the zone while the control-plane half removes its capacity. A
managed resource is one placement whose "subnets" are the zone *ids* it serves traffic
in: those it is deployed in (``ListManagedResources``' ``availabilityZones``) less
those an active shift moves it away from (``ListZonalShifts``, status ACTIVE).

``update`` with one zone left out starts a shift away from it (``StartZonalShift``:
``awayFrom`` is a zone id, ``expiresIn`` at most 72 h, a ``comment`` that marks it as
rideout's); with every zone back, it cancels rideout's shifts (``CancelZonalShift``).
ARC applies one shift per resource at a time, so leaving out two zones is refused.
A shift expires on its own: re-run the evacuation to start another. moto does not
implement this service; the tests check these requests against botocore's service
model (``botocore.stub.Stubber``).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rideout import _validate
from rideout.errors import InvalidArgument
from rideout.evacuate.aws._boundary import calling
from rideout.evacuate.aws.errors import AwsRefused
from rideout.evacuate.aws.zones import ZoneDirectory
from rideout.evacuate.model import Placement, require_unchanged

if TYPE_CHECKING:
    from mypy_boto3_arc_zonal_shift import ARCZonalShiftClient
    from mypy_boto3_arc_zonal_shift.type_defs import ZonalShiftSummaryTypeDef

__all__ = ["COMMENT", "KIND", "MAX_EXPIRY_HOURS", "ZonalShiftOptions", "ZonalShifts"]

KIND = "arc-zonal-shift"  # sorts before asg: plans run it first
COMMENT = "rideout evacuate"  # marks rideout's shifts: recovery cancels only those
MAX_EXPIRY_HOURS = 72
_EXPIRES = re.compile(r"([1-9][0-9]*)(m|h)")


def _expires_in(value: str) -> str:
    found = _EXPIRES.fullmatch(value)
    if not found:
        raise InvalidArgument(
            f"expires_in must be minutes or hours such as 30m or 12h, not {value!r}"
        )
    minutes = int(found[1]) * (60 if found[2] == "h" else 1)
    if minutes > MAX_EXPIRY_HOURS * 60:
        raise InvalidArgument(f"expires_in must be at most {MAX_EXPIRY_HOURS}h, not {value!r}")
    return value


@dataclass(frozen=True, slots=True)
class ZonalShiftOptions:
    """Which managed resources to shift (ARNs; empty: every one ARC manages in the
    region), for how long (``expires_in``: ``30m``, ``12h``, at most 72 h), and the
    comment (it must start with :data:`COMMENT`: that is how recovery knows rideout's
    shifts from an operator's)."""

    resources: tuple[str, ...] = ()
    expires_in: str = "12h"
    comment: str = COMMENT

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "resources", tuple(_validate.text("resources", r) for r in self.resources)
        )
        _expires_in(self.expires_in)
        if not self.comment.startswith(COMMENT) or len(self.comment) > 128:
            raise InvalidArgument(f"comment must start with {COMMENT!r} and fit in 128 characters")


class ZonalShifts:
    """The ``arc-zonal-shift`` kind (see the module doc)."""

    kind = KIND

    def __init__(
        self, client: ARCZonalShiftClient, zones: ZoneDirectory, options: ZonalShiftOptions
    ) -> None:
        self.client = client
        self._zones = zones
        self._only = frozenset(options.resources)
        self.options = options

    def _zone_id(self, zone: str) -> str:
        # ARC speaks zone ids; a name, should one appear, is mapped.
        return zone if zone in self._zones.zone_ids() else (self._zones.id_of(zone) or zone)

    def _active(self, resource: str | None = None) -> list[ZonalShiftSummaryTypeDef]:
        paginator = self.client.get_paginator("list_zonal_shifts")
        with calling("arc-zonal-shift", "ListZonalShifts"):
            pages = (
                paginator.paginate(status="ACTIVE", resourceIdentifier=resource)
                if resource
                else paginator.paginate(status="ACTIVE")
            )
            return [shift for page in pages for shift in page.get("items", [])]

    def _managed(self) -> Iterator[tuple[str, tuple[str, ...]]]:
        with calling("arc-zonal-shift", "ListManagedResources"):
            for page in self.client.get_paginator("list_managed_resources").paginate():
                for item in page.get("items", []):
                    arn = item.get("arn")
                    if arn and (not self._only or arn in self._only):
                        yield arn, tuple(self._zone_id(z) for z in item["availabilityZones"])

    @staticmethod
    def _placement(
        arn: str, zones: tuple[str, ...], shifts: list[ZonalShiftSummaryTypeDef]
    ) -> Placement:
        away = {s["awayFrom"] for s in shifts if s["resourceIdentifier"] == arn}
        return Placement(KIND, arn, tuple(z for z in zones if z not in away))

    def placements(self) -> Iterator[Placement]:
        shifts = self._active()
        for arn, zones in self._managed():
            yield self._placement(arn, zones, shifts)

    def _zones_of(self, resource: str) -> tuple[str, ...] | None:
        for arn, zones in self._managed():
            if arn == resource:
                return zones
        return None

    def describe(self, resource: str) -> Placement | None:
        zones = self._zones_of(resource)
        return None if zones is None else self._placement(resource, zones, self._active(resource))

    def update(
        self, resource: str, subnets: tuple[str, ...], *, expected: tuple[str, ...] | None = None
    ) -> None:
        zones = self._zones_of(resource)
        if zones is None:
            raise AwsRefused(f"arc-zonal-shift: {resource} is not a managed resource")
        away = [z for z in zones if z not in subnets]
        if len(away) > 1:
            raise AwsRefused(
                f"arc-zonal-shift: {resource}: ARC shifts a resource away from one zone at"
                f" a time, not {len(away)} ({', '.join(away)})"
            )
        active = self._active(resource)
        now = self._placement(resource, zones, active).subnets
        require_unchanged(KIND, resource, now, expected)
        for shift in active:
            ours = shift.get("comment", "").startswith(COMMENT)  # an operator's stays
            if ours and shift["awayFrom"] not in away:
                with calling("arc-zonal-shift", "CancelZonalShift"):
                    self.client.cancel_zonal_shift(zonalShiftId=shift["zonalShiftId"])
        if away and not any(s["awayFrom"] == away[0] for s in active):
            with calling("arc-zonal-shift", "StartZonalShift"):
                self.client.start_zonal_shift(
                    resourceIdentifier=resource,
                    awayFrom=away[0],
                    expiresIn=self.options.expires_in,
                    comment=self.options.comment,
                )
