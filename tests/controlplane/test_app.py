from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest
from starlette.applications import Starlette

from rideout.cluster.chaos import LocalChaos
from rideout.cluster.status import LocalInventory
from rideout.config import Config
from rideout.controlplane.app import create_app
from rideout.controlplane.errors import ChaosFailed
from tests.conftest import serving


def local_app(config: Config) -> Starlette:
    """The control plane as `rideout control-plane` builds it in local mode."""
    return create_app(config, chaos=LocalChaos(config.run_dir), inventory=LocalInventory(config))


async def test_health_status_and_metrics(make_config: Callable[..., Config]) -> None:
    config = make_config()
    cp = config.control_plane
    async with (
        serving(local_app(config), cp.address, cp.port),
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
        serving(local_app(config), cp.address, cp.port),
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


class RecordingChaos:
    """Stands in for the local supervisor's chaos port (LocalChaos), the seam the control
    plane is given: what crosses it is the test. The real supervisor behind LocalChaos is
    covered by tests/cluster/test_chaos.py."""

    def __init__(self, fail: str | None = None) -> None:
        self.calls: list[tuple[str, str]] = []
        self.fail = fail

    async def run(self, op: str, region: str) -> str:
        self.calls.append((op, region))
        if self.fail is not None:
            raise ChaosFailed(self.fail)
        return f"did {op} to {region}"


async def test_without_a_supervisor_chaos_is_refused_and_status_is_its_own(
    make_config: Callable[..., Config],
) -> None:
    from rideout.auth.admin import load_or_create_admin_token

    config = make_config()
    cp = config.control_plane
    auth = {"Authorization": f"Bearer {load_or_create_admin_token(config.keys_dir)}"}
    async with (
        serving(create_app(config), cp.address, cp.port),
        httpx.AsyncClient(trust_env=False, base_url=f"http://{cp.address}:{cp.port}") as http,
    ):
        refused = await http.post(
            "/v1/chaos", json={"op": "kill", "region": "us-east-1"}, headers=auth
        )
        assert refused.status_code == 501
        assert refused.json()["error"] == "not_implemented"
        assert "local supervisor" in refused.json()["message"]
        # Nothing to press: the dashboard gets no chaos buttons and no admin token.
        settings = (await http.get("/v1/dashboard")).json()
        assert settings["local"] is False
        assert settings["admin_token"] is None
        # /status: the configured topology and the control plane's own view, no probes.
        status = (await http.get("/status")).json()
        assert "running" not in status
        assert status["control_plane"]["alive"] is True
        assert set(status["control_plane"]) >= {"alarms", "dns", "failover", "health_checks"}
        assert [r["name"] for r in status["regions"]] == ["us-east-1", "us-west-2"]
        assert [z["name"] for z in status["regions"][0]["zones"]] == ["use1-az1", "use1-az2"]
        assert all("health" not in z for r in status["regions"] for z in r["zones"])


@pytest.mark.parametrize("fail", [None, "no region 'mars-1'"])
async def test_chaos_goes_through_the_injected_port(
    make_config: Callable[..., Config], fail: str | None
) -> None:
    from rideout.auth.admin import load_or_create_admin_token

    config = make_config()
    cp = config.control_plane
    port = RecordingChaos(fail)
    auth = {"Authorization": f"Bearer {load_or_create_admin_token(config.keys_dir)}"}
    async with (
        serving(create_app(config, chaos=port), cp.address, cp.port),
        httpx.AsyncClient(trust_env=False, base_url=f"http://{cp.address}:{cp.port}") as http,
    ):
        assert (await http.get("/v1/dashboard")).json()["local"] is True
        answer = await http.post(
            "/v1/chaos", json={"op": "freeze", "region": "us-west-2"}, headers=auth
        )
    assert port.calls == [("freeze", "us-west-2")]
    if fail is None:
        assert answer.status_code == 200
        assert answer.json() == {"message": "did freeze to us-west-2"}
    else:
        assert answer.status_code == 409
        assert answer.json() == {"error": "chaos_failed", "message": fail}
