"""The curated public API: everything in an __all__ exists, nothing private leaks."""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path

import pytest

import rideout

MODULES = sorted(
    m.name
    for m in pkgutil.walk_packages(rideout.__path__, "rideout.")
    if not m.name.endswith("__main__")
)


def test_top_level_api() -> None:
    assert set(rideout.__all__) == {"Config", "ConfigError", "__version__", "load_config"}
    for name in rideout.__all__:
        assert hasattr(rideout, name)


def test_the_walk_sees_every_package() -> None:
    # pkgutil skips a directory without __init__.py, and every module in it, silently.
    root = Path(rideout.__file__).parent
    for directory in {p.parent for p in root.rglob("*.py")}:
        assert (directory / "__init__.py").is_file(), f"{directory} has no __init__.py"
    assert "rideout.realtime.connection" in MODULES


@pytest.mark.parametrize("name", MODULES)
def test_every_all_is_importable_and_public(name: str) -> None:
    module = importlib.import_module(name)
    exported = getattr(module, "__all__", None)
    private = any(part.startswith("_") for part in name.split("."))
    if exported is None:
        # A private module's names reach users only through a public module's __all__.
        assert private, f"{name} is public but has no __all__"
        return
    assert len(set(exported)) == len(exported), f"{name}.__all__ has duplicates"
    for attr in exported:
        assert hasattr(module, attr), f"{name}.__all__ names {attr}, which does not exist"
        assert not attr.startswith("_") or attr == "__version__", (
            f"{name}.__all__ exports private {attr}"
        )
