"""The zone: its modes, what switching them does, and an import that costs nothing."""

from __future__ import annotations

import asyncio
import json
import random
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import rideout
from rideout.auth.revocation import RevocationList
from rideout.protocol import CloseCode
from rideout.realtime.metrics import AppMetrics
from rideout.realtime.zone import (
    DEGRADE_SIGNAL,
    SERVE_SIGNAL,
    ZoneMode,
    ZoneServer,
    drain,
    drain_gradually,
    drain_schedule,
)
from tests.conftest import until


class Closing:
    """A connection as the zone sees it: something to close."""

    def __init__(self, *, probe: bool = False) -> None:
        self.closed: tuple[int, str] | None = None
        self.probe = probe

    def close_soon(self, code: int, reason: str) -> None:
        self.closed = (code, reason)


def zone_server(config: Any = None) -> ZoneServer:
    # Only the metrics and the connections take part in switching modes.
    none: Any = None
    return ZoneServer(
        config=config, region=none, zone=none, redis=none, store=none, hub=none, epoch=none,
        verifier=none, issuer=none, jwks={}, admin_token="", metrics=AppMetrics("r", "z"),
        started_at=0.0, origins=frozenset(), revocations=RevocationList(),
    )  # fmt: skip


def gauge(server: ZoneServer) -> dict[str, float | None]:
    registry = server.metrics.registry
    return {m: registry.get_sample_value("rideout_zone_mode", {"mode": m}) for m in ZoneMode}


def test_the_modes_are_their_strings_on_the_wire() -> None:
    assert [m.value for m in ZoneMode] == ["serving", "degraded", "draining"]
    assert ZoneMode.DEGRADED == "degraded"
    assert f"{ZoneMode.DRAINING}" == "draining"
    assert json.dumps({"mode": ZoneMode.SERVING}) == '{"mode": "serving"}'
    assert ZoneMode("draining") is ZoneMode.DRAINING


def test_the_mode_signals() -> None:
    assert (DEGRADE_SIGNAL, SERVE_SIGNAL) == (signal.SIGUSR1, signal.SIGUSR2)


def test_a_new_zone_serves_and_its_gauge_says_so() -> None:
    server = zone_server()
    assert server.mode is ZoneMode.SERVING
    assert gauge(server) == {"serving": 1.0, "degraded": 0.0, "draining": 0.0}


def test_switching_modes_moves_the_gauge_and_draining_closes_every_connection() -> None:
    server = zone_server()
    a, b = Closing(), Closing()
    server.connections |= {a, b}
    server.set_mode(ZoneMode.DEGRADED)
    assert gauge(server) == {"serving": 0.0, "degraded": 1.0, "draining": 0.0}
    assert a.closed is b.closed is None  # degraded keeps the sockets open
    server.set_mode(ZoneMode.DRAINING)
    assert gauge(server) == {"serving": 0.0, "degraded": 0.0, "draining": 1.0}
    assert a.closed == b.closed == (CloseCode.DRAINING, "zone draining; reconnect now")
    server.set_mode(ZoneMode.SERVING)
    assert server.mode is ZoneMode.SERVING
    assert gauge(server)["serving"] == 1.0


def test_drain_closes_with_1012() -> None:
    server = zone_server()
    conn = Closing()
    server.connections.add(conn)
    drain(server)
    assert conn.closed is not None
    assert conn.closed[0] == 1012
    assert server.mode is ZoneMode.SERVING  # draining the connections is not the mode


def test_origins() -> None:
    server = zone_server()
    server.origins = frozenset({"http://a.example"})
    assert server.origin_allowed("http://a.example")
    assert not server.origin_allowed("http://b.example")
    server.origins = frozenset({"*"})
    assert server.origin_allowed("http://b.example")


def test_importing_the_zone_or_the_package_loads_no_server_stack() -> None:
    """The local supervisor imports the mode signals from here."""
    script = (
        "import json, sys\n"
        "import rideout.realtime, rideout.realtime.zone\n"
        "assert rideout.realtime.ZoneMode.SERVING == 'serving'\n"
        "heavy = ('starlette', 'uvicorn', 'redis', 'httpx', 'websockets', 'prometheus_client')\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in heavy)))\n"
        "print(rideout.realtime.zone.__file__)\n"
    )
    src = Path(rideout.__file__).resolve().parents[1]
    result = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
        env={"PYTHONPATH": str(src)},
    )
    loaded, where = result.stdout.splitlines()
    assert json.loads(loaded) == []
    assert Path(where).resolve().is_relative_to(src)


# ------------------------------------------------------------------ gradual drain


class TimedClosing(Closing):
    """Remembers when (loop time) it was closed, and leaves the zone as a socket does."""

    def __init__(self, server: ZoneServer, *, probe: bool = False) -> None:
        super().__init__(probe=probe)
        self.server = server
        self.at: float | None = None

    def close_soon(self, code: int, reason: str) -> None:
        if self.closed is None:
            super().close_soon(code, reason)
            self.at = asyncio.get_running_loop().time()
            self.server.connections.discard(self)


def test_the_drain_schedule_spreads_every_connection_over_the_spread() -> None:
    plan = drain_schedule(1000, 5.0, random.Random(1))
    assert sum(n for _, n in plan) == 1000
    offsets = [t for t, _ in plan]
    assert offsets == sorted(offsets)
    assert offsets[0] >= 0
    assert offsets[-1] < 5.0
    assert len(plan) > 50  # batches, not one burst
    assert max(n for _, n in plan) < 40  # ~10 per 50 ms step on average
    assert all(t == pytest.approx(round(t / 0.05) * 0.05) for t in offsets)  # on step edges
    assert drain_schedule(7, 0.0) == [(0.0, 7)]
    assert drain_schedule(0, 5.0) == []


async def test_a_failback_drain_closes_in_batches_over_the_spread_and_keeps_serving() -> None:
    server = zone_server()
    conns = [TimedClosing(server) for _ in range(40)]
    server.connections |= set(conns)
    loop = asyncio.get_running_loop()
    start = loop.time()
    server.set_mode(ZoneMode.SERVING, drain_over=0.6)
    assert server.mode is ZoneMode.SERVING  # handshakes are still accepted
    assert gauge(server)["serving"] == 1.0
    first = server.draining
    assert first is not None
    server.set_mode(ZoneMode.SERVING, drain_over=0.6)  # asked twice: one drain
    assert server.draining is first
    await asyncio.sleep(0.05)  # the drain has started
    late = TimedClosing(server)  # a client whose DNS answer had not expired yet
    server.connections.add(late)
    await until(lambda: not server.connections, 5)
    times = sorted(c.at - start for c in conns if c.at is not None)
    assert len(times) == 40
    assert {c.closed for c in conns} == {(CloseCode.DRAINING, "zone draining; reconnect now")}
    assert times[-1] - times[0] > 0.2  # spread out, not one burst
    assert times[-1] < 0.6 + 0.5
    assert late.at is not None
    assert late.at - start >= 0.6 - 0.05  # the newcomers go at the end
    await until(lambda: first.done(), 5)
    assert server.mode is ZoneMode.SERVING


async def test_a_drain_that_moves_clients_leaves_the_canarys_probes_alone() -> None:
    """Closing a probe failed the canary of a region that only handed its clients on;
    a zone that is going away (draining) closes them at the end like the rest."""
    server = zone_server()
    clients = [TimedClosing(server) for _ in range(10)]
    probe = TimedClosing(server, probe=True)
    server.connections |= {*clients, probe}
    server.set_mode(ZoneMode.SERVING, drain_over=0.3)
    assert server.draining is not None
    await until(lambda: server.draining is not None and server.draining.done(), 5)
    assert all(c.closed is not None for c in clients)
    assert probe.closed is None
    assert server.connections == {probe}
    server.set_mode(ZoneMode.DRAINING, drain_over=0.2)
    await until(lambda: probe.closed is not None, 5)
    drain(server, probes=False)  # nothing left to close: no error


async def test_a_slow_drain_in_draining_mode_refuses_newcomers_meanwhile() -> None:
    server = zone_server()
    conns = [TimedClosing(server) for _ in range(10)]
    server.connections |= set(conns)
    server.set_mode(ZoneMode.DRAINING, drain_over=0.3)
    assert server.mode is ZoneMode.DRAINING
    assert gauge(server)["draining"] == 1.0
    await until(lambda: not server.connections, 5)
    assert server.mode is ZoneMode.DRAINING  # until told otherwise, as before


async def test_serving_again_stops_a_gradual_drain_midway() -> None:
    server = zone_server()
    conns = [TimedClosing(server) for _ in range(50)]
    server.connections |= set(conns)
    server.set_mode(ZoneMode.SERVING, drain_over=2.0)
    await until(lambda: len(server.connections) < 50, 5)
    server.set_mode(ZoneMode.SERVING)
    assert server.draining is None
    left = len(server.connections)
    await asyncio.sleep(0.3)
    assert len(server.connections) == left > 0  # the rest stay connected


async def test_drain_gradually_follows_the_schedule_on_an_injected_sleep() -> None:
    server = zone_server()
    conns = [TimedClosing(server) for _ in range(10)]
    server.connections |= set(conns)
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    await drain_gradually(server, 10.0, rng=random.Random(3), sleep=sleep)
    expected = drain_schedule(10, 10.0, random.Random(3))
    assert len(slept) == len(expected) + 1  # one per batch, one before the last sweep
    assert slept[-1] == pytest.approx(10.0, abs=0.1)
    assert not server.connections
    assert server.mode is ZoneMode.SERVING


async def test_a_drain_that_wakes_late_does_not_burst_to_catch_up() -> None:
    server = zone_server()
    conns = [TimedClosing(server) for _ in range(200)]
    server.connections |= set(conns)
    clock = [0.0]
    sleeps = 0
    first: dict[int, float] = {}
    for conn in conns:  # note when each is first told to close, on the fake clock
        conn.close_soon = lambda *a, c=conn: first.setdefault(id(c), clock[0])  # type: ignore[method-assign]

    async def sleep(seconds: float) -> None:
        nonlocal sleeps
        sleeps += 1
        clock[0] += seconds + (2.0 if sleeps == 5 else 0.0)  # the loop stalls once, 2 s

    await drain_gradually(server, 5.0, rng=random.Random(4), sleep=sleep, clock=lambda: clock[0])
    closed_at = list(first.values())
    assert len(closed_at) == 200
    # Planned: 200 over 5 s, about 2 per 50 ms. The stall's overdue batches did not all
    # close on waking: no 100 ms holds more than a fair share of a 5 s spread.
    peak = max(sum(1 for t in closed_at if start <= t < start + 0.1) for start in closed_at)
    assert peak <= 15, peak
    assert clock[0] == pytest.approx(7.0, abs=0.2)  # the drain ended the stall's 2 s later


def test_a_mode_signal_before_the_zone_is_up_is_remembered_not_fatal() -> None:
    # SIGUSR1/2 terminate a process by default: a worker still starting must survive
    # `rideout chaos`'s signal, and apply the mode once its zone is up.
    import subprocess
    import sys

    code = (
        "import os, signal\n"
        "from rideout.realtime.zone import DEGRADE_SIGNAL, early_mode, hold_mode_signals\n"
        "hold_mode_signals()\n"
        "os.kill(os.getpid(), DEGRADE_SIGNAL)\n"
        "print(early_mode())\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout.strip()) == (0, "degraded"), done.stderr
