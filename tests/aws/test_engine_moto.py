"""`rideout aws plan|apply|destroy` against moto in server mode (real boto3 over HTTP).

What moto (5.2.5) can show here: alarms with their tags, CLOUDWATCH_METRIC health checks
with their tags, failover record sets, plan/apply/destroy round trips. What it cannot:
alarm evaluation (an alarm stays in its initial state), health-check status (always
"Success"), composite alarms and every Global Datastore API (HTTP 500, "not
implemented"). It also returns a CLOUDWATCH_METRIC health check *without* its
``AlarmIdentifier`` and ``InsufficientDataHealthStatus`` (rideout keeps them in tags,
see rideout.aws.route53) and deletes a record set without checking its values. The
ElastiCache part and the exact request shapes are tested with botocore's Stubber
(tests/aws/test_elasticache.py, test_requests.py), which validates every request
against the service model.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import boto3
import pytest

from rideout.aws import AwsSession, apply_plan, destroy_plan, make_plan
from rideout.config import Config, parse_config
from tests.conftest import config_data

DOMAIN = "auction.rideout.example"


def aws_config(tmp_path: Path, zone_id: str, **over: Any) -> Config:
    aws: dict[str, Any] = {
        "deployment": "auction-test",
        "hosted_zone_id": zone_id,
        "tags": {"team": "auctions"},
        "regions": {
            "us-east-1": {"addresses": ["203.0.113.10", "203.0.113.11"]},
            "us-west-2": {"addresses": ["198.51.100.20"]},
        },
    }
    aws.update(over.pop("aws", {}))
    data = config_data(tmp_path, app_domain=DOMAIN, profile="seed", aws=aws, **over)
    return parse_config(data)


@pytest.fixture
def zone_id(moto_endpoint: str) -> str:
    r53 = boto3.client("route53", region_name="us-east-1")
    zone = r53.create_hosted_zone(Name="rideout.example", CallerReference="zone")
    return zone["HostedZone"]["Id"].removeprefix("/hostedzone/")


def summary(plan: Any) -> list[tuple[str, str, str]]:
    return [(c.action, c.kind, c.name) for c in plan.changes]


def test_plan_apply_replan_ttl_destroy(tmp_path: Path, zone_id: str) -> None:
    config = aws_config(tmp_path, zone_id)
    session = AwsSession()
    r53 = boto3.client("route53", region_name="us-east-1")
    # A record set rideout did not create, with the same name: it must survive destroy.
    r53.change_resource_record_sets(
        HostedZoneId=zone_id,
        ChangeBatch={
            "Changes": [
                {
                    "Action": "CREATE",
                    "ResourceRecordSet": {
                        "Name": f"{DOMAIN}.",
                        "Type": "A",
                        "SetIdentifier": "someone-else",
                        "Weight": 0,
                        "TTL": 300,
                        "ResourceRecords": [{"Value": "192.0.2.99"}],
                    },
                }
            ]
        },
    )

    plan = make_plan(session, config)  # an empty account: everything to create
    assert summary(plan) == [
        ("create", "cloudwatch-alarm", "auction-test-us-east-1-websocket-health"),
        ("create", "cloudwatch-alarm", "auction-test-us-west-2-websocket-health"),
        ("create", "route53-health-check", "auction-test-us-east-1"),
        ("create", "route53-health-check", "auction-test-us-west-2"),
        ("create", "route53-records", DOMAIN),
    ]
    result = apply_plan(session, config, plan)
    assert result.error is None
    assert len(result.done) == 5

    assert make_plan(session, config).empty  # apply twice changes nothing
    assert apply_plan(session, config, make_plan(session, config)).done == []

    # What apply made, as AWS reports it.
    cw = boto3.client("cloudwatch", region_name="us-west-2")  # the standby region
    alarms = {a["AlarmName"]: a for a in cw.describe_alarms()["MetricAlarms"]}
    alarm = alarms["auction-test-us-east-1-websocket-health"]
    assert (alarm["Namespace"], alarm["MetricName"]) == ("App", "WebSocketHealth")
    assert alarm["Dimensions"] == [{"Name": "ApiId", "Value": "us-east-1"}]
    assert (alarm["EvaluationPeriods"], alarm["DatapointsToAlarm"]) == (7, 2)
    assert alarm["TreatMissingData"] == "breaching"
    assert alarm["Period"] == 60
    tags = cw.list_tags_for_resource(ResourceARN=alarm["AlarmArn"])["Tags"]
    assert {"Key": "rideout:deployment", "Value": "auction-test"} in tags
    assert {"Key": "team", "Value": "auctions"} in tags
    assert (
        boto3.client("cloudwatch", region_name="us-east-1").describe_alarms()["MetricAlarms"] == []
    )  # nothing in the primary region
    records = [
        r
        for r in r53.list_resource_record_sets(HostedZoneId=zone_id)["ResourceRecordSets"]
        if r["Name"] == f"{DOMAIN}."
    ]
    failover = {r["Failover"]: r for r in records if "Failover" in r}
    assert failover["PRIMARY"]["SetIdentifier"] == "auction-test-us-east-1"
    assert failover["PRIMARY"]["TTL"] == failover["SECONDARY"]["TTL"] == 60  # seed's dns_ttl
    assert sorted(v["Value"] for v in failover["PRIMARY"]["ResourceRecords"]) == [
        "203.0.113.10",
        "203.0.113.11",
    ]
    assert failover["SECONDARY"]["SetIdentifier"] == "auction-test-us-west-2"
    checks = {c["Id"]: c for c in r53.list_health_checks()["HealthChecks"]}
    assert failover["PRIMARY"]["HealthCheckId"] in checks
    assert failover["SECONDARY"]["HealthCheckId"] in checks
    assert {c["HealthCheckConfig"]["Type"] for c in checks.values()} == {"CLOUDWATCH_METRIC"}

    # A changed TTL is exactly one change, of one field (both records, one ChangeBatch).
    changed = aws_config(tmp_path, zone_id, timing={"dns_ttl": 120})
    plan = make_plan(session, changed)
    assert summary(plan) == [("update", "route53-records", DOMAIN)]
    assert [(f.field, f.old, f.new) for f in plan.changes[0].fields] == [("TTL", 60, 120)]
    assert apply_plan(session, changed, plan).error is None
    assert make_plan(session, changed).empty

    # Destroy: everything of rideout's goes, the other record set stays.
    plan = destroy_plan(session, changed)
    assert {c.action for c in plan.changes} == {"delete"}
    assert len(plan.changes) == 5
    assert plan.changes[0].kind == "route53-records"  # records before their health checks
    assert apply_plan(session, changed, plan).error is None
    assert destroy_plan(session, changed).empty
    left = r53.list_resource_record_sets(HostedZoneId=zone_id)["ResourceRecordSets"]
    assert [r.get("SetIdentifier") for r in left if r["Name"] == f"{DOMAIN}."] == ["someone-else"]
    assert r53.list_health_checks()["HealthChecks"] == []
    assert cw.describe_alarms()["MetricAlarms"] == []


def test_an_alarm_rideout_did_not_create_is_adopted_never_deleted(
    tmp_path: Path, zone_id: str
) -> None:
    config = aws_config(tmp_path, zone_id)
    cw = boto3.client("cloudwatch", region_name="us-west-2")
    cw.put_metric_alarm(  # someone's alarm, with the name rideout wants, another threshold
        AlarmName="auction-test-us-east-1-websocket-health",
        Namespace="App",
        MetricName="WebSocketHealth",
        Dimensions=[{"Name": "ApiId", "Value": "us-east-1"}],
        Statistic="Minimum",
        Period=60,
        EvaluationPeriods=2,
        DatapointsToAlarm=2,
        Threshold=1.0,
        ComparisonOperator="LessThanThreshold",
        TreatMissingData="breaching",
    )
    session = AwsSession()
    plan = make_plan(session, config)
    adopted = [c for c in plan.changes if c.name == "auction-test-us-east-1-websocket-health"]
    assert [(c.action, [(f.field, f.old, f.new) for f in c.fields]) for c in adopted] == [
        ("update", [("EvaluationPeriods", 2, 7)])
    ]
    assert apply_plan(session, config, plan).error is None
    assert make_plan(session, config).empty
    assert apply_plan(session, config, destroy_plan(session, config)).error is None
    left = [a["AlarmName"] for a in cw.describe_alarms()["MetricAlarms"]]
    assert left == ["auction-test-us-east-1-websocket-health"]  # not rideout's to delete


def test_a_changed_insufficient_data_setting_updates_the_checks_in_place(
    tmp_path: Path, zone_id: str
) -> None:
    config = aws_config(tmp_path, zone_id)
    session = AwsSession()
    assert apply_plan(session, config, make_plan(session, config)).error is None
    r53 = boto3.client("route53", region_name="us-east-1")
    before = sorted(c["Id"] for c in r53.list_health_checks()["HealthChecks"])
    changed = aws_config(tmp_path, zone_id, aws={"insufficient_data_health": "LastKnownStatus"})
    plan = make_plan(session, changed)
    assert summary(plan) == [
        ("update", "route53-health-check", "auction-test-us-east-1"),
        ("update", "route53-health-check", "auction-test-us-west-2"),
    ]
    assert apply_plan(session, changed, plan).error is None
    assert make_plan(session, changed).empty
    assert sorted(c["Id"] for c in r53.list_health_checks()["HealthChecks"]) == before
