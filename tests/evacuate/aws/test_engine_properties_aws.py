"""The engine's concurrency guarantees as properties (tests/evacuate/machine.py) against
moto in server mode: one Auto Scaling group, one ECS service and one Lambda function
over three zones, the DynamoDB ledger, operators changing subnets and security groups
through boto3. Few examples: each builds its world in moto (the in-memory and local
runs in tests/evacuate/test_engine_properties.py explore many more)."""

from __future__ import annotations

import dataclasses
import itertools
import urllib.request
from collections.abc import Callable

from hypothesis import HealthCheck, settings
from hypothesis.stateful import run_state_machine_as_test

from rideout.evacuate.aws import AwsProvider, AwsSettings
from rideout.evacuate.dynamo import DynamoLedger
from rideout.evacuate.engine import Engine, Progress
from tests.conftest import examples
from tests.evacuate.aws.conftest import SESSION, lambda_zip
from tests.evacuate.machine import Key, make_machine

SETTINGS = settings(
    max_examples=examples(4),
    stateful_step_count=6,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


class AwsBackend:
    atomic_writes = False  # ASG and ECS have no conditional write

    def __init__(self, endpoint: str, aws: AwsSettings) -> None:
        self.endpoint = endpoint
        self.aws = aws
        self.tables = itertools.count()
        self.ec2 = SESSION.client("ec2")
        self.asg = SESSION.client("autoscaling")
        self.ecs = SESSION.client("ecs")
        self.fn = SESSION.client("lambda")
        self.zones: list[str] = []

    def reset(self) -> None:
        request = urllib.request.Request(f"{self.endpoint}/moto-api/reset", method="POST")
        urllib.request.urlopen(request, timeout=30).close()
        zones = self.ec2.describe_availability_zones()["AvailabilityZones"][:3]
        self.zones = [z["ZoneId"] for z in zones]
        vpc = self.ec2.create_vpc(CidrBlock="10.30.0.0/16")["Vpc"]["VpcId"]
        self.zone_of: dict[str, str] = {}
        for i, zone in enumerate(self.zones):
            for j in range(2):
                subnet = self.ec2.create_subnet(
                    VpcId=vpc, CidrBlock=f"10.30.{i * 2 + j}.0/24", AvailabilityZoneId=zone
                )["Subnet"]["SubnetId"]
                self.zone_of[subnet] = zone
        first = [s for s in self.zone_of][::2]  # the first subnet of each zone
        self.sgs = [
            self.ec2.create_security_group(GroupName=f"g{i}", Description="g", VpcId=vpc)["GroupId"]
            for i in range(2)
        ]
        template = self.ec2.create_launch_template(
            LaunchTemplateName="t", LaunchTemplateData={"ImageId": "ami-12c6146b"}
        )["LaunchTemplate"]["LaunchTemplateId"]
        self.asg.create_auto_scaling_group(
            AutoScalingGroupName="web", MinSize=0, MaxSize=1, DesiredCapacity=0,
            LaunchTemplate={"LaunchTemplateId": template}, VPCZoneIdentifier=",".join(first),
        )  # fmt: skip
        self.ecs.create_cluster(clusterName="c")
        self.ecs.register_task_definition(
            family="t", networkMode="awsvpc", requiresCompatibilities=["FARGATE"], cpu="256",
            memory="512", containerDefinitions=[{"name": "t", "image": "nginx"}],
        )  # fmt: skip
        self.service = self.ecs.create_service(
            cluster="c", serviceName="api", taskDefinition="t", desiredCount=0,
            launchType="FARGATE",
            networkConfiguration={"awsvpcConfiguration": {
                "subnets": first[:2], "securityGroups": [self.sgs[0]], "assignPublicIp": "ENABLED",
            }},
        )["service"]["serviceArn"]  # fmt: skip
        role = SESSION.client("iam").create_role(RoleName="r", AssumeRolePolicyDocument="{}")[
            "Role"
        ]["Arn"]
        self.function = self.fn.create_function(
            FunctionName="resize", Runtime="python3.12", Role=role, Handler="h.h",
            Code={"ZipFile": lambda_zip()},
            VpcConfig={"SubnetIds": first[1:], "SecurityGroupIds": [self.sgs[0]]},
        )["FunctionArn"]  # fmt: skip
        self.group = self.asg.describe_auto_scaling_groups()["AutoScalingGroups"][0][
            "AutoScalingGroupARN"
        ]
        table = f"prop-{next(self.tables)}"
        self._ledger = DynamoLedger(self.aws, table=table, wait_delay=1)
        self._engines = []
        for slot in range(2):
            own = dataclasses.replace(self.aws)  # a session per thread
            provider = AwsProvider(own, vpc_ids=[vpc])
            ledger = DynamoLedger(own, table=table, create=False)
            self._engines.append(Engine(provider, ledger, owner=f"engine-{slot}"))

    def ledger(self) -> DynamoLedger:
        return self._ledger

    def engine(self, hooks: list[Callable[[Progress], None]], slot: int = 0) -> Engine:
        engine = self._engines[slot]
        engine.hooks = list(hooks)
        return engine

    def _ecs(self) -> dict[str, object]:
        found = self.ecs.describe_services(cluster="c", services=["api"])["services"][0]
        return dict(found["networkConfiguration"]["awsvpcConfiguration"])

    def _lambda(self) -> dict[str, object]:
        return dict(self.fn.get_function_configuration(FunctionName="resize")["VpcConfig"])

    def subnets(self) -> dict[Key, frozenset[str]]:
        group = self.asg.describe_auto_scaling_groups(AutoScalingGroupNames=["web"])
        ids = group["AutoScalingGroups"][0]["VPCZoneIdentifier"]
        return {
            ("asg", self.group): frozenset(ids.split(",")),
            ("ecs", self.service): frozenset(self._ecs()["subnets"]),  # type: ignore[arg-type]
            ("lambda", self.function): frozenset(self._lambda()["SubnetIds"]),  # type: ignore[arg-type]
        }

    def candidates(self, key: Key) -> list[tuple[str, str]]:
        return sorted(self.zone_of.items())

    def operator_set(self, key: Key, subnets: tuple[str, ...]) -> None:
        kind = key[0]
        if kind == "asg":
            self.asg.update_auto_scaling_group(
                AutoScalingGroupName="web", VPCZoneIdentifier=",".join(subnets)
            )
        elif kind == "ecs":
            vpc = {**self._ecs(), "subnets": list(subnets)}
            self.ecs.update_service(
                cluster="c", service="api", networkConfiguration={"awsvpcConfiguration": vpc}
            )  # type: ignore[typeddict-item]
        else:
            vpc = self._lambda()
            self.fn.update_function_configuration(
                FunctionName="resize",
                VpcConfig={"SubnetIds": list(subnets), "SecurityGroupIds": vpc["SecurityGroupIds"]},  # type: ignore[typeddict-item]
            )

    def groups(self) -> dict[Key, frozenset[str]]:
        return {
            ("ecs", self.service): frozenset(self._ecs()["securityGroups"]),  # type: ignore[arg-type]
            ("lambda", self.function): frozenset(self._lambda()["SecurityGroupIds"]),  # type: ignore[arg-type]
        }

    def operator_groups(self, key: Key, index: int) -> frozenset[str] | None:
        groups = [self.sgs[index % 2]]
        if key[0] == "ecs":
            vpc = {**self._ecs(), "securityGroups": groups}
            self.ecs.update_service(
                cluster="c", service="api", networkConfiguration={"awsvpcConfiguration": vpc}
            )  # type: ignore[typeddict-item]
        elif key[0] == "lambda":
            vpc = self._lambda()
            self.fn.update_function_configuration(
                FunctionName="resize",
                VpcConfig={"SubnetIds": vpc["SubnetIds"], "SecurityGroupIds": groups},  # type: ignore[typeddict-item]
            )
        else:
            return None
        return frozenset(groups)

    def in_window(self, change: Callable[[], None]) -> bool:
        return False


def test_no_update_is_lost_on_aws(moto_server: str, aws: AwsSettings) -> None:
    run_state_machine_as_test(make_machine(AwsBackend(moto_server, aws)), settings=SETTINGS)
