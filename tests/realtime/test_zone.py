"""The zone: its modes, what switching them does, and an import that costs nothing."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import rideout
from rideout.auth.revocation import RevocationList
from rideout.protocol import CloseCode
from rideout.realtime.metrics import AppMetrics
from rideout.realtime.zone import DEGRADE_SIGNAL, SERVE_SIGNAL, ZoneMode, ZoneServer, drain


class Closing:
    """A connection as the zone sees it: something to close."""

    def __init__(self) -> None:
        self.closed: tuple[int, str] | None = None

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
