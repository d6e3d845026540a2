"""The long-lived parts' command line in external mode: secrets made once, never per host."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from rideout.processes import ProcessSetupError, parse_listen

ENV = {k: v for k, v in os.environ.items() if not k.startswith("RIDEOUT_")}


def run(*args: str, cwd: Path, entry: str = "rideout") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", entry, *args], cwd=cwd, capture_output=True, text=True,
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
    result = run(*command, "--config", "rideout.toml", cwd=tmp_path, entry="rideout.processes")
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.startswith("error: external mode: ")
    assert "rideout secrets init" in result.stderr
    assert not (tmp_path / "s").exists()


def test_secrets_init_makes_them_once(tmp_path: Path) -> None:
    (tmp_path / "rideout.toml").write_text(f'mode = "external"\nkeys_dir = "{tmp_path / "s"}"\n')
    assert run("secrets", "init", cwd=tmp_path).returncode == 0
    made = sorted(p.name for p in (tmp_path / "s").iterdir())
    assert made == [
        "admin-token",
        "canary-us-east-1.key",
        "canary-us-west-2.key",
        "resume.key",
        "signing-key.pem",
    ]
    before = {p.name: p.read_bytes() for p in (tmp_path / "s").iterdir()}
    assert run("secrets", "init", cwd=tmp_path).returncode == 0
    assert {p.name: p.read_bytes() for p in (tmp_path / "s").iterdir()} == before
    assert all((p.stat().st_mode & 0o077) == 0 for p in (tmp_path / "s").iterdir())


def test_listen_addresses() -> None:
    assert parse_listen(None, ("10.0.0.1", 80)) == ("10.0.0.1", 80)
    assert parse_listen("0.0.0.0:8000", ("x", 1)) == ("0.0.0.0", 8000)
    for bad in ("8000", "localhost:8000", "0.0.0.0:0", "0.0.0.0:65536", "0.0.0.0:x", "[::1]:80"):
        with pytest.raises(ProcessSetupError, match="expected IP:PORT"):
            parse_listen(bad, ("x", 1))
    assert parse_listen("::1:80", ("x", 1)) == ("::1", 80)
