"""`rideout up` as a user runs it: a real subprocess, real signals, checked through /proc."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import socket
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
import redis
from websockets.asyncio.client import connect

from rideout._process import pid_alive
from rideout.config import Config, parse_config
from rideout.store import keys
from rideout.store.acl import RedisRole, credentials_dir
from tests import alerting
from tests.cluster.conftest import READY_WITHIN, STOP_WITHIN, assert_all_gone, rideout, started
from tests.conftest import as_user

pytestmark = pytest.mark.slow


def test_up_serves_every_zone_refuses_a_second_up_and_stops_on_sigint(workdir: Path) -> None:
    config = parse_config(
        json.loads(rideout("config", "show", "--json", "-c", "rideout.toml", cwd=workdir).stdout)
    )
    with started(workdir) as up:
        t0 = time.monotonic()
        view = up.wait_ready()
        assert time.monotonic() - t0 < READY_WITHIN
        assert len(up.pids) == 10  # 2 Redis, 4 app servers, 2 canaries, control plane, DNS
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
        the_alerts_and_dashboard_use_what_it_exports(config, workdir / "declared")
        table = rideout("status", "-c", "rideout.toml", cwd=workdir)
        assert table.returncode == 0
        assert "use1-az1" in table.stdout
        assert "healthy" in table.stdout
        assert f"DNS metrics http://{config.control_plane.address}:" in table.stdout

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


# Labelled metrics that count events: with nothing counted yet they have no sample
# (checked against their declarations instead); never one the alerts or panels need
# to see at rest.
EVENT_COUNTERS = frozenset({
    "rideout_shed_total", "rideout_ws_closes_total", "rideout_store_errors_total",
    "rideout_task_deaths_total", "rideout_room_requests_total", "rideout_replays_total",
    "rideout_dns_dropped_total", "rideout_dns_truncated_total",
})  # fmt: skip


def the_alerts_and_dashboard_use_what_it_exports(config: Config, scratch: Path) -> None:
    """Every metric and label deploy/'s alert rules and Grafana dashboard use, in the
    /metrics of a running deployment: an app server of each region (the writer's exports
    the waiting room's counters), the control plane (with the supervisor's processes),
    the name server. (A local canary serves no HTTP.) A labelled metric nothing has
    happened to yet (rideout_shed_total, rideout_task_deaths_total, ...) is exported
    without samples, so without labels: its labels are checked against its declaration,
    in-process (tests/alerting.py, declared_here)."""
    cp = config.control_plane
    urls = [
        *(f"http://{r.zones[0].address}:{config.app_port}/metrics" for r in config.regions),
        f"http://{cp.address}:{cp.port}/metrics",
        f"http://{cp.address}:{cp.dns_metrics_port}/metrics",
    ]
    used = alerting.used_metrics(alerting.queries())
    declared = alerting.declared_here(scratch)
    # Until the room's scheduler has made its first pass and each canary's first round
    # has reached the control plane (its handshake, its messages, its datapoint): before
    # that, metrics the alerts need at rest have no sample yet.
    deadline = time.monotonic() + 30
    with httpx.Client(trust_env=False, timeout=5) as http:
        while True:
            texts = [http.get(url).text for url in urls]
            exported: dict[str, frozenset[str]] = {}
            for text in texts:
                for name, labels in alerting.scraped(text).items():
                    exported[name] = exported.get(name, frozenset()) | labels
            unseen = {m for m in used if not exported.get(m) and declared.get(m)}
            queued = 'rideout_room_queue_number{event="auction"}' in texts[0]
            if queued and unseen <= EVENT_COUNTERS:
                break
            assert time.monotonic() < deadline, (queued, unseen - EVENT_COUNTERS)
            time.sleep(0.2)
    assert used - exported.keys() == set(), "used, not exported"
    assert alerting.problems(alerting.queries(), exported, declared) == []


def test_data_survives_down_and_up(workdir: Path) -> None:
    config = parse_config(
        json.loads(rideout("config", "show", "--json", "-c", "rideout.toml", cwd=workdir).stdout)
    )
    primary = config.primary.redis
    with started(workdir) as up:
        up.wait_ready()
        passwords = {
            p.name: p.read_text() for p in credentials_dir(config.keys_dir).glob("*.password")
        }
        assert sorted(passwords) == [f"{role}.password" for role in sorted(RedisRole)]
        client = redis.Redis(primary.address, primary.port, **as_user(config, RedisRole.APP))
        client.hset(keys.room_state("persisted"), "bid", "7")
        client.close()
        down = rideout("down", "-c", "rideout.toml", cwd=workdir)
        assert down.returncode == 0, down.stderr
        assert "stopped." in down.stdout
        assert up.wait_exit() == 0
        assert_all_gone(up.pids)
    assert "nothing to stop" in rideout("down", "-c", "rideout.toml", cwd=workdir).stdout
    with started(workdir) as up:
        up.wait_ready()
        # The same credentials (made once), and the data they guard.
        again = {p.name: p.read_text() for p in credentials_dir(config.keys_dir).glob("*.password")}
        assert again == passwords
        client = redis.Redis(primary.address, primary.port, **as_user(config, RedisRole.APP))
        assert client.hget(keys.room_state("persisted"), "bid") == b"7"
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


async def test_the_auction_through_up_with_two_workers_per_zone(
    make_workdir: Callable[..., Path],
) -> None:
    """Tokens from `rideout token issue`, clients spread over two workers of a zone by the
    kernel (SO_REUSEPORT) and over both regions; one bid reaches all of them."""
    workdir = make_workdir(realtime={"workers": 2})
    config = parse_config(
        json.loads(rideout("config", "show", "--json", "-c", "rideout.toml", cwd=workdir).stdout)
    )
    with started(workdir) as up:
        up.wait_ready()
        assert len(up.pids) == 2 + 2 + 4 * 2 + 2  # Redis, control plane + DNS, workers, canaries
        assert all(pid_alive(p) for p in up.pids)
        issued = rideout("token", "issue", "--sub", "alice", "-c", "rideout.toml", cwd=workdir)
        assert issued.returncode == 0, issued.stderr
        token = issued.stdout.strip()
        urls = [
            f"ws://{z.address}:{config.app_port}/ws?token={token}"
            for r in config.regions
            for z in r.zones
        ]
        async with contextlib.AsyncExitStack() as stack:
            clients = [await stack.enter_async_context(connect(urls[i % 4])) for i in range(24)]
            for ws in clients:
                await ws.send(json.dumps({"action": "getState", "room": "e2e"}))
                assert json.loads(await asyncio.wait_for(ws.recv(), 5))["type"] == "state"
            bidder = clients[0]
            await bidder.send(
                json.dumps({"action": "bid", "room": "e2e", "amount": 42, "id": "e2e-1"})
            )
            for ws in clients:
                while (msg := json.loads(await asyncio.wait_for(ws.recv(), 10)))[
                    "type"
                ] != "update":
                    assert msg["type"] == "ack"
                assert msg["state"]["bid"] == 42
                assert msg["state"]["bidder"] == "alice"
        # The token was in 24 URLs; it is in no log.
        for log in (workdir / ".rideout" / "logs").glob("*.log"):
            assert token not in log.read_text(), log.name
        up.proc.send_signal(signal.SIGTERM)
        assert up.wait_exit() == 0
        assert_all_gone(up.pids)
