"""``/admin/mode``: degrade and drain a zone (local mode only)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

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


async def test_a_failback_drain_closes_over_the_spread_and_keeps_serving(
    deployment: Deployment,
) -> None:
    """What the control plane asks of the old writer's zones after a failback."""
    config = deployment.config
    zone = config.primary.zones[0]
    admin = f"http://{zone.address}:{config.app_port}/admin/mode"
    auth = {"Authorization": f"Bearer {load_or_create_admin_token(config.keys_dir)}"}
    loop = asyncio.get_running_loop()
    async with contextlib.AsyncExitStack() as stack, httpx.AsyncClient(trust_env=False) as http:
        sockets = [
            await stack.enter_async_context(deployment.connect("a1", f"u{i}")) for i in range(12)
        ]
        for ws in sockets:  # each is served (counted by the zone) before the drain
            await send(ws, action="heartbeat")
            assert await recv(ws) == "pong"

        async def closed_at(ws: Any) -> tuple[int | None, float]:
            try:
                while True:
                    await recv(ws, timeout=10)
            except ConnectionClosed as closed:
                return (closed.rcvd.code if closed.rcvd else None, loop.time())

        start = loop.time()
        answer = await http.post(admin, json={"mode": "serving", "drain_over": 1.5}, headers=auth)
        assert answer.status_code == 200, answer.text
        assert answer.json()["mode"] == "serving"
        # Meanwhile the zone still takes a handshake (its canary's, say) and answers it.
        async with deployment.connect("a1", "canary") as ws:
            await send(ws, action="heartbeat")
            assert await recv(ws) == "pong"
        closes = await asyncio.gather(*(closed_at(ws) for ws in sockets))
        assert {code for code, _ in closes} == {1012}
        times = sorted(t - start for _, t in closes)
        assert times[-1] - times[0] > 0.3, times  # over the spread, not in one instant
        assert times[-1] < 1.5 + 3.0, times  # the spread, plus a loaded machine's scheduling
        assert (await http.get(admin, headers=auth)).json()["mode"] == "serving"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"mode": "serving", "drain_over": -1}, "drain_over must be >= 0"),
        ({"mode": "serving", "drain_over": "5"}, "drain_over must be a number of seconds"),
        ({"mode": "draining", "drain_over": True}, "drain_over must be a number of seconds"),
        ({"mode": "serving", "drain_over": 1e9}, "drain_over must be at most 3600 seconds"),
        (b'{"mode": "serving", "drain_over": Infinity}', "no NaN or Infinity"),
        (b'{"mode": "serving", "mode": "draining"}', "no key named twice"),
        ({"mode": "degraded", "drain_over": 5}, "not degraded"),
        ({"mode": "draining", "drain_over": None}, None),
    ],
)
async def test_a_bad_drain_is_refused_clearly_and_changes_nothing(
    deployment: Deployment, body: dict[str, Any] | bytes, message: str | None
) -> None:
    config = deployment.config
    zone = config.primary.zones[0]
    admin = f"http://{zone.address}:{config.app_port}/admin/mode"
    auth = {"Authorization": f"Bearer {load_or_create_admin_token(config.keys_dir)}"}
    async with httpx.AsyncClient(trust_env=False) as http:
        if isinstance(body, bytes):
            answer = await http.post(admin, content=body, headers=auth)
        else:
            answer = await http.post(admin, json=body, headers=auth)
        if message is None:  # nulls are absent values: a plain drain
            assert answer.json()["mode"] == "draining"
            await http.post(admin, json={"mode": "serving"}, headers=auth)
            return
        assert answer.status_code == 400
        assert answer.json()["error"] == "bad_request"
        assert message in answer.json()["message"]
        assert (await http.get(admin, headers=auth)).json()["mode"] == "serving"
        # Without the token the drain options change nothing either.
        no_token = await http.post(admin, json={"mode": "draining", "drain_over": 1})
        assert no_token.status_code == 401
        assert deployment.servers["a1"].mode is ZoneMode.SERVING


async def test_a_body_over_the_limit_is_413(deployment: Deployment) -> None:
    config = deployment.config
    zone = config.primary.zones[0]
    admin = f"http://{zone.address}:{config.app_port}/admin/mode"
    auth = {"Authorization": f"Bearer {load_or_create_admin_token(config.keys_dir)}"}
    async with httpx.AsyncClient(trust_env=False) as http:
        answer = await http.post(admin, content=b" " * 8192 + b'{"mode": "serving"}',
                                 headers=auth)  # fmt: skip
        assert (answer.status_code, answer.json()["error"]) == (413, "too_large")


@pytest.mark.parametrize(
    ("body", "mode"),
    [
        ({"mode": "draining"}, ZoneMode.DRAINING),
        ({"mode": "serving", "why": "drill over"}, ZoneMode.SERVING),
        ({"mode": "asleep"}, None),
        ({"mode": 1}, None),
        ({"mode": ["degraded"]}, None),
        ({}, None),
    ],
)
def test_the_mode_a_body_asks_for(body: dict[str, Any], mode: ZoneMode | None) -> None:
    assert _parse_mode(body) is mode  # what is not a JSON object: rideout._body's 400
