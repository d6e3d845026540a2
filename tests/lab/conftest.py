"""A small real lab (router + 3 hosts in 2 regions) for the tests that need root.

The ``lab`` and ``lab_dir`` fixtures put a test in the ``deployment`` tier (tests/conftest.py): it builds
namespaces and starts processes in them, so ``./dev test --quick`` skips it. Without root
it skips, saying why; CI runs as root, so it runs there.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from rideout.lab.netns import Lab, lab_namespaces
from rideout.lab.topology import plan_topology

needs_root = pytest.mark.skipif(
    os.geteuid() != 0,
    reason="needs root: the lab creates network namespaces, veth pairs and routes (CI runs as root)",
)

GROUPS = {"east": ["a", "b"], "west": ["c"]}


@pytest.fixture
def lab_dir(tmp_path: Path) -> Path:
    """A state directory for a real lab the test builds itself (skips without root)."""
    if os.geteuid() != 0:
        pytest.skip("needs root: the lab creates network namespaces, veth pairs and routes")
    return tmp_path / "lab"


@pytest.fixture
def lab(lab_dir: Path) -> Iterator[Lab]:
    """The lab of :data:`GROUPS` under a fresh id, removed after the test (which checks
    that none of its namespaces is left)."""
    topology = plan_topology(secrets.token_hex(3), GROUPS)
    with Lab(topology, lab_dir) as built:
        yield built
    assert not [ns for ns in lab_namespaces() if ns in topology.namespaces]


def run_on(lab: Lab, host: str, code: str, timeout: float = 20.0) -> str:
    """Run Python `code` on `host`; its stdout (CalledProcessError if it failed)."""
    done = subprocess.run(
        [*lab.exec_argv(host), sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=True,
    )
    return done.stdout.strip()
