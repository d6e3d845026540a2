"""The long-lived parts' command line in external mode: secrets made once, never per host."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from rideout.processes import ProcessSetupError, parse_listen

ENV = {k: v for k, v in os.environ.items() if not k.startswith("RIDEOUT_")}


RIDEOUT = [sys.executable, "-m", "rideout"]
PROCESSES = [sys.executable, "-m", "rideout.processes"]


def run(*args: str, cwd: Path, entry: list[str] = RIDEOUT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*entry, *args], cwd=cwd, capture_output=True, text=True,
        timeout=60, check=False, env={**ENV, "COLUMNS": "200"},
    )  # fmt: skip


@pytest.mark.parametrize(
    "command",
    [
        ["serve", "--region", "us-east-1", "--zone", "use1-az1"],
        ["canary", "--region", "us-east-1"],
        ["control-plane"],
        ["token", "issue", "--sub", "alice"],
    ],
)
def test_without_the_shared_secrets_no_part_starts_or_makes_its_own(
    tmp_path: Path, command: list[str]
) -> None:
    (tmp_path / "rideout.toml").write_text(f'mode = "external"\nkeys_dir = "{tmp_path / "s"}"\n')
    result = run(*command, cwd=tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "rideout secrets init" in result.stderr
    assert not (tmp_path / "s").exists()  # nothing was created


@pytest.mark.parametrize(
    "command",
    [
        ["serve", "--region", "us-east-1", "--zone", "use1-az1"],
        ["canary", "--region", "us-east-1"],
        ["control-plane"],
    ],
)
def test_nor_as_rideout_up_starts_them(tmp_path: Path, command: list[str]) -> None:
    (tmp_path / "rideout.toml").write_text(f'mode = "external"\nkeys_dir = "{tmp_path / "s"}"\n')
    result = run(*command, "--config", "rideout.toml", cwd=tmp_path, entry=PROCESSES)
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.startswith("error: external mode: ")
    assert "rideout secrets init" in result.stderr
    assert not (tmp_path / "s").exists()


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_secrets_init_makes_them_once(tmp_path: Path) -> None:
    (tmp_path / "rideout.toml").write_text(f'mode = "external"\nkeys_dir = "{tmp_path / "s"}"\n')
    first = run("secrets", "init", "--redis-host", "east=10.0.1.5,redis.use1.internal",
                cwd=tmp_path)  # fmt: skip
    assert first.returncode == 0, first.stdout + first.stderr
    assert sorted(_tree(tmp_path / "s")) == [
        "admin-token",
        "canary-us-east-1.key",
        "canary-us-west-2.key",
        "redis/app.password",
        "redis/controller.password",
        "redis/monitor.password",
        "redis/replication.password",
        "redis/server.conf",
        "redis/tls/ca.key",
        "redis/tls/ca.pem",
        "redis/tls/client.key",
        "redis/tls/client.pem",
        "redis/tls/server-east.key",
        "redis/tls/server-east.pem",
        "redis/users-functions.acl",
        "redis/users.acl",
        "resume.key",
        "signing-key.pem",
    ]
    assert "18 made, 0 kept" in first.stdout
    assert all((p.stat().st_mode & 0o077) == 0 for p in (tmp_path / "s").rglob("*"))
    # Which host gets which file: each kind of host, each Redis with its addresses.
    for shown in ("every app server", "the canary of us-east-1", "every control plane",
                  "where `rideout status` runs", "Redis east", "10.0.1.5, redis.use1.internal",
                  "redis/tls/server-east.key", "redis/tls/ca.key (signs a new host's"):  # fmt: skip
        assert shown in first.stdout, (shown, first.stdout)

    before = _tree(tmp_path / "s")
    again = run("secrets", "init", "--redis-host", "west=10.1.1.5", cwd=tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr
    after = _tree(tmp_path / "s")
    assert {name: after[name] for name in before} == before  # nothing replaced
    assert set(after) - set(before) == {"redis/tls/server-west.key", "redis/tls/server-west.pem"}
    assert "2 made, 18 kept" in again.stdout
    assert "Redis east" in again.stdout  # made before: still listed
    assert "Redis west" in again.stdout


@pytest.mark.parametrize(
    ("args", "code", "says"),
    [
        (["--redis-host", "east=10.0.1.300"], 2,
         "error: --redis-host 'east=10.0.1.300': '10.0.1.300' is not an IP address"),
        (["--redis-host", "10.0.1.5"], 2, "expected NAME=ADDRESS"),
        (["--dir", "afile"], 2, "error: --dir afile: not a directory"),
        (["--dir", "afile/sub"], 1, "error: "),
    ],
)  # fmt: skip
def test_secrets_init_says_what_is_wrong(
    tmp_path: Path, args: list[str], code: int, says: str
) -> None:
    (tmp_path / "afile").write_text("a file, not a directory\n")
    (tmp_path / "rideout.toml").write_text(f'mode = "external"\nkeys_dir = "{tmp_path / "s"}"\n')
    result = run("secrets", "init", *args, cwd=tmp_path)
    assert result.returncode == code, result.stdout + result.stderr
    assert says in result.stderr, result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    assert not (tmp_path / "s").exists()


def test_secrets_init_refuses_to_replace_an_unfit_certificate(tmp_path: Path) -> None:
    (tmp_path / "rideout.toml").write_text(f'mode = "external"\nkeys_dir = "{tmp_path / "s"}"\n')
    assert run("secrets", "init", "--redis-host", "east=10.0.1.5", cwd=tmp_path).returncode == 0
    before = _tree(tmp_path / "s")
    result = run("secrets", "init", "--redis-host", "east=10.0.1.6", cwd=tmp_path)
    assert result.returncode == 1
    assert "server-east.pem: it does not name 10.0.1.6; remove server-east.pem" in result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    assert _tree(tmp_path / "s") == before


def test_secrets_init_takes_the_redis_hosts_from_the_config(tmp_path: Path) -> None:
    (tmp_path / "rideout.toml").write_text(f"""
mode = "external"
keys_dir = "{tmp_path / "s"}"
[control_plane]
state_redis_url = "rediss://10.9.0.5:6380"
[[regions]]
name = "us-east-1"
role = "primary"
redis = {{ url = "rediss://10.0.1.20:6380", replica = {{ address = "10.0.2.20" }} }}
zones = [{{ name = "use1-az1", address = "10.0.1.10" }}, {{ name = "use1-az2", address = "10.0.2.10" }}]
[[regions]]
name = "us-west-2"
role = "secondary"
redis = {{ url = "rediss://redis.usw2.internal:6380" }}
zones = [{{ name = "usw2-az1", address = "10.1.1.10" }}]
""")
    result = run("secrets", "init", "--redis-host", "us-west-2=10.1.1.20", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    tls = sorted(p.name for p in (tmp_path / "s" / "redis" / "tls").glob("server-*.pem"))
    assert tls == ["server-control-plane-state.pem", "server-us-east-1-replica.pem",
                   "server-us-east-1.pem", "server-us-west-2.pem"]  # fmt: skip
    assert "10.1.1.20, redis.usw2.internal" in result.stdout  # the config's and the option's


def test_secrets_init_help_says_how_to_name_redis_hosts() -> None:
    result = run("secrets", "init", "--help", cwd=Path.cwd())
    assert result.returncode == 0
    for shown in ("--redis-host", "NAME=ADDRESS", "REGION-replica", "control-plane-state",
                  "never replaced", "Exit codes"):  # fmt: skip
        assert shown in result.stdout, (shown, result.stdout)


def test_listen_addresses() -> None:
    assert parse_listen(None, ("10.0.0.1", 80)) == ("10.0.0.1", 80)
    assert parse_listen("0.0.0.0:8000", ("x", 1)) == ("0.0.0.0", 8000)
    for bad in ("8000", "localhost:8000", "0.0.0.0:0", "0.0.0.0:65536", "0.0.0.0:x", "[::1]:80"):
        with pytest.raises(ProcessSetupError, match="expected IP:PORT"):
            parse_listen(bad, ("x", 1))
    assert parse_listen("::1:80", ("x", 1)) == ("::1", 80)
