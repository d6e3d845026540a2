"""The drill on a terminal: the exit code, the summary, the errors a user sees."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from rideout.config import dump_toml
from rideout.drill import console as console_module
from rideout.drill.console import main_region_outage
from rideout.drill.options import DrillOptions
from tests.drill.conftest import sample_report


def terminal() -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, width=200, highlight=False, color_system=None), out


def test_a_config_that_cannot_load_exits_2(tmp_path: Path) -> None:
    path = tmp_path / "rideout.toml"
    path.write_text("profile = [")
    console, out = terminal()
    assert main_region_outage(DrillOptions(config_path=path), console) == 2
    assert out.getvalue().startswith("error: ")


def test_a_drill_that_cannot_run_exits_2(running_async: Path) -> None:
    console, out = terminal()
    options = DrillOptions(replication="sync", config_path=running_async, env={})
    assert main_region_outage(options, console) == 2
    assert "uses async replication, not sync" in out.getvalue()


@pytest.mark.parametrize(("lost", "code"), [(0, 0), (3, 1)])
def test_the_summary_and_the_exit_code(
    make_config: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, lost: int, code: int
) -> None:
    """The run itself needs a deployment (tests/drill/test_drill_e2e.py runs one): here
    it is replaced by the report it would return."""
    config = make_config()
    path = tmp_path / "rideout.toml"
    path.write_text(dump_toml(config))
    report = sample_report(lost=lost)

    async def run(options: DrillOptions, progress: Any) -> dict[str, Any]:
        progress("measuring")
        return report

    monkeypatch.setattr(console_module, "run_region_outage", run)
    console, out = terminal()
    options = DrillOptions(config_path=path, report_dir=tmp_path / "report")
    assert main_region_outage(options, console) == code
    text = out.getvalue()
    assert "region outage drill" in text
    assert "full-jitter" in text
    assert "full jitter 4, no jitter 40 (10.0×)" in text
    assert ("ok lost" if lost == 0 else "FAILED lost: 3 (limit 0)") in text
    assert (tmp_path / "report" / "report.json").is_file()
    assert f"report: {tmp_path / 'report'}" in text


def test_a_chaos_step_that_fails_mid_drill_exits_2_without_a_traceback(
    make_config: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue #11, finding 1: `restore` failed mid-drill and the drill ended in a
    traceback, exit 1, no report. The run (which needs a deployment) is replaced by one
    that fails as that one did."""
    from rideout.cluster.chaos import ChaosError

    config = make_config()
    path = tmp_path / "rideout.toml"
    path.write_text(dump_toml(config))

    async def run(options: DrillOptions, progress: Any) -> dict[str, Any]:
        raise ChaosError("restore us-east-1 failed: You can't write against a read only replica.")

    monkeypatch.setattr(console_module, "run_region_outage", run)
    console, out = terminal()
    assert main_region_outage(DrillOptions(config_path=path), console) == 2
    text = out.getvalue()
    assert text.startswith("error: the drill could not run: ChaosError: restore us-east-1")
    assert "Traceback" not in text
