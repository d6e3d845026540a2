"""`rideout --help` helps: commands grouped by pattern, choices and defaults shown,
flags shown as flags (issue #32, item 7)."""

from __future__ import annotations

import re
import typing
from collections.abc import Iterator
from typing import Any

import pytest
import typer.main
from typer.testing import CliRunner

from rideout.cli import app
from rideout.cli import drill as drill_cli
from rideout.cli._help import PANELS
from rideout.config import PROFILES
from rideout.drill.options import FAULTS
from rideout.drill.surge import INLETS

runner = CliRunner()


def _commands(command: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    yield path, command
    for name, sub in getattr(command, "commands", {}).items():
        yield from _commands(sub, (*path, name))


ALL = [path for path, _ in _commands(typer.main.get_command(app))]


def test_every_command_is_in_a_group_of_the_top_level_help() -> None:
    top = {path[0] for path in ALL if len(path) == 1}
    assert top == set(PANELS), "a command without a group in rideout.cli._help.PANELS"
    shown = runner.invoke(app, ["--help"], env={"COLUMNS": "200"}).stdout
    for panel in set(PANELS.values()):
        assert panel in shown


@pytest.mark.parametrize("path", ALL, ids=lambda p: " ".join(p) or "rideout")
def test_help_shows_no_bool_and_no_prose_choices(path: tuple[str, ...]) -> None:
    result = runner.invoke(app, [*path, "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "<bool>" not in result.stdout
    # A string option whose help spells its choices out ("kill, freeze or throttle")
    # should have been a choice: --help would show them, and a typo is refused early.
    word = r"[a-z]+( \([^)]*\))?"  # a choice, maybe followed by what it means
    prose = re.compile(rf"<str>\s+[│|]?\s*{word}(, {word})* or [a-z]+[ .(]")
    assert not prose.search(result.stdout), result.stdout


def test_the_choices_are_the_drills_own() -> None:
    """The CLI's choice types say what the library accepts, not a copy that drifts."""
    assert typing.get_args(drill_cli.Fault) == FAULTS
    assert typing.get_args(drill_cli.Inlet) == INLETS
    assert set(typing.get_args(drill_cli.Profile)) == set(PROFILES)
    assert set(typing.get_args(drill_cli.Replication)) == {"sync", "async"}


def test_a_choice_is_refused_naming_the_choices() -> None:
    result = runner.invoke(app, ["drill", "region-outage", "--fault", "explode"])
    assert result.exit_code == 2
    assert "'kill', 'freeze', 'throttle'" in " ".join(result.stderr.split())
