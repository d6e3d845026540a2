"""An app server's /live and /ready, the drain before exit, and following the writer
away from its region (external mode), on real servers and Redis."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable

import httpx
import pytest
from websockets.exceptions import ConnectionClosed

from rideout.config import Config
from rideout.realtime.app import _leave_with_the_writer, create_app, drain_for_exit
from rideout.realtime.zone import ZoneMode
from tests.conftest import serving, until
from tests.realtime.conftest import Deployment, recv


async def test_ready_until_it_drains_for_exit_and_the_clients_get_1012(
    deployment: Deployment,
) -> None:
    server, base = deployment.servers["a2"], deployment.urls["a2"].replace("ws://", "http://")
    async with httpx.AsyncClient(trust_env=False, timeout=3) as http:
        assert (await http.get(base + "/live")).status_code == 200
        ready = await http.get(base + "/ready")
        assert ready.status_code == 200, ready.json()
        assert ready.json()["redis_role"] == "master"
        async with deployment.connect("a2") as ws:
            await until(lambda: server.connections, message="the connection is counted")
            await asyncio.wait_for(drain_for_exit(server), 5)
            with pytest.raises(ConnectionClosed) as closed:
                await recv(ws)
            assert closed.value.rcvd is not None
            assert closed.value.rcvd.code == 1012
        ready = await http.get(base + "/ready")
        assert ready.status_code == 503
        assert ready.json()["message"] == "draining"
        assert (await http.get(base + "/live")).status_code == 200


async def test_not_ready_without_redis(make_config: Callable[..., Config]) -> None:
    config = make_config()  # nobody started its Redis
    zone = config.primary.zones[0]
    app = create_app(config, config.primary.name, zone.name)
    async with serving(app, zone.address, config.app_port), httpx.AsyncClient(
        trust_env=False, timeout=3
    ) as http:  # fmt: skip
        ready = await http.get(f"http://{zone.address}:{config.app_port}/ready")
    assert ready.status_code == 503
    assert ready.json()["message"].startswith("redis unreachable")


async def test_a_zone_drains_itself_when_the_writer_leaves_its_region(
    deployment: Deployment,
) -> None:
    server = deployment.servers["a2"]
    server.config = dataclasses.replace(
        server.config,
        failover=dataclasses.replace(server.config.failover, failback_drain_seconds=0.2),
    )
    last: list[str] = []
    async with deployment.connect("a2") as ws:
        await until(lambda: server.connections, message="the connection is counted")
        _leave_with_the_writer(server, last, "us-east-1")  # first reading: nothing moved
        last[:] = ["us-east-1"]
        _leave_with_the_writer(server, last, "us-east-1")
        assert server.draining is None
        _leave_with_the_writer(server, last, "us-west-2")  # the writer left: drain, serving
        assert server.mode == ZoneMode.SERVING
        with pytest.raises(ConnectionClosed) as closed:
            await recv(ws, timeout=5)
        assert closed.value.rcvd is not None
        assert closed.value.rcvd.code == 1012
