"""The layer contracts (pyproject.toml, ``[tool.importlinter]``) are part of the suite."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def lint_imports(src: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    """`lint-imports` on the rideout package found in `src`, with this repository's
    contracts; no cache, so nothing is written beside the code."""
    assert LINT_IMPORTS.exists(), f"{LINT_IMPORTS} is missing: install the `test` extra"
    env = {**os.environ, "PYTHONPATH": str(src)}
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", str(ROOT / "pyproject.toml")],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_contracts_hold() -> None:
    result = lint_imports(ROOT / "src", ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


@pytest.mark.parametrize(
    ("module", "line", "contract", "chain"),
    [
        (
            "controlplane/app.py",
            "import rideout.cluster.supervisor",
            "controlplane never imports cluster (production has no local supervisor) BROKEN",
            "rideout.controlplane.app -> rideout.cluster.supervisor",
        ),
        (
            "client/resolve.py",
            "import starlette.responses",
            "rideout.client never imports the server stack BROKEN",
            "rideout.client.resolve -> starlette",  # external packages by their top name
        ),
        (
            "config/_services.py",
            "import rideout.config._config",
            "rideout.config: each module imports only the ones below it BROKEN",
            "rideout.config._services -> rideout.config._config",
        ),
    ],
    ids=["controlplane-cluster", "client-starlette", "config-one-way"],
)
def test_a_broken_contract_fails(
    tmp_path: Path, module: str, line: str, contract: str, chain: str
) -> None:
    """A forbidden import injected into a copy of the package fails the check, by name."""
    copy = tmp_path / "src" / "rideout"
    shutil.copytree(ROOT / "src" / "rideout", copy, ignore=shutil.ignore_patterns("__pycache__"))
    path = copy / module
    path.write_text(path.read_text(encoding="utf-8") + f"\n{line}  # injected\n", encoding="utf-8")
    result = lint_imports(tmp_path / "src", tmp_path)
    assert result.returncode != 0
    assert contract in result.stdout, result.stdout + result.stderr
    assert chain in result.stdout


def import_cycles(package: str) -> set[tuple[str, str]]:
    """Every pair of modules of `package` that import each other, directly or through
    others (function-level and TYPE_CHECKING imports included: a cycle there still ties
    two modules so that neither can be read, or moved, alone)."""
    import grimp  # import-linter's graph library

    graph = grimp.build_graph(package)
    found = set()
    for module in graph.modules:
        for imported in graph.find_modules_directly_imported_by(module):
            if graph.chain_exists(importer=imported, imported=module):
                found.add((min(module, imported), max(module, imported)))
    return found


def test_no_module_imports_itself_back() -> None:
    assert import_cycles("rideout") == set()


def test_an_import_cycle_is_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    package = tmp_path / "cyclic"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from cyclic import b\n")
    (package / "b.py").write_text("def f():\n    from cyclic import a\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert import_cycles("cyclic") == {("cyclic.a", "cyclic.b")}
