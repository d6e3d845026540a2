"""The AWS provider's errors, beneath :class:`~rideout.evacuate.errors.ProviderError`."""

from __future__ import annotations

from rideout.evacuate.errors import ProviderError

__all__ = ["AwsNotFound", "AwsProviderError", "AwsRefused", "KubernetesError"]


class AwsProviderError(ProviderError):
    """An AWS call failed; the message names the service, the operation and AWS's error
    code (also in :attr:`code`, "" when the failure was not an AWS answer, such as a
    connection error)."""

    def __init__(self, message: str, *, code: str = "") -> None:
        super().__init__(message)
        self.code = code


class AwsNotFound(AwsProviderError):
    """AWS answered that the resource (or zone, or subnet) does not exist."""


class AwsRefused(AwsProviderError):
    """AWS understood the request and refused it: a conflict, a failed condition, a
    validation error or missing permission. Retrying the same request will not help."""


class KubernetesError(ProviderError):
    """The Kubernetes API of an EKS cluster refused a request or could not be reached."""
