"""`rideout aws plan|apply|destroy` from the command line, against moto's server."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import boto3
import pytest
from typer.testing import CliRunner

from rideout.cli import app
from rideout.cli.aws import EXIT_AWS_ERROR, EXIT_CHANGES, EXIT_CONFIG, EXIT_OK
from rideout.config import dump_toml, parse_config
from tests.conftest import config_data

runner = CliRunner(env={"COLUMNS": "250"})  # tables unwrapped


@pytest.fixture
def config_file(tmp_path: Path, moto_endpoint: str) -> Path:
    r53 = boto3.client("route53", region_name="us-east-1")
    zone = r53.create_hosted_zone(Name="rideout.example", CallerReference="z")["HostedZone"]
    data = config_data(
        tmp_path / ".rideout",
        app_domain="auction.rideout.example",
        aws={
            "hosted_zone_id": zone["Id"].removeprefix("/hostedzone/"),
            "regions": {
                "us-east-1": {"addresses": ["203.0.113.10"]},
                "us-west-2": {"addresses": ["198.51.100.20"]},
            },
        },
    )
    path = tmp_path / "rideout.toml"
    path.write_text(dump_toml(parse_config(data)))
    return path


def test_plan_apply_plan_destroy(config_file: Path) -> None:
    c = ["-c", str(config_file)]
    plan = runner.invoke(app, ["aws", "plan", *c])
    assert plan.exit_code == EXIT_CHANGES, plan.output
    assert "create" in plan.stdout
    assert "route53-health-check" in plan.stdout
    assert "5 to create, 0 to update, 0 to delete." in plan.stdout
    as_json = runner.invoke(app, ["aws", "plan", "--json", *c])
    assert as_json.exit_code == EXIT_CHANGES
    assert json.loads(as_json.stdout)["summary"] == {"create": 5, "update": 0, "delete": 0}

    applied = runner.invoke(app, ["aws", "apply", *c])  # nothing to delete: no question
    assert applied.exit_code == EXIT_OK, applied.output
    assert "Applied 5 changes." in applied.stdout
    again = runner.invoke(app, ["aws", "plan", *c])
    assert again.exit_code == EXIT_OK
    assert "No changes" in again.stdout

    refused = runner.invoke(app, ["aws", "destroy", *c])  # stdin is not a terminal
    assert refused.exit_code == EXIT_AWS_ERROR
    assert "--yes" in refused.stderr
    assert runner.invoke(app, ["aws", "plan", *c]).exit_code == EXIT_OK  # nothing deleted

    destroyed = runner.invoke(app, ["aws", "destroy", "--yes", "--json", *c])
    assert destroyed.exit_code == EXIT_OK, destroyed.output
    report = json.loads(destroyed.stdout)
    assert len(report["done"]) == 5
    assert report["error"] is None
    assert runner.invoke(app, ["aws", "plan", *c]).exit_code == EXIT_CHANGES


def test_no_credentials_is_a_clear_error(
    config_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    result = runner.invoke(app, ["aws", "plan", "-c", str(config_file)])
    assert result.exit_code == EXIT_AWS_ERROR
    assert "no AWS credentials" in result.stderr


def test_a_refusal_names_the_operation_and_code(
    config_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = config_file.read_text()
    other = tmp_path / "other.toml"
    other.write_text(text.replace('hosted_zone_id = "', 'hosted_zone_id = "ZNOPE'))
    result = runner.invoke(app, ["aws", "plan", "-c", str(other)])
    assert result.exit_code == EXIT_AWS_ERROR
    assert "ListResourceRecordSets: NoSuchHostedZone" in result.stderr


def test_a_bad_aws_section_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "rideout.toml"
    path.write_text("[aws]\nperiod = 45\n")
    result = runner.invoke(app, ["aws", "plan", "-c", str(path)])
    assert result.exit_code == EXIT_CONFIG
    assert "aws.period: must be 10, 30 or a multiple of 60" in result.stderr


def test_help_documents_the_exit_codes() -> None:
    for command in ("plan", "apply", "destroy"):
        result = runner.invoke(app, ["aws", command, "--help"])
        assert result.exit_code == 0
        assert "Exit codes" in result.stdout


def test_an_unknown_region_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without an endpoint override, a region botocore does not know is refused before
    any request (it would otherwise look like a network failure)."""
    from rideout.aws import AwsError, AwsSession

    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    with pytest.raises(AwsError, match="'us-east-9' is not an AWS region botocore knows"):
        AwsSession().cloudwatch("us-east-9")
    assert AwsSession().cloudwatch("us-west-2") is not None


def test_the_control_plane_provider_is_checked(tmp_path: Path) -> None:
    path = tmp_path / "rideout.toml"
    path.write_text(dump_toml(parse_config(config_data(tmp_path / ".rideout"))))
    bogus = runner.invoke(app, ["control-plane", "--provider", "gcp", "-c", str(path)])
    assert bogus.exit_code == 2  # a usage error: --help lists the choices
    assert "'gcp' is not one of 'redis', 'aws'" in " ".join(bogus.stderr.split())
    aws = runner.invoke(app, ["control-plane", "--provider", "aws", "-c", str(path)])
    assert aws.exit_code == EXIT_CONFIG
    assert "needs aws.global_datastore" in aws.stderr


def test_a_service_moto_lacks_is_one_error_line(tmp_path: Path, moto_endpoint: str) -> None:
    """moto answers the Global Datastore's API with HTTP 500 "not implemented", which
    botocore cannot parse (its ResponseParserError is no BotoCoreError): `aws plan` says
    so in one `error:` line with the operation, exit 4, no traceback (it printed 100)."""
    data = config_data(tmp_path / ".rideout")
    data["aws"] = {
        "deployment": "auction-test",
        "global_datastore": "auction",
        "regions": {
            "us-east-1": {"replication_group": "auction-use1"},
            "us-west-2": {"replication_group": "auction-usw2"},
        },
    }
    path = tmp_path / "rideout.toml"
    path.write_text(dump_toml(parse_config(data)))
    result = subprocess.run(
        [sys.executable, "-m", "rideout", "aws", "plan", "-c", str(path)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == EXIT_AWS_ERROR, result.stdout + result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.stdout + result.stderr
