"""`rideout lab ...` without building a lab: its refusals (no root, no TLS-capable
redis-server, no lab running) and its argument errors, each one line, exit 1 or 2; and,
as root, `lab down` removing a lab whose process was killed."""

from __future__ import annotations

import secrets
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

import rideout.store.embedded
from rideout.cli import app
from rideout.cli import lab as lab_cli
from rideout.lab.netns import lab_namespaces

runner = CliRunner()


def run(*args: str) -> Result:
    return runner.invoke(app, ["lab", *args], env={"COLUMNS": "200"})


@pytest.fixture
def as_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lab_cli, "_euid", lambda: 0)


@pytest.fixture
def as_user(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lab_cli, "_euid", lambda: 1000)


@pytest.mark.parametrize(
    "args",
    [
        ["up"],
        ["down"],
        ["status"],
        ["partition", "us-east-1", "us-west-2"],
        ["heal", "--all"],
        ["latency", "35"],
        ["loss", "0.1"],
    ],
)
def test_without_root_every_command_refuses_and_says_why(as_user: None, args: list[str]) -> None:
    result = run(*args)
    assert result.exit_code == 1, result.output
    assert "needs root" in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["up", "--id", "Bad_Id"], "lab id must be 1 to 8"),
        (["status", "--id", "toolongid9"], "lab id must be 1 to 8"),
        (["loss", "2"], "less than or equal to 1"),
        (["loss", "0.1", "--mode", "drop"], "timeout"),
        (["latency", "--", "-1"], "greater than or equal to 0"),
        (["latency", "5", "--direction", "sideways"], "both"),
        (["partition", "a", "b", "--direction", "up"], "a->b"),
        (["heal"], "give A and B, or --all"),
        (["heal", "us-east-1"], "give A and B, or --all"),
        (["heal", "us-east-1", "us-west-2", "--all"], "give A and B, or --all"),
        (["partition", "us-east-1"], "Missing argument"),
    ],
)
def test_bad_input_exits_2(as_root: None, args: list[str], says: str) -> None:
    result = run(*args)
    assert result.exit_code == 2, result.output
    assert says in result.output
    assert "Traceback" not in result.output


def test_no_lab_running_is_a_clear_failure(as_root: None, tmp_path: Path) -> None:
    for args in (["partition", "us-east-1", "us-west-2"], ["status"], ["heal", "--all"]):
        result = run(*args, "--id", "zz9", "--dir", str(tmp_path))
        assert result.exit_code == 1, result.output
        assert "no lab zz9 recorded" in result.output
    result = run("latency", "35", "--id", "zz9", "--dir", str(tmp_path))
    assert result.exit_code == 1, result.output
    assert "`rideout lab up --id zz9` is not running" in result.output


def test_up_without_a_tls_redis_server_says_what_to_install(
    as_root: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(rideout.store.embedded, "tls_redis_server", lambda: None)
    result = run("up", "--id", "zz9", "--dir", str(tmp_path))
    assert result.exit_code == 1, result.output
    assert "no redis-server that serves TLS found" in result.output
    assert "apt-get install redis-server" in result.output
    assert not (tmp_path / "zz9.json").exists()  # nothing was built
    result = run("up", "--id", "zz9", "--dir", str(tmp_path), "--redis-server", "/bin/false")
    assert result.exit_code == 2, result.output
    assert "not a redis-server that serves TLS" in result.output


def test_help_explains_each_command_and_shows_the_choices() -> None:
    result = run("--help")
    assert result.exit_code == 0
    for command in ("up", "down", "status", "partition", "heal", "latency", "loss"):
        assert command in result.output
    assert "both|a->b|b->a" in run("partition", "--help").output.replace(" ", "")
    assert "timeout|reset" in run("loss", "--help").output.replace(" ", "")
    assert "up|down|both" in run("latency", "--help").output.replace(" ", "")


def test_down_removes_a_killed_lab_and_says_what(lab_dir: Path) -> None:
    """As root: a lab whose process died with SIGKILL, removed by `lab down` from its
    record; `lab up` of the same id before that says how to remove it."""
    lab_id = secrets.token_hex(3)
    script = textwrap.dedent(f"""
        import os, signal
        from pathlib import Path
        from rideout.lab.netns import Lab
        from rideout.lab.topology import plan_topology
        Lab(plan_topology({lab_id!r}, {{"us-east-1": ["a"], "us-west-2": ["b"]}}),
            Path({str(lab_dir)!r})).create()
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    subprocess.run([sys.executable, "-c", script], check=False, timeout=60)
    assert len([ns for ns in lab_namespaces() if ns.startswith(f"rdo-{lab_id}-")]) == 3
    if rideout.store.embedded.tls_redis_server() is not None:
        again = run("up", "--id", lab_id, "--dir", str(lab_dir))
        assert again.exit_code == 1, again.output
        assert f"`rideout lab down --id {lab_id}`" in again.output
    result = run("down", "--id", lab_id, "--dir", str(lab_dir))
    assert result.exit_code == 0, result.output
    assert f"removed lab {lab_id}: 3 namespaces (rdo-{lab_id}-router" in result.output
    assert not [ns for ns in lab_namespaces() if ns.startswith(f"rdo-{lab_id}-")]
    assert run("down", "--id", lab_id, "--dir", str(lab_dir)).output.startswith(
        f"no lab {lab_id} here"
    )
