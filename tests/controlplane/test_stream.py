"""The dashboard feed against a real control plane and real app servers: readers share
one view per period, are capped, and never slow the evaluation loop."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import replace

import httpx
from prometheus_client import CollectorRegistry

from rideout.config import Config
from rideout.controlplane.app import create_app
from rideout.controlplane.runtime import ControlPlane
from tests.conftest import serving
from tests.realtime.conftest import running_deployment


def sample(registry: CollectorRegistry, name: str, **labels: str) -> float:
    value = registry.get_sample_value(name, labels)
    return 0.0 if value is None else value


def metric(text: str, line_start: str) -> float:
    """A sample's value from a Prometheus exposition (0 when absent)."""
    for line in text.splitlines():
        if line.startswith(line_start + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def with_readers(config: Config, readers: int) -> Config:
    return replace(config, control_plane=replace(config.control_plane, max_stream_readers=readers))


async def read_frames(http: httpx.AsyncClient, seconds: float) -> int:
    """Read /v1/stream for `seconds`: how many summaries arrived."""
    seen = 0
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(seconds), http.stream("GET", "/v1/stream") as stream:
            assert stream.status_code == 200
            async for line in stream.aiter_lines():
                seen += line == "event: summary"
    return seen


async def test_200_readers_cost_one_zone_poll_per_period_and_the_loop_keeps_time(
    make_config: Callable[..., Config],
) -> None:
    config = with_readers(make_config(), 200)
    period = config.timing.canary_interval
    cp = config.control_plane
    async with running_deployment(config) as deployment:
        plane = ControlPlane(config)
        limits = httpx.Limits(max_connections=250, max_keepalive_connections=250)
        async with (
            serving(create_app(config, runtime=plane), cp.address, cp.port),
            httpx.AsyncClient(
                trust_env=False, base_url=f"http://{cp.address}:{cp.port}", limits=limits,
                timeout=60,
            ) as http,
        ):  # fmt: skip
            servers = {n: deployment.servers[n] for n in ("a1", "a2", "b1")}  # port app_port

            def polls() -> dict[str, float]:
                return {
                    n: sample(s.metrics.registry, "rideout_health_checks_total", outcome="ok")
                    for n, s in servers.items()
                }

            before, rounds_before = polls(), plane.rounds
            started = time.monotonic()
            seen = await asyncio.gather(*(read_frames(http, 10 * period) for _ in range(200)))
            elapsed = time.monotonic() - started
            after, rounds = polls(), plane.rounds - rounds_before
            text = (await http.get("/metrics")).text
    periods = elapsed / period
    views = metric(text, "rideout_dashboard_views_total")
    # Every reader got the shared views (a reader that lags skips to the latest one:
    # under load this test's own 200 clients, in the same process, fall behind).
    assert min(seen) >= 3, sorted(seen)[:5]
    assert max(seen) <= views + 1
    assert sum(seen) / len(seen) >= views * 0.6, (sum(seen) / len(seen), views)
    # One view per period, shared: each zone answered at most one /health per period.
    for name in servers:
        assert after[name] - before[name] <= periods + 2, (name, after[name], periods)
    assert views <= periods + 2
    for zone in ("use1-az1", "use1-az2", "usw2-az1", "usw2-az2"):
        assert metric(text, f'rideout_dashboard_zone_polls_total{{zone="{zone}"}}') <= periods + 2
    # The evaluation loop kept its cadence meanwhile.
    assert rounds >= periods * 0.8 - 1, (rounds, periods)
    assert metric(text, "rideout_evaluation_delay_seconds") < period
    print(f"200 readers, {elapsed:.1f} s = {periods:.1f} periods: {views:g} views, {rounds} "
          f"rounds, frames per reader {min(seen)}-{max(seen)}")  # fmt: skip


async def test_readers_beyond_the_cap_get_503_and_operators_keep_a_seat(
    make_config: Callable[..., Config],
) -> None:
    config = with_readers(make_config(), 3)
    cp = config.control_plane
    app = create_app(config)
    api = app.state.api
    async with (
        serving(app, cp.address, cp.port),
        httpx.AsyncClient(trust_env=False, base_url=f"http://{cp.address}:{cp.port}") as http,
    ):
        async with contextlib.AsyncExitStack() as stack:
            streams = [
                await stack.enter_async_context(http.stream("GET", "/v1/stream")) for _ in range(3)
            ]
            assert [s.status_code for s in streams] == [200] * 3
            refused = await http.get("/v1/stream")
            assert refused.status_code == 503
            assert refused.headers["retry-after"] == "1"
            assert refused.json()["error"] == "busy"
            # An operator session may still watch (a few seats are kept for it).
            code, _ = api.sessions.mint_code()
            login = await http.get(f"/login?code={code}")
            assert login.status_code == 303
            async with http.stream("GET", "/v1/stream") as operator:
                assert operator.status_code == 200
            http.cookies.clear()
            # Another Host (DNS rebinding) gets nothing.
            assert (
                await http.get("/v1/stream", headers={"Host": "evil.example"})
            ).status_code == 403
        # Readers that leave free their seats.
        async with asyncio.timeout(10):
            while api.feed.readers:
                await asyncio.sleep(0.05)
        async with http.stream("GET", "/v1/stream") as again:
            assert again.status_code == 200
        text = (await http.get("/metrics")).text
    assert 'rideout_control_plane_refused_total{endpoint="stream",reason="full"} 1.0' in text
