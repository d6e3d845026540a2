"""Lint, format and types are part of the suite: `./dev test` fails when they do."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.mark.parametrize(
    "command",
    [
        ("ruff", "check", "src", "tests", "bench"),
        ("ruff", "format", "--check", "src", "tests", "bench"),
        ("mypy",),  # strict on src/, as configured in pyproject.toml
    ],
    ids=["ruff-check", "ruff-format", "mypy-strict"],
)
# mypy without a cache (a fresh clone) takes ~19 s of CPU; beside three workers running
# deployments it took over 120 s in a clean-clone CI run. Its own bound is run()'s 300 s.
@pytest.mark.timeout(300)
def test_clean(command: tuple[str, ...]) -> None:
    result = run(*command)
    assert result.returncode == 0, result.stdout + result.stderr


def test_no_cancellation_is_swallowed_with_suppress() -> None:
    """``task.cancel()`` then ``with suppress(CancelledError): await task`` also swallows
    a cancellation of the caller that comes meanwhile: use
    rideout.store.client.cancel_and_wait (tests/store/test_client.py shows the bug)."""
    found = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in sorted((ROOT / "src").rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if "suppress(asyncio.CancelledError" in line or "suppress(CancelledError" in line
    ]
    assert not found, found


def test_every_property_test_scales_its_examples() -> None:
    """``./dev test --quick`` runs a fifth of every property test's examples
    (RIDEOUT_TEST_EXAMPLES): a number written as a literal would not scale."""
    pattern = re.compile(r"max_examples=(?!examples\()")
    found = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in sorted((ROOT / "tests").rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if pattern.search(line) and path.name not in ("conftest.py", "test_quality.py")
    ]
    assert not found, found


def test_every_test_that_runs_rideout_is_in_the_deployment_tier() -> None:
    """``./dev test --quick`` leaves out the tests that start a rideout process, told
    from their module's source (tests/conftest.py): a module run through ``-m`` must be
    spelled there, not passed in a variable the rule cannot see."""
    from tests.conftest import _STARTS

    spelled = re.compile(r'"-m",\s*"rideout[".]')
    hidden = re.compile(r'"-m",\s*[A-Za-z_]')  # a module named by a variable
    sources = {path: path.read_text() for path in sorted((ROOT / "tests").rglob("test_*.py"))}
    assert [p for p, s in sources.items() if spelled.search(s) and not _STARTS.search(s)] == []
    assert [p.name for p, s in sources.items() if hidden.search(s)] == []
    for argv in ('[sys.executable, "-m", "rideout", "status"]',
                 '[sys.executable, "-m", "rideout.processes", *args]'):  # fmt: skip
        assert _STARTS.search(argv), argv
    assert not _STARTS.search('[sys.executable, "-c", CODE]')


def test_every_test_that_starts_moto_is_in_the_aws_tier() -> None:
    """``./dev test --quick`` also leaves out the tests that start moto, told from the
    fixtures that start it (tests/conftest.py): moto is started in those fixtures only,
    and a test that reaches one another way, unmarked, fails rather than runs."""
    from types import SimpleNamespace

    from tests.conftest import _AWS_FIXTURES, require_aws_mark

    starts = re.compile(r"def (\w+)\([^)]*\)[^:]*:\n(?:(?!\ndef ).)*ThreadedMotoServer\(", re.S)
    fixtures = {
        name
        for path in sorted((ROOT / "tests").rglob("*.py"))
        for name in starts.findall(path.read_text())
    }
    assert fixtures == set(_AWS_FIXTURES)

    def node(marked: bool) -> SimpleNamespace:
        return SimpleNamespace(nodeid="t.py::x", get_closest_marker=lambda name: marked or None)

    require_aws_mark(SimpleNamespace(node=node(True)))  # type: ignore[arg-type]
    with pytest.raises(pytest.fail.Exception, match="without the `aws` mark"):
        require_aws_mark(SimpleNamespace(node=node(False)))  # type: ignore[arg-type]


def test_no_fixture_is_package_scoped() -> None:
    """In a directory that is no Python package (tests/ has no __init__.py), a
    "package"-scoped fixture outlives the directory: the OpenAPI tests' live servers ran
    beside every later test of their worker. Module or session scope says what it means."""
    scoped = re.compile(r"scope\s*=\s*[\"']package[\"']")
    found = [
        str(path.relative_to(ROOT))
        for path in sorted((ROOT / "tests").rglob("*.py"))
        if path.name != "test_quality.py" and scoped.search(path.read_text())
    ]
    assert found == []
