"""`rideout evacuate|recover|evacuate list --provider aws` against moto in server mode:
the deployment's [evacuate_aws] settings, boto3 reaching moto through AWS_ENDPOINT_URL."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from rideout.cli import app
from rideout.evacuate.aws import AwsSettings
from tests.evacuate.aws.conftest import SESSION, World

runner = CliRunner()


def config(tmp_path: Path, world: World) -> str:
    path = tmp_path / "rideout.toml"
    path.write_text(
        f'data_dir = "{tmp_path / ".rideout"}"\n'
        "[evacuate_aws]\n"
        'region = "us-east-1"\n'
        f'vpc_ids = ["{world.vpc}"]\n'
        'table = "evac-cli"\n'
    )
    return str(path)


def subnets(name: str) -> set[str]:
    group = SESSION.client("autoscaling").describe_auto_scaling_groups(
        AutoScalingGroupNames=[name]
    )["AutoScalingGroups"][0]
    return set(group["VPCZoneIdentifier"].split(","))


def test_evacuate_list_and_recover(aws: AwsSettings, world: World, tmp_path: Path) -> None:
    path = config(tmp_path, world)
    zone = world.zones[1]
    base = ["--provider", "aws", "-c", path]

    dry = runner.invoke(app, ["evacuate", "--zone-id", zone, "--dry-run", "--json", *base])
    assert dry.exit_code == 0, dry.output
    plan = json.loads(dry.stdout)
    assert plan["dry_run"]
    assert {s["resource"] for s in plan["plan"] if s["action"] == "remove"} >= {world.asg["web"]}
    assert subnets("web") == set(world.spread(0, 1, 2))  # a dry run changes nothing

    done = runner.invoke(
        app, ["evacuate", "--zone-id", zone, "--type", "asg,lambda", "--json", *base]
    )
    assert done.exit_code == 0, done.output
    assert subnets("web") == set(world.spread(0, 2))
    assert subnets("batch") == set(world.spread(0))

    listed = runner.invoke(app, ["evacuate", "list", "--json", *base])
    assert listed.exit_code == 0, listed.output
    rows = json.loads(listed.stdout)
    assert {(r["kind"], r["resource"]) for r in rows} == {
        ("asg", world.asg["web"]),
        ("asg", world.asg["batch"]),
        ("lambda", world.lambdas["resize"]),
        ("lambda", world.lambdas["notify"]),
    }

    back = runner.invoke(app, ["recover", "--zone-id", zone, "--json", *base])
    assert back.exit_code == 0, back.output
    assert subnets("web") == set(world.spread(0, 1, 2))
    assert json.loads(runner.invoke(app, ["evacuate", "list", "--json", *base]).stdout) == []


def test_an_unknown_zone_and_a_missing_region_fail_clearly(
    aws: AwsSettings, world: World, tmp_path: Path
) -> None:
    path = config(tmp_path, world)
    result = runner.invoke(
        app, ["evacuate", "--zone-id", "use1-az77", "--provider", "aws", "-c", path]
    )
    assert result.exit_code == 2, result.output
    assert "use1-az77" in result.output
    bare = tmp_path / "bare.toml"
    bare.write_text(f'data_dir = "{tmp_path / ".rideout"}"\n')
    result = runner.invoke(
        app,
        ["evacuate", "--zone-id", world.zones[0], "--provider", "aws", "-c", str(bare)],
        env={"AWS_DEFAULT_REGION": "", "AWS_REGION": ""},
    )
    assert result.exit_code == 2, result.output
    assert "no AWS region" in result.output


def test_a_dry_run_writes_nothing_anywhere(aws: AwsSettings, world: World, tmp_path: Path) -> None:
    base = ["--provider", "aws", "-c", config(tmp_path, world)]
    dry = runner.invoke(app, ["evacuate", "--zone-id", world.zones[0], "--dry-run", *base])
    assert dry.exit_code == 0, dry.output
    listed = runner.invoke(app, ["evacuate", "list", *base])
    assert listed.exit_code == 0, listed.output
    assert "empty" in listed.output
    recover = runner.invoke(app, ["recover", "--dry-run", *base])
    assert recover.exit_code == 0, recover.output
    assert "evac-cli" not in SESSION.client("dynamodb").list_tables()["TableNames"]


def test_unknown_and_unused_zones_are_refused(
    aws: AwsSettings, world: World, tmp_path: Path
) -> None:
    base = ["--provider", "aws", "-c", config(tmp_path, world)]
    unknown = runner.invoke(app, ["recover", "--zone-id", "use1-az99", *base])
    assert unknown.exit_code == 2, unknown.output
    assert "use1-az99" in unknown.output
    assert all(zone in unknown.output for zone in world.zones)  # the zones that exist
    zones = SESSION.client("ec2").describe_availability_zones()["AvailabilityZones"]
    unused = next(z["ZoneId"] for z in zones if z["ZoneId"] not in world.zones)
    nothing = runner.invoke(app, ["evacuate", "--zone-id", unused, *base])
    assert nothing.exit_code == 2, nothing.output
    assert "nothing uses zone" in nothing.output


def test_tables_are_whole_without_a_terminal(
    aws: AwsSettings, world: World, tmp_path: Path
) -> None:
    base = ["--provider", "aws", "-c", config(tmp_path, world)]
    dry = runner.invoke(app, ["evacuate", "--zone-id", world.zones[0], "--dry-run", *base])
    assert dry.exit_code == 0, dry.output
    assert all(arn in dry.stdout for arn in [*world.asg.values(), *world.ecs.values()])
