"""AWS in a box: moto in SERVER mode on loopback, reached by real boto3 over real HTTP.

``moto_server`` starts one ``ThreadedMotoServer`` per test module on 127.0.0.1 and a
free port; ``aws`` resets its state and points boto3 at it (``AWS_ENDPOINT_URL``, fake
credentials, no credential or config file of the machine's). ``world`` builds a VPC
with two subnets in each of three zones and Auto Scaling groups, ECS services (Fargate,
awsvpc) and Lambda functions spread over them.
"""

from __future__ import annotations

import io
import json
import urllib.request
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto.server import ThreadedMotoServer

from rideout.evacuate.aws import AwsSettings
from rideout.evacuate.dynamo import DEFAULT_TABLE, KIND_INDEX
from tests.conftest import MOTO_NO_DEFAULT_AMIS, require_aws_mark

REGION = "us-east-1"
# One session for the tests' own clients: it loads each service model once.
SESSION = boto3.session.Session(region_name=REGION)


@pytest.fixture(scope="module")
def moto_server() -> Iterator[str]:
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


@pytest.fixture
def aws(
    moto_server: str,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> AwsSettings:
    """Settings for a fresh moto (state reset), through ``AWS_ENDPOINT_URL`` as a
    deployment would set it: the settings carry no endpoint of their own."""
    require_aws_mark(request)
    monkeypatch.setenv(*MOTO_NO_DEFAULT_AMIS)  # read as the reset rebuilds the backends
    request = urllib.request.Request(f"{moto_server}/moto-api/reset", method="POST")
    with urllib.request.urlopen(request, timeout=30) as answer:
        assert answer.status == 200
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_server)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "aws-credentials"))
    return SETTINGS


# One AwsSettings for every test: its boto3 session (and the client classes botocore
# builds from each service model) is made once per process, not once per test. The
# endpoint and credentials come from the environment each test sets above.
SETTINGS = AwsSettings(region=REGION, max_attempts=2, connect_timeout=5, read_timeout=30)


def lambda_zip() -> bytes:
    """A real, minimal deployment package (moto stores it; nothing runs it)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("handler.py", "def handler(event, context):\n    return 'ok'\n")
    return buffer.getvalue()


@dataclass
class World:
    """What ``world`` built: zone ids in order, subnets by zone id, resource ARNs."""

    zones: list[str]
    names: dict[str, str]  # zone id -> zone name
    subnets: dict[str, list[str]]  # zone id -> the VPC's subnets there
    vpc: str
    security_group: str
    asg: dict[str, str] = field(default_factory=dict)  # name -> ARN
    ecs: dict[str, str] = field(default_factory=dict)
    lambdas: dict[str, str] = field(default_factory=dict)
    cluster: str = "prod"

    def spread(self, *zone_indexes: int) -> list[str]:
        """The first subnet of each zone named by index."""
        return [self.subnets[self.zones[i]][0] for i in zone_indexes]


def build_world(settings: AwsSettings) -> World:
    session = SESSION
    ec2 = session.client("ec2")
    zones = ec2.describe_availability_zones()["AvailabilityZones"][:3]
    ids = [z["ZoneId"] for z in zones]
    names = {z["ZoneId"]: z["ZoneName"] for z in zones}
    vpc = ec2.create_vpc(CidrBlock="10.20.0.0/16")["Vpc"]["VpcId"]
    subnets: dict[str, list[str]] = {}
    for i, zone in enumerate(zones):
        subnets[zone["ZoneId"]] = [
            ec2.create_subnet(
                VpcId=vpc, CidrBlock=f"10.20.{i * 2 + j}.0/24", AvailabilityZoneId=zone["ZoneId"]
            )["Subnet"]["SubnetId"]
            for j in range(2)
        ]
    group = ec2.create_security_group(GroupName="app", Description="app", VpcId=vpc)["GroupId"]
    world = World(ids, names, subnets, vpc, group)

    autoscaling = session.client("autoscaling")
    template = ec2.create_launch_template(
        LaunchTemplateName="app",
        LaunchTemplateData={"ImageId": "ami-12c6146b", "InstanceType": "t3.micro"},
    )["LaunchTemplate"]["LaunchTemplateId"]
    for name, spread in {"web": (0, 1, 2), "batch": (0, 1), "pinned": (0,)}.items():
        autoscaling.create_auto_scaling_group(
            AutoScalingGroupName=name,
            LaunchTemplate={"LaunchTemplateId": template, "Version": "$Latest"},
            MinSize=0,
            MaxSize=3,
            DesiredCapacity=0,
            VPCZoneIdentifier=",".join(world.spread(*spread)),
        )
    for group_info in autoscaling.describe_auto_scaling_groups()["AutoScalingGroups"]:
        world.asg[group_info["AutoScalingGroupName"]] = group_info["AutoScalingGroupARN"]

    ecs = session.client("ecs")
    ecs.create_cluster(clusterName=world.cluster)
    ecs.register_task_definition(
        family="app",
        networkMode="awsvpc",
        requiresCompatibilities=["FARGATE"],
        cpu="256",
        memory="512",
        containerDefinitions=[{"name": "app", "image": "nginx", "essential": True}],
    )
    for name, spread, public in (("api", (0, 1, 2), "ENABLED"), ("worker", (0, 2), "DISABLED")):
        service = ecs.create_service(
            cluster=world.cluster,
            serviceName=name,
            taskDefinition="app",
            desiredCount=0,
            launchType="FARGATE",
            # moto (5.2.5) fails with a 500 on an awsvpc service without security groups.
            networkConfiguration={
                "awsvpcConfiguration": {
                    "subnets": world.spread(*spread),
                    "securityGroups": [group],
                    "assignPublicIp": public,
                }
            },
        )["service"]
        world.ecs[name] = service["serviceArn"]

    iam = session.client("iam")
    role = iam.create_role(
        RoleName="lambda",
        AssumeRolePolicyDocument=json.dumps(
            {
                "Version": "2012-10-17",
                "Statement": [
                    {
                        "Effect": "Allow",
                        "Principal": {"Service": "lambda.amazonaws.com"},
                        "Action": "sts:AssumeRole",
                    }
                ],
            }
        ),
    )["Role"]["Arn"]
    functions = session.client("lambda")
    for name, spread in {"resize": (0, 1, 2), "notify": (1, 2), "plain": ()}.items():
        extra = (
            {"VpcConfig": {"SubnetIds": world.spread(*spread), "SecurityGroupIds": [group]}}
            if spread
            else {}
        )
        created = functions.create_function(
            FunctionName=name,
            Runtime="python3.12",
            Role=role,
            Handler="handler.handler",
            Code={"ZipFile": lambda_zip()},
            **extra,
        )
        world.lambdas[name] = created["FunctionArn"]
    return world


@pytest.fixture
def world(aws: AwsSettings) -> World:
    return build_world(aws)


def ledger_items(zone: str) -> dict[tuple[str, str], dict[str, Any]]:
    """The ledger's rows for ``zone`` as a plain boto3 read of the table sees them (the
    seed's schema, no rideout code between), without the volatile time and version."""
    client = SESSION.client("dynamodb")
    found = client.query(
        TableName=DEFAULT_TABLE,
        KeyConditionExpression="zone_id = :z",
        ExpressionAttributeValues={":z": {"S": zone}},
        ConsistentRead=True,
    )["Items"]
    index = client.describe_table(TableName=DEFAULT_TABLE)["Table"]["GlobalSecondaryIndexes"]
    assert [(i["IndexName"], i["KeySchema"][0]["AttributeName"]) for i in index] == [
        (KIND_INDEX, "kind")
    ]
    for item in found:
        assert float(item.pop("at")["N"]) > 0
        assert int(item.pop("version")["N"]) >= 1
        for name in ("removed", "before"):  # in the service's order: compared as sets
            item[name]["L"].sort(key=lambda v: v["S"])
    return {(item["kind"]["S"], item["resource"]["S"]): item for item in found}
