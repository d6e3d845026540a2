"""Fan-out: one follower per process, every worker and zone of a region, in order."""

from __future__ import annotations

import asyncio
from typing import Any

from rideout.protocol import OffsetKey, Position
from rideout.realtime.hub import Hub
from rideout.realtime.metrics import AppMetrics
from rideout.store.auction import RoomEntry, StoreError
from tests.conftest import until
from tests.realtime.conftest import Deployment, recv, recv_type, send


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


class Inbox:
    def __init__(self) -> None:
        self.updates: list[tuple[str, OffsetKey, str]] = []

    def deliver(self, room: str, key: OffsetKey, text: str) -> None:
        self.updates.append((room, key, text))


async def test_first_subscribers_share_one_start_and_the_last_one_out_stops_it(
    deployment: Deployment,
) -> None:
    server = deployment.servers["a1"]
    hub = Hub(server.store, server.region.name, AppMetrics("r", "z"))  # not started
    a, b = Inbox(), Inbox()
    await asyncio.gather(hub.subscribe("lot-h", a), hub.subscribe("lot-h", b))
    assert (hub.rooms, hub.subscriber_count("lot-h")) == ({"lot-h"}, 2)
    hub.unsubscribe("lot-h", a)
    hub.unsubscribe("elsewhere", a)  # never subscribed: nothing happens
    assert hub.subscriber_count("lot-h") == 1
    hub.unsubscribe("lot-h", b)
    assert (hub.rooms, hub.subscriber_count("lot-h")) == (frozenset(), 0)


async def test_a_connection_that_leaves_is_unsubscribed(deployment: Deployment) -> None:
    hub = deployment.servers["a1"].hub
    async with deployment.connect("a1") as ws:
        await send(ws, action="getState", room="lot-left")
        await recv_type(ws, "state")
        assert hub.subscriber_count("lot-left") == 1
    await until(lambda: "lot-left" not in hub.rooms, 5, message="the room left the hub")


class Broken:
    def deliver(self, room: str, key: OffsetKey, text: str) -> None:
        raise RuntimeError("a subscriber's bug")


class FailsOnce:
    """The region's store, whose first stream read fails with an unexpected error."""

    def __init__(self, store: Any) -> None:
        self.store, self.failed = store, False

    async def last_offset(self, room: str) -> str:
        return str(await self.store.last_offset(room))

    async def read_updates(self, cursors: dict[str, str], **options: Any) -> Any:
        if not self.failed:
            self.failed = True
            raise RuntimeError("a bug in the read path")
        return await self.store.read_updates(cursors, **options)


async def test_fan_out_outlives_an_unexpected_error_and_a_failing_subscriber(
    deployment: Deployment,
) -> None:
    server = deployment.servers["a1"]
    store = FailsOnce(server.store)
    hub = Hub(store, server.region.name, AppMetrics("r", "z"), block_ms=50)  # type: ignore[arg-type]
    inbox = Inbox()
    await hub.subscribe("lot-survive", Broken())
    await hub.subscribe("lot-survive", inbox)
    hub.start()
    try:
        await until(lambda: store.failed, 5, message="the failing read")
        async with deployment.connect("a1", "alice") as ws:
            await send(ws, action="bid", room="lot-survive", amount=10, id="s1")
            assert (await recv_type(ws, "ack"))["accepted"] is True
        await until(lambda: inbox.updates, 5, message="the update past the broken subscriber")
        assert inbox.updates[0][0] == "lot-survive"
    finally:
        await hub.stop()


class _OutageStore:
    """A state store that fails `failures` reads in a row, then has one change: stands in
    for Redis only to drive the hub's retry arithmetic through an outage of any length
    on a fake clock (a real outage of 10,000 reads would last hours)."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.reads = 0

    async def last_offset(self, room: str) -> str:
        return "0-0"

    async def read_updates(self, cursors: dict[str, str], **options: Any) -> list[Any]:
        self.reads += 1
        if self.reads <= self.failures:
            raise StoreError(f"redis at 127.0.1.100:6390 is down (read {self.reads})")
        if cursors["lot-outage"] == "0-0":
            return [("lot-outage", RoomEntry(Position(1, "5-0"), {"bid": 10}))]
        await asyncio.sleep(3600)  # nothing more: block, as XREAD does
        return []


async def test_the_hub_outlives_an_outage_of_any_length() -> None:
    """10,000 failed reads in a row (~5.5 hours at the 2 s cap): the delay stays at its
    cap (``0.05 * 2**failures`` overflowed at 1,024, ending the hub for good while
    /health stayed green), and the first read that works delivers."""
    store = _OutageStore(10_000)
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)  # the fake clock: no time passes

    hub = Hub(store, "us-east-1", AppMetrics("r", "z"), sleep=sleep)  # type: ignore[arg-type]
    inbox = Inbox()
    await hub.subscribe("lot-outage", inbox)
    hub.start()
    try:
        await until(lambda: inbox.updates, 60, message="the update after the outage")
        assert len(slept) == 10_000
        assert slept[:3] == [0.1, 0.2, 0.4]
        assert max(slept) == slept[-1] == 2.0
        assert sum(slept) > 5 * 3600
        assert inbox.updates[0][0] == "lot-outage"
    finally:
        await hub.stop()
