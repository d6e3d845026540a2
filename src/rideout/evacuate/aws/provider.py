"""The ``aws`` provider: Auto Scaling groups, ECS services, Lambda functions, EKS nodes and
(optionally) ARC zonal shifts of one region, behind the evacuation engine's
:class:`~rideout.evacuate.model.Provider` protocol.

Kinds placed by subnet (``asg``, ``ecs``, ``lambda``) report their subnet ids; kinds
placed by zone (``eks``, ``arc-zonal-shift``) report zone ids. ``subnets_in_zone`` returns
both for a zone, so one plan covers every kind.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Protocol

from rideout import _validate
from rideout.evacuate.aws._boundary import AwsSettings
from rideout.evacuate.aws.asg import AutoScalingGroups
from rideout.evacuate.aws.ecs import EcsServices
from rideout.evacuate.aws.eks import EksCluster, EksNodes
from rideout.evacuate.aws.errors import AwsNotFound, AwsRefused
from rideout.evacuate.aws.lambda_ import DEFAULT_WAIT, LambdaFunctions, WaitPolicy
from rideout.evacuate.aws.zonal_shift import ZonalShiftOptions, ZonalShifts
from rideout.evacuate.aws.zones import ZONE_NOT_FOUND, ZoneDirectory
from rideout.evacuate.model import Placement, Subnets

__all__ = ["DEFAULT_KINDS", "AwsProvider", "Kind"]

DEFAULT_KINDS = ("asg", "ecs", "lambda")


class Kind(Protocol):
    """One resource type of the provider (asg.py, ecs.py, ...)."""

    kind: str

    def placements(self) -> Iterable[Placement]: ...

    def describe(self, resource: str) -> Placement | None: ...

    def update(
        self, resource: str, subnets: tuple[str, ...], *, expected: tuple[str, ...] | None = None
    ) -> None:
        """Write ``subnets`` if the resource, read right before, has ``expected``
        (:func:`~rideout.evacuate.model.require_unchanged`)."""
        ...


class AwsProvider:
    """Evacuate zones of one AWS region (a :class:`~rideout.evacuate.model.Provider`).

    ``vpc_ids`` limits the subnet lookups to those VPCs; ``eks`` adds the ``eks`` kind
    (nodes of those clusters, through their Kubernetes API); ``zonal_shift`` adds the
    ``arc-zonal-shift`` kind (ARC zonal shifts of managed resources) (listed first: the data plane moves before the control plane,
    as the whitepaper asks for load balancers with cross-zone load balancing off).
    """

    name = "aws"

    def __init__(
        self,
        settings: AwsSettings,
        *,
        vpc_ids: Sequence[str] = (),
        eks: Sequence[EksCluster] = (),
        zonal_shift: ZonalShiftOptions | None = None,
        lambda_wait: WaitPolicy = DEFAULT_WAIT,
    ) -> None:
        self.settings = settings
        for vpc in vpc_ids:
            _validate.text("vpc_ids", vpc)
        self.zones = ZoneDirectory(settings.client("ec2"), vpc_ids=vpc_ids)
        found: list[Kind] = []
        self.zonal_shifts: ZonalShifts | None = None
        if zonal_shift is not None:
            self.zonal_shifts = ZonalShifts(
                settings.client("arc-zonal-shift"), self.zones, zonal_shift
            )
            found.append(self.zonal_shifts)
        found += [
            AutoScalingGroups(settings.client("autoscaling")),
            EcsServices(settings.client("ecs")),
            LambdaFunctions(settings.client("lambda"), wait=lambda_wait),
        ]
        self._eks: EksNodes | None = None
        if eks:
            self._eks = EksNodes(eks, self.zones)
            found.append(self._eks)
        self._kinds: dict[str, Kind] = {k.kind: k for k in found}

    def close(self) -> None:
        """Close the Kubernetes API connections (boto3's close with their clients)."""
        if self._eks is not None:
            self._eks.close()

    def __enter__(self) -> AwsProvider:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def kinds(self) -> tuple[str, ...]:
        """The kinds this provider handles, in the order they should be evacuated."""
        return tuple(self._kinds)

    def zone_ids(self) -> frozenset[str]:
        """Every zone id of the region."""
        return self.zones.zone_ids()

    def _kind(self, kind: str) -> Kind:
        return self._kinds[_validate.choice("kind", kind, self._kinds)]

    def subnets_in_zone(self, zone_id: str) -> frozenset[str]:
        """The zone's subnets, and the zone id itself (for the kinds placed by zone);
        empty for a zone id the region does not have (the engine refuses it)."""
        try:
            found = self.zones.subnets_in_zone(_validate.text("zone_id", zone_id))
        except AwsNotFound as exc:
            if exc.code != ZONE_NOT_FOUND:
                raise
            return frozenset()
        return found | {zone_id}

    def zones_of(self, subnets: Iterable[str]) -> Mapping[str, str]:
        """subnet (or zone id) -> zone id, for those EC2 knows."""
        return self.zones.zones_of(subnets)

    def placements(self, kind: str) -> Iterator[Placement]:
        """Every resource of ``kind`` with a network placement, as it is now."""
        yield from self._kind(kind).placements()

    def describe(self, kind: str, resource: str) -> Placement | None:
        """``resource`` now, or None if it no longer exists."""
        return self._kind(kind).describe(_validate.text("resource", resource))

    def update(
        self, kind: str, resource: str, subnets: Subnets, *, expected: Subnets | None = None
    ) -> Placement | None:
        """Give ``resource`` exactly ``subnets``, keeping the rest of its configuration,
        if it has ``expected`` when read right before the write (else
        :class:`~rideout.evacuate.errors.ResourceChanged`; Lambda's write is conditional
        on the revision read, the other services have no conditional write); return it
        as read after the write. An empty ``subnets`` is refused here
        (:class:`AwsRefused`), whatever was planned."""
        if not subnets:  # a ProviderError: the engine counts the resource as failed
            raise AwsRefused(f"{kind} {resource}: refusing to leave it no subnet or zone")
        found = self._kind(kind)
        resource = _validate.text("resource", resource)
        found.update(resource, tuple(subnets), expected=expected)
        return found.describe(resource)
