"""tests/store/test_acl.py on every server of the supported matrix.

That module decides at import which server generation it checks (Redis 6.2's rules, or
7.0+'s read-only epoch and function library: ``FUNCTIONS``) and starts its servers once
per module, so it cannot take the ``matrix_server`` parameter itself. Here it runs whole
in a pytest of its own per server, its servers chosen by RIDEOUT_REDIS_SERVER: on the
default server alone, the 6.2-only tests (the known gap) would never run in ./dev test.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from rideout.store.embedded import ENV_REDIS_SERVER

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


def test_the_acl_tests_pass_on_this_server(matrix_server: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
         "-rs", str(ROOT / "tests" / "store" / "test_acl.py")],
        cwd=ROOT, env={**os.environ, ENV_REDIS_SERVER: str(matrix_server)},
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    tail = result.stdout[-3000:] + result.stderr[-2000:]
    assert result.returncode == 0, tail
    assert " passed" in result.stdout, tail
    assert " failed" not in result.stdout, tail
