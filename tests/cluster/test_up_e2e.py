"""`rideout up` as a user runs it: a real subprocess, real signals, checked through /proc."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from rideout._process import pid_alive
from rideout.config import dump_toml, parse_config
from tests.conftest import config_data

pytestmark = pytest.mark.slow

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
            result = rideout("status", "--json", "--config", "rideout.toml", cwd=self.workdir)
            if result.returncode == 0:
                view = json.loads(result.stdout)
                zones = [z for r in view["regions"] for z in r["zones"]]
                if (
                    all(z.get("health", {}).get("up") for z in zones)
                    and "ready in" in self.output.read_text()
                ):
                    pids = [view["control_plane"]["pid"]]
                    for region in view["regions"]:
                        pids.append(region["redis"]["pid"])
                        pids.extend(z["pid"] for z in region["zones"])
                    assert all(isinstance(p, int) for p in pids), view
                    self.pids = pids
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
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self._out.close()


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    config = parse_config(config_data(tmp_path / ".rideout"))
    (tmp_path / "rideout.toml").write_text(dump_toml(config))
    return tmp_path


@contextlib.contextmanager
def started(workdir: Path) -> Iterator[Up]:
    up = Up(workdir)
    try:
        yield up
    finally:
        up.cleanup()


def assert_all_gone(pids: list[int], within: float = STOP_WITHIN) -> None:
    deadline = time.monotonic() + within
    while any(pid_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [p for p in pids if pid_alive(p)], "processes left behind"


def test_up_serves_every_zone_refuses_a_second_up_and_stops_on_sigint(workdir: Path) -> None:
    config = parse_config(
        json.loads(rideout("config", "show", "--json", "-c", "rideout.toml", cwd=workdir).stdout)
    )
    with started(workdir) as up:
        t0 = time.monotonic()
        view = up.wait_ready()
        assert time.monotonic() - t0 < READY_WITHIN
        assert len(up.pids) == 7
        assert all(isinstance(p, int) and pid_alive(p) for p in up.pids)
        with httpx.Client(trust_env=False) as http:
            for region in config.regions:
                for zone in region.zones:
                    body = http.get(f"http://{zone.address}:{config.app_port}/health").json()
                    assert (body["region"], body["zone"], body["epoch"]) == (
                        region.name,
                        zone.name,
                        1,
                    )
        assert view["regions"][1]["redis"]["state"]["link"] == "up"
        table = rideout("status", "-c", "rideout.toml", cwd=workdir)
        assert table.returncode == 0
        assert "use1-az1" in table.stdout
        assert "healthy" in table.stdout

        second = rideout("up", "--config", "rideout.toml", cwd=workdir)
        assert second.returncode == 1
        assert f"already running from {config.data_dir} (pid {up.proc.pid})" in second.stderr

        up.proc.send_signal(signal.SIGINT)
        t0 = time.monotonic()
        assert up.wait_exit() == 0
        assert time.monotonic() - t0 < STOP_WITHIN
        assert_all_gone(up.pids)
        for region in config.regions:
            for zone in region.zones:
                with socket.socket() as probe, pytest.raises(ConnectionRefusedError):
                    probe.connect((zone.address, config.app_port))
        output = up.output.read_text()
        assert "SIGINT received: shutting down" in output
        assert "app-use1-az1 │" in output  # prefixed, streamed logs
    assert (config.logs_dir / "redis-us-east-1.log").exists()
    assert rideout("status", "-c", "rideout.toml", cwd=workdir).returncode == 1


def test_data_survives_down_and_up(workdir: Path) -> None:
    config = parse_config(
        json.loads(rideout("config", "show", "--json", "-c", "rideout.toml", cwd=workdir).stdout)
    )
    primary = config.primary.redis
    with started(workdir) as up:
        up.wait_ready()
        client = redis.Redis(primary.address, primary.port)
        client.set("rideout:test:persisted", "yes")
        client.close()
        down = rideout("down", "-c", "rideout.toml", cwd=workdir)
        assert down.returncode == 0, down.stderr
        assert "stopped." in down.stdout
        assert up.wait_exit() == 0
        assert_all_gone(up.pids)
    assert "nothing to stop" in rideout("down", "-c", "rideout.toml", cwd=workdir).stdout
    with started(workdir) as up:
        up.wait_ready()
        client = redis.Redis(primary.address, primary.port)
        assert client.get("rideout:test:persisted") == b"yes"
        client.close()
        up.proc.send_signal(signal.SIGTERM)
        assert up.wait_exit() == 0
        assert_all_gone(up.pids)


def test_a_killed_supervisor_leaves_nothing_running(workdir: Path) -> None:
    with started(workdir) as up:
        up.wait_ready()
        up.proc.kill()  # SIGKILL: no chance to clean up; the kernel's PDEATHSIG does it
        up.wait_exit()
        assert_all_gone(up.pids)
    # And the data directory is free again: no stale lock.
    assert "nothing to stop" in rideout("down", "-c", "rideout.toml", cwd=workdir).stdout
