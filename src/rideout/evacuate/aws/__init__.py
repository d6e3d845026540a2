"""The AWS provider of zone evacuation: Auto Scaling groups, ECS services, Lambda
functions, EKS nodes and ARC zonal shifts, through boto3 (the ``aws`` extra) and the
Kubernetes API. Its ledger is :class:`rideout.evacuate.dynamo.DynamoLedger`.
"""

from __future__ import annotations

from rideout.evacuate.aws._boundary import AwsSettings
from rideout.evacuate.aws.connect import open_aws, settings_from
from rideout.evacuate.aws.errors import AwsNotFound, AwsProviderError, AwsRefused, KubernetesError
from rideout.evacuate.aws.provider import DEFAULT_KINDS, AwsProvider

__all__ = [
    "DEFAULT_KINDS",
    "AwsNotFound",
    "AwsProvider",
    "AwsProviderError",
    "AwsRefused",
    "AwsSettings",
    "KubernetesError",
    "open_aws",
    "settings_from",
]
