"""The canary against real app servers and a real ingest endpoint."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket

from rideout.config import Config
from rideout.health.canary import METRIC_NAME, NAMESPACE, Canary, metric_data, probe
from rideout.health.names import BUSY_METRIC_NAME, CANARY_PROBE, FULL_METRIC_NAME, PROBE_CLAIM
from rideout.protocol import PONG, encode_probe
from tests.conftest import FakeClock, free_port, serving
from tests.realtime.conftest import Deployment


def canary_token(deployment: Deployment) -> str:
    """A token with the canary's probe claim (the probe is refused to others)."""
    return deployment.token("canary", extra_claims={PROBE_CLAIM: CANARY_PROBE})


async def test_probe_healthy_dead_and_degraded(deployment: Deployment) -> None:
    token = canary_token(deployment)
    url = deployment.urls["a1"] + "/ws"
    assert await probe(url, token, 2.0) == (True, None, False, False)  # healthy, not full, not busy
    healthy, error = await probe(f"ws://127.0.1.1:{free_port('127.0.1.1')}/ws", token, 2.0)
    assert not healthy
    assert "ConnectionRefusedError" in (error or "")
    healthy, error = await probe(url, "not-a-token", 2.0)
    assert not healthy
    assert "401" in (error or "")
    deployment.servers["a1"].set_mode("degraded")
    healthy, error = await probe(url, token, 2.0)
    assert not healthy
    assert "expected pong" in (error or "")
    deployment.servers["a1"].set_mode("serving")


async def test_a_probe_that_hangs_times_out(deployment: Deployment) -> None:
    import socket

    with socket.socket() as silent:  # accepts connections, never answers the handshake
        silent.bind(("127.0.1.1", 0))
        silent.listen()
        port = silent.getsockname()[1]
        healthy, error = await probe(f"ws://127.0.1.1:{port}/ws", deployment.token(), 0.3)
    assert not healthy
    assert error == "no WebSocket handshake within 0.3 s"


async def test_a_heartbeat_left_unanswered_times_out_and_says_how_long_the_handshake_took() -> None:
    async def silent_after_accept(ws: WebSocket) -> None:
        await ws.accept()
        while (await ws.receive())["type"] != "websocket.disconnect":
            pass  # reads the heartbeat and the probe, answers neither

    port = free_port("127.0.1.1")
    app = Starlette(routes=[WebSocketRoute("/ws", silent_after_accept)])
    async with serving(app, "127.0.1.1", port):
        healthy, error = await probe(f"ws://127.0.1.1:{port}/ws", "token", 0.3)
    assert not healthy
    assert error is not None
    assert re.fullmatch(r"no pong within 0\.3 s \(the handshake took 0\.[0-2]\d s\)", error)


async def test_a_store_probe_left_unanswered_times_out_and_says_which() -> None:
    async def pong_only(ws: WebSocket) -> None:  # the heartbeat's answer, then silence
        await ws.accept()
        await ws.receive_text()
        await ws.send_text(PONG)
        await ws.receive_text()
        await ws.receive()  # the probe's answer never comes: wait for the client to leave

    port = free_port("127.0.1.1")
    async with serving(Starlette(routes=[WebSocketRoute("/ws", pong_only)]), "127.0.1.1", port):
        healthy, error = await probe(f"ws://127.0.1.1:{port}/ws", "token", 0.3)
    assert not healthy
    assert error is not None
    assert error.startswith("no answer to the store probe within 0.3 s (the handshake took 0.")


def late_zone(delay: float, *, busy: bool) -> Starlette:
    """A zone that answers the heartbeat at once and the store probe after `delay`
    seconds, saying whether it sheds load."""

    async def answer_late(ws: WebSocket) -> None:
        await ws.accept()
        await ws.receive_text()
        await ws.send_text(PONG)
        await ws.receive_text()
        await asyncio.sleep(delay)
        await ws.send_text(
            encode_probe(region="us-east-1", zone="use1-az1", role="writer", epoch=1,
                         replicas=None, busy=busy)
        )  # fmt: skip
        await ws.receive()

    return Starlette(routes=[WebSocketRoute("/ws", answer_late)])


@pytest.mark.parametrize("busy", [True, False])
async def test_a_late_answer_is_healthy_only_from_a_zone_that_says_it_is_busy(busy: bool) -> None:
    """Busy is not down: past the timeout, within the grace, an answer that says the zone
    sheds load is healthy (and busy); one that does not is a failure that says why."""
    port = free_port("127.0.1.1")
    async with serving(late_zone(0.4, busy=busy), "127.0.1.1", port):
        outcome = await probe(f"ws://127.0.1.1:{port}/ws", "token", 0.2, grace=2.0)
    if busy:
        assert outcome == (True, None, False, True)
    else:
        healthy, error = outcome[:2]
        assert not healthy
        assert error is not None
        assert re.fullmatch(
            r"the store probe's answer came after 0\.\d\d s, past the 0\.2 s timeout, from a "
            r"zone that does not say it is shedding load",
            error,
        ), error


async def test_a_busy_zone_that_answers_after_the_grace_is_down() -> None:
    port = free_port("127.0.1.1")
    async with serving(late_zone(5.0, busy=True), "127.0.1.1", port):
        healthy, error = await probe(f"ws://127.0.1.1:{port}/ws", "token", 0.2, grace=0.2)
    assert not healthy
    assert error is not None
    assert error.startswith("no answer to the store probe within 0.2 s (nor 0.2 s more) (the ")


async def test_without_a_grace_a_busy_zone_answering_late_is_down() -> None:
    port = free_port("127.0.1.1")
    async with serving(late_zone(0.4, busy=True), "127.0.1.1", port):
        healthy, error = await probe(f"ws://127.0.1.1:{port}/ws", "token", 0.2)
    assert not healthy
    assert (error or "").startswith("no answer to the store probe within 0.2 s (the handshake")


async def test_the_canary_gives_its_probes_the_configured_grace_and_reports_busy_zones(
    deployment: Deployment, ingest: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The canary's own probe function takes ``timing.canary_busy_grace``; a busy zone's
    datapoints say healthy, and busy."""
    import rideout.health.canary as canary_module

    config = deployment.config
    assert config.timing.canary_busy_grace > 0
    graces: list[float] = []
    busy_address = config.regions[0].zones[0].address

    async def probe(url: str, token: str, timeout: float, grace: float = 0.0) -> Any:
        graces.append(grace)
        return True, None, False, url.startswith(f"ws://{busy_address}:")

    monkeypatch.setattr(canary_module, "probe", probe)
    time = FakeClock(1_700_000_000.1)
    canary = Canary(config, "us-east-1", clock=time, sleep=time.asleep)
    await canary.run(rounds=1)
    assert graces == [config.timing.canary_busy_grace] * 2
    assert [(r.zone, r.healthy, r.busy) for r in canary.last_results] == [
        ("use1-az1", True, True), ("use1-az2", True, False)
    ]  # fmt: skip
    busy = {
        next(d["Value"] for d in p["Dimensions"] if d["Name"] == "Zone"): p["Value"]
        for p in ingest[0]["MetricData"]
        if p["MetricName"] == BUSY_METRIC_NAME
    }
    assert busy == {"use1-az1": 1.0, "use1-az2": 0.0}


@contextlib.asynccontextmanager
async def ingesting(config: Config) -> AsyncIterator[list[dict[str, Any]]]:
    """A stand-in control plane that keeps every body posted to its ingest endpoint."""
    received: list[dict[str, Any]] = []

    async def put(request: Request) -> Response:
        assert request.headers["content-type"] == "application/json"
        assert request.headers["x-rideout-region"] == "us-east-1"
        assert {"x-rideout-timestamp", "x-rideout-nonce", "x-rideout-signature"} <= set(
            request.headers
        )
        received.append(await request.json())
        return JSONResponse({"ok": True})

    cp = config.control_plane
    app = Starlette(routes=[Route("/v1/metrics", put, methods=["POST"])])
    async with serving(app, cp.address, cp.port):
        yield received


@pytest.fixture
async def ingest(deployment: Deployment) -> AsyncIterator[list[dict[str, Any]]]:
    async with ingesting(deployment.config) as received:
        yield received


async def test_rounds_probe_every_zone_and_push_datapoints(
    deployment: Deployment, ingest: list[dict[str, Any]]
) -> None:
    config = deployment.config
    time = FakeClock(1_700_000_000.1)  # rounds wait on this clock, not on the wall's
    canary = Canary(config, "us-east-1", clock=time, sleep=time.asleep)
    await canary.run(rounds=2)
    assert len(ingest) == 2
    body = ingest[0]
    assert body["Namespace"] == NAMESPACE
    points = [p for p in body["MetricData"] if p["MetricName"] == METRIC_NAME]
    zones = sorted(next(d["Value"] for d in p["Dimensions"] if d["Name"] == "Zone") for p in points)
    assert zones == ["use1-az1", "use1-az2"]
    assert all(p["Value"] == 1.0 for p in points)
    # Each healthy zone's fullness and busyness too: neither is at its connection cap,
    # neither sheds load.
    full = [p for p in body["MetricData"] if p["MetricName"] == FULL_METRIC_NAME]
    assert [p["Value"] for p in full] == [0.0, 0.0]
    busy = [p for p in body["MetricData"] if p["MetricName"] == BUSY_METRIC_NAME]
    assert [p["Value"] for p in busy] == [0.0, 0.0]
    assert len(body["MetricData"]) == 6
    assert all({"Name": "ApiId", "Value": "us-east-1"} in p["Dimensions"] for p in points)
    # On the period grid, a quarter in, one period apart: one datapoint per period.
    interval = config.timing.canary_interval
    stamps = [body["MetricData"][0]["Timestamp"] for body in ingest]
    assert [round((t / interval) % 1, 6) for t in stamps] == [0.25, 0.25]
    assert stamps[1] - stamps[0] == pytest.approx(interval)
    assert time.sleeps == [pytest.approx(stamps[0] - 1_700_000_000.1), pytest.approx(interval)]


async def test_a_canary_that_fell_behind_skips_the_rounds_it_missed(
    make_config: Callable[..., Config],
) -> None:
    config = make_config()
    interval = config.timing.canary_interval
    time = FakeClock(1000 * interval)

    stalled: list[str] = []

    async def stalls(url: str, token: str, timeout: float) -> tuple[bool, str | None]:
        if not stalled:  # the first probe of the first round takes three periods
            stalled.append(url)
            time.advance(3 * interval)
        return True, None

    canary = Canary(config, "us-east-1", probe_zone=stalls, clock=time, sleep=time.asleep)
    async with ingesting(config) as received:
        await canary.run(rounds=2)
    stamps = [body["MetricData"][0]["Timestamp"] for body in received]
    # Not the slots it missed: the next one after the stall, still a quarter in.
    assert stamps == [1001.25 * interval, 1005.25 * interval]


async def test_a_timeout_names_the_canarys_own_lag(make_config: Callable[..., Config]) -> None:
    """A canary that stalled times out on its own: its reasons say how late it was."""
    import asyncio
    import time as wall

    config = make_config()
    clock = FakeClock(1000 * config.timing.canary_interval)

    async def stalled_then_timed_out(url: str, token: str, timeout: float) -> tuple[bool, str]:
        wall.sleep(0.5)  # noqa: ASYNC251 - the canary's own process stalls
        await asyncio.sleep(0.1)  # its lag watcher runs
        return False, f"no pong within {timeout:g} s"

    canary = Canary(
        config, "us-east-1", probe_zone=stalled_then_timed_out, clock=clock, sleep=clock.asleep
    )
    async with ingesting(config):
        await canary.run(rounds=1)
    errors = [r.error or "" for r in canary.last_results]
    assert len(errors) == 2
    for error in errors:
        match = re.fullmatch(
            r"no pong within 0\.4 s; this canary's own loop ran up to (\S+) s late", error
        )
        assert match is not None, error
        assert 0.4 < float(match.group(1)) < 5.0
    # Outside run() nothing watches the loop: nothing is claimed about it.
    results = await canary.probe_all()
    assert {r.error for r in results} == {"no pong within 0.4 s"}


async def test_a_real_canary_gets_through_a_real_control_plane(deployment: Deployment) -> None:
    """Signed with its region's key, the canary's datapoints are stored; nothing refused."""
    from rideout.controlplane.app import create_app
    from rideout.controlplane.runtime import ControlPlane

    config = deployment.config
    plane = ControlPlane(config)
    cp = config.control_plane
    async with (
        serving(create_app(config, runtime=plane), cp.address, cp.port),
        httpx.AsyncClient(trust_env=False) as http,
    ):
        await Canary(config, "us-east-1").run(rounds=2)
        metrics = (await http.get(f"http://{cp.address}:{cp.port}/metrics")).text
    points = plane.canary_history(3600)
    assert len(points["us-east-1"]) == 4  # two rounds, two zones
    assert {v for _, v in points["us-east-1"]} == {1.0}
    assert points["us-west-2"] == []
    assert "rideout_control_plane_refused_total{" not in metrics  # nothing was refused
    assert "rideout_datapoints_total 12.0" in metrics  # and each zone's fullness and busyness
    assert plane.zones.full() == frozenset()


async def test_pushing_to_a_dead_control_plane_is_logged_not_raised(
    deployment: Deployment, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="rideout.canary")
    canary = Canary(deployment.config, "us-east-1")  # the region `ingesting` expects
    results = await canary.probe_all()
    async with httpx.AsyncClient(trust_env=False) as http:
        for _ in range(3):
            assert await canary.push(http, results) is False
        # Logged when it starts, then counted (a standby down for an hour would
        # otherwise log every round); the count is in /metrics.
        assert caplog.text.count("cannot reach the control plane") == 1
        assert list(canary.failed_pushes.values()) == [3]
        async with ingesting(deployment.config):
            assert await canary.push(http, results) is True
    assert "takes the datapoints again, after 3 failed pushes" in caplog.text
    assert list(canary.failed_pushes.values()) == [0]


def test_metric_data_shape() -> None:
    from rideout.health.canary import ProbeResult

    body = metric_data([ProbeResult("r", "z", False, 0.1, "boom", 1700000000.0)])
    assert body == {
        "Namespace": "App",
        "MetricData": [
            {
                "MetricName": "WebSocketHealth",
                "Dimensions": [{"Name": "ApiId", "Value": "r"}, {"Name": "Zone", "Value": "z"}],
                "Value": 0.0,
                "Timestamp": 1700000000.0,
            }
        ],
    }
