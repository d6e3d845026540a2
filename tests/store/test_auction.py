"""The auction store against a real primary Redis and its replica (one pair per module)."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import random
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
import redis.asyncio as aioredis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rideout.config import Config, parse_config
from rideout.protocol import MAX_AMOUNT, Position
from rideout.store import keys
from rideout.store.acl import RedisRole
from rideout.store.auction import (
    AuctionSettings,
    AuctionStore,
    BidResult,
    NotRecovered,
    NotWriter,
    Reason,
    RoomEntry,
    StoreCorrupt,
    StoreUnavailable,
    decode_stream_entry,
    empty_state,
)
from rideout.store.client import probe_client, state_client
from rideout.store.replication import sync_epoch_copies
from tests.conftest import (
    ADMIN,
    TEST_ADMIN,
    as_user,
    config_data,
    credentials,
    examples,
    free_port,
    replicated,
    running_redis_pair,
    set_epoch,
    until,
)

pytestmark = pytest.mark.asyncio(loop_scope="module")

REGION = "us-east-1"
_rooms = itertools.count()


def fresh(prefix: str = "room") -> str:
    """A name no other test or example of this module uses."""
    return f"{prefix}-{next(_rooms)}"


@dataclass
class Pair:
    """Clients as the app servers make them (writer, reader), and the test superuser's
    (admin, admin_reader) for what the tests do that no rideout user may."""

    config: Config
    writer: aioredis.Redis
    reader: aioredis.Redis
    admin: aioredis.Redis
    admin_reader: aioredis.Redis

    def store(self, **kw: object) -> AuctionStore:
        return AuctionStore(self.writer, AuctionSettings(**kw), REGION)  # type: ignore[arg-type]

    def replica_store(self, **kw: object) -> AuctionStore:
        return AuctionStore(self.reader, AuctionSettings(**kw), "us-west-2")  # type: ignore[arg-type]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def servers(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Pair]:
    data_dir: Path = tmp_path_factory.mktemp("auction") / ".rideout"
    config = parse_config(config_data(data_dir))
    async with running_redis_pair(config):
        p, s = config.primary.redis, config.secondary.redis
        app = credentials(config, RedisRole.APP)
        pair = Pair(
            config,
            state_client(p.address, p.port, credentials=app),
            state_client(s.address, s.port, credentials=app),
            aioredis.Redis(host=p.address, port=p.port, decode_responses=True, **ADMIN),
            aioredis.Redis(host=s.address, port=s.port, decode_responses=True, **ADMIN),
        )
        try:
            yield pair
        finally:
            for client in (pair.writer, pair.reader, pair.admin, pair.admin_reader):
                await client.aclose()


@pytest_asyncio.fixture(loop_scope="module")
async def pair(servers: Pair) -> Pair:
    """The module's pair, emptied, with epoch 1 on both servers."""
    await servers.admin.flushall()
    await set_epoch(servers.admin, 1)
    await replicated(servers.admin)
    return servers


async def stream_states(client: aioredis.Redis, room: str) -> list[RoomEntry]:
    entries: Any = await client.xrange(keys.room_stream(room))
    return [decode_stream_entry(room, entry_id, fields) for entry_id, fields in entries]


def id_key(offset: str) -> tuple[int, int]:
    ms, seq = offset.split("-")
    return int(ms), int(seq)


def ms(offset: str) -> int:
    return int(offset.split("-")[0])


# ------------------------------------------------------------------------------ bids


async def test_an_accepted_bid_updates_state_stream_session_and_position(pair: Pair) -> None:
    store, room = pair.store(), fresh()
    result = await store.bid(room, "alice", 10, "r1", epoch=1)
    assert result.accepted
    assert result.reason is None
    assert not result.duplicate
    assert result.position.epoch == 1
    assert result.state["bid"] == 10
    assert result.state["bidder"] == "alice"
    assert result.state["bids"] == 1
    (server_ms, _) = await pair.admin.time()
    assert abs(result.state["updated_at"] - server_ms * 1000) < 5000

    entries = await stream_states(pair.writer, room)
    assert entries == [RoomEntry(result.position, result.state)]
    raw: Any = await pair.admin.xrange(keys.room_stream(room))
    assert set(raw[0][1]) == {"state", "epoch"}  # the contract with the fan-out hub

    view = await store.get_state(room, "alice")
    assert view.state == result.state
    assert view.position == result.position
    assert view.session == {
        "last_bid": 10,
        "last_bid_room": room,
        "last_bid_id": "r1",
        "last_position": {"epoch": 1, "offset": result.position.offset},
    }
    assert (view.recovered, view.missed, view.reason) == (False, (), None)
    assert (await store.get_state(room, "bob")).session == {}


async def test_an_empty_room(pair: Pair) -> None:
    view = await pair.store().get_state(fresh(), "alice")
    assert view.state == empty_state() == {"bid": 0, "bidder": None, "bids": 0, "updated_at": None}
    assert view.position == Position(1, "0-0")
    assert view.session == {}


async def test_lower_equal_and_out_of_bounds_bids_are_rejected(pair: Pair) -> None:
    store, room = pair.store(min_bid=5, max_bid=1000, min_increment=10), fresh()
    empty = await store.bid(room, "alice", 4, "a0", epoch=1)
    assert (empty.accepted, empty.reason) == (False, Reason.OUT_OF_BOUNDS)
    assert empty.position == Position(1, "0-0")
    assert empty.state == empty_state()
    first = await store.bid(room, "alice", 5, "a1", epoch=1)  # the first bid may be min_bid
    assert first.accepted
    for amount, reason in [
        (5, Reason.TOO_LOW),  # equal
        (14, Reason.TOO_LOW),  # below bid + min_increment
        (1001, Reason.OUT_OF_BOUNDS),
        (-3, Reason.OUT_OF_BOUNDS),
        (10**30, Reason.OUT_OF_BOUNDS),
    ]:
        result = await store.bid(room, "bob", amount, f"b{amount}", epoch=1)
        assert (result.accepted, result.reason) == (False, reason), amount
        assert result.position == first.position  # the room's current position
        assert result.state == first.state
    assert (await store.bid(room, "bob", 15, "b15", epoch=1)).accepted
    assert (await store.bid(room, "bob", 1000, "b1000", epoch=1)).accepted
    view = await store.get_state(room, "bob")
    assert (view.state["bid"], view.state["bids"]) == (1000, 3)
    assert len(await stream_states(pair.writer, room)) == 3


async def test_amounts_up_to_the_largest_exact_integer(pair: Pair) -> None:
    store, room = pair.store(max_bid=MAX_AMOUNT), fresh()
    assert (await store.bid(room, "alice", MAX_AMOUNT - 1, "x", epoch=1)).accepted
    result = await store.bid(room, "bob", MAX_AMOUNT, "y", epoch=1)
    assert result.accepted
    assert result.state["bid"] == MAX_AMOUNT
    assert (await stream_states(pair.writer, room))[-1].state["bid"] == MAX_AMOUNT
    view = await store.get_state(room, "bob")
    assert view.state["bid"] == MAX_AMOUNT
    assert view.session["last_bid"] == MAX_AMOUNT


async def test_names_with_any_characters_stay_in_their_own_keys(pair: Pair) -> None:
    store = pair.store()
    room, sub = 'r:{x}/"é"\\' + fresh(), 'user:{1}"\n'
    result = await store.bid(room, sub, 3, "id:{1}", epoch=1)
    assert result.accepted
    assert result.state["bidder"] == sub
    view = await store.get_state(room, sub)
    assert view.state == result.state
    assert view.session["last_bid_room"] == room


async def test_a_duplicate_request_id_returns_the_same_ack_and_changes_nothing(
    pair: Pair,
) -> None:
    store, room = pair.store(), fresh()
    first = await store.bid(room, "alice", 10, "same", epoch=1)
    again = await store.bid(room, "alice", 50, "same", epoch=1)  # another amount, same id
    assert again == BidResult(
        first.accepted, first.reason, first.position, first.state, duplicate=True
    )
    view = await store.get_state(room, "alice")
    assert (view.state["bid"], view.state["bids"]) == (10, 1)
    assert len(await stream_states(pair.writer, room)) == 1
    # Another user may use the same request id.
    assert (await store.bid(room, "bob", 11, "same", epoch=1)).duplicate is False

    # A rejection is a decision too: the retry gets it back, even with a better amount.
    rejected = await store.bid(room, "carol", 5, "c1", epoch=1)
    assert rejected.reason == Reason.TOO_LOW
    retried = await store.bid(room, "carol", 500, "c1", epoch=1)
    assert retried.duplicate
    assert retried.reason == Reason.TOO_LOW
    assert (await store.get_state(room, "carol")).state["bid"] == 11

    ttl = await pair.admin.pttl(keys.bid_ack("alice", room, "same"))
    assert 86_000_000 < ttl <= 86_400_000


async def test_a_request_id_is_scoped_to_its_room(pair: Pair) -> None:
    """The same id in another room is another bid: it is placed, not answered with the
    first room's decision (which would acknowledge a bid that never happened)."""
    store, room, other = pair.store(), fresh(), fresh()
    first = await store.bid(room, "alice", 10, "same", epoch=1)
    elsewhere = await store.bid(other, "alice", 70, "same", epoch=1)
    assert first.accepted
    assert elsewhere.accepted
    assert not elsewhere.duplicate
    # (Their positions may be equal: each room's stream numbers its own entries, and two
    # entries in one millisecond in two streams both get <ms>-0.)
    assert (await store.get_state(other, "alice")).state["bid"] == 70
    assert (await store.get_state(room, "alice")).state["bid"] == 10
    # Each is still idempotent in its own room.
    assert (await store.bid(other, "alice", 99, "same", epoch=1)).position == elsewhere.position
    assert (await store.bid(room, "alice", 99, "same", epoch=1)).position == first.position


async def test_an_ack_stored_under_the_users_tag_still_answers_its_bid(pair: Pair) -> None:
    """An upgrade keeps exactly-once for bids decided while acks were kept under the
    user's tag: the record there answers a retry (and is refreshed, not rewritten);
    without legacy_acks (a cluster's setting) it is not read."""
    store, room = pair.store(), fresh()
    placed = await store.bid(room, "alice", 10, "old", epoch=1)
    record = await pair.admin.get(keys.bid_ack("alice", room, "old"))
    await pair.admin.delete(keys.bid_ack("alice", room, "old"))
    await pair.admin.set(keys.user_bid_ack("alice", room, "old"), record, px=60_000)

    retried = await store.bid(room, "alice", 10, "old", epoch=1)
    assert retried.duplicate
    assert retried.position == placed.position
    assert (await store.get_state(room, "alice")).state["bids"] == 1
    assert await pair.admin.pttl(keys.user_bid_ack("alice", room, "old")) > 60_000
    assert await pair.admin.exists(keys.bid_ack("alice", room, "old")) == 0  # not rewritten

    # A cluster's store reads no key of another slot: the same id is a new bid there.
    unread = await pair.store(legacy_acks=False).bid(room, "alice", 20, "old", epoch=1)
    assert unread.accepted
    assert not unread.duplicate


async def test_an_ack_stored_before_room_scoping_still_answers_its_room_only(
    pair: Pair,
) -> None:
    """An upgrade keeps exactly-once for bids decided before it: the legacy per-user
    record is honoured for the room it names and ignored for any other."""
    store, room, other = pair.store(), fresh(), fresh()
    placed = await store.bid(room, "alice", 10, "old", epoch=1)
    # Move the record to where a server before room scoping kept it.
    record = await pair.admin.get(keys.bid_ack("alice", room, "old"))
    await pair.admin.delete(keys.bid_ack("alice", room, "old"))
    await pair.admin.set(keys.legacy_bid_ack("alice", "old"), record, px=60_000)

    retried = await store.bid(room, "alice", 10, "old", epoch=1)
    assert retried.duplicate
    assert retried.position == placed.position
    assert (await store.get_state(room, "alice")).state["bids"] == 1
    assert await pair.admin.pttl(keys.legacy_bid_ack("alice", "old")) > 60_000  # refreshed

    elsewhere = await store.bid(other, "alice", 20, "old", epoch=1)
    assert elsewhere.accepted
    assert not elsewhere.duplicate
    assert await pair.admin.exists(keys.bid_ack("alice", room, "old")) == 0  # never rewritten


async def test_the_ack_expires_after_ack_ttl(pair: Pair) -> None:
    store, room = pair.store(ack_ttl=0.05), fresh()
    await store.bid(room, "alice", 10, "r", epoch=1)
    await asyncio.sleep(0.1)  # Redis's own clock expires the key: time has to pass
    assert await pair.admin.exists(keys.bid_ack("alice", room, "r")) == 0


async def test_concurrent_bids_keep_the_room_consistent(pair: Pair) -> None:
    # redis-py's default pool refuses a 101st concurrent command; a bounded blocking
    # pool queues them instead, as an app server under load should.
    p = pair.config.primary.redis
    pool = aioredis.BlockingConnectionPool(
        host=p.address, port=p.port, max_connections=32, timeout=5, decode_responses=True,
        **as_user(pair.config, RedisRole.APP),
    )  # fmt: skip
    client = aioredis.Redis.from_pool(pool)  # closing the client closes the pool
    store, room = AuctionStore(client, AuctionSettings(), REGION), fresh()
    rng = random.Random(7)
    amounts = [i * 3 for i in range(1, 101)] + [rng.randrange(1, 400) for _ in range(100)]
    rng.shuffle(amounts)
    try:
        results = await asyncio.gather(
            *(
                store.bid(room, f"user{i % 17}", amount, f"req{i}", epoch=1)
                for i, amount in enumerate(amounts)
            )
        )
    finally:
        await client.aclose()
    store = pair.store()
    accepted = [(r, a) for r, a in zip(results, amounts, strict=True) if r.accepted]
    assert all(r.reason == Reason.TOO_LOW for r in results if not r.accepted)
    assert accepted

    view = await store.get_state(room, "user0")
    assert view.state["bid"] == max(a for _, a in accepted) == max(amounts)
    assert view.state["bids"] == len(accepted)

    entries = await stream_states(pair.writer, room)
    by_position = sorted(accepted, key=lambda ra: id_key(ra[0].position.offset))
    assert [e.position for e in entries] == [r.position for r, _ in by_position]
    stream_amounts = [e.state["bid"] for e in entries]
    assert stream_amounts == [a for _, a in by_position]
    assert all(x < y for x, y in itertools.pairwise(stream_amounts))
    assert [e.state["bids"] for e in entries] == list(range(1, len(entries) + 1))
    assert view.position == entries[-1].position


# -------------------------------------------------------------------- fencing, errors


async def test_a_stale_epoch_is_fenced_and_changes_nothing(pair: Pair) -> None:
    store, room = pair.store(), fresh()
    first = await store.bid(room, "alice", 10, "r1", epoch=1)
    await set_epoch(pair.admin, 2)
    assert await store.current_epoch() == 2

    refused = await store.bid(room, "bob", 20, "r2", epoch=1)
    assert (refused.accepted, refused.reason, refused.duplicate) == (
        False,
        Reason.STALE_EPOCH,
        False,
    )
    assert refused.position == Position(2, first.position.offset)  # the writer's epoch
    assert refused.state == first.state
    assert await pair.admin.exists(keys.bid_ack("bob", room, "r2")) == 0  # not stored
    assert len(await stream_states(pair.writer, room)) == 1
    assert (await store.get_state(room, "bob")).session == {}

    # Even a retry of an earlier request is fenced: a stale server learns nothing.
    assert (await store.bid(room, "alice", 10, "r1", epoch=1)).reason == Reason.STALE_EPOCH
    # A server that adopted the new epoch bids, with the same request id as the refusal.
    accepted = await store.bid(room, "bob", 20, "r2", epoch=2)
    assert accepted.accepted
    assert accepted.position.epoch == 2
    assert (await stream_states(pair.writer, room))[-1].position.epoch == 2


async def test_an_unset_epoch_is_zero(pair: Pair) -> None:
    store = pair.store()
    await set_epoch(pair.admin, None)
    assert await store.current_epoch() == 0
    assert (await store.bid(fresh(), "alice", 10, "r", epoch=0)).accepted
    assert (await store.bid(fresh(), "alice", 10, "s", epoch=1)).reason == Reason.STALE_EPOCH


async def test_without_its_copies_the_fence_reads_the_epoch_until_they_are_written(
    pair: Pair,
) -> None:
    """Data from before the copies: the scripts read the epoch itself (one Redis), and
    the controller's sync_epoch_copies writes the copies, which the fence reads then."""
    store, room = pair.store(), fresh()
    await set_epoch(pair.admin, None)
    await pair.admin.set(keys.EPOCH, 3)
    assert (await store.bid(room, "alice", 10, "c1", epoch=3)).accepted
    assert (await store.bid(room, "alice", 20, "c2", epoch=2)).reason == Reason.STALE_EPOCH
    assert (await store.read_room(room)).position.epoch == 3

    assert await sync_epoch_copies(pair.admin) == 3
    assert set(await pair.admin.mget(keys.epoch_copies())) == {"3"}
    await pair.admin.set(keys.EPOCH, 4)  # the epoch alone (rideout moves both at once)
    assert (await store.bid(room, "alice", 30, "c3", epoch=3)).accepted  # the copy's


async def test_a_corrupt_epoch_is_reported(pair: Pair) -> None:
    store = pair.store()
    await set_epoch(pair.admin, "garbage")
    with pytest.raises(StoreCorrupt, match="epoch"):
        await store.current_epoch()
    with pytest.raises(StoreCorrupt, match="epoch"):
        await store.bid(fresh(), "alice", 10, "r", epoch=1)
    with pytest.raises(StoreCorrupt, match="epoch"):
        await store.get_state(fresh(), "alice")
    await set_epoch(pair.admin, 1)
    room = fresh()
    await pair.admin.set(keys.room_state(room), "not a hash")
    with pytest.raises(StoreCorrupt, match="WRONGTYPE"):
        await store.bid(room, "alice", 10, "r", epoch=1)


async def test_a_bid_on_the_replica_raises_not_writer(pair: Pair) -> None:
    replica = pair.replica_store()
    assert await replica.current_epoch() == 1
    with pytest.raises(NotWriter, match=r"us-west-2 at 127\.0\.2\.100:\d+ is a read-only replica"):
        await replica.bid(fresh(), "alice", 10, "r1", epoch=1)
    assert isinstance(NotWriter("x"), StoreUnavailable)


async def test_a_fenced_bid_waiting_on_the_replica_raises_not_writer(pair: Pair) -> None:
    """A bid script that writes nothing on a replica (fenced: the epoch moved on) is
    followed by a WAIT the replica refuses: that too says "not the writer", never that
    the store fails (which would degrade the zone's heartbeats and its canary)."""
    replica = pair.replica_store()
    with pytest.raises(NotWriter, match="read-only replica"):
        await replica.bid(fresh(), "alice", 10, "r2", epoch=0, wait_replicas=1, wait_timeout=0.1)


async def test_a_dead_server_raises_store_unavailable() -> None:
    port = free_port("127.0.1.100")
    for client in (
        probe_client("127.0.1.100", port, credentials=TEST_ADMIN, timeout=0.5),
        state_client("127.0.1.100", port, credentials=TEST_ADMIN),
    ):
        store = AuctionStore(client, AuctionSettings(), REGION)
        try:
            with pytest.raises(StoreUnavailable, match=rf"127\.0\.1\.100:{port} is unavailable"):
                await store.bid("room", "alice", 10, "r1", epoch=1)
            with pytest.raises(StoreUnavailable):
                await store.get_state("room", "alice")
            with pytest.raises(StoreUnavailable):
                await store.current_epoch()
            with pytest.raises(StoreUnavailable):
                await store.read_updates({"room": "0-0"})
            with pytest.raises(StoreUnavailable):
                await store.last_offset("room")
        finally:
            await client.aclose()


def one_connection(pair: Pair) -> aioredis.Redis:
    """A client of the primary's Redis, as the app, whose pool holds one connection."""
    p = pair.config.primary.redis
    return aioredis.Redis(
        host=p.address,
        port=p.port,
        max_connections=1,
        decode_responses=True,
        **as_user(pair.config, RedisRole.APP),
    )


async def test_concurrent_last_offsets_share_one_pipeline(pair: Pair) -> None:
    # A failover's herd subscribes to every room at once on the new region: those reads
    # go out as one pipeline, not one pooled connection (opened on demand) each.
    client = one_connection(pair)
    store = AuctionStore(client, AuctionSettings(), REGION)
    rooms = [fresh() for _ in range(20)]
    try:
        placed = await store.bid(rooms[3], "alice", 5, "r1", epoch=1)
        offsets = await asyncio.gather(*(store.last_offset(room) for room in rooms))
    finally:
        await store.close()
        await client.aclose()
    assert offsets[3] == placed.position.offset
    assert offsets[:3] + offsets[4:] == ["0-0"] * 19


async def test_an_exhausted_connection_pool_is_named(pair: Pair) -> None:
    client = one_connection(pair)
    store = AuctionStore(client, AuctionSettings(), REGION)
    try:
        results = await asyncio.gather(
            *(store.current_epoch() for i in range(3)), return_exceptions=True
        )
    finally:
        await client.aclose()
    errors = [r for r in results if isinstance(r, BaseException)]
    assert errors
    assert all(isinstance(e, StoreUnavailable) for e in errors)
    assert "every connection of the pool" in str(errors[0])


async def test_concurrent_state_reads_share_one_pipeline(pair: Pair) -> None:
    """A herd of reconnecting clients: 50 reads at once on a pool of one connection
    (one pooled connection each would exhaust it), every reply its own room's."""
    client = one_connection(pair)
    store, rooms = AuctionStore(client, AuctionSettings(), REGION), [fresh() for _ in range(50)]
    try:
        for i, room in enumerate(rooms):
            await store.bid(room, "alice", 10 + i, f"r{i}", epoch=1)
        results = await asyncio.gather(*(store.get_state(room, "alice") for room in rooms))
    finally:
        await store.close()
        await client.aclose()
    assert [r.room for r in results] == rooms
    assert [r.state["bid"] for r in results] == [10 + i for i in range(50)]


async def test_a_closed_store_refuses_as_unavailable(pair: Pair) -> None:
    client = one_connection(pair)
    store = AuctionStore(client, AuctionSettings(), REGION)
    try:
        await store.close()
        with pytest.raises(StoreUnavailable, match="closed"):
            await store.get_state(fresh(), "alice")
        with pytest.raises(StoreUnavailable, match="closed"):
            await store.bid(fresh(), "alice", 10, "r1", epoch=1)
    finally:
        await client.aclose()


async def test_concurrent_bids_share_one_pipeline(pair: Pair) -> None:
    """50 bids at once on a pool of one connection: one at a time would exhaust it."""
    client = one_connection(pair)
    store, room = AuctionStore(client, AuctionSettings(), REGION), fresh()
    try:
        results = await asyncio.gather(
            *(store.bid(room, f"u{i}", 10 + i, f"r{i}", epoch=1) for i in range(50))
        )
        state = await store.get_state(room, "u49")
    finally:
        await store.close()
        await client.aclose()
    assert all(r.accepted for r in results)  # in the order they were made: each beat the last
    assert state.state["bid"] == 59
    assert state.state["bids"] == 50


async def test_scripts_survive_script_flush(pair: Pair) -> None:
    store, room = pair.store(), fresh()
    first = await store.bid(room, "alice", 10, "r1", epoch=1)
    await pair.admin.script_flush()
    assert (await store.bid(room, "alice", 11, "r2", epoch=1)).accepted
    await pair.admin.script_flush()
    view = await store.get_state(room, "alice", first.position)
    assert view.recovered
    assert [e.state["bid"] for e in view.missed] == [11]


async def test_state_written_on_the_primary_reads_on_the_replica(pair: Pair) -> None:
    store, room = pair.store(), fresh()
    results = [await store.bid(room, "alice", 10 * i, f"r{i}", epoch=1) for i in range(1, 4)]
    await replicated(pair.writer)
    await pair.admin_reader.script_flush()  # a fresh server: the script is loaded on demand
    replica = pair.replica_store()
    view = await replica.get_state(room, "alice", results[0].position)
    primary_view = await store.get_state(room, "alice", results[0].position)
    assert view == primary_view
    assert view.state["bid"] == 30
    assert view.position == results[-1].position
    assert view.recovered
    assert [e.position for e in view.missed] == [r.position for r in results[1:]]
    assert view.session["last_bid_id"] == "r3"


async def test_read_room_and_read_session_are_get_state_in_two_parts(pair: Pair) -> None:
    """The room's part is the same for every user (so identical reads can share it);
    the session is read apart, on the primary or the replica alike."""
    store, room = pair.store(), fresh()
    results = [await store.bid(room, "alice", 10 * i, f"r{i}", epoch=1) for i in range(1, 4)]
    await replicated(pair.writer)
    for reader in (store, pair.replica_store()):
        for since in (
            None,
            results[0].position,
            Position(0, "1-0"),
            Position(1, "9999999999999-0"),
        ):
            whole = await reader.get_state(room, "alice", since)
            part = await reader.read_room(room, since)
            assert part == dataclasses.replace(whole, session={})
            assert await reader.read_session(room, "alice") == whole.session
    assert await store.read_session(room, "nobody") == {}
    assert await store.read_session(fresh(), "alice") == {}  # a session is per room
    assert (await store.read_room(fresh())).state == empty_state()
    with pytest.raises(ValueError, match="room"):
        await store.read_room("")
    with pytest.raises(ValueError, match="sub"):
        await store.read_session(room, "")
    with pytest.raises(ValueError, match="room"):
        await store.read_session("", "alice")


# ------------------------------------------------------------------------------ replay


async def test_replay_returns_what_was_missed_in_order(pair: Pair) -> None:
    store, room = pair.store(), fresh()
    results = [await store.bid(room, "alice", i, f"r{i}", epoch=1) for i in range(1, 6)]

    view = await store.get_state(room, "alice", results[1].position)
    assert view.recovered
    assert view.reason is None
    assert view.missed == tuple(RoomEntry(r.position, r.state) for r in results[2:])
    assert view.position == results[-1].position

    latest = await store.get_state(room, "alice", results[-1].position)
    assert (latest.recovered, latest.missed) == (True, ())

    start = await store.get_state(room, "alice", Position(1, "0-0"))
    assert start.recovered
    assert len(start.missed) == 5

    # Leading zeros are the same id.
    padded = Position(1, "000" + results[3].position.offset)
    assert [e.state["bid"] for e in (await store.get_state(room, "a", padded)).missed] == [5]

    # An offset that is no entry's id replays the entries after it.
    between = (ms(results[2].position.offset), 99999)
    view = await store.get_state(room, "a", Position(1, f"{between[0]}-{between[1]}"))
    after = [r.state["bid"] for r in results if id_key(r.position.offset) > between]
    assert view.recovered == bool(after)  # else it is ahead of the history
    assert [e.state["bid"] for e in view.missed] == after

    other = await store.get_state(room, "alice", Position(2, results[1].position.offset))
    assert (other.recovered, other.missed, other.reason) == (False, (), NotRecovered.EPOCH_CHANGED)
    assert other.state == results[-1].state


async def test_a_position_ahead_of_the_history_is_not_recovered(pair: Pair) -> None:
    store, room = pair.store(), fresh()
    last = await store.bid(room, "alice", 10, "r1", epoch=1)
    offset = last.position.offset
    for ahead in (
        f"{ms(offset)}-{int(offset.split('-')[1]) + 1}",
        f"{ms(offset) + 1}-0",
        "18446744073709551615-18446744073709551615",
    ):
        view = await store.get_state(room, "alice", Position(1, ahead))
        assert (view.recovered, view.missed, view.reason) == (False, (), NotRecovered.AHEAD)
        assert view.state == last.state
    empty = await store.get_state(fresh(), "alice", Position(1, "1-0"))
    assert (empty.recovered, empty.reason) == (False, NotRecovered.AHEAD)
    assert (await store.get_state(fresh(), "alice", Position(1, "0-0"))).recovered


async def test_history_trimmed_by_size(pair: Pair) -> None:
    store, room = pair.store(history_size=3), fresh()
    results = [await store.bid(room, "alice", i, f"r{i}", epoch=1) for i in range(1, 6)]
    assert await pair.admin.xlen(keys.room_stream(room)) == 3
    # The newest trimmed entry (bid 2) is still a position to replay from...
    view = await store.get_state(room, "alice", results[1].position)
    assert view.recovered
    assert [e.state["bid"] for e in view.missed] == [3, 4, 5]
    # ... an older one is not: bid 2 is gone.
    for since in (results[0].position, Position(1, "0-0")):
        old = await store.get_state(room, "alice", since)
        assert (old.recovered, old.missed, old.reason) == (False, (), NotRecovered.TRIMMED)
        assert old.state == results[-1].state
    assert (await store.get_state(room, "alice", results[2].position)).recovered


async def test_replay_is_capped(pair: Pair) -> None:
    store, room = pair.store(max_replay=2), fresh()
    results = [await store.bid(room, "alice", i, f"r{i}", epoch=1) for i in range(1, 5)]
    assert (await store.get_state(room, "a", results[1].position)).recovered
    capped = await store.get_state(room, "a", results[0].position)
    assert (capped.recovered, capped.missed, capped.reason) == (False, (), NotRecovered.TOO_MANY)


async def test_history_trimmed_by_age(pair: Pair) -> None:
    store, room = pair.store(history_ttl=0.2), fresh()
    first = await store.bid(room, "alice", 1, "r1", epoch=1)
    second = await store.bid(room, "alice", 2, "r2", epoch=1)

    async def both_older_than_the_ttl() -> bool:  # by the writer's clock, which trims
        seconds, micros = await pair.admin.time()
        return seconds * 1000 + micros // 1000 > ms(second.position.offset) + 200

    await until(both_older_than_the_ttl)
    third = await store.bid(room, "alice", 3, "r3", epoch=1)
    entries = await stream_states(pair.writer, room)
    assert [e.position for e in entries] == [third.position]
    view = await store.get_state(room, "alice", second.position)
    assert view.recovered
    assert view.missed == (RoomEntry(third.position, third.state),)
    old = await store.get_state(room, "alice", first.position)
    assert (old.recovered, old.reason) == (False, NotRecovered.TRIMMED)


async def test_lost_stream_entries_are_not_replayed(pair: Pair) -> None:
    store, room = pair.store(), fresh()
    first = await store.bid(room, "alice", 1, "r1", epoch=1)
    await store.bid(room, "alice", 2, "r2", epoch=1)
    await pair.admin.delete(keys.room_stream(room))  # e.g. evicted under maxmemory
    view = await store.get_state(room, "alice", first.position)
    assert (view.recovered, view.reason) == (False, NotRecovered.TRIMMED)


# ------------------------------------------------------------------- fan-out contract


async def test_read_updates_and_decode_stream_entry(pair: Pair) -> None:
    store, a, b = pair.store(), fresh(), fresh()
    assert await store.last_offset(a) == "0-0"
    a1 = await store.bid(a, "alice", 1, "a1", epoch=1)
    assert await store.last_offset(a) == a1.position.offset
    a2 = await store.bid(a, "alice", 2, "a2", epoch=1)
    b1 = await store.bid(b, "bob", 7, "b1", epoch=1)
    updates = await store.read_updates({a: a1.position.offset, b: "0-0"})
    assert sorted(updates, key=lambda u: u[0]) == sorted(
        [(a, RoomEntry(a2.position, a2.state)), (b, RoomEntry(b1.position, b1.state))],
        key=lambda u: u[0],
    )
    assert await store.read_updates({a: a2.position.offset}) == []
    assert await store.read_updates({}) == []

    waiting = asyncio.create_task(store.read_updates({a: "$"}, block_ms=1000))

    async def blocked_in_xread() -> bool:
        clients: Any = await pair.admin.client_list()
        return any(c["cmd"] == "xread" and "b" in c["flags"] for c in clients)

    await until(blocked_in_xread, 5, interval=0.01, message="the XREAD blocked on the server")
    a3 = await store.bid(a, "alice", 3, "a3", epoch=1)
    assert await waiting == [(a, RoomEntry(a3.position, a3.state))]


async def test_decode_stream_entry_accepts_str_and_bytes_and_refuses_the_rest() -> None:
    state = {"bid": 5, "bidder": "alice", "bids": 1, "updated_at": 1}
    expected = RoomEntry(Position(3, "17-0"), state)
    text = '{"bid":5,"bidder":"alice","bids":1,"updated_at":1}'
    assert decode_stream_entry("r", "17-0", {"state": text, "epoch": "3"}) == expected
    assert decode_stream_entry("r", b"17-0", {b"state": text.encode(), b"epoch": b"3"}) == expected
    cases: list[tuple[str, dict[str, Any]]] = [
        ("17", {"state": text, "epoch": "3"}),
        ("17-0", {"state": text}),
        ("17-0", {"state": text, "epoch": "-1"}),
        ("17-0", {"state": "[1]", "epoch": "3"}),
        ("17-0", {"state": "{", "epoch": "3"}),
        ("17-0", {"state": b"\xff", "epoch": "3"}),
    ]
    for entry_id, fields in cases:
        with pytest.raises(StoreCorrupt):
            decode_stream_entry("r", entry_id, fields)


# -------------------------------------------------------------------------- validation


async def test_bad_arguments_are_refused_before_anything_is_sent(pair: Pair) -> None:
    store = pair.store()
    for args, kw in [
        (("", "alice", 1, "r"), {"epoch": 1}),
        (("room", "", 1, "r"), {"epoch": 1}),
        (("room", "alice", 1, ""), {"epoch": 1}),
        (("room", 5, 1, "r"), {"epoch": 1}),
        (("room", "alice", True, "r"), {"epoch": 1}),
        (("room", "alice", 1.5, "r"), {"epoch": 1}),
        (("room", "alice", "10", "r"), {"epoch": 1}),
        (("room", "\ud800", 1, "r"), {"epoch": 1}),
        (("room", "alice", 1, "r"), {"epoch": -1}),
        (("room", "alice", 1, "r"), {"epoch": True}),
    ]:
        with pytest.raises(ValueError, match="must be"):
            await store.bid(*args, **kw)  # type: ignore[arg-type]
    for since in [
        Position(1, "garbage"),
        Position(1, "1-2-3"),
        Position(1, "99999999999999999999999-0"),
        Position(-1, "0-0"),
        ("1", "0-0"),
    ]:
        with pytest.raises(ValueError, match="must be"):
            await store.get_state("room", "alice", since)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="must be"):
        await store.get_state("room", "")
    with pytest.raises(ValueError, match="offset"):
        await store.read_updates({"room": "nope"})
    assert await pair.admin.dbsize() == 1 + len(keys.epoch_copies())  # only the epoch


@pytest.mark.parametrize(
    "kw",
    [
        {"min_bid": 0},
        {"min_bid": 10, "max_bid": 5},
        {"max_bid": MAX_AMOUNT + 1},
        {"min_increment": 0},
        {"min_bid": True},
        {"history_size": 0},
        {"history_size": 1.5},
        {"history_ttl": 0},
        {"history_ttl": float("inf")},
        {"ack_ttl": -1},
        {"ack_ttl": "1"},
        {"max_replay": 0},
        {"legacy_acks": "yes"},
    ],
)
async def test_settings_are_validated(kw: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="must"):
        AuctionSettings(**kw)  # type: ignore[arg-type]


async def test_settings_defaults() -> None:
    s = AuctionSettings()
    assert (s.min_bid, s.max_bid, s.min_increment) == (1, 10**9, 1)
    assert (s.history_size, s.history_ttl, s.ack_ttl) == (1000, 3600, 86400)
    assert s.replay_limit == 1000
    assert AuctionSettings(history_size=10).replay_limit == 10
    assert AuctionSettings(max_replay=3).replay_limit == 3
    assert s.legacy_acks  # off only on a cluster, which has no acks under a user's tag


# -------------------------------------------------------------------------- properties

_SUBS = ("ann", "ben", "cat")
_IDS = ("a", "b", "c", "d")


@settings(
    max_examples=examples(60),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    st.lists(
        st.tuples(st.integers(-5, 60), st.sampled_from(_IDS), st.sampled_from(_SUBS)),
        max_size=30,
    )
)
async def test_sequential_bids_match_a_model(pair: Pair, bids: list[tuple[int, str, str]]) -> None:
    store, room = pair.store(min_bid=1, max_bid=50, min_increment=2, history_size=100), fresh()
    decided: dict[tuple[str, str], BidResult] = {}
    accepted: list[int] = []
    for amount, request_id, name in bids:
        sub = f"{room}-{name}"  # keep examples apart
        result = await store.bid(room, sub, amount, request_id, epoch=1)
        key = (sub, request_id)
        if key in decided:
            assert result.duplicate
            assert result == dataclasses.replace(decided[key], duplicate=True)
            continue
        assert not result.duplicate
        current = accepted[-1] if accepted else 0
        if not 1 <= amount <= 50:
            assert result.reason == Reason.OUT_OF_BOUNDS
        elif accepted and amount < current + 2:
            assert result.reason == Reason.TOO_LOW
        else:
            assert result.accepted
            accepted.append(amount)
        decided[key] = result

    view = await store.get_state(room, "someone")
    assert view.state["bid"] == (max(accepted) if accepted else 0)
    assert view.state["bids"] == len(accepted)
    entries = await stream_states(pair.writer, room)
    assert [e.state["bid"] for e in entries] == accepted
    accepted_keys = [k for k, r in decided.items() if r.accepted]
    assert len(accepted_keys) == len(set(accepted_keys)) == len(accepted)
