"""getState's identical concurrent reads share one (realtime.coalesce_reads): real app
servers and Redis (docs/realtime-api.md, "Admission")."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from rideout.config import Config
from rideout.protocol import Position
from rideout.realtime.zone import ZoneServer
from rideout.store.auction import StateResult, empty_state
from tests.conftest import until
from tests.realtime.conftest import Deployment, recv_type, running_deployment, send
from tests.realtime.test_limits import fill_room


def reads(server: ZoneServer, how: str) -> float:
    value = server.metrics.registry.get_sample_value("rideout_state_reads_total", {"how": how})
    return value or 0.0


async def test_a_herds_identical_get_states_share_reads_each_with_its_own_session(
    deployment: Deployment,
) -> None:
    d = deployment
    room = "lot-herd"
    async with d.connect("a1", "seller") as ws:
        positions = []
        for amount in range(1, 6):
            await send(ws, action="bid", room=room, amount=amount, id=f"s{amount}")
            positions.append((await recv_type(ws, "ack"))["position"])
    server = d.servers["a1"]
    count = 30
    async with contextlib.AsyncExitStack() as stack:
        sockets = [await stack.enter_async_context(d.connect("a1", f"u{i}")) for i in range(count)]
        for ws in sockets:  # a herd: every request is in before the first answer
            await send(ws, action="getState", room=room, since=positions[0])
        replies = [await recv_type(ws, "state") for ws in sockets]
    assert all(r["recovered"] for r in replies)
    assert all(r["missed"] == replies[0]["missed"] for r in replies)
    assert [u["position"] for u in replies[0]["missed"]] == positions[1:]
    assert all(r["user"] == {} for r in replies)  # each its own (empty) session
    own, shared, again = (reads(server, how) for how in ("redis", "shared", "again"))
    assert own + shared + again == count
    assert shared > 0 and own < count  # noqa: PT018


async def test_identical_replays_share_one_place_of_the_gate(
    make_config: Callable[..., Config],
) -> None:
    """Where replays from eight positions get one place, one in the queue and six
    refusals (tests/realtime/test_admission.py), eight from one position share the
    read that holds the place: none is refused."""
    config = make_config(realtime={"max_replays": 1, "replay_queue": 1})
    async with running_deployment(config) as d:
        since = await fill_room(d, "lot", 200)
        async with contextlib.AsyncExitStack() as stack:
            sockets = [
                await stack.enter_async_context(d.connect(sub=f"user-{n}", max_size=None))
                for n in range(8)
            ]
            for ws in sockets:
                await send(ws, action="getState", room="lot", since=since)
            replies = [await recv_type(ws, "state") for ws in sockets]
        assert all(r["recovered"] and len(r["missed"]) == 199 for r in replies)
        server = d.servers["a1"]
        assert server.metrics.shed.labels("replay", "queue_full")._value.get() == 0
        assert reads(server, "shared") > 0
        assert (server.replays.running, server.replays.waiting) == (0, 0)


async def test_a_shared_read_older_than_the_subscription_is_read_again(
    deployment: Deployment,
) -> None:
    """A read that reached Redis before this connection subscribed may miss updates the
    hub delivered to others before: it is read again, never sent as it is."""
    d = deployment
    room = "lot-stale"
    async with d.connect("a1", "seller") as ws:
        for amount in (1, 2):
            await send(ws, action="bid", room=room, amount=amount, id=f"s{amount}")
            newest = (await recv_type(ws, "ack"))["position"]
    server = d.servers["a1"]
    assert server.reads is not None
    release = asyncio.Event()

    async def stale() -> tuple[StateResult, str]:
        await release.wait()
        return StateResult(room, empty_state(), {}, Position(1, "0-0"), False), "[]"

    old = server.reads.run((room, None), stale)  # in flight when the getState comes
    async with d.connect("a1", "late") as ws:
        await send(ws, action="getState", room=room)
        await until(lambda: server.hub.subscriber_count(room) == 1, message="subscribed")
        release.set()
        reply = await recv_type(ws, "state")
    assert await old.result()  # it did run, and was not what the client got
    assert reply["position"] == newest
    assert reply["state"]["bid"] == 2
    assert (reads(server, "again"), reads(server, "shared")) == (1, 0)
