"""`rideout evacuate` / `recover` / `evacuate list` without a running deployment: usage,
refusals and exit codes (the end-to-end test runs them against `rideout up`)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from typer.testing import CliRunner

from rideout.cli import app
from rideout.config import Config, dump_toml
from rideout.evacuate.ledger import SqliteLedger
from rideout.evacuate.model import Record

runner = CliRunner()


def configured(make_config: Callable[..., Config], tmp_path: Path) -> tuple[Config, str]:
    config = make_config()
    path = tmp_path / "rideout.toml"
    path.write_text(dump_toml(config))
    return config, str(path)


def test_help_names_the_exit_codes() -> None:
    for args in (["evacuate", "--help"], ["recover", "--help"]):
        result = runner.invoke(app, args, env={"COLUMNS": "200"})
        assert result.exit_code == 0
        assert "2 refused" in " ".join(result.output.split())


def test_usage_errors_exit_2(make_config: Callable[..., Config], tmp_path: Path) -> None:
    _, path = configured(make_config, tmp_path)
    assert runner.invoke(app, ["evacuate", "-c", path]).exit_code == 2
    assert (
        runner.invoke(
            app, ["evacuate", "--zone-id", "use1-az1", "--provider", "gcp", "-c", path]
        ).exit_code
        == 2
    )
    bad = runner.invoke(app, ["evacuate", "--zone-id", "use1-az1", "--batch-size", "0", "-c", path])
    assert bad.exit_code == 2
    assert "batch_size" in bad.output


def test_without_a_control_plane_nothing_is_recorded(
    make_config: Callable[..., Config], tmp_path: Path
) -> None:
    config, path = configured(make_config, tmp_path)
    result = runner.invoke(app, ["evacuate", "--zone-id", "use1-az1", "-c", path])
    assert result.exit_code == 1
    assert "does not answer" in result.output
    assert SqliteLedger.in_data_dir(config.data_dir).records() == []


def test_list_shows_the_ledger(make_config: Callable[..., Config], tmp_path: Path) -> None:
    config, path = configured(make_config, tmp_path)
    assert "empty" in runner.invoke(app, ["evacuate", "list", "-c", path]).output
    SqliteLedger.in_data_dir(config.data_dir).merge(
        Record("use1-az1", "us-east-1", "local", ("use1-az1",), 1.7e9, "alice")
    )
    rows = json.loads(runner.invoke(app, ["evacuate", "list", "--json", "-c", path]).output)
    assert rows == [
        {"zone_id": "use1-az1", "resource": "us-east-1", "kind": "local",
         "removed": ["use1-az1"], "at": 1.7e9, "operator": "alice", "before": [],
         "outcome": "", "seen": {}},
    ]  # fmt: skip
    table = runner.invoke(app, ["evacuate", "list", "-c", path], env={"COLUMNS": "200"}).output
    assert "use1-az1" in table
    assert "alice" in table
    assert (
        runner.invoke(
            app, ["evacuate", "list", "--zone-id", "use1-az2", "--json", "-c", path]
        ).output.strip()
        == "[]"
    )
