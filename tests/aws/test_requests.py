"""Requests moto accepts but cannot show back, checked against the service model.

moto's server returns a CLOUDWATCH_METRIC health check without its ``AlarmIdentifier``
and ``InsufficientDataHealthStatus``, so the round trip in test_engine_moto.py cannot
prove rideout sends them. botocore's Stubber validates each request here against the
Route 53 model and the exact parameters expected.
"""

from __future__ import annotations

from collections.abc import Callable

from botocore.stub import ANY

from rideout.aws import AwsSession, Change, FieldChange, Resource
from rideout.aws.route53 import apply_health_check
from rideout.config import Config
from tests.aws.stubs import stubbed

SPEC = {
    "Type": "CLOUDWATCH_METRIC",
    "AlarmRegion": "us-west-2",
    "AlarmName": "d-us-east-1-websocket-health",
    "InsufficientDataHealthStatus": "Unhealthy",
}


def test_a_health_check_follows_the_alarm_in_the_standby_region(
    make_config: Callable[..., Config],
) -> None:
    config = make_config(aws={"deployment": "d"})
    session = AwsSession()
    stub = stubbed(session, "route53", "us-east-1")
    stub.add_response(
        "create_health_check",
        {
            "HealthCheck": {
                "Id": "hc-1",
                "CallerReference": "x",
                "HealthCheckConfig": {"Type": "CLOUDWATCH_METRIC"},
                "HealthCheckVersion": 1,
            },
            "Location": "https://route53.amazonaws.com/2013-04-01/healthcheck/hc-1",
        },
        {
            "CallerReference": ANY,
            "HealthCheckConfig": {
                "Type": "CLOUDWATCH_METRIC",
                "AlarmIdentifier": {"Region": "us-west-2", "Name": "d-us-east-1-websocket-health"},
                "InsufficientDataHealthStatus": "Unhealthy",
            },
        },
    )
    stub.add_response(
        "change_tags_for_resource",
        {},
        {
            "ResourceType": "healthcheck",
            "ResourceId": "hc-1",
            "AddTags": [
                {"Key": "rideout:deployment", "Value": "d"},
                {"Key": "rideout:region", "Value": "us-east-1"},
                {"Key": "rideout:name", "Value": "d-us-east-1"},
                {"Key": "rideout:alarm", "Value": "us-west-2/d-us-east-1-websocket-health"},
                {"Key": "rideout:insufficient-data", "Value": "Unhealthy"},
            ],
        },
    )
    desired = Resource("route53-health-check", "d-us-east-1", "global", SPEC)
    ids: dict[str, str] = {}
    fields = tuple(FieldChange(k, None, v) for k, v in SPEC.items())
    apply_health_check(
        session,
        config,
        Change("create", desired.kind, desired.name, "global", fields, desired),
        ids,
    )
    assert ids == {"d-us-east-1": "hc-1"}
    stub.assert_no_pending_responses()

    # An update changes the check in place (same id: the records keep pointing at it).
    changed = Resource(
        "route53-health-check",
        "d-us-east-1",
        "global",
        {**SPEC, "InsufficientDataHealthStatus": "LastKnownStatus"},
    )
    found = Resource("route53-health-check", "d-us-east-1", "global", SPEC, ident="hc-1")
    stub.add_response(
        "update_health_check",
        {
            "HealthCheck": {
                "Id": "hc-1",
                "CallerReference": "x",
                "HealthCheckConfig": {"Type": "CLOUDWATCH_METRIC"},
                "HealthCheckVersion": 2,
            }
        },
        {
            "HealthCheckId": "hc-1",
            "AlarmIdentifier": {"Region": "us-west-2", "Name": "d-us-east-1-websocket-health"},
            "InsufficientDataHealthStatus": "LastKnownStatus",
        },
    )
    stub.add_response(
        "change_tags_for_resource",
        {},
        {"ResourceType": "healthcheck", "ResourceId": "hc-1", "AddTags": ANY},
    )
    update = Change(
        "update", changed.kind, changed.name, "global",
        (FieldChange("InsufficientDataHealthStatus", "Unhealthy", "LastKnownStatus"),),
        changed, found,
    )  # fmt: skip
    apply_health_check(session, config, update, ids)
    stub.assert_no_pending_responses()
