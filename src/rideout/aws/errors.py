"""The aws package's exceptions: what AWS (or moto) said, translated at the boundary."""

from __future__ import annotations

from rideout.errors import RideoutError

__all__ = [
    "AwsCredentialsMissing",
    "AwsError",
    "AwsPreconditionFailed",
    "AwsRequestFailed",
    "AwsUnreachable",
]


class AwsError(RideoutError):
    """Base of every error the aws package raises."""


class AwsCredentialsMissing(AwsError):
    """boto3 found no credentials (environment, profile, instance role)."""


class AwsUnreachable(AwsError):
    """The AWS endpoint could not be reached (network, wrong endpoint URL)."""


class AwsRequestFailed(AwsError):
    """AWS refused a request; `code` is its error code (``AccessDenied``, ...)."""

    def __init__(self, operation: str, code: str, message: str) -> None:
        self.operation = operation
        self.code = code
        super().__init__(f"{operation}: {code}: {message}")


class AwsPreconditionFailed(AwsError):
    """Something rideout needs but does not create is missing or not as expected."""
