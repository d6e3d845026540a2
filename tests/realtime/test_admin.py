"""``/admin/mode``: degrade and drain a zone (local mode only)."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest
from websockets.exceptions import ConnectionClosed

from rideout.auth.admin import load_or_create_admin_token
from rideout.config import Config
from rideout.realtime.admin import _parse_mode
from rideout.realtime.zone import ZoneMode
from tests.realtime.conftest import Deployment, recv, rejected, running_deployment, send


async def test_degraded_and_draining_modes(deployment: Deployment) -> None:
    config = deployment.config
    zone = config.primary.zones[0]
    admin = f"http://{zone.address}:{config.app_port}/admin/mode"
    token = load_or_create_admin_token(config.keys_dir)
    auth = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(trust_env=False) as http:
        assert (await http.post(admin, json={"mode": "degraded"})).status_code == 401
        assert (
            await http.post(
                admin, json={"mode": "degraded"}, headers={"Authorization": "Bearer nope"}
            )
        ).status_code == 401
        assert (await http.post(admin, json={"mode": "asleep"}, headers=auth)).status_code == 400
        async with deployment.connect("a1") as ws:
            assert (await http.post(admin, json={"mode": "degraded"}, headers=auth)).json()[
                "mode"
            ] == "degraded"
            await send(ws, action="heartbeat")
            error = await recv(ws)
            assert (error["type"], error["code"]) == ("error", "unavailable")
            await send(ws, action="getState", room="lot-6")
            assert (await recv(ws))["code"] == "unavailable"
            assert (await http.post(admin, json={"mode": "serving"}, headers=auth)).json()[
                "mode"
            ] == "serving"
            await send(ws, action="heartbeat")
            assert await recv(ws) == "pong"
            assert (await http.post(admin, json={"mode": "draining"}, headers=auth)).json()[
                "mode"
            ] == "draining"
            with pytest.raises(ConnectionClosed) as info:
                await recv(ws)
            assert info.value.rcvd is not None
            assert info.value.rcvd.code == 1012
        code, body = await rejected(f"{deployment.urls['a1']}/ws?token={deployment.token()}")
        assert (code, body["error"]) == (503, "draining")
        await http.post(admin, json={"mode": "serving"}, headers=auth)
        metrics = (await http.get(f"http://{zone.address}:{config.app_port}/metrics")).text
        assert 'rideout_ws_closes_total{code="1012"} 1.0' in metrics
        assert 'rideout_ws_messages_total{action="heartbeat",outcome="unavailable"} 1.0' in metrics
        assert 'rideout_zone_mode{mode="serving"} 1.0' in metrics


async def test_admin_routes_do_not_exist_outside_local_mode(
    make_config: Callable[..., Config],
) -> None:
    config = make_config(mode="external")
    async with running_deployment(config) as d, httpx.AsyncClient(trust_env=False) as http:
        zone = config.primary.zones[0]
        token = load_or_create_admin_token(config.keys_dir)
        response = await http.get(
            f"http://{zone.address}:{config.app_port}/admin/mode",
            headers={"Authorization": f"Bearer {token}"},
        )
        assert response.status_code == 404
        assert d.urls


@pytest.mark.parametrize(
    ("body", "mode"),
    [
        (b'{"mode": "draining"}', ZoneMode.DRAINING),
        (b'{"mode": "serving", "why": "drill over"}', ZoneMode.SERVING),
        (b'{"mode": "asleep"}', None),
        (b'{"mode": 1}', None),
        (b'{"mode": ["degraded"]}', None),
        (b"{}", None),
        (b'["degraded"]', None),
        (b'"degraded"', None),
        (b"{", None),
        (b"\xff", None),
    ],
)
def test_the_mode_a_body_asks_for(body: bytes, mode: ZoneMode | None) -> None:
    assert _parse_mode(body) is mode
