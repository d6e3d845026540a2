"""open_aws: the provider and ledger `--provider aws` gets from [evacuate_aws]."""

from __future__ import annotations

from pathlib import Path

import pytest

from rideout.config import parse_config
from rideout.errors import InvalidArgument
from rideout.evacuate.aws import AwsSettings, open_aws, settings_from

CLUSTER = "arn:aws:eks:us-east-1:123456789012:cluster/prod"


def test_every_kind_from_the_settings(aws: AwsSettings, tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("k8s-aws-v1.abc\n")
    config = parse_config({"evacuate_aws": {
        "region": "us-east-1", "table": "t1", "zonal_shift": True, "zonal_shift_expires_in": "30m",
        "eks_cluster": CLUSTER, "eks_server": "https://127.0.0.1:6443", "eks_token_file": str(token),
    }})  # fmt: skip
    provider, ledger = open_aws(config, operator="alice")
    with provider:
        assert provider.kinds() == ("arc-zonal-shift", "asg", "ecs", "lambda", "eks")
        assert provider.zonal_shifts is not None
        assert provider.zonal_shifts.options.expires_in == "30m"
        assert provider.settings.region == "us-east-1"
    assert ledger.table == "t1"
    assert ledger.records() == []  # created, and empty


def test_the_region_comes_from_the_environment(
    aws: AwsSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = parse_config({})
    assert settings_from(config.evacuate_aws).region == "us-east-1"  # AWS_DEFAULT_REGION
    monkeypatch.delenv("AWS_DEFAULT_REGION")
    monkeypatch.delenv("AWS_REGION", raising=False)
    with pytest.raises(InvalidArgument, match="no AWS region"):
        settings_from(config.evacuate_aws)


@pytest.mark.parametrize("content", [None, ""])
def test_a_token_file_that_cannot_be_used(
    aws: AwsSettings, tmp_path: Path, content: str | None
) -> None:
    token = tmp_path / "token"
    if content is not None:
        token.write_text(content)
    config = parse_config({"evacuate_aws": {
        "eks_cluster": CLUSTER, "eks_server": "https://127.0.0.1:6443", "eks_token_file": str(token),
    }})  # fmt: skip
    with pytest.raises(InvalidArgument, match="eks_token_file"):
        open_aws(config)
