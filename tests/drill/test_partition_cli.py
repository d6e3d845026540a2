"""`rideout drill partition`'s arguments (no lab: each refusal comes before one is built)."""

from __future__ import annotations

import typing
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rideout.cli import app
from rideout.cli import drill as drill_cli
from rideout.drill.errors import DrillError
from rideout.drill.partition import PartitionOptions
from rideout.drill.partition_scenarios import SCENARIOS

runner = CliRunner()


def test_the_scenario_choices_are_the_drills_own() -> None:
    assert typing.get_args(drill_cli.PartitionScenario) == tuple(SCENARIOS)


def test_help_shows_the_scenarios() -> None:
    shown = runner.invoke(app, ["drill", "partition", "--help"], env={"COLUMNS": "200"})
    assert shown.exit_code == 0, shown.output
    text = " ".join(shown.stdout.split())
    assert "replication-cut|split-brain|zone-store-cut|control-plane-isolated|one-way" in text
    for option in ("--clients", "--max-lost", "--replication", "--id", "--report", "--dir"):
        assert option in text


@pytest.mark.parametrize(
    ("args", "says"),
    [
        ([], "Missing option '--scenario'"),
        (["--scenario", "meteor"], "'replication-cut', 'split-brain'"),
        (["--scenario", "split-brain", "--clients", "1"], "--clients"),
        (["--scenario", "split-brain", "--max-lost", "-1"], "--max-lost"),
        (["--scenario", "split-brain", "--id", "Bad_Id"], "--id"),
        (["--scenario", "split-brain", "--replication", "semi"], "'sync', 'async'"),
    ],
)
def test_bad_input_exits_2_naming_it(args: list[str], says: str) -> None:
    result = runner.invoke(app, ["drill", "partition", *args], env={"COLUMNS": "200"})
    assert result.exit_code == 2, result.output
    assert says in " ".join(result.output.split())


def test_options_refuse_what_the_cli_cannot_catch() -> None:
    with pytest.raises(DrillError, match="--scenario 'meteor'"):
        PartitionOptions(scenario="meteor")
    with pytest.raises(DrillError, match="--clients 1"):
        PartitionOptions(scenario="split-brain", clients=1)
    with pytest.raises(DrillError, match="--replication 'semi'"):
        PartitionOptions(scenario="split-brain", replication="semi")
    with pytest.raises(DrillError, match="--max-lost -1"):
        PartitionOptions(scenario="split-brain", max_lost=-1)
    assert PartitionOptions(scenario="replication-cut", state_dir=Path("/x")).plan.cuts == (
        ("us-east-1", "us-west-2"),
    )


def test_without_root_it_says_so_and_exits_1(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("os.geteuid", lambda: 1000)
    result = runner.invoke(app, ["drill", "partition", "--scenario", "replication-cut"])
    assert result.exit_code == 1
    assert "the network lab needs root" in result.output
