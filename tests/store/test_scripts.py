"""The Lua scripts called directly (KEYS and ARGV by hand) on a real redis-server.

The auction store's tests cover them through :class:`AuctionStore`; these pin the
conventions the scripts share: fencing first, the first decision final, errors that
start with ``rideout:``, stream ids compared exactly however long they are.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
import redis.asyncio as aioredis
from redis.exceptions import ResponseError

from rideout.store import keys, scripts
from rideout.store.embedded import RedisSpec
from tests.conftest import ADMIN, set_epoch

pytestmark = pytest.mark.asyncio(loop_scope="module")

ROOM, SUB = "lot", "alice"
#       min_bid, max_bid, min_increment, history_size, history_ttl ms, ack_ttl ms
LIMITS = ["1", "1000000", "1", "100", "3600000", "60000"]
COPY = keys.epoch_copy(keys.room_state(ROOM))  # the epoch, as the room's scripts read it


@pytest_asyncio.fixture(loop_scope="module")
async def client(redis_server: RedisSpec) -> AsyncIterator[aioredis.Redis]:
    redis = aioredis.Redis(
        host=redis_server.address, port=redis_server.port, decode_responses=True, **ADMIN
    )
    await redis.flushall()
    await redis.script_flush()
    await set_epoch(redis, "1")
    try:
        yield redis
    finally:
        await redis.aclose()


async def bid(client: aioredis.Redis, epoch: str, amount: int, request_id: str) -> tuple[str, Any]:
    script = client.register_script(scripts.BID)
    room_keys = [keys.room_state(ROOM), keys.room_stream(ROOM), keys.room_session(ROOM, SUB)]
    kind, ack = await script(
        keys=[*room_keys, keys.bid_ack(SUB, ROOM, request_id)],
        args=[epoch, str(amount), ROOM, SUB, request_id, *LIMITS, COPY,
              keys.user_bid_ack(SUB, ROOM, request_id), keys.legacy_bid_ack(SUB, request_id)],
    )  # fmt: skip
    return kind, json.loads(ack)


async def get_room(client: aioredis.Redis, since_epoch: str = "", since: str = "") -> Any:
    script = client.register_script(scripts.GET_ROOM)
    room_keys = [keys.room_state(ROOM), keys.room_stream(ROOM)]
    return await script(keys=room_keys, args=[since_epoch, since, "10", COPY])


async def test_both_scripts_compile(client: aioredis.Redis) -> None:
    for source in (scripts.BID, scripts.GET_ROOM):
        assert len(await client.script_load(source)) == 40


async def test_a_bid_under_another_epoch_is_fenced_and_writes_nothing(
    client: aioredis.Redis,
) -> None:
    kind, ack = await bid(client, "2", 10, "r1")
    assert (kind, ack["accepted"], ack["reason"], ack["epoch"]) == (
        "stale",
        False,
        "stale_epoch",
        1,
    )
    assert await client.keys("rideout:room:*") == []
    assert await client.exists(keys.bid_ack(SUB, ROOM, "r1")) == 0  # nothing was decided


async def test_the_first_decision_is_final(client: aioredis.Redis) -> None:
    kind, first = await bid(client, "1", 10, "r1")
    assert (kind, first["accepted"], first["state"]["bid"]) == ("new", True, 10)
    kind, again = await bid(client, "1", 500, "r1")  # the retry, with another amount
    assert (kind, again) == ("dup", first)
    assert await client.xlen(keys.room_stream(ROOM)) == 1


async def test_the_bid_reads_only_acks_under_a_users_tag_by_name(client: aioredis.Redis) -> None:
    script = client.register_script(scripts.BID)
    room_keys = [keys.room_state(ROOM), keys.room_stream(ROOM), keys.room_session(ROOM, SUB)]
    for legacy in ([keys.room_state(ROOM), ""], ["", keys.EPOCH]):
        with pytest.raises(ResponseError, match=r"^rideout: .* is not an ack under a user tag"):
            await script(
                keys=[*room_keys, keys.bid_ack(SUB, ROOM, "r1")],
                args=["1", "10", ROOM, SUB, "r1", *LIMITS, COPY, *legacy],
            )
    assert await client.keys("rideout:room:*") == []  # refused before anything was written


async def test_an_epoch_that_is_not_an_integer_is_an_error_naming_rideout(
    client: aioredis.Redis,
) -> None:
    await set_epoch(client, "one")
    for call in (bid(client, "1", 10, "r1"), get_room(client)):
        with pytest.raises(ResponseError, match=r"^rideout: rideout:epoch:\{\w+\} does not hold"):
            await call


async def test_get_room_compares_stream_ids_as_exact_decimals(client: aioredis.Redis) -> None:
    # Two ids that one double cannot tell apart (2**53 and 2**53 + 1 milliseconds).
    last, since = "9007199254740993-0", "9007199254740992-0"
    await client.xadd(keys.room_stream(ROOM), {"state": "{}", "epoch": "1"}, id=last)
    await client.hset(keys.room_state(ROOM), mapping={"bid": 5, "bids": 1, "offset": last})
    epoch, _, status, entries = await get_room(client, "1", since)
    assert (epoch, status, [entry_id for entry_id, _ in entries]) == ("1", "recovered", [last])
    assert (await get_room(client, "1", last))[2:] == ["recovered", []]
    assert (await get_room(client, "1", "18446744073709551615-0"))[2] == "ahead"
    assert (await get_room(client, "2", last))[2] == "epoch_changed"
    assert (await get_room(client))[2] == "none"
