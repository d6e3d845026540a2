"""The WebSocket API against real servers and real Redis."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from rideout.auth import SigningKey
from rideout.auth.admin import load_or_create_admin_token
from rideout.config import Config
from rideout.store import keys
from tests.realtime.conftest import Deployment, recv, recv_type, running_deployment, send

# ----------------------------------------------------------------------------- handshake


async def rejected(url: str, **kw: Any) -> tuple[int, dict[str, Any]]:
    with pytest.raises(InvalidStatus) as info:
        async with connect(url, open_timeout=5, **kw):
            pass
    response = info.value.response
    return response.status_code, json.loads(response.body or b"{}")


def b64(obj: object) -> str:
    return base64.urlsafe_b64encode(json.dumps(obj).encode()).rstrip(b"=").decode()


async def test_no_token_is_rejected_before_the_upgrade(deployment: Deployment) -> None:
    code, body = await rejected(deployment.urls["a1"] + "/ws")
    assert (code, body["error"]) == (401, "missing_token")
    assert body["message"]


async def test_token_attacks(deployment: Deployment) -> None:
    url = deployment.urls["a1"] + "/ws?token="
    issuer = deployment.issuer
    signing_key = SigningKey.load_or_create(deployment.config.keys_dir)
    now = time.time()
    # Forge tokens the way attackers do.
    header = {"alg": "none", "typ": "JWT"}
    claims = {"sub": "alice", "iss": deployment.config.auth.issuer, "aud": deployment.config.auth.audience,
              "exp": now + 600, "iat": now, "token_use": "access", "jti": "x"}  # fmt: skip
    alg_none = f"{b64(header)}.{b64(claims)}."
    valid = issuer.issue("alice")
    h, _, sig = valid.split(".")
    tampered = f"{h}.{b64({**claims, 'sub': 'mallory'})}.{sig}"
    other_key = SigningKey.generate()
    foreign = other_key.encode({**claims, "exp": int(now + 600), "iat": int(now)})
    wrong_aud = signing_key.encode(
        {**claims, "aud": "someone-else", "exp": int(now + 600), "iat": int(now)}
    )
    id_token = signing_key.encode(
        {**claims, "token_use": "id", "exp": int(now + 600), "iat": int(now)}
    )
    cases = {
        "garbage": ("not-a-token", 401, "malformed"),
        "alg none": (alg_none, 401, "alg_not_allowed"),
        "tampered": (tampered, 401, "bad_signature"),
        "unknown key": (foreign, 401, "unknown_kid"),
        "wrong audience": (wrong_aud, 403, "wrong_audience"),
        "id token": (id_token, 403, "not_access_token"),
    }
    for name, (token, status, reason) in cases.items():
        code, body = await rejected(url + token)
        assert (code, body["error"]) == (status, reason), name
        assert token not in body["message"]


async def test_expired_token(make_config: Callable[..., Config]) -> None:
    config = make_config(auth={"leeway": 0.0})
    async with running_deployment(config) as d:
        token = d.issuer.issue("alice", ttl=1)
        await asyncio.sleep(1.5)
        code, body = await rejected(f"{d.urls['a1']}/ws?token={token}")
        assert (code, body["error"]) == (401, "token_expired")


async def test_token_locations_and_origin(deployment: Deployment) -> None:
    base = deployment.urls["a1"] + "/ws"
    token = deployment.token()
    async with connect(base, additional_headers={"Authorization": f"Bearer {token}"}) as ws:
        await send(ws, action="heartbeat")
        assert await recv(ws) == "pong"
    async with connect(base, subprotocols=["bearer", token]) as ws:  # type: ignore[list-item]
        assert ws.subprotocol == "bearer"
        await send(ws, action="heartbeat")
        assert await recv(ws) == "pong"
    code, body = await rejected(f"{base}?token={token}", origin="http://evil.example")  # type: ignore[arg-type]
    assert (code, body["error"]) == (403, "origin_not_allowed")
    own = f"http://{deployment.config.primary.zones[1].address}:{deployment.config.app_port}"
    async with connect(f"{base}?token={token}", origin=own) as ws:  # type: ignore[arg-type]
        await send(ws, action="heartbeat")
        assert await recv(ws) == "pong"


# ----------------------------------------------------------------------------- routes


async def test_heartbeat_state_and_unknown_action(deployment: Deployment) -> None:
    async with deployment.connect("a1") as ws:
        await send(ws, action="heartbeat")
        assert await recv(ws) == "pong"
        await send(ws, action="getState", room="lot-1")
        state = await recv(ws)
        assert state["type"] == "state"
        assert state["region"] == "us-east-1"
        assert state["room"] == "lot-1"
        assert state["state"]["bid"] == 0
        assert state["state"]["bids"] == 0
        assert state["recovered"] is False
        assert state["missed"] == []
        assert state["position"]["epoch"] == 1
        await send(ws, action="dance")
        error = await recv(ws)
        assert (error["type"], error["code"]) == ("error", "bad_request")


async def test_a_bid_reaches_every_worker_and_zone_in_order(deployment: Deployment) -> None:
    names = ["a1", "a1b", "a2", "b1"]
    async with (
        deployment.connect("a1", "alice") as bidder,
        deployment.connect("a1b", "bob") as w2,
        deployment.connect("a2", "carol") as z2,
        deployment.connect("b1", "dave") as other_region,
    ):
        watchers = [bidder, w2, z2, other_region]
        for ws in watchers:
            await send(ws, action="getState", room="lot-1")
            assert (await recv_type(ws, "state"))["state"]["bids"] == 0
        early: list[dict[str, Any]] = []  # updates that overtook their bid's ack
        for amount in range(10, 110, 10):
            await send(bidder, action="bid", room="lot-1", amount=amount, id=f"b{amount}")
            while (msg := await recv(bidder))["type"] != "ack":
                early.append(msg)
            assert msg["accepted"] is True
            assert msg["region"] == "us-east-1"
        for name, ws in zip(names, watchers, strict=True):
            updates = early if ws is bidder else []
            while len(updates) < 10:
                updates.append(await recv_type(ws, "update"))
            assert [u["type"] for u in updates] == ["update"] * 10
            assert [u["state"]["bid"] for u in updates] == list(range(10, 110, 10)), name
            offsets = [tuple(map(int, u["position"]["offset"].split("-"))) for u in updates]
            assert offsets == sorted(set(offsets)), f"{name}: out of order or duplicated"
            assert {u["region"] for u in updates} == {"us-west-2" if name == "b1" else "us-east-1"}
            await send(ws, action="heartbeat")  # nothing else was queued before the pong
            assert await recv(ws) == "pong", name


async def test_reconnect_replays_exactly_what_was_missed(deployment: Deployment) -> None:
    async with deployment.connect("a1", "alice") as bidder:
        await send(bidder, action="getState", room="lot-2")
        await recv_type(bidder, "state")
        await send(bidder, action="bid", room="lot-2", amount=5, id="first")
        await recv_type(bidder, "ack")
        async with deployment.connect("a2", "bob") as watcher:
            await send(watcher, action="getState", room="lot-2")
            position = (await recv_type(watcher, "state"))["position"]
        for amount in (6, 7, 8):
            await send(bidder, action="bid", room="lot-2", amount=amount, id=f"b{amount}")
            await recv_type(bidder, "ack")
        # Back, on another server, with the last position seen.
        async with deployment.connect("a1b", "bob") as watcher:
            await send(watcher, action="getState", room="lot-2", since=position)
            state = await recv_type(watcher, "state")
            assert state["recovered"] is True
            assert [m["state"]["bid"] for m in state["missed"]] == [6, 7, 8]
            assert state["state"]["bid"] == 8
            # And with a position from another writer's history: no replay, full state.
            await send(
                watcher,
                action="getState",
                room="lot-2",
                since={**position, "epoch": position["epoch"] + 1},
            )
            stale = await recv_type(watcher, "state")
            assert stale["recovered"] is False
            assert stale["missed"] == []
            assert stale["state"]["bid"] == 8


async def test_a_retried_bid_is_applied_once(deployment: Deployment) -> None:
    async with deployment.connect("a1", "alice") as ws:
        await send(ws, action="getState", room="lot-3")
        await recv_type(ws, "state")
        await send(ws, action="bid", room="lot-3", amount=50, id="same")
        first = await recv_type(ws, "ack")
    async with deployment.connect("a2", "alice") as ws:  # the retry lands elsewhere
        await send(ws, action="bid", room="lot-3", amount=50, id="same")
        again = await recv_type(ws, "ack")
        assert again == first
        await send(ws, action="getState", room="lot-3")
        state = await recv_type(ws, "state")
        assert state["state"]["bids"] == 1
        assert state["user"]["last_bid"] == 50


async def test_bids_are_refused_in_the_region_that_is_not_the_writer(
    deployment: Deployment,
) -> None:
    async with deployment.connect("b1", "alice") as ws:
        await send(ws, action="bid", room="lot-4", amount=5, id="x1")
        error = await recv_type(ws, "error")
        assert (error["code"], error["id"]) == ("unavailable", "x1")
        assert "not the writer" in error["message"]


async def test_a_fenced_server_cannot_change_state(deployment: Deployment) -> None:
    config = deployment.config
    writer = aioredis.Redis(host=config.primary.redis.address, port=config.primary.redis.port)
    try:
        async with deployment.connect("a1", "alice") as ws:
            await send(ws, action="getState", room="lot-5")
            await recv_type(ws, "state")
            # A promotion elsewhere bumped the epoch: this server still believes in 1.
            await writer.set(keys.EPOCH, 2)
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


# ----------------------------------------------------------------------------- bad input


async def test_bad_input_gets_an_error_and_the_connection_stays_open(
    deployment: Deployment,
) -> None:
    async with deployment.connect("a1") as ws:
        for garbage in ("{", "[]", "null", '{"action": 5}', '{"action":"bid","room":"r","amount":"10","id":"q"}',
                        '{"action":"bid","room":"r","amount":1e400,"id":"q"}', '{"action":"getState"}'):  # fmt: skip
            await ws.send(garbage)
            error = await recv(ws)
            assert (error["type"], error["code"]) == ("error", "bad_request"), garbage
            assert "Traceback" not in error["message"]
        await ws.send(b"\xff\xfe\x00garbage")
        assert (await recv(ws))["code"] == "bad_request"
        await send(ws, action="bid", room="r", amount=-1, id="neg")
        error = await recv(ws)
        assert (error["code"], error.get("id")) == ("bad_request", "neg")
        await send(ws, action="heartbeat")
        assert await recv(ws) == "pong"


async def test_an_oversized_message_closes_with_1009(deployment: Deployment) -> None:
    async with deployment.connect("a1") as ws:
        await ws.send("x" * (deployment.config.realtime.max_message_size + 1))
        with pytest.raises(ConnectionClosed) as info:
            await recv(ws)
        assert info.value.rcvd is not None
        assert info.value.rcvd.code == 1009


async def test_too_many_messages_are_throttled(make_config: Callable[..., Config]) -> None:
    config = make_config(realtime={"rate_limit": 1.0, "rate_burst": 3})
    async with running_deployment(config) as d, d.connect("a1") as ws:
        for _ in range(5):
            await send(ws, action="heartbeat")
        replies = [await recv(ws) for _ in range(5)]
        assert replies[:3] == ["pong"] * 3
        assert [r["code"] for r in replies[3:]] == ["throttled", "throttled"]


async def test_token_expiry_closes_with_1008(deployment: Deployment) -> None:
    token = deployment.issuer.issue("alice", ttl=1)
    async with connect(f"{deployment.urls['a1']}/ws?token={token}") as ws:
        with pytest.raises(ConnectionClosed) as info:
            await recv(ws, timeout=5)
        assert info.value.rcvd is not None
        assert (info.value.rcvd.code, info.value.rcvd.reason) == (1008, "token expired")


# ----------------------------------------------------------------------------- admin modes


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
