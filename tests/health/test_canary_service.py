"""The canary as a service of its own: /live, /ready and /metrics over its loop, and one
round pushed to every control plane instance."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx

from rideout.config import Config
from rideout.health.canary import Canary
from rideout.health.canary_service import create_canary_app
from tests.conftest import free_port, serving, until
from tests.health.test_canary import ingesting


async def healthy(url: str, token: str, timeout: float) -> tuple[bool, str | None]:
    return True, None


async def test_live_once_it_runs_ready_once_a_control_plane_took_a_round(
    make_config: Callable[..., Config],
) -> None:
    config = make_config()
    canary = Canary(config, "us-east-1", probe_zone=healthy)
    host, port = "127.0.0.1", free_port("127.0.0.1")
    base = f"http://{host}:{port}"
    async with serving(create_canary_app(canary), host, port), httpx.AsyncClient(
        trust_env=False, timeout=3
    ) as http:  # fmt: skip
        await until(lambda: canary.rounds >= 1, 15, message="a round")
        assert (await http.get(base + "/live")).status_code == 200
        ready = await http.get(base + "/ready")
        assert ready.status_code == 503  # nobody took it: no control plane runs
        assert ready.json()["message"] == "no round has reached a control plane yet"
        received: list[dict[str, Any]]
        async with ingesting(config) as received:
            await until(lambda: received, 15, message="a round reached the control plane")
            await until(
                lambda: _status(http, base + "/ready", 200), 15, message="ready once pushed"
            )
        metrics = (await http.get(base + "/metrics")).text
    assert "rideout_canary_rounds_total" in metrics
    assert 'rideout_canary_probe_healthy{region="us-east-1",zone="use1-az1"} 1.0' in metrics
    assert f'rideout_canary_failed_pushes{{url="{canary.ingest_urls[0]}"}}' in metrics


async def _status(http: httpx.AsyncClient, url: str, code: int) -> bool:
    return (await http.get(url)).status_code == code


async def test_a_round_goes_to_every_control_plane_instance(
    make_config: Callable[..., Config],
) -> None:
    first = make_config()
    cp = first.control_plane
    other = free_port("127.0.0.1")
    config = make_config(
        control_plane={"port": cp.port, "dns_port": cp.dns_port,
                       "urls": [f"http://{cp.address}:{cp.port}", f"http://127.0.0.1:{other}"]},
    )  # fmt: skip
    canary = Canary(config, "us-east-1", probe_zone=healthy)
    results = await canary.probe_all()
    async with ingesting(config) as received, httpx.AsyncClient(trust_env=False) as http:
        # One instance answers, the other is down: the round counts as taken.
        assert await canary.push(http, results)
    assert len(received) == 1
    assert canary.last_pushed_at is not None
