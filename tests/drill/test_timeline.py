"""The timeline PNG, drawn from a report (matplotlib, the ``drill`` extra)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rideout.drill.timeline import plot_timeline
from tests.drill.conftest import sample_phase, sample_report

pytest.importorskip("matplotlib")

PNG = b"\x89PNG\r\n\x1a\n"


def size(path: Path) -> tuple[int, int]:
    """Width and height from the PNG's header."""
    data = path.read_bytes()
    assert data[:8] == PNG
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


def test_one_column_per_pass(tmp_path: Path) -> None:
    report = sample_report()
    plot_timeline(report, tmp_path / "two.png")
    report["passes"] = report["passes"][:1]
    report["passes"][0]["failback"] = sample_phase("west", "east", 4.0)
    plot_timeline(report, tmp_path / "one.png")
    (two_wide, two_high), (one_wide, one_high) = (
        size(tmp_path / "two.png"),
        size(tmp_path / "one.png"),
    )
    assert two_high == one_high
    assert two_wide == 2 * one_wide


def test_a_report_without_passes_still_draws(tmp_path: Path) -> None:
    plot_timeline({"passes": []}, tmp_path / "empty.png")
    assert size(tmp_path / "empty.png")[0] > 0
