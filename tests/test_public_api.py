"""The curated public API: everything in an __all__ exists, nothing private leaks."""

from __future__ import annotations

import importlib
import pkgutil

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


@pytest.mark.parametrize("name", MODULES)
def test_every_all_is_importable_and_public(name: str) -> None:
    module = importlib.import_module(name)
    exported = getattr(module, "__all__", None)
    if exported is None:
        return
    assert len(set(exported)) == len(exported), f"{name}.__all__ has duplicates"
    for attr in exported:
        assert hasattr(module, attr), f"{name}.__all__ names {attr}, which does not exist"
        assert not attr.startswith("_") or attr == "__version__", (
            f"{name}.__all__ exports private {attr}"
        )
