"""CloudWatch: the canary alarms rideout keeps in the alarm region (observe and apply)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rideout.aws.desired import DEPLOYMENT_TAG, REGION_TAG, alarm_region, tags
from rideout.aws.plan import Change, Resource
from rideout.aws.session import AwsSession, boundary
from rideout.config import Config
from rideout.health.names import METRIC_NAME, NAMESPACE

if TYPE_CHECKING:
    from mypy_boto3_cloudwatch.type_defs import MetricAlarmTypeDef

__all__ = ["apply_alarm", "observe_alarms"]

_SPEC_FIELDS = (
    "Namespace",
    "MetricName",
    "Statistic",
    "Period",
    "EvaluationPeriods",
    "DatapointsToAlarm",
    "Threshold",
    "ComparisonOperator",
    "TreatMissingData",
)


def _spec(alarm: MetricAlarmTypeDef) -> dict[str, Any]:
    spec: dict[str, Any] = {k: alarm.get(k) for k in _SPEC_FIELDS}
    spec["Dimensions"] = ",".join(f"{d['Name']}={d['Value']}" for d in alarm.get("Dimensions", []))
    if spec["Threshold"] is not None:
        spec["Threshold"] = float(spec["Threshold"])
    return {k: spec[k] for k in ("Namespace", "MetricName", "Dimensions", *_SPEC_FIELDS[2:])}


def observe_alarms(session: AwsSession, config: Config) -> list[Resource]:
    """The alarms on the canary metric in the alarm region: rideout's (by tag) and any
    others that bear a name rideout wants (adopted, never deleted)."""
    region = alarm_region(config)
    client = session.cloudwatch(region)
    wanted = {config.aws.alarm_name(r.name) for r in config.regions}
    found: list[Resource] = []
    with boundary(f"DescribeAlarms in {region}"):
        pages = client.get_paginator("describe_alarms").paginate(AlarmTypes=["MetricAlarm"])
        alarms = [a for page in pages for a in page.get("MetricAlarms", [])]
    for alarm in alarms:
        name = alarm["AlarmName"]
        on_canary = alarm.get("Namespace") == NAMESPACE and alarm.get("MetricName") == METRIC_NAME
        if not on_canary and name not in wanted:
            continue
        with boundary(f"ListTagsForResource {name}"):
            listed = client.list_tags_for_resource(ResourceARN=alarm["AlarmArn"])["Tags"]
        tagged = {t["Key"]: t["Value"] for t in listed}
        owned = tagged.get(DEPLOYMENT_TAG) == config.aws.deployment
        if owned or name in wanted:
            found.append(
                Resource(
                    "cloudwatch-alarm", name, region, _spec(alarm), alarm["AlarmArn"], owned,
                    extra={"region": tagged.get(REGION_TAG, "")},
                )
            )  # fmt: skip
    return found


def _region_of(dimensions: str) -> str:
    return dimensions.partition("=")[2]


def apply_alarm(session: AwsSession, config: Config, change: Change) -> None:
    """Create, update (PutMetricAlarm replaces it whole) or delete one alarm."""
    client = session.cloudwatch(change.region)
    if change.action == "delete":
        with boundary(f"DeleteAlarms {change.name}"):
            client.delete_alarms(AlarmNames=[change.name])
        return
    assert change.desired is not None
    spec = change.desired.spec
    region = _region_of(str(spec["Dimensions"]))
    name, _, value = str(spec["Dimensions"]).partition("=")
    with boundary(f"PutMetricAlarm {change.name}"):
        client.put_metric_alarm(
            AlarmName=change.name,
            AlarmDescription=(
                f"rideout {config.aws.deployment}: the canary of {region} "
                f"({spec['DatapointsToAlarm']} bad of {spec['EvaluationPeriods']} raise it; "
                f"it clears after {int(spec['EvaluationPeriods']) - 1} good in a row)"
            ),
            Namespace=str(spec["Namespace"]),
            MetricName=str(spec["MetricName"]),
            Dimensions=[{"Name": name, "Value": value}],
            Statistic="Minimum",
            Period=int(spec["Period"]),
            EvaluationPeriods=int(spec["EvaluationPeriods"]),
            DatapointsToAlarm=int(spec["DatapointsToAlarm"]),
            Threshold=float(spec["Threshold"]),
            ComparisonOperator="LessThanThreshold",
            TreatMissingData=str(spec["TreatMissingData"]),
            # Tags only on create: an adopted alarm must stay someone else's (AWS ignores
            # Tags on an existing alarm; moto would apply them).
            Tags=[{"Key": k, "Value": v} for k, v in tags(config, region).items()]
            if change.action == "create"
            else [],
        )
