"""`rideout up` keeps its processes running: kill -9 one, it comes back, `status` and
`/metrics` count it; and name resolution outlives a control-plane crash."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dns.asyncquery
import dns.exception
import dns.message
import dns.rdatatype
import httpx
import pytest

from rideout.config import Config, parse_config
from tests.cluster.conftest import rideout, started

pytestmark = pytest.mark.slow

BACK_WITHIN = 30.0  # seconds until a killed process answers again (start-up is ~1-3 s)
PRIMARY = ["127.0.1.1", "127.0.1.2"]


def load(workdir: Path) -> Config:
    shown = rideout("config", "show", "--json", "-c", "rideout.toml", cwd=workdir)
    return parse_config(json.loads(shown.stdout))


def status(workdir: Path) -> dict[str, Any]:
    result = rideout("status", "--json", "-c", "rideout.toml", cwd=workdir)
    assert result.returncode == 0, result.stderr
    view: dict[str, Any] = json.loads(result.stdout)
    return view


def pid_of(workdir: Path, name: str) -> int:
    state = json.loads((workdir / ".rideout" / "run" / "up.json").read_text())
    pid: int = next(p["pid"] for p in state["processes"] if p["name"] == name)
    assert pid > 0, f"{name} does not run"  # and os.kill(0) would be this process group
    return pid


def wait_for(check: Callable[[], Any], timeout: float = BACK_WITHIN) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = check()
        if result:
            return result
        time.sleep(0.2)
    raise AssertionError(f"not within {timeout} s")


def restarts_metric(config: Config, process: str) -> float | None:
    cp = config.control_plane
    try:
        text = httpx.get(f"http://{cp.address}:{cp.port}/metrics", timeout=2).text
    except httpx.HTTPError:
        return None
    for line in text.splitlines():
        if line.startswith("rideout_process_restarts_total{") and f'process="{process}"' in line:
            return float(line.rsplit(" ", 1)[1])
    return None


def test_a_killed_app_server_is_restarted_and_counted(workdir: Path) -> None:
    config = load(workdir)
    with started(workdir) as up:
        up.wait_ready()
        old = pid_of(workdir, "app-use1-az1")
        os.kill(old, signal.SIGKILL)

        def back() -> dict[str, Any] | None:
            zone = status(workdir)["regions"][0]["zones"][0]
            up_again = zone["alive"] and zone["pid"] != old and zone.get("health", {}).get("up")
            return zone if up_again else None

        t0 = time.monotonic()
        zone = wait_for(back)
        took = time.monotonic() - t0
        assert zone["restarts"] == 1, zone
        assert zone["supervision"] == "running"
        assert took < BACK_WITHIN
        table = subprocess.run(
            [sys.executable, "-m", "rideout", "status", "-c", "rideout.toml"],
            cwd=workdir, capture_output=True, text=True, timeout=30, check=True,
            env={**os.environ, "COLUMNS": "250"},
        ).stdout  # fmt: skip
        row = next(line for line in table.splitlines() if "use1-az1" in line)
        shown = row.split("│")[5].strip()
        # Zonal autoshift may have evacuated the zone while it was down (a zone failing
        # while the region's other one passes); it says so between the two.
        assert shown.startswith("healthy"), shown
        assert shown.endswith("(1 restart)"), shown
        assert wait_for(lambda: restarts_metric(config, "app-use1-az1") == 1.0)
        assert restarts_metric(config, "app-use1-az2") == 0.0
        assert "app-use1-az1 exited with code -9; restarting in" in up.output.read_text()


async def test_dns_answers_throughout_a_control_plane_crash(workdir: Path) -> None:
    config = load(workdir)
    cp = config.control_plane
    with started(workdir) as up:
        up.wait_ready()
        answers: list[list[str] | str] = []

        async def ask() -> list[str] | str:
            query = dns.message.make_query(config.app_domain, dns.rdatatype.A)
            try:
                response = await dns.asyncquery.udp(query, cp.address, port=cp.dns_port, timeout=1)
            except dns.exception.Timeout:
                return "timeout"
            return sorted(str(r) for rrset in response.answer for r in rrset)

        assert await ask() == PRIMARY
        old = pid_of(workdir, "control-plane")
        os.kill(old, signal.SIGKILL)
        async with httpx.AsyncClient(trust_env=False, timeout=0.5) as http:

            async def control_plane_back() -> bool:
                try:
                    return (await http.get(f"http://{cp.address}:{cp.port}/health")).is_success
                except httpx.HTTPError:
                    return False

            deadline = time.monotonic() + BACK_WITHIN
            while not await control_plane_back():
                assert time.monotonic() < deadline, "the control plane did not come back"
                answers.append(await ask())
                await asyncio.sleep(0.05)
            down_for = len(answers)
            # Past its restart: the restored state must not flip the answer either.
            settle = time.monotonic() + 3
            while time.monotonic() < settle:
                answers.append(await ask())
                await asyncio.sleep(0.05)
        assert down_for > 3, "the control plane came back before DNS could be asked"
        assert all(a == PRIMARY for a in answers), [a for a in answers if a != PRIMARY][:5]
        assert pid_of(workdir, "control-plane") != old
        assert status(workdir)["control_plane"]["restarts"] == 1

        # The DNS server itself, killed, comes back answering the same at once.
        os.kill(pid_of(workdir, "dns"), signal.SIGKILL)
        assert wait_for(lambda: status(workdir)["dns"].get("answer", {}).get("up"))
        assert await ask() == PRIMARY
        assert status(workdir)["dns"]["restarts"] == 1
