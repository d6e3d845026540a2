"""Where boto3 meets rideout: client construction and the exception mapping.

Every call to AWS goes through :func:`calling`, so a botocore exception reaches a caller
as an :class:`~rideout.evacuate.aws.errors.AwsProviderError` naming the operation and AWS's own
error code (httpx-style mapping at the boundary). Throttling is retried by botocore's
*standard* retry mode with a bounded number of attempts, configured here once.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, overload

import boto3
import botocore.loaders
import botocore.session
from botocore.config import Config as BotoConfig
from botocore.exceptions import BotoCoreError, ClientError, ParamValidationError
from botocore.parsers import ResponseParserError

from rideout import _validate
from rideout.evacuate.aws.errors import AwsNotFound, AwsProviderError, AwsRefused

if TYPE_CHECKING:
    from mypy_boto3_arc_zonal_shift import ARCZonalShiftClient
    from mypy_boto3_autoscaling import AutoScalingClient
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_ec2 import EC2Client
    from mypy_boto3_ecs import ECSClient
    from mypy_boto3_lambda import LambdaClient
    from mypy_boto3_sts import STSClient

__all__ = ["AwsSettings", "calling", "error_code"]

# AWS error codes that mean "that resource does not exist" across the services used here.
_NOT_FOUND = frozenset(
    {
        "ResourceNotFoundException",
        "ServiceNotFoundException",
        "ClusterNotFoundException",
        "InvalidSubnetID.NotFound",
        "InvalidAvailabilityZone",
        "ValidationError",  # autoscaling: "AutoScalingGroup name not found"
    }
)
# Codes that mean "not now, or not allowed": the request was understood and refused.
_REFUSED = frozenset(
    {
        "ConditionalCheckFailedException",
        "ResourceConflictException",
        "ResourceInUse",
        "ResourceInUseException",
        "ResourceContentionFault",
        "ScalingActivityInProgress",
        "ConflictException",
        "AccessDeniedException",
        "AccessDenied",
        "UnauthorizedOperation",
        "InvalidParameterException",
        "InvalidParameterValueException",
        "InvalidParameterValue",
        "ValidationException",
    }
)


@dataclass(frozen=True, slots=True)
class AwsSettings:
    """How to reach AWS: region, optional endpoint (else boto3's own resolution, which
    honours ``AWS_ENDPOINT_URL``), optional named profile, and the retry bound."""

    region: str
    endpoint_url: str | None = None
    profile: str | None = None
    max_attempts: int = 5
    connect_timeout: float = 5.0
    read_timeout: float = 30.0
    # One boto3 session for every client of these settings: it loads each service's
    # model once (loading EC2's takes most of a second).
    _session: list[boto3.session.Session] = field(
        default_factory=list, init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        _validate.text("region", self.region)
        if self.endpoint_url is not None:  # signed requests (a session token) go there
            _validate.secure_url("endpoint_url", self.endpoint_url)
        _validate.count("max_attempts", self.max_attempts, low=1, high=20)
        _validate.seconds("connect_timeout", self.connect_timeout)
        _validate.seconds("read_timeout", self.read_timeout)

    def boto_config(self) -> BotoConfig:
        """botocore's standard retry mode (throttling and transient errors retried with
        jittered backoff), at most ``max_attempts`` attempts in all."""
        return BotoConfig(
            region_name=self.region,
            retries={"mode": "standard", "total_max_attempts": self.max_attempts},
            connect_timeout=self.connect_timeout,
            read_timeout=self.read_timeout,
        )

    def session(self) -> boto3.session.Session:
        """The boto3 session every client of these settings comes from (made once)."""
        if not self._session:
            with calling("boto3", "create session"):
                core = botocore.session.get_session()
                core.register_component("data_loader", _loader(core))
                self._session.append(
                    boto3.session.Session(
                        profile_name=self.profile, region_name=self.region, botocore_session=core
                    )
                )
        return self._session[0]

    @overload
    def client(self, service: Literal["ec2"]) -> EC2Client: ...
    @overload
    def client(self, service: Literal["autoscaling"]) -> AutoScalingClient: ...
    @overload
    def client(self, service: Literal["ecs"]) -> ECSClient: ...
    @overload
    def client(self, service: Literal["lambda"]) -> LambdaClient: ...
    @overload
    def client(self, service: Literal["dynamodb"]) -> DynamoDBClient: ...
    @overload
    def client(self, service: Literal["arc-zonal-shift"]) -> ARCZonalShiftClient: ...
    @overload
    def client(self, service: Literal["sts"]) -> STSClient: ...
    def client(self, service: str) -> Any:
        """A boto3 client for ``service`` with these settings."""
        with calling(service, "create client"):
            return self.session().client(  # type: ignore[call-overload]
                service, endpoint_url=self.endpoint_url, config=self.boto_config()
            )


# botocore's data loader (service models, endpoint rules, paginators), one per data path
# for the process: a session makes its own by default and parses each model's JSON again
# (EC2's alone is ~300 ms of CPU). The loader only reads and caches what it read.
_LOADERS: dict[str | None, botocore.loaders.Loader] = {}


def _loader(core: botocore.session.Session) -> botocore.loaders.Loader:
    path = core.get_config_variable("data_path")
    found = _LOADERS.get(path)
    if found is None:
        found = _LOADERS.setdefault(path, botocore.loaders.create_loader(path))
    return found


def error_code(error: ClientError) -> str:
    """AWS's error code in a botocore ``ClientError`` ("" if it has none)."""
    return str(error.response.get("Error", {}).get("Code", ""))


@contextlib.contextmanager
def calling(service: str, operation: str) -> Iterator[None]:
    """Map botocore's exceptions raised inside to :class:`AwsProviderError` subclasses."""
    try:
        yield
    except ClientError as exc:
        code = error_code(exc)
        message = str(exc.response.get("Error", {}).get("Message", "")) or str(exc)
        cls: type[AwsProviderError] = AwsProviderError
        if code in _NOT_FOUND or "not found" in message.lower():
            cls = AwsNotFound
        elif code in _REFUSED:
            cls = AwsRefused
        raise cls(f"{service} {operation}: {code}: {message}", code=code) from exc
    except ParamValidationError as exc:
        raise AwsRefused(f"{service} {operation}: invalid request: {exc}", code="") from exc
    except BotoCoreError as exc:
        raise AwsProviderError(f"{service} {operation}: {exc}", code="") from exc
    except ResponseParserError as exc:  # not a BotoCoreError: an answer not the service's
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise AwsProviderError(f"{service} {operation}: {first}", code="") from exc
