"""botocore's exceptions become the provider's at the boundary; retries are bounded."""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError, ParamValidationError

from rideout.evacuate.aws import AwsNotFound, AwsProviderError, AwsRefused, AwsSettings
from rideout.evacuate.aws._boundary import calling
from rideout.evacuate.errors import ProviderError


def client_error(code: str, message: str = "it failed") -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": message}}, "UpdateService")


@pytest.mark.parametrize(
    ("raised", "expected", "code"),
    [
        (client_error("ServiceNotFoundException"), AwsNotFound, "ServiceNotFoundException"),
        (
            client_error("ValidationError", "AutoScalingGroup name not found - x"),
            AwsNotFound,
            "ValidationError",
        ),
        (client_error("ResourceConflictException"), AwsRefused, "ResourceConflictException"),
        (client_error("AccessDeniedException"), AwsRefused, "AccessDeniedException"),
        (client_error("ThrottlingException"), AwsProviderError, "ThrottlingException"),
        (ParamValidationError(report="Invalid length"), AwsRefused, ""),
        (EndpointConnectionError(endpoint_url="http://127.0.0.1:9"), AwsProviderError, ""),
    ],
)
def test_errors_are_mapped(raised: Exception, expected: type[AwsProviderError], code: str) -> None:
    with pytest.raises(expected) as caught, calling("ecs", "UpdateService"):
        raise raised
    assert type(caught.value) is expected
    assert isinstance(caught.value, ProviderError)
    assert caught.value.code == code
    assert str(caught.value).startswith("ecs UpdateService: ")
    assert caught.value.__cause__ is raised


def test_retries_use_the_standard_mode_and_are_bounded() -> None:
    config = AwsSettings(region="eu-west-1", max_attempts=3).boto_config()
    assert config.retries == {"mode": "standard", "total_max_attempts": 3}
    assert config.region_name == "eu-west-1"


@pytest.mark.parametrize(
    "bad", [{"region": ""}, {"max_attempts": 0}, {"max_attempts": 21}, {"read_timeout": -1}]
)
def test_bad_settings(bad: dict[str, object]) -> None:
    with pytest.raises(ValueError, match=next(iter(bad))):
        AwsSettings(**{"region": "us-east-1", **bad})  # type: ignore[arg-type]


def test_sessions_share_one_model_loader_and_keep_their_own_settings() -> None:
    """Each AwsSettings has a session of its own (its profile, its region), and every
    session reads AWS's service models through one loader: a model is parsed once a
    process, not once a session."""
    first = AwsSettings(region="eu-west-1").session()
    second = AwsSettings(region="us-east-2").session()
    assert first is not second
    assert (first.region_name, second.region_name) == ("eu-west-1", "us-east-2")
    loaders = {id(s._session.get_component("data_loader")) for s in (first, second)}
    assert len(loaders) == 1
