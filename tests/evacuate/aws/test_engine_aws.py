"""Evacuate a zone id of an AWS region through the engine, and recover it: moto in server
mode (real boto3 over HTTP), the DynamoDB ledger, every kind moto has.

Where moto differs from AWS the code follows AWS and these tests check what AWS
documents, which moto records: the subnets of each resource. moto never moves an Auto
Scaling group's instances (AWS rebalances them), reports a fixed VPC id for Lambda
functions, and accepts ECS subnets that do not exist (no subnet the code sends was not
read from the resource or the ledger). The one failure injected (ThrottlingException on
ECS UpdateService) is a botocore ``before-send`` handler answering as AWS answers: the
edge where moto cannot be made to throttle; the retries and the error mapping above it
are real.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from botocore.awsrequest import AWSResponse

from rideout.evacuate.aws import AwsProvider, AwsSettings
from rideout.evacuate.dynamo import DynamoLedger
from rideout.evacuate.engine import EXIT_OK, EXIT_PARTIAL, EXIT_REFUSED, Engine, Options
from rideout.evacuate.model import SKIP_ALREADY_EVACUATED, SKIP_NO_SUBNET_LEFT
from tests.evacuate.aws.conftest import SESSION, World, ledger_items


def snapshot(p: AwsProvider) -> dict[tuple[str, str], frozenset[str]]:
    return {(x.kind, x.resource): frozenset(x.subnets) for k in p.kinds() for x in p.placements(k)}


@pytest.fixture
def engine(aws: AwsSettings, world: World) -> Iterator[Engine]:
    with AwsProvider(aws, vpc_ids=[world.vpc]) as provider:
        yield Engine(provider, DynamoLedger(aws, wait_delay=1), sleep=lambda _: None)


def test_evacuate_a_zone_and_recover_it(engine: Engine, world: World) -> None:
    provider = engine.provider
    assert isinstance(provider, AwsProvider)
    before = snapshot(provider)
    zone = world.zones[0]
    gone = set(world.subnets[zone])
    options = Options(operator="alice", batch_size=2)

    outcome = engine.evacuate(zone, options)
    assert outcome.exit_code == EXIT_OK, outcome
    after = snapshot(provider)
    for key, subnets in before.items():
        assert after[key] == (subnets if key[1] == world.asg["pinned"] else subnets - gone), key
    # The group with no other zone keeps it: skipped, with the reason, never emptied.
    (skip,) = outcome.skipped
    assert (skip.resource, skip.reason) == (world.asg["pinned"], SKIP_NO_SUBNET_LEFT)
    # The ledger has the seed's rows: zone id, resource ARN, removed subnets, kind, operator.
    rows = engine.ledger.records(zone_id=zone)
    expected = {key for key, subnets in before.items() if subnets & gone} - {
        ("asg", world.asg["pinned"])
    }
    assert {(r.kind, r.resource) for r in rows} == expected
    assert all(set(r.removed) == set(world.spread(0)) and r.operator == "alice" for r in rows)
    assert [r.resource for r in engine.ledger.records(kind="lambda")] == [world.lambdas["resize"]]
    assert ledger_items(zone) == {
        (r.kind, r.resource): _seed_item(
            r.kind, r.resource, world, zone, before[(r.kind, r.resource)]
        )
        for r in rows
    }

    # Re-running changes nothing and loses nothing.
    again = engine.evacuate(zone, options)
    assert again.exit_code == EXIT_OK
    assert again.changed == ()
    assert {s.reason for s in again.skipped} == {SKIP_ALREADY_EVACUATED, SKIP_NO_SUBNET_LEFT}
    assert engine.ledger.records(zone_id=zone) == rows
    assert snapshot(provider) == after

    recovered = engine.recover(zone, options)
    assert recovered.exit_code == EXIT_OK, recovered
    assert snapshot(provider) == before
    assert engine.ledger.records() == []
    assert engine.ledger.lock_owner(zone) is None  # type: ignore[attr-defined]


def _seed_item(
    kind: str, resource: str, world: World, zone: str, subnets: frozenset[str]
) -> dict[str, Any]:
    """What the table holds for one resource evacuated from ``zone`` by alice."""
    gone = world.subnets[zone]
    seen: dict[str, Any] = {
        "asg": {},
        "ecs": {
            "assignPublicIp": {
                "L": [{"S": "ENABLED" if resource == world.ecs["api"] else "DISABLED"}]
            },
            "securityGroups": {"L": [{"S": world.security_group}]},
        },
        "lambda": {"SecurityGroupIds": {"L": [{"S": world.security_group}]}},
    }[kind]
    return {
        "zone_id": {"S": zone},
        "resource": {"S": resource},
        "kind": {"S": kind},
        "removed": {"L": [{"S": s} for s in sorted(subnets) if s in gone]},
        "operator": {"S": "alice"},
        "before": {"L": [{"S": s} for s in sorted(subnets)]},
        "seen": {"M": seen},
        "outcome": {"S": "removed"},
    }


def test_a_zone_no_resource_could_safely_lose_is_refused(engine: Engine, world: World) -> None:
    before = snapshot(engine.provider)  # type: ignore[arg-type]
    outcome = engine.evacuate(world.zones[0], Options(min_healthy_zones=3))
    assert outcome.exit_code == EXIT_REFUSED
    assert outcome.refused is not None
    assert snapshot(engine.provider) == before  # type: ignore[arg-type]
    assert engine.ledger.records() == []


def test_an_unknown_zone_id_is_refused(engine: Engine) -> None:
    outcome = engine.evacuate("use1-az42")
    assert outcome.exit_code == EXIT_REFUSED
    assert "use1-az42" in (outcome.refused or "")


class _Body:
    def __init__(self, body: bytes) -> None:
        self._body = body

    def stream(self, **_: Any) -> Iterator[bytes]:
        yield self._body


def test_a_partial_failure_leaves_the_ledger_true(aws: AwsSettings, world: World) -> None:
    calls: list[str] = []
    throttling = [True]

    def throttle(request: Any, **_: Any) -> AWSResponse | None:
        if not throttling[0]:
            return None  # send it to moto
        calls.append(request.url)
        body = json.dumps({"__type": "ThrottlingException", "message": "Rate exceeded"})
        return AWSResponse(request.url, 400, {"x-amzn-RequestId": "r-1"}, _Body(body.encode()))

    # Registered on the session before the provider makes its clients: they copy it.
    aws.session().events.register("before-send.ecs.UpdateService", throttle)
    zone = world.zones[2]
    with AwsProvider(aws, vpc_ids=[world.vpc]) as provider:
        engine = Engine(provider, DynamoLedger(aws, wait_delay=1), sleep=lambda _: None)
        before = snapshot(provider)
        outcome = engine.evacuate(zone, Options(kinds=("ecs", "lambda")))
        assert outcome.exit_code == EXIT_PARTIAL
        assert {f.step.resource for f in outcome.failed} == {world.ecs["api"], world.ecs["worker"]}
        assert all("ThrottlingException" in f.error for f in outcome.failed)
        assert len(calls) == 2 * aws.max_attempts  # retried, and bounded
        assert outcome.resume is not None
        # The failed services are untouched and have no row; what changed has its row.
        now = snapshot(provider)
        for name in ("api", "worker"):
            assert now[("ecs", world.ecs[name])] == before[("ecs", world.ecs[name])]
        assert {r.resource for r in engine.ledger.records(zone_id=zone)} == {
            world.lambdas["resize"],
            world.lambdas["notify"],
        }

        throttling[0] = False
        # The same command again finishes the job; recovery restores everything.
        assert engine.evacuate(zone, Options(kinds=("ecs", "lambda"))).exit_code == EXIT_OK
        assert len(engine.ledger.records(zone_id=zone)) == 4
        assert engine.recover(zone).exit_code == EXIT_OK
        assert snapshot(provider) == before
        assert engine.ledger.records() == []


def test_a_resources_last_zone_is_never_removed(engine: Engine, world: World) -> None:
    autoscaling = SESSION.client("autoscaling")
    for name in ("web", "batch"):  # now only "pinned" uses zone 0, and nothing else
        autoscaling.update_auto_scaling_group(
            AutoScalingGroupName=name, VPCZoneIdentifier=",".join(world.spread(1, 2))
        )
    outcome = engine.evacuate(world.zones[0], Options(kinds=("asg",)))
    assert outcome.exit_code == EXIT_REFUSED
    assert "no subnet" in (outcome.refused or "")
    assert [(s.resource, s.reason) for s in outcome.skipped] == [
        (world.asg["pinned"], SKIP_NO_SUBNET_LEFT)
    ]
    group = autoscaling.describe_auto_scaling_groups(AutoScalingGroupNames=["pinned"])
    assert group["AutoScalingGroups"][0]["VPCZoneIdentifier"] == world.spread(0)[0]
    assert engine.ledger.records() == []


def test_one_run_per_zone_at_a_time(engine: Engine, world: World) -> None:
    zone = world.zones[1]
    assert engine.ledger.lock(zone, "another-operator", 300)  # their run holds the zone
    before = snapshot(engine.provider)  # type: ignore[arg-type]
    outcome = engine.evacuate(zone)
    assert outcome.exit_code == EXIT_REFUSED
    assert "another run" in (outcome.refused or "")
    assert snapshot(engine.provider) == before  # type: ignore[arg-type]
    engine.ledger.unlock(zone, "another-operator")
    assert engine.evacuate(zone).exit_code == EXIT_OK
