"""The AWS provider against moto in server mode (real boto3 over HTTP on loopback).

Where moto differs from AWS the code follows AWS and the test says so: moto never moves
an Auto Scaling group's instances (only the configuration is checked), reports a fixed
VPC id for Lambda functions, and accepts ECS subnets that do not exist.
"""

from __future__ import annotations

import pytest

from rideout.errors import InvalidArgument
from rideout.evacuate.aws import AwsNotFound, AwsProvider, AwsRefused, AwsSettings
from rideout.evacuate.aws.asg import group_name
from rideout.evacuate.aws.ecs import service_cluster
from rideout.evacuate.model import Placement
from tests.evacuate.aws.conftest import SESSION, World


def provider(aws: AwsSettings, world: World) -> AwsProvider:
    return AwsProvider(aws, vpc_ids=[world.vpc])


def test_zone_ids_map_to_the_vpcs_subnets(aws: AwsSettings, world: World) -> None:
    p = provider(aws, world)
    zone = world.zones[1]
    assert p.subnets_in_zone(zone) == {*world.subnets[zone], zone}
    assert p.zones.name_of(zone) == world.names[zone]
    every = [s for subnets in world.subnets.values() for s in subnets]
    assert p.zones_of([*every, zone, "subnet-nope"]) == {
        **{s: z for z, subnets in world.subnets.items() for s in subnets},
        zone: zone,
    }


def test_unscoped_lookups_also_see_the_default_vpc(aws: AwsSettings, world: World) -> None:
    # The trap in AWS's sample: a zone filter alone returns every VPC's subnets there.
    zone = world.zones[0]
    unscoped = AwsProvider(aws).subnets_in_zone(zone)
    assert unscoped > {*world.subnets[zone], zone}


def test_an_unknown_zone_id(aws: AwsSettings, world: World) -> None:
    p = provider(aws, world)
    with pytest.raises(AwsNotFound, match=r"use1-az99.*known: use1-az"):
        p.zones.subnets_in_zone("use1-az99")
    # To the engine, the provider has nothing there: it refuses the evacuation.
    assert p.subnets_in_zone("use1-az99") == frozenset()


def test_placements_of_every_kind(aws: AwsSettings, world: World) -> None:
    p = provider(aws, world)
    assert p.kinds() == ("asg", "ecs", "lambda")
    assert {x.resource: set(x.subnets) for x in p.placements("asg")} == {
        world.asg["web"]: set(world.spread(0, 1, 2)),
        world.asg["batch"]: set(world.spread(0, 1)),
        world.asg["pinned"]: set(world.spread(0)),
    }
    assert {x.resource: set(x.subnets) for x in p.placements("ecs")} == {
        world.ecs["api"]: set(world.spread(0, 1, 2)),
        world.ecs["worker"]: set(world.spread(0, 2)),
    }
    # "plain" has no VPC: nothing to evacuate, so it is not a placement.
    assert {x.resource: set(x.subnets) for x in p.placements("lambda")} == {
        world.lambdas["resize"]: set(world.spread(0, 1, 2)),
        world.lambdas["notify"]: set(world.spread(1, 2)),
    }
    with pytest.raises(InvalidArgument, match="kind"):
        list(p.placements("rds"))


def test_updates_keep_the_rest_of_the_network_configuration(aws: AwsSettings, world: World) -> None:
    p = provider(aws, world)
    kept = tuple(world.spread(1, 2))
    group_ids = (world.security_group,)
    for kind, resource, rest in (
        ("asg", world.asg["web"], ()),  # an ASG's groups are its launch template's
        (
            "ecs",
            world.ecs["api"],
            (("assignPublicIp", ("ENABLED",)), ("securityGroups", group_ids)),
        ),
        ("lambda", world.lambdas["resize"], (("SecurityGroupIds", group_ids),)),
    ):
        p.update(kind, resource, kept)
        assert p.describe(kind, resource) == Placement(kind, resource, kept, rest)

    session = SESSION
    service = session.client("ecs").describe_services(cluster="prod", services=[world.ecs["api"]])
    vpc = service["services"][0]["networkConfiguration"]["awsvpcConfiguration"]
    assert vpc == {
        "subnets": list(kept),
        "securityGroups": [world.security_group],
        "assignPublicIp": "ENABLED",
    }
    config = session.client("lambda").get_function_configuration(FunctionName="resize")
    assert config["VpcConfig"]["SecurityGroupIds"] == [world.security_group]
    group = session.client("autoscaling").describe_auto_scaling_groups(
        AutoScalingGroupNames=["web"]
    )["AutoScalingGroups"][0]
    # AWS derives the zones from the subnets; moto does too (its instances never move).
    assert set(group["AvailabilityZones"]) == {world.names[world.zones[i]] for i in (1, 2)}


def test_an_empty_subnet_list_is_refused_before_any_call(aws: AwsSettings, world: World) -> None:
    p = provider(aws, world)
    with pytest.raises(AwsRefused, match="no subnet"):
        p.update("asg", world.asg["pinned"], ())
    assert p.describe("asg", world.asg["pinned"]) == Placement(
        "asg", world.asg["pinned"], tuple(world.spread(0))
    )


def test_resources_that_are_gone(aws: AwsSettings, world: World) -> None:
    p = provider(aws, world)
    arn = world.asg["web"].replace("/web", "/gone")
    assert p.describe("asg", arn) is None
    gone_service = world.ecs["api"].replace("/api", "/gone")
    assert p.describe("ecs", gone_service) is None
    assert p.describe("lambda", world.lambdas["resize"].replace("resize", "gone")) is None
    for kind, resource in (("asg", arn), ("ecs", gone_service)):
        with pytest.raises(AwsNotFound):
            p.update(kind, resource, ("subnet-1",))


def test_names_from_arns() -> None:
    arn = (
        "arn:aws:autoscaling:us-east-1:123456789012:autoScalingGroup:0f-1:autoScalingGroupName/web"
    )
    assert group_name(arn) == "web"
    assert group_name("web") == "web"
    assert service_cluster("arn:aws:ecs:us-east-1:123456789012:service/prod/api") == "prod"
    assert service_cluster("arn:aws:ecs:us-east-1:123456789012:service/api") is None


def test_every_page_is_read(aws: AwsSettings, world: World) -> None:
    """moto pages DescribeAutoScalingGroups by 50 (as AWS does by default); DescribeServices
    takes at most 10 services a call."""
    template = SESSION.client("ec2").describe_launch_templates()["LaunchTemplates"][0]
    autoscaling, ecs = SESSION.client("autoscaling"), SESSION.client("ecs")
    for i in range(52):
        autoscaling.create_auto_scaling_group(
            AutoScalingGroupName=f"many-{i:02}",
            LaunchTemplate={"LaunchTemplateId": template["LaunchTemplateId"]},
            MinSize=0,
            MaxSize=1,
            VPCZoneIdentifier=",".join(world.spread(0, 1)),
        )
    for i in range(11):
        ecs.create_service(
            cluster=world.cluster,
            serviceName=f"many-{i:02}",
            taskDefinition="app",
            desiredCount=0,
            launchType="FARGATE",
            networkConfiguration={
                "awsvpcConfiguration": {
                    "subnets": world.spread(1, 2),
                    "securityGroups": [world.security_group],
                }
            },
        )
    p = provider(aws, world)
    assert len(list(p.placements("asg"))) == 3 + 52
    assert len(list(p.placements("ecs"))) == 2 + 11
