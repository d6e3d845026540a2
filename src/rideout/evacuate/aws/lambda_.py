"""Lambda functions in a VPC: their subnets are ``VpcConfig.SubnetIds``.

An update keeps the function's security groups (and its dual-stack setting), waits
until a previous update has finished (a function mid-update refuses another) and until
this one has (``LastUpdateStatus``), with botocore's ``function_updated_v2`` waiter. It
is conditional on the ``RevisionId`` read with the subnets it checked: AWS refuses it
(``PreconditionFailedException``) if the function changed in between (moto ignores it).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rideout import _validate
from rideout.evacuate.aws._boundary import calling
from rideout.evacuate.aws.errors import AwsNotFound, AwsProviderError
from rideout.evacuate.errors import ResourceChanged
from rideout.evacuate.model import Placement, network, require_unchanged

if TYPE_CHECKING:
    from mypy_boto3_lambda import LambdaClient
    from mypy_boto3_lambda.type_defs import FunctionConfigurationResponseTypeDef, VpcConfigTypeDef

__all__ = ["DEFAULT_WAIT", "KIND", "LambdaFunctions", "WaitPolicy"]

KIND = "lambda"
_REVISION_CHANGED = "PreconditionFailedException"


@dataclass(frozen=True, slots=True)
class WaitPolicy:
    """How long to wait for a function's update: every ``delay`` seconds, at most
    ``attempts`` times."""

    delay: int = 2
    attempts: int = 60

    def __post_init__(self) -> None:
        _validate.count("delay", self.delay, low=1)
        _validate.count("attempts", self.attempts, low=1)


DEFAULT_WAIT = WaitPolicy()


def _placement(config: Mapping[str, Any]) -> Placement | None:
    vpc = config.get("VpcConfig", {})
    subnets = tuple(vpc.get("SubnetIds", []))
    if not subnets:
        return None  # not in a VPC: nothing to remove
    groups = network({"SecurityGroupIds": vpc.get("SecurityGroupIds", [])})
    return Placement(KIND, config.get("FunctionArn") or config["FunctionName"], subnets, groups)


class LambdaFunctions:
    """The ``lambda`` kind: functions attached to a VPC."""

    kind = KIND

    def __init__(self, client: LambdaClient, *, wait: WaitPolicy = DEFAULT_WAIT) -> None:
        self._client = client
        self._wait = wait

    def placements(self) -> Iterator[Placement]:
        with calling("lambda", "ListFunctions"):
            for page in self._client.get_paginator("list_functions").paginate():
                for function in page.get("Functions", []):
                    if (found := _placement(function)) is not None:
                        yield found

    def _configuration(self, resource: str) -> FunctionConfigurationResponseTypeDef | None:
        try:
            with calling("lambda", "GetFunctionConfiguration"):
                return self._client.get_function_configuration(FunctionName=resource)
        except AwsNotFound:
            return None

    def describe(self, resource: str) -> Placement | None:
        config = self._configuration(resource)
        if config is None:
            return None
        return _placement(config) or Placement(KIND, resource, ())

    def _settle(self, resource: str) -> None:
        """Wait until the function's last update has finished (a WaiterError, for a
        failed or endless update, becomes an AwsProviderError at the boundary)."""
        with calling("lambda", "GetFunction (waiting for the update)"):
            self._client.get_waiter("function_updated_v2").wait(
                FunctionName=resource,
                WaiterConfig={"Delay": self._wait.delay, "MaxAttempts": self._wait.attempts},
            )

    def update(
        self, resource: str, subnets: tuple[str, ...], *, expected: tuple[str, ...] | None = None
    ) -> None:
        config = self._configuration(resource)
        if config is not None and config.get("LastUpdateStatus") == "InProgress":
            self._settle(resource)
            config = self._configuration(resource)
        if config is None:
            raise AwsNotFound(f"lambda: no function {resource}")
        current = config.get("VpcConfig", {})
        require_unchanged(KIND, resource, tuple(current.get("SubnetIds", [])), expected)
        vpc: VpcConfigTypeDef = {
            "SubnetIds": list(subnets),
            "SecurityGroupIds": list(current.get("SecurityGroupIds", [])),
        }
        if "Ipv6AllowedForDualStack" in current:
            vpc["Ipv6AllowedForDualStack"] = current["Ipv6AllowedForDualStack"]
        revision = config.get("RevisionId")
        try:
            with calling("lambda", "UpdateFunctionConfiguration"):
                if revision:  # AWS always returns one; the write is conditional on it
                    self._client.update_function_configuration(
                        FunctionName=resource, VpcConfig=vpc, RevisionId=revision
                    )
                else:
                    self._client.update_function_configuration(FunctionName=resource, VpcConfig=vpc)
        except AwsProviderError as exc:
            if exc.code != _REVISION_CHANGED:
                raise
            raise ResourceChanged(f"lambda {resource} changed since it was read: {exc}") from exc
        self._settle(resource)
