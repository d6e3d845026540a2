from __future__ import annotations

import json
import socket
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from rideout import __version__
from rideout.cli import app
from rideout.config import dump_toml, parse_config
from tests.conftest import config_data

runner = CliRunner()


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "rideout.toml"
    path.write_text(dump_toml(parse_config(config_data(tmp_path / ".rideout"))))
    return path


def test_version_and_help() -> None:
    assert runner.invoke(app, ["--version"]).stdout.strip() == f"rideout {__version__}"
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    for command in ("up", "down", "status", "config", "serve", "control-plane", "dns"):
        assert command in result.stdout


def test_help_keeps_what_the_docstrings_say() -> None:
    """Help is rendered as Markdown (paragraphs rewrapped to the terminal): a TOML
    section name such as ``[control_plane]`` is shown, not eaten as a rich style tag."""
    result = runner.invoke(app, ["canary", "--help"])
    assert result.exit_code == 0
    assert "[control_plane] urls" in " ".join(result.stdout.split())


def test_config_show_prints_the_effective_config(config_file: Path) -> None:
    result = runner.invoke(
        app, ["config", "show", "-c", str(config_file)], env={"RIDEOUT_TIMING__DNS_TTL": "7"}
    )
    assert result.exit_code == 0
    shown = parse_config(tomllib.loads(result.stdout))
    assert shown.timing.dns_ttl == 7
    as_json = runner.invoke(app, ["config", "show", "--json", "-c", str(config_file)])
    assert json.loads(as_json.stdout)["app_domain"] == "auction.rideout.test"


def test_bad_config_is_refused_with_the_key(tmp_path: Path) -> None:
    path = tmp_path / "rideout.toml"
    path.write_text("[timing]\ncanary_interval = -1\n")
    for command in (["config", "show"], ["up"], ["status"], ["down"]):
        result = runner.invoke(app, [*command, "-c", str(path)])
        assert result.exit_code == 2, command
        assert "timing.canary_interval: must be a positive number of seconds" in result.stderr


def test_status_and_down_when_nothing_runs(config_file: Path) -> None:
    result = runner.invoke(app, ["status", "-c", str(config_file)])
    assert result.exit_code == 1
    assert "rideout is not running" in result.stdout
    as_json = runner.invoke(app, ["status", "--json", "-c", str(config_file)])
    assert as_json.exit_code == 1
    view = json.loads(as_json.stdout)
    assert view["running"] is False
    assert all(not z["health"]["up"] for r in view["regions"] for z in r["zones"])
    down = runner.invoke(app, ["down", "-c", str(config_file)])
    assert down.exit_code == 0
    assert "nothing to stop" in down.stdout


def test_up_refuses_a_taken_port_and_starts_nothing(config_file: Path) -> None:
    config = parse_config(tomllib.loads(config_file.read_text()))
    cp = config.control_plane
    with socket.socket() as squatter:
        squatter.bind((cp.address, cp.port))
        squatter.listen()
        result = runner.invoke(app, ["up", "-c", str(config_file)])
    assert result.exit_code == 1
    assert f"{cp.address}:{cp.port}, needed by control-plane, is already in use" in result.stderr


def test_serve_an_unknown_zone(config_file: Path) -> None:
    result = runner.invoke(
        app, ["serve", "--region", "us-east-1", "--zone", "nope", "-c", str(config_file)]
    )
    assert result.exit_code == 2
    assert "no zone 'nope' in region 'us-east-1'" in result.stderr


def test_token_issue_mints_a_token_every_server_accepts(config_file: Path) -> None:
    from rideout.auth import JWKSet, SigningKey, TokenVerifier

    config = parse_config(tomllib.loads(config_file.read_text()))
    result = runner.invoke(
        app, ["token", "issue", "--sub", "alice", "--ttl", "60", "-c", str(config_file)]
    )
    assert result.exit_code == 0, result.stderr
    key = SigningKey.load_or_create(config.keys_dir)  # the one the command created
    verifier = TokenVerifier(JWKSet(key.jwks()), config.auth.issuer, config.auth.audience)
    claims = verifier.verify(result.stdout.strip())
    assert claims.sub == "alice"
    assert claims.exp - claims.iat == 60
    bad = runner.invoke(app, ["token", "issue", "--sub", "", "-c", str(config_file)])
    assert bad.exit_code == 2
    assert "cannot issue a token" in bad.stderr


def test_dashboard_login_when_nothing_runs(config_file: Path) -> None:
    result = runner.invoke(app, ["dashboard", "login", "-c", str(config_file)])
    assert result.exit_code == 1
    assert "is rideout up?" in result.stderr
    assert not (config_file.parent / ".rideout" / "keys" / "admin-token").exists()  # made none


async def test_dashboard_login_prints_a_link_the_control_plane_accepts(
    config_file: Path,
) -> None:
    import asyncio

    import httpx

    from rideout.auth.admin import load_or_create_admin_token
    from rideout.config import load_config
    from rideout.controlplane.app import create_app
    from rideout.store.acl import load_or_create_users
    from tests.conftest import serving

    config = load_config(config_file, env={})
    load_or_create_admin_token(config.keys_dir)
    load_or_create_users(config.keys_dir)  # the failover controller's Redis user
    cp = config.control_plane
    async with serving(create_app(config), cp.address, cp.port):
        result = await asyncio.to_thread(
            runner.invoke, app, ["dashboard", "login", "-c", str(config_file)]
        )
        assert result.exit_code == 0, result.output
        link = result.stdout.strip()
        async with httpx.AsyncClient(trust_env=False) as http:
            assert (await http.get(link)).status_code == 303
            assert (await http.get(link)).status_code == 401  # once


def test_token_issue_refuses_a_lifetime_over_the_maximum(config_file: Path) -> None:
    command = ["token", "issue", "--sub", "alice", "-c", str(config_file), "--ttl"]
    result = runner.invoke(app, [*command, "86401"])
    assert result.exit_code == 2
    assert "longer than the longest token lifetime, 86400 s (auth.max_token_ttl)" in (
        result.stderr.replace("\n", "")
    )
    assert result.stdout == ""
    assert runner.invoke(app, [*command, "86400"]).exit_code == 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "give exactly one of --sub NAME and --jti ID"),
        (["--sub", "a", "--jti", "b"], "give exactly one of --sub NAME and --jti ID"),
        (["--sub", "a", "--until", "soon"], "neither a duration (90, 15m, 2h, 7d) nor an ISO"),
        (["--sub", "a", "--until", "2030-01-01T00:00:00"], "has no time zone"),
        (["--jti", "b", "--until", "2000-01-01T00:00:00Z"], "until must be a time after now"),
        (["--sub", ""], "sub must be a non-empty printable string"),
    ],
)
def test_token_revoke_refuses_bad_arguments(
    config_file: Path, args: list[str], message: str
) -> None:
    runner.invoke(app, ["token", "issue", "--sub", "x", "-c", str(config_file)])  # the key
    result = runner.invoke(app, ["token", "revoke", *args, "-c", str(config_file)])
    assert result.exit_code == 2
    assert message in result.stderr.replace("\n", "")


def test_token_revoke_needs_the_deployments_signing_key(config_file: Path) -> None:
    result = runner.invoke(app, ["token", "revoke", "--sub", "a", "-c", str(config_file)])
    assert result.exit_code == 2
    assert "cannot use the deployment's signing key" in result.stderr.replace("\n", "")
    assert "signing-key.pem" in result.stderr.replace("\n", "")


def test_token_revoke_without_a_running_deployment_says_so(config_file: Path) -> None:
    from rideout.config import load_config
    from rideout.store.acl import load_or_create_users

    runner.invoke(app, ["token", "issue", "--sub", "x", "-c", str(config_file)])  # the key
    load_or_create_users(load_config(config_file, env={}).keys_dir)  # as a stopped `up` leaves
    result = runner.invoke(app, ["token", "revoke", "--sub", "a", "-c", str(config_file)])
    assert result.exit_code == 1
    assert "no region's Redis answers as the writer" in result.stderr.replace("\n", "")


def _command_paths(group: Any, prefix: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    """Every command and group under `group` (typer's click groups have `commands`)."""
    for name, command in group.commands.items():
        yield (*prefix, name)
        if hasattr(command, "commands"):
            yield from _command_paths(command, (*prefix, name))


def test_no_help_is_cut_short_in_an_80_column_terminal() -> None:
    """Every command's help fits 80 columns without an option name, default or type
    shown cut off with an ellipsis (drill region-outage's --no-compare-jitter was)."""
    paths = list(_command_paths(typer.main.get_command(app)))
    assert len(paths) > 30
    for path in paths:
        result = runner.invoke(app, [*path, "--help"], env={"COLUMNS": "80"})
        assert result.exit_code == 0, path
        assert "…" not in result.stdout, (path, result.stdout)


def test_drill_region_outage_checks_rooms_and_the_clients_niceness(config_file: Path) -> None:
    """Refused before anything starts (exit 2): the CLI hands both to DrillOptions."""
    base = ["drill", "region-outage", "-c", str(config_file), "--clients", "10"]
    rooms = runner.invoke(app, [*base, "--rooms", "11"])
    assert rooms.exit_code == 2
    assert "--rooms must be between 1 and --clients (10)" in rooms.stderr
    nice = runner.invoke(app, [*base, "--client-nice", "20"])
    assert nice.exit_code == 2
    assert "--client-nice" in nice.stderr
