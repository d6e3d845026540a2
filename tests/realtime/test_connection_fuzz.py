"""Arbitrary input at a live endpoint: it keeps serving and Redis stays consistent."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import pytest_asyncio
import redis.asyncio as aioredis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rideout.config import Config
from rideout.store import keys
from tests.conftest import ADMIN, examples, json_values
from tests.realtime.conftest import Deployment, recv, recv_type, running_deployment, send

ROOMS = ["fz-1", "fz-2"]


plausible = st.fixed_dictionaries(
    {"action": st.sampled_from(["bid", "getState", "heartbeat", "Bid", "", "bid "])},
    optional={
        "room": st.sampled_from([*ROOMS, "", "x" * 100, "bad room", 7]),
        "amount": st.one_of(
            st.integers(-5, 10**6), st.floats(allow_nan=False), st.text(max_size=3), st.booleans()
        ),
        "id": st.one_of(st.text(max_size=70), st.integers()),
        "since": st.one_of(
            json_values,
            st.fixed_dictionaries({"epoch": st.integers(-1, 3), "offset": st.text(max_size=20)}),
        ),
    },
)
frames = st.one_of(
    st.binary(max_size=300),
    st.text(max_size=300),
    json_values.map(json.dumps),
    plausible.map(json.dumps),
)


@pytest.fixture(scope="module")
def module_config(tmp_path_factory: pytest.TempPathFactory) -> Config:
    from rideout.config import parse_config
    from tests.conftest import config_data

    return parse_config(
        config_data(
            tmp_path_factory.mktemp("fuzz") / ".rideout",
            realtime={"rate_limit": 10000.0, "rate_burst": 10000},
        )
    )


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def live(module_config: Config) -> AsyncIterator[Deployment]:
    async with running_deployment(module_config) as d:
        yield d


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def ws(live: Deployment) -> AsyncIterator[Any]:
    async with live.connect("a1", "fuzzer") as conn:
        yield conn


pytestmark = pytest.mark.asyncio(loop_scope="module")


@settings(
    max_examples=examples(150),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(frame=frames)
async def test_any_frame_gets_a_reply_and_the_server_keeps_serving(
    ws: Any, frame: str | bytes
) -> None:
    await ws.send(frame)
    reply = await recv(ws, timeout=5)
    assert reply == "pong" or reply["type"] in ("state", "ack", "error")
    if isinstance(reply, dict) and reply["type"] == "error":
        assert reply["code"] in ("bad_request", "unavailable")
        assert "Traceback" not in reply["message"]


async def test_redis_is_consistent_after_the_fuzzing(live: Deployment, ws: Any) -> None:
    # Valid bids as well, so that there is something to check.
    for amount in (10, 20, 15, 30):
        await send(ws, action="bid", room=ROOMS[0], amount=amount, id=f"consistency-{amount}")
        await recv_type(ws, "ack")  # updates may come first: the fuzzer may have subscribed
    redis = live.config.primary.redis
    client = aioredis.Redis(host=redis.address, port=redis.port, decode_responses=True, **ADMIN)
    try:
        for room in ROOMS:
            state = await client.hgetall(keys.room_state(room))
            entries = await client.xrange(keys.room_stream(room))
            amounts = [json.loads(fields["state"])["bid"] for _, fields in entries]
            assert amounts == sorted(set(amounts)), f"{room}: bids must strictly increase"
            assert int(state.get("bids", 0)) == len(entries)
            assert int(state.get("bid", 0)) == (amounts[-1] if amounts else 0)
    finally:
        await client.aclose()
    await send(ws, action="heartbeat")
    while (reply := await recv(ws)) != "pong":
        assert reply["type"] == "update"


async def test_metrics_count_what_happened(live: Deployment) -> None:
    async with live.connect("a2", "watcher") as watcher, live.connect("a1", "bidder") as bidder:
        await send(watcher, action="getState", room="mx")
        position = (await recv(watcher))["position"]
        await send(bidder, action="getState", room="mx")
        await recv(bidder)
        await send(bidder, action="bid", room="mx", amount=1, id="m1")
        await asyncio.wait_for(_until_update(watcher), 5)
        await send(watcher, action="getState", room="mx", since=position)
        assert (await recv(watcher))["recovered"] is True
    zone = live.config.primary.zones[1]
    async with httpx.AsyncClient(trust_env=False) as http:
        text = (await http.get(f"http://{zone.address}:{live.config.app_port}/metrics")).text
    assert 'rideout_ws_handshakes_total{outcome="accepted"}' in text
    assert 'rideout_ws_messages_total{action="getState",outcome="ok"} 2.0' in text
    assert 'rideout_replays_total{outcome="recovered"} 1.0' in text
    assert "rideout_fanout_latency_seconds_count 1.0" in text
    assert "rideout_epoch 1.0" in text


async def _until_update(ws: Any) -> None:
    while (await recv(ws)).get("type") != "update":
        pass
