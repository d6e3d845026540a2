"""The suite's own scheduling aid (tests/conftest.py): what it names exists."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import SLOWEST_MODULES

ROOT = Path(__file__).resolve().parent.parent


def test_every_module_named_slowest_exists_once() -> None:
    assert len(set(SLOWEST_MODULES)) == len(SLOWEST_MODULES)
    missing = [m for m in SLOWEST_MODULES if not (ROOT / m).is_file()]
    assert not missing, f"SLOWEST_MODULES names modules that are gone: {missing}"
