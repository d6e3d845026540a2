"""The zone's ASGI app: its HTTP routes and the routes other parts mount on it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import httpx
import pytest
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import BaseRoute, Route

import rideout.realtime
import rideout.realtime.hub
from rideout.config import Config
from rideout.protocol import encode_update
from rideout.realtime.app import ZoneExtension, create_app
from rideout.realtime.zone import ZoneServer
from tests.conftest import HeldSleep, running_redis_pair, serving, until
from tests.realtime.conftest import Deployment, recv_type, send


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
                    assert "rideout_event_loop_lag_seconds " in metrics


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


# ----------------------------------------------------------------------------- extensions


class Greeter:
    """A tiny extension: a route of its own, and one that clashes with rideout's."""

    def __init__(self, name: str, log: list[str]) -> None:
        self.name = name
        self.log = log

    def routes(self, server: ZoneServer) -> Sequence[BaseRoute]:
        async def hello(request: Request) -> Response:
            return JSONResponse({"hello": self.name, "zone": server.zone.name})

        async def health(request: Request) -> Response:
            return PlainTextResponse("not rideout's")

        return [Route(f"/{self.name}/hello", hello), Route("/health", health)]

    async def start(self, server: ZoneServer) -> None:
        self.log.append(f"start {self.name} {server.mode}")

    async def stop(self) -> None:
        self.log.append(f"stop {self.name}")


class Broken(Greeter):
    async def start(self, server: ZoneServer) -> None:
        raise RuntimeError(f"{self.name} cannot start")


async def test_extensions_mount_their_routes_after_rideouts_own(
    make_config: Callable[..., Config],
) -> None:
    config = make_config()  # no Redis: /health answers 503, which is still rideout's
    zone = config.primary.zones[0]
    log: list[str] = []
    extensions: list[ZoneExtension] = [Greeter("room", log), Greeter("other", log)]
    app = create_app(config, config.primary.name, zone.name, extensions=extensions)
    base = f"http://{zone.address}:{config.app_port}"
    async with (
        serving(app, zone.address, config.app_port),
        httpx.AsyncClient(trust_env=False) as http,
    ):
        assert log == ["start room serving", "start other serving"]
        hello = await http.get(base + "/room/hello")
        assert (hello.status_code, hello.json()) == (200, {"hello": "room", "zone": zone.name})
        assert (await http.get(base + "/other/hello")).json()["hello"] == "other"
        assert (await http.get(base + "/health")).json()["zone"] == zone.name  # rideout's wins
        page = await http.get(base + "/")
        assert (page.status_code, page.headers["content-type"]) == (200, "text/html; charset=utf-8")
        assert (await http.get(base + "/nobody/hello")).status_code == 404
    assert log[2:] == ["stop other", "stop room"]


async def test_an_extension_that_cannot_start_stops_the_zone_and_those_started(
    make_config: Callable[..., Config],
) -> None:
    config = make_config()
    zone = config.primary.zones[0]
    log: list[str] = []
    extensions = [Greeter("room", log), Broken("broken", log), Greeter("never", log)]
    app = create_app(config, config.primary.name, zone.name, extensions=extensions)
    with pytest.raises(RuntimeError, match="broken cannot start"):
        async with app.web.router.lifespan_context(app.web):
            pass
    assert log == ["start room serving", "stop room"]


def test_the_package_exports_the_app_and_the_seam() -> None:
    assert rideout.realtime.create_app is create_app
    assert rideout.realtime.ZoneExtension is ZoneExtension
    assert rideout.realtime.ZoneServer is ZoneServer
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        _ = rideout.realtime.nothing  # type: ignore[attr-defined]


async def test_a_dead_hub_turns_health_red_until_it_is_restarted(
    deployment: Deployment, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue #29: the hub's task died (of an OverflowError) and the zone pushed no update
    again while /health said 200. Now its death is a 503 naming it, until its restart,
    and the restarted hub delivers the next update."""
    server = deployment.servers["a1"]
    server.tasks.sleep = held = HeldSleep()
    died: list[str] = []

    def encode_once_broken(**fields: Any) -> str:
        if not died:
            died.append(fields["room"])
            raise RuntimeError("a bug past the hub's guards")
        return encode_update(**fields)

    monkeypatch.setattr(rideout.realtime.hub, "encode_update", encode_once_broken)
    base = deployment.urls["a1"].replace("ws://", "http://")
    async with deployment.connect("a1", "alice") as ws, httpx.AsyncClient(trust_env=False) as http:
        assert (await http.get(base + "/health")).status_code == 200
        await send(ws, action="getState", room="lot-dies")
        await recv_type(ws, "state")
        await send(ws, action="bid", room="lot-dies", amount=10, id="d1")
        await recv_type(ws, "ack")
        await until(lambda: held.asked, 5, message="the hub's death")
        response = await http.get(base + "/health")
        assert response.status_code == 503
        body = response.json()
        assert (body["status"], body["tasks_down"]) == ("degraded", ["hub"])
        assert body["tasks"]["hub"]["last_error"] == "RuntimeError: a bug past the hub's guards"
        ready = await http.get(base + "/ready")
        assert ready.status_code == 503
        assert "hub" in ready.json()["message"]
        metrics = (await http.get(base + "/metrics")).text
        assert 'rideout_task_deaths_total{task="hub"} 1.0' in metrics
        assert 'rideout_task_up{task="hub"} 0.0' in metrics
        held.release()
        await until(lambda: _status(http, base + "/health", 200), 5, message="/health green again")
        await send(ws, action="bid", room="lot-dies", amount=20, id="d2")
        update = await recv_type(ws, "update")
        assert update["state"]["bid"] == 20
    assert held.asked == [0.1]


async def _status(http: httpx.AsyncClient, url: str, status: int) -> bool:
    return (await http.get(url)).status_code == status
