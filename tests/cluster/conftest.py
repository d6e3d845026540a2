"""Run `rideout up` as a user does: a real subprocess, real signals, checked through /proc."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from rideout._process import pid_alive
from rideout.cluster.chaos import send_command
from rideout.cluster.supervisor import LocalCluster
from rideout.config import Config, dump_toml, parse_config
from tests.conftest import config_data, until_sync

READY_WITHIN = 45.0  # seconds; start-up takes ~1-2 s here, the bound is for a loaded CI box
STOP_WITHIN = 15.0


def rideout(*args: str, cwd: Path, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rideout", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


class Up:
    """A `rideout up` in the background, with its output in a file."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.output = workdir / f"up-{time.monotonic_ns()}.out"
        self._out = self.output.open("w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "rideout", "up", "--config", "rideout.toml"],
            cwd=workdir,
            stdout=self._out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "COLUMNS": "200"},
        )
        self.pids: list[int] = []

    def wait_ready(self) -> dict[str, Any]:
        deadline = time.monotonic() + READY_WITHIN
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"rideout up exited early:\n{self.output.read_text()}")
            # `up` says when it is ready; `status` (a Python process, ~1 s of CPU) is asked
            # only then, not every 0.2 s while the deployment it slows down is starting.
            if "ready in" in self.output.read_text():
                result = rideout("status", "--json", "--config", "rideout.toml", cwd=self.workdir)
                if result.returncode == 0:
                    view = json.loads(result.stdout)
                    zones = [z for r in view["regions"] for z in r["zones"]]
                    if all(z.get("health", {}).get("up") for z in zones):
                        state = json.loads(
                            (self.workdir / ".rideout" / "run" / "up.json").read_text()
                        )
                        self.pids = [p["pid"] for p in state["processes"] if p["pid"] > 0]
                        return view
            time.sleep(0.2)
        raise AssertionError(f"not ready within {READY_WITHIN} s:\n{self.output.read_text()}")

    def wait_exit(self) -> int:
        code = self.proc.wait(timeout=STOP_WITHIN)
        self._out.close()
        return code

    def cleanup(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=STOP_WITHIN)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for pid in self.pids:
            if pid > 0:  # 0 would be this process group
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        self._out.close()


@pytest.fixture
def make_workdir(tmp_path: Path) -> Callable[..., Path]:
    """A directory with a rideout.toml on fresh ports (overrides as in config_data)."""

    def make(**overrides: Any) -> Path:
        config = parse_config(config_data(tmp_path / ".rideout", **overrides))
        (tmp_path / "rideout.toml").write_text(dump_toml(config))
        return tmp_path

    return make


@pytest.fixture
def workdir(make_workdir: Callable[..., Path]) -> Path:
    return make_workdir()


@pytest.fixture
async def cluster(make_config: Callable[..., Config]) -> AsyncIterator[LocalCluster]:
    """A default deployment run by an in-process supervisor (modules may override it)."""
    running = LocalCluster(make_config())
    try:
        await running.start()
        yield running
    finally:
        await running.stop()


@contextlib.contextmanager
def started(workdir: Path) -> Iterator[Up]:
    up = Up(workdir)
    try:
        yield up
    finally:
        up.cleanup()


def assert_all_gone(pids: list[int], within: float = STOP_WITHIN) -> None:
    with contextlib.suppress(AssertionError):  # reported below, naming them
        until_sync(lambda: not any(pid_alive(p) for p in pids), within)
    assert not [p for p in pids if pid_alive(p)], "processes left behind"


async def chaos(cluster: LocalCluster, op: str, region: str) -> str:
    """``rideout chaos OP REGION`` through the CLI's blocking client, off the event loop
    the supervisor runs on."""
    return await asyncio.to_thread(send_command, cluster.config.run_dir, op, region)
