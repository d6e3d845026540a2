"""`rideout status`'s probes: Redis as the monitor user (and why they cannot), and what
is left listening when nothing runs."""

from __future__ import annotations

import io
import os
import signal
import time
from pathlib import Path

import pytest
from rich.console import Console
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

from rideout import routes
from rideout.cli._status import print_status
from rideout.cluster.runstate import RunLock
from rideout.cluster.status import collect_status
from rideout.config import parse_config
from rideout.store.acl import load_or_create_users
from rideout.store.embedded import server_info
from tests.conftest import config_data, running_redis_pair, serving


async def test_status_reads_redis_as_the_monitor_and_names_each_server(
    tmp_path: Path, matrix_server: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On every server of the matrix: the role, the link, and which server and version
    answered (issue #27: `status` names each Redis's server), in the view and printed."""
    config = parse_config(config_data(tmp_path / ".rideout"))
    async with running_redis_pair(config):
        # No supervisor runs, so the default would be the leftovers' 0.25 s (CI missed it
        # under load); a generous budget, asked for as `rideout status --timeout` does.
        view = await collect_status(config, timeout=5.0)
    primary, secondary = (region["redis"]["state"] for region in view["regions"])
    assert (primary["reachable"], primary["role"]) == (True, "master"), primary
    assert (secondary["role"], secondary["link"]) == ("replica", "up"), secondary
    label = server_info(matrix_server).label  # what the binary says it is: "valkey 8.1.8"
    assert (primary["server"], secondary["server"]) == (label, label)
    console = Console(width=400, record=True, file=io.StringIO())
    monkeypatch.setattr("rideout.cli._status.console", console)
    print_status(view, title="rideout")
    printed = console.export_text()
    assert f"master, epoch None; {label}" in printed, printed  # no epoch: nothing started it
    assert f"replica (link up), epoch None; {label}" in printed, printed


async def test_without_credentials_status_names_the_missing_file(tmp_path: Path) -> None:
    config = parse_config(config_data(tmp_path / ".rideout"))  # no deployment ever started
    view = await collect_status(config)
    for region in view["regions"]:
        state = region["redis"]["state"]
        assert not state["reachable"]
        assert "monitor.password: no Redis password for rideout-monitor" in state["error"]
    # With credentials but no Redis: unreachable, as before.
    load_or_create_users(config.keys_dir)
    state = (await collect_status(config))["regions"][0]["redis"]["state"]
    assert not state["reachable"]
    assert "monitor.password" not in state["error"]


async def test_with_nothing_running_status_still_finds_what_was_left_listening(
    tmp_path: Path,
) -> None:
    """No supervisor: the probes look briefly (a name server that is not there is not
    waited out for a second), but a server left behind still shows up."""
    config = parse_config(config_data(tmp_path / ".rideout"))
    zone = config.regions[0].zones[0]
    left = Starlette(routes=[Route(routes.HEALTH, lambda _: JSONResponse({"ok": True}))])
    async with serving(left, zone.address, config.app_port):
        view = await collect_status(config)
    assert view["running"] is False
    zones = {z["name"]: z for r in view["regions"] for z in r["zones"]}
    assert zones[zone.name]["health"]["up"] is True
    assert not any(z["health"]["up"] for name, z in zones.items() if name != zone.name)
    assert view["dns"]["answer"]["up"] is False


async def test_a_redis_that_does_not_answer_in_time_is_said_to_time_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A frozen writer Redis (SIGSTOP: the kernel takes the connection, nothing answers)
    is waited out for the probe's budget and reported with the error that says so, and
    `rideout status` prints that error, not a bare "unreachable"."""
    config = parse_config(config_data(tmp_path / ".rideout"))
    lock = RunLock(config.run_dir)  # as if a supervisor ran: the probes get `timeout`
    lock.acquire()
    try:
        async with running_redis_pair(config) as (primary, _):
            assert primary.pid is not None
            os.kill(primary.pid, signal.SIGSTOP)
            try:
                started = time.monotonic()
                view = await collect_status(config, timeout=2.0)
                took = time.monotonic() - started
            finally:
                os.kill(primary.pid, signal.SIGCONT)
            # The frozen server is waited out for the budget asked (not the client's own
            # 1 s); the live one costs nothing. Only a generous upper bound.
            assert 1.9 <= took < 15, took
            writer, replica = (region["redis"]["state"] for region in view["regions"])
            assert not writer["reachable"], writer
            assert "Timeout" in writer["error"], writer
            assert (replica["reachable"], replica["role"]) == (True, "replica"), replica
            console = Console(width=400, record=True, file=io.StringIO())
            monkeypatch.setattr("rideout.cli._status.console", console)
            print_status(view, title="rideout")
            printed = console.export_text()
            assert f"unreachable: {writer['error']}" in printed, printed
    finally:
        lock.release()
