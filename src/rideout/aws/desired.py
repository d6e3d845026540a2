"""The desired AWS state of a deployment, from its configuration alone (pure).

Per rideout region (``[aws]`` and ``[aws.regions.<region>]`` of ``rideout.toml``):

- a **CloudWatch alarm** on the region's canary metric (seed 000: ``App/WebSocketHealth``,
  dimension ``ApiId=<region>``, statistic ``Minimum``, ``LessThanThreshold 1``,
  ``TreatMissingData = breaching``), created in ``aws.alarm_region`` (default: the
  secondary's AWS region: the alarm that decides a failover must not live in the region
  that fails). Failback is slower than failover with one M-of-N alarm:
  ``DatapointsToAlarm = failover_datapoints`` (2) of ``EvaluationPeriods =
  failback_datapoints + 1`` (7). Two bad datapoints in a row raise it at once, and it
  clears only when at most one of the last seven is bad, that is after six good ones in a
  row (the seed's "more than five"). Alarms and composite alarms are memoryless, so a
  pair of them (fast to alarm, slow to clear) can only be combined into "either" or
  "both", which is a symmetric rule again; the window of one alarm is the memory.
- a **Route 53 health check** of type ``CLOUDWATCH_METRIC`` that follows that alarm,
  with ``InsufficientDataHealthStatus`` = ``aws.insufficient_data_health`` (the seed's
  ``Unhealthy`` by default);
- a **failover record set** for the app domain: PRIMARY or SECONDARY by the region's
  role, ``SetIdentifier = <deployment>-<region>``, the health check above, and either A
  records (``addresses``, TTL ``timing.dns_ttl``) or an alias (``record_type = "alias"``,
  ``EvaluateTargetHealth`` off: the health check decides). The two record sets are one
  resource (``route53-records``, named by the app domain) with fields ``TTL``,
  ``PRIMARY.*`` and ``SECONDARY.*``, changed in one ChangeBatch, which Route 53 applies
  atomically: the pair is never half updated.

And, with ``aws.global_datastore`` set, the **ElastiCache Global Datastore** over the
regions' replication groups: the primary region's group must exist (rideout does not
choose your VPC, subnets or security groups); the datastore is created on it (or adopted
when it exists) and the secondary's group is created into it.
"""

from __future__ import annotations

from typing import Final

from rideout.aws.plan import Resource
from rideout.config import Config
from rideout.health.names import METRIC_NAME, NAMESPACE, REGION_DIMENSION

__all__ = [
    "DEPLOYMENT_TAG",
    "GLOBAL",
    "REGION_TAG",
    "alarm_region",
    "desired_state",
    "health_check_name",
    "set_identifier",
    "tags",
]

DEPLOYMENT_TAG: Final = "rideout:deployment"
REGION_TAG: Final = "rideout:region"
GLOBAL: Final = "global"
"""The region of Route 53's resources (the API is global; boto3 calls it in us-east-1)."""


def alarm_region(config: Config) -> str:
    """The AWS region of the canary alarms and the metric they watch."""
    return config.aws.alarm_region or config.aws.region(config.secondary.name).aws_region


def set_identifier(config: Config, region: str) -> str:
    """The failover record's SetIdentifier for rideout region `region`."""
    return f"{config.aws.deployment}-{region}"


def health_check_name(config: Config, region: str) -> str:
    """The name rideout gives (as tags) to `region`'s health check."""
    return f"{config.aws.deployment}-{region}"


def tags(config: Config, region: str | None = None) -> dict[str, str]:
    """The tags of everything rideout creates for the deployment (and `region`)."""
    out = dict(config.aws.tags)
    out[DEPLOYMENT_TAG] = config.aws.deployment
    if region is not None:
        out[REGION_TAG] = region
    return out


def _alarm(config: Config, region: str) -> Resource:
    timing = config.timing
    spec = {
        "Namespace": NAMESPACE,
        "MetricName": METRIC_NAME,
        "Dimensions": f"{REGION_DIMENSION}={region}",
        "Statistic": "Minimum",
        "Period": config.aws.period,
        "EvaluationPeriods": timing.failback_datapoints + 1,
        "DatapointsToAlarm": timing.failover_datapoints,
        "Threshold": 1.0,
        "ComparisonOperator": "LessThanThreshold",
        "TreatMissingData": "breaching",
    }
    return Resource("cloudwatch-alarm", config.aws.alarm_name(region), alarm_region(config), spec)


def _health_check(config: Config, region: str) -> Resource:
    spec = {
        "Type": "CLOUDWATCH_METRIC",
        "AlarmRegion": alarm_region(config),
        "AlarmName": config.aws.alarm_name(region),
        "InsufficientDataHealthStatus": config.aws.insufficient_data_health,
    }
    return Resource("route53-health-check", health_check_name(config, region), GLOBAL, spec)


def _records(config: Config) -> Resource:
    spec: dict[str, object] = {"Name": f"{config.app_domain}.", "Type": "A"}
    if config.aws.record_type == "A":
        spec["TTL"] = config.timing.dns_ttl
    for region in config.regions:
        mapped = config.aws.region(region.name)
        role = "PRIMARY" if region.role == "primary" else "SECONDARY"
        spec[f"{role}.SetIdentifier"] = set_identifier(config, region.name)
        spec[f"{role}.HealthCheck"] = health_check_name(config, region.name)
        if config.aws.record_type == "alias":
            spec[f"{role}.AliasDNSName"] = mapped.alias_dns_name.rstrip(".").lower() + "."
            spec[f"{role}.AliasHostedZoneId"] = mapped.alias_hosted_zone_id
        else:
            spec[f"{role}.ResourceRecords"] = tuple(sorted(mapped.addresses))
    return Resource("route53-records", config.app_domain, GLOBAL, spec)


def _elasticache(config: Config) -> list[Resource]:
    aws = config.aws
    primary, secondary = aws.region(config.primary.name), aws.region(config.secondary.name)
    # The primary's group is a member; which member is the datastore's primary is not
    # part of the desired state: the controller moves it in a failover.
    datastore = Resource(
        "elasticache-global-datastore",
        aws.global_datastore,
        primary.aws_region,
        {"Member": f"{primary.aws_region}:{primary.replication_group}"},
    )
    spec: dict[str, object] = {"GlobalDatastore": aws.global_datastore}
    if secondary.cache_subnet_group:
        spec["CacheSubnetGroup"] = secondary.cache_subnet_group
    group = Resource(
        "elasticache-replication-group", secondary.replication_group, secondary.aws_region, spec
    )
    return [datastore, group]


def desired_state(config: Config) -> list[Resource]:
    """Every resource `rideout aws apply` makes exist for `config` (see the module doc)."""
    resources: list[Resource] = []
    for region in config.regions:
        resources.append(_alarm(config, region.name))
        if config.aws.hosted_zone_id:
            resources.append(_health_check(config, region.name))
    if config.aws.hosted_zone_id:
        resources.append(_records(config))
    if config.aws.global_datastore:
        resources.extend(_elasticache(config))
    return resources
