"""Route 53: the health checks on the canary alarms and the app domain's failover records.

Health checks carry tags (``rideout:deployment``, ``rideout:region``), so rideout finds
its own; record sets cannot be tagged, so a failover record is rideout's when its
SetIdentifier is one rideout gives (``<deployment>-<region>``) and its health check is
one of rideout's (or it has none). A record set in the zone that is not rideout's is
never touched, whatever its name.

The health check's alarm and insufficient-data setting are also kept in tags
(``rideout:alarm``, ``rideout:insufficient-data``): moto's server returns a
``CLOUDWATCH_METRIC`` health check without them, and the tags let a plan compare the
same fields against both.
"""

from __future__ import annotations

import uuid
from collections.abc import MutableMapping
from typing import TYPE_CHECKING, Any

from rideout.aws.desired import DEPLOYMENT_TAG, GLOBAL, REGION_TAG, set_identifier, tags
from rideout.aws.plan import Change, Resource
from rideout.aws.session import AwsSession, boundary
from rideout.config import Config

if TYPE_CHECKING:
    from mypy_boto3_route53.type_defs import ResourceRecordSetOutputTypeDef

__all__ = ["apply_health_check", "apply_records", "observe_health_checks", "observe_records"]

NAME_TAG = "rideout:name"
ALARM_TAG = "rideout:alarm"
INSUFFICIENT_TAG = "rideout:insufficient-data"


def _zone_id(config: Config) -> str:
    return config.aws.hosted_zone_id.removeprefix("/hostedzone/")


def observe_health_checks(session: AwsSession, config: Config) -> list[Resource]:
    """rideout's health checks for this deployment (found by tag)."""
    client = session.route53()
    with boundary("ListHealthChecks"):
        pages = client.get_paginator("list_health_checks").paginate()
        checks = [c for page in pages for c in page["HealthChecks"]]
    metric_checks = [c for c in checks if c["HealthCheckConfig"]["Type"] == "CLOUDWATCH_METRIC"]
    found: list[Resource] = []
    for start in range(0, len(metric_checks), 10):  # ListTagsForResources takes 10 at most
        batch = metric_checks[start : start + 10]
        with boundary("ListTagsForResources"):
            sets = client.list_tags_for_resources(
                ResourceType="healthcheck", ResourceIds=[c["Id"] for c in batch]
            )["ResourceTagSets"]
        by_id = {
            s.get("ResourceId", ""): {t["Key"]: t["Value"] for t in s.get("Tags", [])} for s in sets
        }
        for check in batch:
            tagged = by_id.get(check["Id"], {})
            if tagged.get(DEPLOYMENT_TAG) != config.aws.deployment or NAME_TAG not in tagged:
                continue
            cfg = check["HealthCheckConfig"]
            alarm = cfg.get("AlarmIdentifier")
            tag_region, _, tag_name = tagged.get(ALARM_TAG, "").partition("/")
            spec = {
                "Type": cfg["Type"],
                "AlarmRegion": alarm["Region"] if alarm else tag_region,
                "AlarmName": alarm["Name"] if alarm else tag_name,
                "InsufficientDataHealthStatus": cfg.get(
                    "InsufficientDataHealthStatus", tagged.get(INSUFFICIENT_TAG, "")
                ),
            }
            found.append(
                Resource(
                    "route53-health-check", tagged[NAME_TAG], GLOBAL, spec, check["Id"],
                    extra={"region": tagged.get(REGION_TAG, "")},
                )
            )  # fmt: skip
    return found


def observe_records(session: AwsSession, config: Config, checks: list[Resource]) -> list[Resource]:
    """The app domain's failover pair, as far as it is rideout's (module docstring)."""
    client = session.route53()
    name = f"{config.app_domain}."
    ours = {set_identifier(config, r.name) for r in config.regions}
    names = {c.ident: c.name for c in checks}
    records: list[ResourceRecordSetOutputTypeDef] = []
    start: dict[str, str] = {"StartRecordName": name, "StartRecordType": "A"}
    while True:  # from the app domain's A records on, until the name changes
        with boundary("ListResourceRecordSets"):
            page = client.list_resource_record_sets(HostedZoneId=_zone_id(config), **start)  # type: ignore[arg-type]
        records.extend(page["ResourceRecordSets"])
        last = page["ResourceRecordSets"][-1]["Name"].lower() if page["ResourceRecordSets"] else ""
        if not page.get("IsTruncated") or last != name:
            break
        start = {
            "StartRecordName": page["NextRecordName"],
            "StartRecordType": page["NextRecordType"],
        }
        if "NextRecordIdentifier" in page:
            start["StartRecordIdentifier"] = page["NextRecordIdentifier"]
    spec: dict[str, Any] = {}
    raw: list[ResourceRecordSetOutputTypeDef] = []
    for record in records:
        if record["Name"].lower() != name or record["Type"] != "A":
            continue
        ident = record.get("SetIdentifier", "")
        check = record.get("HealthCheckId")
        role = record.get("Failover")
        if ident not in ours or not role or (check and check not in names):
            continue
        raw.append(record)
        spec[f"{role}.SetIdentifier"] = ident
        spec[f"{role}.HealthCheck"] = names.get(check or "", check)
        alias = record.get("AliasTarget")
        if alias:
            spec[f"{role}.AliasDNSName"] = alias["DNSName"].lower()
            spec[f"{role}.AliasHostedZoneId"] = alias["HostedZoneId"]
        else:
            # Two different TTLs (edited by hand) show as "60,120": a change either way.
            ttls = sorted({str(t) for t in (spec.get("TTL"), record.get("TTL")) if t is not None})
            spec["TTL"] = int(ttls[0]) if len(ttls) == 1 else ",".join(ttls)
            values = sorted(r["Value"] for r in record.get("ResourceRecords", []))
            spec[f"{role}.ResourceRecords"] = tuple(values)
    if not raw:
        return []
    spec = {"Name": name, "Type": "A", **spec}
    return [Resource("route53-records", config.app_domain, GLOBAL, spec, name, extra={"raw": raw})]


def _check_config(spec: Any) -> dict[str, Any]:
    return {
        "Type": "CLOUDWATCH_METRIC",
        "AlarmIdentifier": {"Region": spec["AlarmRegion"], "Name": spec["AlarmName"]},
        "InsufficientDataHealthStatus": spec["InsufficientDataHealthStatus"],
    }


def apply_health_check(
    session: AwsSession, config: Config, change: Change, ids: MutableMapping[str, str]
) -> None:
    """Create (then tag), update or delete one health check; `ids` maps names to ids."""
    client = session.route53()
    if change.action == "delete":
        assert change.actual is not None
        with boundary(f"DeleteHealthCheck {change.name}"):
            client.delete_health_check(HealthCheckId=change.actual.ident)
        ids.pop(change.name, None)
        return
    assert change.desired is not None
    spec = change.desired.spec
    spec_tags = [
        {"Key": ALARM_TAG, "Value": f"{spec['AlarmRegion']}/{spec['AlarmName']}"},
        {"Key": INSUFFICIENT_TAG, "Value": str(spec["InsufficientDataHealthStatus"])},
    ]
    if change.action == "create":
        region = change.name.removeprefix(f"{config.aws.deployment}-")
        with boundary(f"CreateHealthCheck {change.name}"):
            created = client.create_health_check(
                CallerReference=f"rideout-{change.name}-{uuid.uuid4().hex[:12]}",
                HealthCheckConfig=_check_config(spec),  # type: ignore[arg-type]
            )
        ident = created["HealthCheck"]["Id"]
        ids[change.name] = ident
        own = [{"Key": k, "Value": v} for k, v in tags(config, region).items()]
        own.append({"Key": NAME_TAG, "Value": change.name})
        with boundary(f"ChangeTagsForResource {change.name}"):
            client.change_tags_for_resource(
                ResourceType="healthcheck",
                ResourceId=ident,
                AddTags=own + spec_tags,  # type: ignore[arg-type]
            )
        return
    assert change.actual is not None
    cfg = _check_config(spec)
    with boundary(f"UpdateHealthCheck {change.name}"):
        client.update_health_check(
            HealthCheckId=change.actual.ident,
            AlarmIdentifier=cfg["AlarmIdentifier"],
            InsufficientDataHealthStatus=cfg["InsufficientDataHealthStatus"],
        )
        client.change_tags_for_resource(
            ResourceType="healthcheck",
            ResourceId=change.actual.ident,
            AddTags=spec_tags,  # type: ignore[arg-type]
        )


def _record_set(spec: Any, role: str, ids: MutableMapping[str, str]) -> dict[str, Any]:
    record: dict[str, Any] = {
        "Name": spec["Name"],
        "Type": spec["Type"],
        "SetIdentifier": spec[f"{role}.SetIdentifier"],
        "Failover": role,
        "HealthCheckId": ids[spec[f"{role}.HealthCheck"]],
    }
    if f"{role}.AliasDNSName" in spec:
        record["AliasTarget"] = {
            "HostedZoneId": spec[f"{role}.AliasHostedZoneId"],
            "DNSName": spec[f"{role}.AliasDNSName"],
            "EvaluateTargetHealth": False,
        }
    else:
        record["TTL"] = spec["TTL"]
        record["ResourceRecords"] = [{"Value": v} for v in spec[f"{role}.ResourceRecords"]]
    return record


def apply_records(
    session: AwsSession, config: Config, change: Change, ids: MutableMapping[str, str]
) -> None:
    """Create, update or delete the failover pair in one ChangeBatch (atomic).

    An update UPSERTs both records, and deletes first a record whose SetIdentifier
    is no longer wanted; a delete removes exactly the record sets that were found.
    """
    changes: list[dict[str, Any]] = []
    found = list(change.actual.extra["raw"]) if change.actual is not None else []
    if change.action == "delete":
        changes = [{"Action": "DELETE", "ResourceRecordSet": dict(r)} for r in found]
    else:
        assert change.desired is not None
        spec = change.desired.spec
        wanted = [_record_set(spec, role, ids) for role in ("PRIMARY", "SECONDARY")]
        keep = {r["SetIdentifier"] for r in wanted}
        changes = [
            {"Action": "DELETE", "ResourceRecordSet": dict(r)}
            for r in found
            if r.get("SetIdentifier") not in keep
        ]
        action = "CREATE" if change.action == "create" else "UPSERT"
        changes += [{"Action": action, "ResourceRecordSet": r} for r in wanted]
    with boundary(f"ChangeResourceRecordSets {change.action} {change.name}"):
        session.route53().change_resource_record_sets(
            HostedZoneId=_zone_id(config),
            ChangeBatch={"Comment": f"rideout {config.aws.deployment}", "Changes": changes},  # type: ignore[typeddict-item]
        )
