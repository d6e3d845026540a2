"""constraints.txt pins every dependency of ``rideout[test]``, and the suite runs on
exactly those versions (``./dev install`` installs with it; ``./dev lock`` rewrites it)."""

from __future__ import annotations

from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]


def pins() -> dict[str, str]:
    found: dict[str, str] = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        line = line.partition("#")[0].strip()
        if line:
            name, equals, version = line.partition("==")
            assert equals, f"not a pin: {line!r}"
            found[canonicalize_name(name)] = version
    return found


def needed() -> set[str]:
    """Every distribution ``rideout[test]`` requires here, directly or not (markers
    evaluated for this interpreter and the extras asked for)."""
    names: set[str] = set()
    seen: set[tuple[str, frozenset[str]]] = set()
    todo = [("rideout", frozenset({"test"}))]
    while todo:
        name, extras = todo.pop()
        if (name, extras) in seen:
            continue
        seen.add((name, extras))
        for raw in metadata.requires(name) or []:
            requirement = Requirement(raw)
            marker = requirement.marker
            if marker and not any(marker.evaluate({"extra": e}) for e in extras or {""}):
                continue
            dependency = canonicalize_name(requirement.name)
            names.add(dependency)
            todo.append((dependency, frozenset(requirement.extras)))
    names.discard("rideout")
    return names


def test_every_dependency_is_pinned() -> None:
    missing = needed() - set(pins())
    assert not missing, f"not in constraints.txt (run ./dev lock): {sorted(missing)}"


def test_the_suite_runs_on_the_pinned_versions() -> None:
    installed = {name: metadata.version(name) for name in needed()}
    wrong = {
        name: f"{version} installed, {pins()[name]} pinned"
        for name, version in installed.items()
        if name in pins() and version != pins()[name]
    }
    assert not wrong, f"run ./dev install: {wrong}"


def test_needed_follows_extras_and_skips_other_platforms() -> None:
    names = needed()
    assert {"uvicorn", "uvloop", "httptools", "pytest", "hypothesis"} <= names
    assert "colorama" not in names  # click needs it on Windows only
