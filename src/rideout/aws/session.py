"""boto3 clients for a deployment, and the one place AWS errors become rideout's.

Credentials, the endpoint and the retry mode come from boto3's usual sources (the
environment, ``~/.aws``, an instance or task role; ``AWS_ENDPOINT_URL`` points every
client at another endpoint, such as moto's server in the tests). Every call bounds its
connect and read time and retries throttling and transient errors a few times
(botocore's ``standard`` mode), no more.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import boto3
import botocore.config
import botocore.exceptions
import botocore.parsers

from rideout.aws.errors import (
    AwsCredentialsMissing,
    AwsError,
    AwsRequestFailed,
    AwsUnreachable,
)

if TYPE_CHECKING:
    from mypy_boto3_cloudwatch import CloudWatchClient
    from mypy_boto3_elasticache import ElastiCacheClient
    from mypy_boto3_route53 import Route53Client

__all__ = ["AwsSession", "boundary"]

ROUTE53_REGION = "us-east-1"  # Route 53's API is global; boto3 signs it for us-east-1


@contextlib.contextmanager
def boundary(operation: str) -> Iterator[None]:
    """Turn botocore's exceptions raised inside into :class:`~rideout.aws.AwsError`."""
    try:
        yield
    except AwsError:
        raise
    except botocore.exceptions.NoCredentialsError:
        raise AwsCredentialsMissing(
            f"{operation}: no AWS credentials (set AWS_PROFILE or AWS_ACCESS_KEY_ID and "
            "AWS_SECRET_ACCESS_KEY, or run where an instance or task role applies)"
        ) from None
    except (
        botocore.exceptions.EndpointConnectionError,
        botocore.exceptions.ConnectTimeoutError,
        botocore.exceptions.ReadTimeoutError,
    ) as exc:
        raise AwsUnreachable(f"{operation}: {exc}") from None
    except botocore.exceptions.ClientError as exc:
        error: dict[str, Any] = dict(exc.response.get("Error", {}))
        code = str(error.get("Code", "Unknown"))
        message = str(error.get("Message", exc))
        raise AwsRequestFailed(operation, code, message) from None
    except botocore.exceptions.ParamValidationError as exc:
        raise AwsRequestFailed(operation, "ParamValidation", str(exc)) from None
    except botocore.exceptions.BotoCoreError as exc:
        raise AwsRequestFailed(operation, type(exc).__name__, str(exc)) from None
    except botocore.parsers.ResponseParserError as exc:
        # An answer that is not the service's (an emulator's "not implemented" page, a
        # proxy's error page): not a BotoCoreError, so named here. Its first line only.
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise AwsRequestFailed(operation, "UnparsableResponse", first) from None


class AwsSession:
    """One boto3 session's clients, one per service and region, made on first use."""

    def __init__(self, session: boto3.session.Session | None = None) -> None:
        self._session = session or boto3.session.Session()
        self._config = botocore.config.Config(
            connect_timeout=5,
            read_timeout=20,
            retries={"max_attempts": 4, "mode": "standard"},
        )
        self._clients: dict[tuple[str, str], Any] = {}

    def _known(self, service: str, region: str) -> bool:
        """Whether botocore knows `region` for `service` in any partition."""
        return any(
            region in self._session.get_available_regions(service, partition)
            for partition in self._session.get_available_partitions()
        )

    def _client(self, service: str, region: str) -> Any:
        key = (service, region)
        if key not in self._clients:
            # A misspelt region would otherwise surface as an unreachable endpoint.
            # (With AWS_ENDPOINT_URL, such as moto's, any region name is accepted.)
            if (
                service != "route53"
                and not os.environ.get("AWS_ENDPOINT_URL")
                and not self._known(service, region)
            ):
                raise AwsError(
                    f"{region!r} is not an AWS region botocore knows for {service} (check "
                    "aws_region and alarm_region in [aws]; a region newer than this "
                    "botocore needs a newer boto3)"
                )
            with boundary(f"{service} in {region}"):
                self._clients[key] = self._session.client(
                    service,  # type: ignore[call-overload]  # one of three literals
                    region_name=region,
                    config=self._config,
                )
        return self._clients[key]

    def route53(self) -> Route53Client:
        client: Route53Client = self._client("route53", ROUTE53_REGION)
        return client

    def cloudwatch(self, region: str) -> CloudWatchClient:
        client: CloudWatchClient = self._client("cloudwatch", region)
        return client

    def elasticache(self, region: str) -> ElastiCacheClient:
        client: ElastiCacheClient = self._client("elasticache", region)
        return client

    def add_client(self, service: str, region: str, client: Any) -> None:
        """Use `client` for `service` in `region` (tests pass a stubbed one)."""
        self._clients[(service, region)] = client
