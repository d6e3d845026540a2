from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest

from rideout.config import Config
from rideout.realtime.app import create_app
from tests.conftest import running_redis_pair, serving


async def test_health_and_metrics_on_every_zone(make_config: Callable[..., Config]) -> None:
    config = make_config()
    async with running_redis_pair(config), httpx.AsyncClient(trust_env=False) as http:
        for region in config.regions:
            for zone in region.zones:
                app = create_app(config, region.name, zone.name)
                async with serving(app, zone.address, config.app_port):
                    base = f"http://{zone.address}:{config.app_port}"
                    response = await http.get(base + "/health")
                    assert response.status_code == 200
                    body = response.json()
                    assert body["status"] == "ok"
                    assert (body["region"], body["zone"], body["role"]) == (
                        region.name,
                        zone.name,
                        region.role,
                    )
                    expected = "master" if region.role == "primary" else "replica"
                    assert body["redis"]["role"] == expected
                    if expected == "replica":
                        assert body["redis"]["link"] == "up"
                    metrics = (await http.get(base + "/metrics")).text
                    assert (
                        f'rideout_app_info{{region="{region.name}",zone="{zone.name}"}} 1.0'
                        in metrics
                    )
                    assert 'rideout_health_checks_total{outcome="ok"} 1.0' in metrics
                    assert "rideout_redis_up 1.0" in metrics


async def test_health_is_503_when_redis_is_gone(make_config: Callable[..., Config]) -> None:
    config = make_config()  # nobody started its Redis
    zone = config.primary.zones[0]
    async with (
        serving(create_app(config, config.primary.name, zone.name), zone.address, config.app_port),
        httpx.AsyncClient(trust_env=False) as http,
    ):
        response = await http.get(f"http://{zone.address}:{config.app_port}/health")
        assert response.status_code == 503
        body = response.json()
        assert body["status"] == "degraded"
        assert body["redis"]["reachable"] is False
        assert body["epoch"] is None
        metrics = (await http.get(f"http://{zone.address}:{config.app_port}/metrics")).text
        assert 'rideout_health_checks_total{outcome="redis_unreachable"} 1.0' in metrics
        assert "rideout_redis_up 0.0" in metrics


def test_unknown_region_or_zone(make_config: Callable[..., Config]) -> None:
    config = make_config()
    with pytest.raises(KeyError, match="no region"):
        create_app(config, "eu-west-1", "x")
    with pytest.raises(KeyError, match="no zone"):
        create_app(config, "us-east-1", "usw2-az1")
