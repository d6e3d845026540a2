"""Where a server's belief about the writer epoch comes from."""

from __future__ import annotations

import httpx
import redis.asyncio as aioredis
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from rideout.realtime.epoch import EpochTracker, control_plane_epoch
from rideout.store import keys
from tests.conftest import ADMIN, free_port, serving, set_epoch
from tests.realtime.conftest import Deployment, recv_type, send


async def test_the_control_plane_is_the_authority_once_it_has_answered() -> None:
    answers: list[int | None] = [None, 2, None, 3]
    own_redis = [1, 1, 7, 7]  # a stale writer would keep saying 1 (or anything)
    changes: list[int] = []

    async def control_plane() -> int | None:
        return answers.pop(0)

    async def redis() -> int | None:
        return own_redis.pop(0)

    tracker = EpochTracker(control_plane, interval=1.0, on_change=changes.append, fallback=redis)
    assert await tracker.refresh() == 1  # no answer yet: the server's own Redis
    assert not tracker.authoritative
    assert await tracker.refresh() == 2
    assert tracker.authoritative
    assert await tracker.refresh() == 2  # the control plane is unreachable: keep, never ask Redis
    assert await tracker.refresh() == 3
    assert changes == [1, 2, 3]
    assert own_redis == [1, 7, 7]


async def test_a_failing_source_keeps_the_belief() -> None:
    async def broken() -> int | None:
        raise RuntimeError("boom")

    tracker = EpochTracker(broken, interval=1.0)
    tracker.value = 4
    assert await tracker.refresh() == 4


async def test_control_plane_epoch_over_http() -> None:
    state: dict[str, object] = {"epoch": 5}

    async def writer(request: Request) -> Response:
        if state.get("down"):
            return JSONResponse({"error": "starting"}, status_code=503)
        return JSONResponse({"region": "us-east-1", **state})

    port = free_port("127.0.0.1")
    app = Starlette(routes=[Route("/v1/writer", writer)])
    url = f"http://127.0.0.1:{port}/v1/writer"
    async with httpx.AsyncClient(trust_env=False) as http:
        assert await control_plane_epoch(http, url) is None  # nothing listening
        async with serving(app, "127.0.0.1", port):
            assert await control_plane_epoch(http, url) == 5
            state["epoch"] = "6"
            assert await control_plane_epoch(http, url) is None  # not an integer
            state["down"] = True
            assert await control_plane_epoch(http, url) is None


async def test_a_fenced_server_cannot_change_state(deployment: Deployment) -> None:
    config = deployment.config
    writer = aioredis.Redis(
        host=config.primary.redis.address, port=config.primary.redis.port, **ADMIN
    )
    try:
        async with deployment.connect("a1", "alice") as ws:
            await send(ws, action="getState", room="lot-5")
            await recv_type(ws, "state")
            # A promotion elsewhere bumped the epoch: this server still believes in 1.
            await set_epoch(writer, 2)
            await send(ws, action="bid", room="lot-5", amount=5, id="fenced")
            error = await recv_type(ws, "error")
            assert (error["code"], error["id"]) == ("unavailable", "fenced")
            assert await writer.hget(keys.room_state("lot-5"), "bids") in (None, b"0")
            # The server re-read the epoch: the client's retry (same id) goes through once.
            await send(ws, action="bid", room="lot-5", amount=5, id="fenced")
            ack = await recv_type(ws, "ack")
            assert ack["accepted"] is True
            assert ack["position"]["epoch"] == 2
    finally:
        await writer.aclose()
