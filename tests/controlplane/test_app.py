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


async def test_dashboard_data_and_chaos_are_guarded(make_config: Callable[..., Config]) -> None:
    from rideout.auth.admin import load_or_create_admin_token

    config = make_config()
    cp = config.control_plane
    async with (
        serving(create_app(config), cp.address, cp.port),
        httpx.AsyncClient(trust_env=False, base_url=f"http://{cp.address}:{cp.port}") as http,
    ):
        settings = (await http.get("/v1/dashboard")).json()
        assert settings["local"] is True
        assert settings["admin_token"] == load_or_create_admin_token(config.keys_dir)
        assert "access-control-allow-origin" not in (await http.get("/v1/dashboard")).headers
        # DNS rebinding: another name that resolves here is refused.
        assert (
            await http.get("/v1/dashboard", headers={"Host": "evil.example:9000"})
        ).status_code == 403
        auth = {"Authorization": f"Bearer {settings['admin_token']}"}
        assert (
            await http.post("/v1/chaos", json={"op": "kill", "region": "us-east-1"})
        ).status_code == 401
        assert (await http.post("/v1/chaos", content=b"{", headers=auth)).status_code == 400
        refused = await http.post(
            "/v1/chaos", json={"op": "kill", "region": "us-east-1"}, headers=auth
        )
        assert refused.status_code == 409  # no supervisor is running
        assert "not running" in refused.json()["message"]
        async with http.stream("GET", "/v1/stream") as stream:
            async for line in stream.aiter_lines():
                if line.startswith("data: "):
                    import json

                    view = json.loads(line[len("data: ") :])
                    assert set(view) >= {"alarms", "dns", "failover", "canary", "clients", "now"}
                    break
        assert "<title>rideout · operations</title>" in (await http.get("/")).text
