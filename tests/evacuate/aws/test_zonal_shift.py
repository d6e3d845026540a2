"""ARC zonal shift: the requests, checked against botocore's service model.

moto implements no ``arc-zonal-shift`` API (in-process it answers 404, in server mode
500), and no other endpoint exists here. So the ARC client is driven through
``botocore.stub.Stubber``, which validates every request's parameters and every stubbed
answer against the service model botocore ships, and fails on a request the test did not
expect. Zone ids come from EC2 in moto server mode, as on AWS.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from botocore.stub import Stubber

from rideout.errors import InvalidArgument
from rideout.evacuate.aws import AwsProvider, AwsRefused, AwsSettings
from rideout.evacuate.aws.zonal_shift import COMMENT, ZonalShiftOptions
from rideout.evacuate.dynamo import DynamoLedger
from rideout.evacuate.engine import Engine, Options
from rideout.evacuate.model import Placement
from tests.evacuate.aws.conftest import SESSION, World

ALB = "arn:aws:elasticloadbalancing:us-east-1:123456789012:loadbalancer/app/web/50dc6c495c0c9188"
NLB = "arn:aws:elasticloadbalancing:us-east-1:123456789012:loadbalancer/net/tcp/73e2d6bc24d8a067"
NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
def zone_ids(aws: AwsSettings) -> list[str]:
    found = SESSION.client("ec2").describe_availability_zones()["AvailabilityZones"][:3]
    return [z["ZoneId"] for z in found]


@pytest.fixture
def shifted(aws: AwsSettings) -> Iterator[tuple[AwsProvider, Stubber]]:
    p = AwsProvider(aws, zonal_shift=ZonalShiftOptions(expires_in="3h"))
    assert p.zonal_shifts is not None
    with Stubber(p.zonal_shifts.client) as stubber:
        yield p, stubber
        stubber.assert_no_pending_responses()


def managed(zones: list[str], *arns: str) -> dict[str, Any]:
    return {"items": [{"arn": a, "name": a.rsplit("/", 2)[1], "availabilityZones": zones}
                      for a in arns]}  # fmt: skip


def shift(
    arn: str,
    away: str,
    comment: str = COMMENT,
    shift_id: str = "9ac9ec1e-1df9-4e2c-b6a8-1c2a3d4e5f60",
) -> dict[str, Any]:
    return {
        "zonalShiftId": shift_id,
        "resourceIdentifier": arn,
        "awayFrom": away,
        "expiryTime": NOW + timedelta(hours=3),
        "startTime": NOW,
        "status": "ACTIVE",
        "comment": comment,
    }


def read_back(stub: Stubber, zones: list[str], *active: dict[str, Any]) -> None:
    """What the provider reads after a write, to return the resource as it is then."""
    stub.add_response("list_managed_resources", managed(zones, ALB), {})
    stub.add_response(
        "list_zonal_shifts",
        {"items": list(active)},
        {"status": "ACTIVE", "resourceIdentifier": ALB},
    )


def test_placements_leave_out_the_zones_shifted_away_from(
    shifted: tuple[AwsProvider, Stubber], zone_ids: list[str]
) -> None:
    p, stub = shifted
    assert p.kinds()[0] == "arc-zonal-shift"  # the data plane moves first
    stub.add_response(
        "list_zonal_shifts", {"items": [shift(NLB, zone_ids[0])]}, {"status": "ACTIVE"}
    )
    stub.add_response("list_managed_resources", managed(zone_ids, ALB, NLB), {})
    assert list(p.placements("arc-zonal-shift")) == [
        Placement("arc-zonal-shift", ALB, tuple(zone_ids)),
        Placement("arc-zonal-shift", NLB, tuple(zone_ids[1:])),
    ]


def test_evacuating_starts_a_shift_and_recovering_cancels_it(
    shifted: tuple[AwsProvider, Stubber], zone_ids: list[str]
) -> None:
    p, stub = shifted
    away, kept = zone_ids[1], (zone_ids[0], zone_ids[2])
    stub.add_response("list_managed_resources", managed(zone_ids, ALB), {})
    stub.add_response(
        "list_zonal_shifts", {"items": []}, {"status": "ACTIVE", "resourceIdentifier": ALB}
    )
    stub.add_response(
        "start_zonal_shift",
        shift(ALB, away),
        {"resourceIdentifier": ALB, "awayFrom": away, "expiresIn": "3h", "comment": COMMENT},
    )
    read_back(stub, zone_ids, shift(ALB, away))
    assert p.update("arc-zonal-shift", ALB, kept) == Placement("arc-zonal-shift", ALB, kept)

    # Re-running finds the shift already there: nothing is started twice.
    stub.add_response("list_managed_resources", managed(zone_ids, ALB), {})
    stub.add_response(
        "list_zonal_shifts",
        {"items": [shift(ALB, away)]},
        {"status": "ACTIVE", "resourceIdentifier": ALB},
    )
    read_back(stub, zone_ids, shift(ALB, away))
    p.update("arc-zonal-shift", ALB, kept)

    # Recovery cancels rideout's shift, and leaves an operator's alone.
    stub.add_response("list_managed_resources", managed(zone_ids, ALB), {})
    theirs = shift(
        ALB, zone_ids[2], comment="drill by alice", shift_id="0b1c2d3e-4f50-4617-8293-a4b5c6d7e8f9"
    )
    stub.add_response(
        "list_zonal_shifts",
        {"items": [shift(ALB, away), theirs]},
        {"status": "ACTIVE", "resourceIdentifier": ALB},
    )
    stub.add_response(
        "cancel_zonal_shift",
        {**shift(ALB, away), "status": "CANCELED"},
        {"zonalShiftId": "9ac9ec1e-1df9-4e2c-b6a8-1c2a3d4e5f60"},
    )
    read_back(stub, zone_ids, theirs)
    p.update("arc-zonal-shift", ALB, tuple(zone_ids))


def test_two_zones_at_once_are_refused(
    shifted: tuple[AwsProvider, Stubber], zone_ids: list[str]
) -> None:
    p, stub = shifted
    stub.add_response("list_managed_resources", managed(zone_ids, ALB), {})
    with pytest.raises(AwsRefused, match="one zone at a time"):
        p.update("arc-zonal-shift", ALB, (zone_ids[0],))


def test_arc_errors_are_mapped(shifted: tuple[AwsProvider, Stubber], zone_ids: list[str]) -> None:
    p, stub = shifted
    stub.add_response("list_managed_resources", managed(zone_ids, ALB), {})
    stub.add_response(
        "list_zonal_shifts", {"items": []}, {"status": "ACTIVE", "resourceIdentifier": ALB}
    )
    stub.add_client_error(
        "start_zonal_shift",
        service_error_code="ConflictException",
        service_message="A zonal shift is already active for the resource",
        http_status_code=409,
    )
    with pytest.raises(AwsRefused, match="ConflictException"):
        p.update("arc-zonal-shift", ALB, (zone_ids[0], zone_ids[2]))
    stub.add_response("list_managed_resources", {"items": []}, {})
    assert p.describe("arc-zonal-shift", ALB) is None


@pytest.mark.parametrize("value", ["0m", "73h", "4321m", "1d", "12", ""])
def test_expiry_is_bounded_as_arc_bounds_it(value: str) -> None:
    with pytest.raises(InvalidArgument, match="expires_in"):
        ZonalShiftOptions(expires_in=value)


def test_the_comment_marks_rideouts_shifts() -> None:
    assert ZonalShiftOptions(comment=COMMENT + " by bob").comment.startswith(COMMENT)
    with pytest.raises(InvalidArgument, match="comment"):
        ZonalShiftOptions(comment="mine")


def test_an_evacuation_shifts_traffic_before_it_removes_capacity(
    aws: AwsSettings, world: World
) -> None:
    """The whitepaper's order for groups behind a load balancer: data plane first."""
    with AwsProvider(aws, vpc_ids=[world.vpc], zonal_shift=ZonalShiftOptions()) as p:
        assert p.zonal_shifts is not None
        engine = Engine(p, DynamoLedger(aws, wait_delay=1))
        with Stubber(p.zonal_shifts.client) as stub:
            stub.add_response("list_zonal_shifts", {"items": []}, {"status": "ACTIVE"})
            stub.add_response("list_managed_resources", managed(world.zones, ALB), {})
            plan = engine.plan_evacuation(world.zones[0], Options(kinds=("asg", "arc-zonal-shift")))
    kinds = [s.kind for s in plan.actions]
    assert kinds[0] == "arc-zonal-shift"
    assert set(kinds[1:]) == {"asg"}
