from __future__ import annotations

from collections.abc import Callable

import httpx

from rideout.config import Config
from rideout.controlplane.app import create_app
from tests.conftest import serving


async def test_health_status_and_metrics(make_config: Callable[..., Config]) -> None:
    config = make_config()
    cp = config.control_plane
    async with (
        serving(create_app(config), cp.address, cp.port),
        httpx.AsyncClient(trust_env=False, base_url=f"http://{cp.address}:{cp.port}") as http,
    ):
        assert (await http.get("/health")).json() == {
            "status": "ok",
            "app_domain": config.app_domain,
        }
        status = (await http.get("/status")).json()
        assert status["running"] is False  # no `rideout up` holds this data dir
        assert [r["name"] for r in status["regions"]] == ["us-east-1", "us-west-2"]
        assert status["control_plane"]["health"]["up"] is True
        # Nothing else runs: every probe says so rather than failing.
        assert all(not z["health"]["up"] for r in status["regions"] for z in r["zones"])
        assert all(not r["redis"]["state"]["reachable"] for r in status["regions"])
        metrics = (await http.get("/metrics")).text
        assert (
            'rideout_deployment_info{app_domain="auction.rideout.test",profile="fast"} 1.0'
            in metrics
        )
        assert 'rideout_control_plane_requests_total{endpoint="status"} 1.0' in metrics
