"""The AWS provider and its DynamoDB ledger from a deployment's ``[evacuate_aws]`` settings
(what ``rideout evacuate|recover --provider aws`` runs)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import boto3

from rideout.config import Config, EvacuateAwsConfig
from rideout.errors import InvalidArgument
from rideout.evacuate.aws._boundary import AwsSettings, calling
from rideout.evacuate.aws.eks import EksCluster
from rideout.evacuate.aws.provider import AwsProvider
from rideout.evacuate.aws.zonal_shift import ZonalShiftOptions

if TYPE_CHECKING:
    # Imported when called: rideout.evacuate.dynamo imports this package's boundary, so
    # importing it here made ``import rideout.evacuate.dynamo`` (first) circular.
    from rideout.evacuate.dynamo import DynamoLedger

__all__ = ["open_aws", "settings_from"]


def settings_from(aws: EvacuateAwsConfig) -> AwsSettings:
    """How to reach AWS: the configured region, else boto3's (environment, profile)."""
    region = aws.region
    if not region:
        with calling("boto3", "find the region"):
            region = boto3.session.Session(profile_name=aws.profile or None).region_name or ""
    if not region:
        raise InvalidArgument(
            "no AWS region: set [evacuate_aws] region (RIDEOUT_EVACUATE_AWS__REGION) or AWS_REGION"
        )
    return AwsSettings(
        region=region,
        endpoint_url=aws.endpoint_url or None,
        profile=aws.profile or None,
        max_attempts=aws.max_attempts,
    )


def _eks(aws: EvacuateAwsConfig, settings: AwsSettings) -> list[EksCluster]:
    if not aws.eks_cluster:
        return []
    ca_file = aws.eks_ca_file or None
    if not aws.eks_token_file:  # made from the AWS credentials, as `aws eks get-token` does
        return [EksCluster.signed(settings, aws.eks_cluster, aws.eks_server, ca_file=ca_file)]
    path = Path(aws.eks_token_file).expanduser()
    try:
        token = path.read_text().strip()
    except OSError as exc:
        raise InvalidArgument(f"evacuate_aws.eks_token_file: cannot read {path}: {exc}") from exc
    if not token:
        raise InvalidArgument(f"evacuate_aws.eks_token_file: {path} is empty")
    return [EksCluster(aws.eks_cluster, aws.eks_server, token, ca_file=ca_file)]


def open_aws(
    config: Config, *, operator: str = "", create: bool = True
) -> tuple[AwsProvider, DynamoLedger]:
    """The provider of ``config``'s ``[evacuate_aws]`` and its ledger (the table is
    created if missing, unless ``create`` is false: a dry run or a listing writes
    nothing). ``operator`` is recorded by the engine, not here."""
    aws = config.evacuate_aws
    settings = settings_from(aws)
    zonal = (
        ZonalShiftOptions(aws.zonal_shift_resources, aws.zonal_shift_expires_in)
        if aws.zonal_shift
        else None
    )
    provider = AwsProvider(
        settings, vpc_ids=aws.vpc_ids, eks=_eks(aws, settings), zonal_shift=zonal
    )
    from rideout.evacuate.dynamo import DynamoLedger

    return provider, DynamoLedger(settings, table=aws.table, create=create)
