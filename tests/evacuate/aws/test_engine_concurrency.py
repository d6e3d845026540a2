"""Evacuations that cannot lose an update (issue #30): against moto in server mode, real
boto3 over HTTP, the DynamoDB ledger.

1. recovering every zone at once merges each resource's rows in one update;
2. a change an operator makes while a batched run pauses is kept (the resource is read
   again right before it is written);
3. two zones evacuated at once serialize on the resources they share (a lease per
   resource) and lose neither's change.

After each, every resource holds its original subnets less what the ledger says was
removed, and recovering everything gives back exactly the original configuration.
"""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rideout.cli import app
from rideout.evacuate.aws import AwsProvider, AwsSettings
from rideout.evacuate.dynamo import DynamoLedger
from rideout.evacuate.engine import EXIT_OK, Engine, Options, Progress
from tests.evacuate.aws.conftest import SESSION, World
from tests.evacuate.aws.test_cli_aws import config

Snapshot = dict[tuple[str, str], frozenset[str]]


def snapshot(p: AwsProvider) -> Snapshot:
    return {(x.kind, x.resource): frozenset(x.subnets) for k in p.kinds() for x in p.placements(k)}


def assert_ledger_matches(now: Snapshot, original: Snapshot, ledger: DynamoLedger) -> None:
    """Each resource has its original subnets less those its rows say were removed."""
    removed: dict[tuple[str, str], set[str]] = {}
    for row in ledger.records():
        removed.setdefault((row.kind, row.resource), set()).update(row.removed)
    for key, subnets in original.items():
        assert now[key] == subnets - removed.get(key, set()), key


@pytest.fixture
def provider(aws: AwsSettings, world: World) -> Iterator[AwsProvider]:
    with AwsProvider(aws, vpc_ids=[world.vpc]) as p:
        yield p


def test_recovering_every_zone_loses_no_subnet(
    aws: AwsSettings, world: World, provider: AwsProvider, tmp_path: Path
) -> None:
    original = snapshot(provider)
    base = ["--provider", "aws", "-c", config(tmp_path, world)]
    runner = CliRunner()
    for zone in world.zones[:2]:
        done = runner.invoke(app, ["evacuate", "--zone-id", zone, "--json", *base])
        assert done.exit_code == 0, done.output
    web = ("asg", world.asg["web"])
    assert snapshot(provider)[web] == set(world.spread(2))

    back = runner.invoke(app, ["recover", "--json", *base])
    assert back.exit_code == 0, back.output
    outcome = json.loads(back.stdout)
    # One update per resource, all of its rows merged in it.
    assert len({s["resource"] for s in outcome["changed"]}) == len(outcome["changed"])
    assert snapshot(provider) == original
    assert json.loads(runner.invoke(app, ["evacuate", "list", "--json", *base]).stdout) == []


def test_a_change_made_during_a_batched_run_is_kept(
    aws: AwsSettings, world: World, provider: AwsProvider
) -> None:
    original = snapshot(provider)
    added = world.subnets[world.zones[2]][1]
    functions = SESSION.client("lambda")
    pauses: list[float] = []

    def operator_adds_a_subnet(seconds: float) -> None:
        if not pauses:  # the first pause: "resize" is still waiting its turn
            config = functions.get_function_configuration(FunctionName="resize")["VpcConfig"]
            functions.update_function_configuration(
                FunctionName="resize",
                VpcConfig={
                    "SubnetIds": [*config["SubnetIds"], added],
                    "SecurityGroupIds": config["SecurityGroupIds"],
                },
            )
        pauses.append(seconds)

    ledger = DynamoLedger(aws, wait_delay=1)
    engine = Engine(provider, ledger, sleep=operator_adds_a_subnet)
    outcome = engine.evacuate(world.zones[0], Options(batch_size=1, pause=4))
    assert outcome.exit_code == EXIT_OK, outcome
    assert pauses[:1] == [4]
    resize = ("lambda", world.lambdas["resize"])
    assert snapshot(provider)[resize] == {*world.spread(1, 2), added}
    expected = dict(original)
    expected[resize] = original[resize] | {added}
    assert_ledger_matches(snapshot(provider), expected, ledger)

    assert engine.recover(world.zones[0]).exit_code == EXIT_OK
    assert snapshot(provider) == expected
    assert ledger.records() == []


def test_a_lambda_changed_between_read_and_write_is_refused_by_its_revision_and_replanned(
    aws: AwsSettings, world: World, provider: AwsProvider
) -> None:
    """Lambda's write is conditional on the RevisionId rideout read. An operator's change
    landing between that read and the write makes AWS refuse it (412
    PreconditionFailedException); the engine reads the function again, re-plans, and
    keeps the operator's subnet.

    moto returns no RevisionId and checks none ("not yet implemented", its docs say), so
    two hooks on rideout's own client add AWS's documented rule on top of moto: each read
    carries the function's current revision, each update changes it, and an update that
    names an older one is refused. The operator's change and every subnet are moto's."""
    from botocore.exceptions import ClientError

    original = snapshot(provider)
    resize = world.lambdas["resize"]
    added = world.subnets[world.zones[2]][1]
    functions = SESSION.client("lambda")  # the operator's
    revision = {"n": 1}
    sent: list[object] = []

    def reads_carry_the_revision(parsed: dict[str, object], **_: object) -> None:
        parsed["RevisionId"] = f"rev-{revision['n']}"

    def updates_check_it(params: dict[str, object], **_: object) -> None:
        if params.get("FunctionName") != resize:
            return
        sent.append(params.get("RevisionId"))
        if len(sent) == 1:  # the operator's change lands in rideout's window
            config = functions.get_function_configuration(FunctionName=resize)["VpcConfig"]
            functions.update_function_configuration(
                FunctionName=resize,
                VpcConfig={"SubnetIds": [*config["SubnetIds"], added],
                           "SecurityGroupIds": config["SecurityGroupIds"]},
            )  # fmt: skip
            revision["n"] += 1
        if params.get("RevisionId") != f"rev-{revision['n']}":
            raise ClientError(
                {"Error": {"Code": "PreconditionFailedException",
                           "Message": "The Revision Id provided does not match the latest "
                                      "Revision Id. Call the GetFunction/GetAlias API to "
                                      "retrieve the latest Revision Id"},
                 "ResponseMetadata": {"HTTPStatusCode": 412}},
                "UpdateFunctionConfiguration",
            )  # fmt: skip
        revision["n"] += 1

    events = provider._kinds["lambda"]._client.meta.events  # type: ignore[attr-defined]
    events.register("after-call.lambda.GetFunctionConfiguration", reads_carry_the_revision)
    events.register("before-parameter-build.lambda.UpdateFunctionConfiguration", updates_check_it)
    ledger = DynamoLedger(aws, wait_delay=1)
    outcome = Engine(provider, ledger).evacuate(world.zones[0], Options(kinds=("lambda",)))
    assert outcome.exit_code == EXIT_OK, outcome
    assert sent == ["rev-1", "rev-2"]  # refused once, then written on the fresh revision
    assert snapshot(provider)[("lambda", resize)] == {*world.spread(1, 2), added}
    expected = dict(original)
    expected[("lambda", resize)] = original[("lambda", resize)] | {added}
    assert_ledger_matches(snapshot(provider), expected, ledger)


def test_two_zones_evacuated_at_once_serialize(
    aws: AwsSettings, world: World, provider: AwsProvider
) -> None:
    original = snapshot(provider)
    ledger = DynamoLedger(aws, wait_delay=1)
    both_planned = threading.Barrier(2, timeout=60)

    def wait_for_the_other(p: Progress) -> None:
        if p.event == "planned":  # both runs have read every resource before either writes
            both_planned.wait()

    engines = []
    for _ in range(2):
        settings = dataclasses.replace(aws)  # a session of its own: one per thread
        engines.append(
            Engine(
                AwsProvider(settings, vpc_ids=[world.vpc]),
                DynamoLedger(settings, create=False),
                hooks=[wait_for_the_other],
            )
        )
    outcomes: dict[str, object] = {}

    def run(engine: Engine, zone: str) -> None:
        outcomes[zone] = engine.evacuate(zone, Options(batch_size=1, pause=0.05, operator=zone))

    threads = [
        threading.Thread(target=run, args=(engine, zone))
        for engine, zone in zip(engines, world.zones[:2], strict=True)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert all(getattr(o, "exit_code", None) == EXIT_OK for o in outcomes.values()), outcomes
    now = snapshot(provider)
    assert_ledger_matches(now, original, ledger)
    gone = set(world.subnets[world.zones[0]]) | set(world.subnets[world.zones[1]])
    web = ("asg", world.asg["web"])
    assert now[web] == original[web] - gone  # both zones' changes, neither undone

    assert Engine(provider, ledger).recover().exit_code == EXIT_OK
    assert snapshot(provider) == original
    assert ledger.records() == []


def test_each_type_end_to_end_with_the_ledger_read_by_boto3(
    aws: AwsSettings, world: World, provider: AwsProvider
) -> None:
    """The seed's flow for ASG, ECS and Lambda: evacuate, the rows as DynamoDB holds
    them (a plain boto3 read of the table and of its index), recover."""
    original = snapshot(provider)
    zone = world.zones[1]
    gone = set(world.subnets[zone])
    engine = Engine(provider, DynamoLedger(aws, table="seed", wait_delay=1))
    assert engine.evacuate(zone, Options(operator="alice")).exit_code == EXIT_OK
    dynamodb = SESSION.client("dynamodb")
    items = dynamodb.query(
        TableName="seed",
        KeyConditionExpression="zone_id = :z",
        ExpressionAttributeValues={":z": {"S": zone}},
        ConsistentRead=True,
    )["Items"]
    rows = {i["resource"]["S"]: i for i in items}
    expected = {key for key, subnets in original.items() if subnets & gone and len(subnets) > 1}
    assert {(i["kind"]["S"], r) for r, i in rows.items()} == expected
    assert {k for k, _ in expected} == {"asg", "ecs", "lambda"}
    for (kind, resource), subnets in original.items():
        if (kind, resource) not in expected:
            continue
        item = rows[resource]
        assert [v["S"] for v in item["removed"]["L"]] == world.spread(1)
        assert {v["S"] for v in item["before"]["L"]} == subnets  # what it saw
        assert (item["operator"]["S"], item["outcome"]["S"]) == ("alice", "removed")
        assert float(item["at"]["N"]) > 0
    by_kind = dynamodb.query(
        TableName="seed",
        IndexName="kind-index",
        KeyConditionExpression="kind = :k",
        ExpressionAttributeValues={":k": {"S": "lambda"}},
    )["Items"]
    assert {i["resource"]["S"] for i in by_kind} == {r for k, r in expected if k == "lambda"}

    assert engine.recover(zone).exit_code == EXIT_OK
    assert snapshot(provider) == original
    assert dynamodb.scan(TableName="seed", FilterExpression="attribute_exists(kind)")["Items"] == []


def test_recover_to_the_recorded_configuration(
    aws: AwsSettings, world: World, provider: AwsProvider
) -> None:
    """By default an operator's change made meanwhile is kept; --to-recorded gives back
    exactly what the ledger saw before the evacuation."""
    original = snapshot(provider)
    ledger = DynamoLedger(aws, wait_delay=1)
    engine = Engine(provider, ledger)
    assert engine.evacuate(world.zones[0], Options(kinds=("asg",))).exit_code == EXIT_OK
    extra = world.subnets[world.zones[2]][1]
    SESSION.client("autoscaling").update_auto_scaling_group(
        AutoScalingGroupName="web", VPCZoneIdentifier=",".join([*world.spread(1, 2), extra])
    )
    assert engine.recover(world.zones[0], Options(to_recorded=True)).exit_code == EXIT_OK
    assert snapshot(provider) == original
    assert ledger.records() == []
