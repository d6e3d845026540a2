"""Which of rideout's calls a Redis Cluster would refuse (issue #31).

First the slot rule (:mod:`rideout.store.slots`) against a real cluster node's
``CLUSTER KEYSLOT``. Then a tour: every store's operations run on a real Redis while each
command the client sends is recorded; the server names each command's keys (``COMMAND
GETKEYS``, which knows ``FCALL``'s and ``XREAD``'s layouts), the keys a script
reads by names in ``ARGV`` (the epoch's copy, acks under a user's tag) are added, and each call's keys are placed in slots. A call whose keys span more
than one slot is one a cluster answers with ``CROSSSLOT``: :data:`CROSSING` lists them as
they are today, so a change that adds one fails here, and so does one that removes one
(then the list, and docs/capacity.md, say so). Last, the tour on a real two-node cluster
of each server of the matrix: the cluster refuses those calls (:data:`REFUSAL`) and runs
the rest.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
import redis.asyncio as aioredis
from hypothesis import given, settings
from hypothesis import strategies as st
from redis.asyncio.connection import AbstractConnection
from redis.exceptions import ClusterCrossSlotError, MovedError, ResponseError

from rideout._process import ManagedProcess
from rideout.config import AuthConfig
from rideout.controlplane.lease import RedisLease
from rideout.realtime.demo import claim_name
from rideout.store import functions, keys
from rideout.store.acl import RedisRole, load_credentials
from rideout.store.auction import AuctionSettings, AuctionStore, Position
from rideout.store.client import state_client
from rideout.store.embedded import RedisSpec, find_redis_server
from rideout.store.revocations import RevocationStore
from rideout.store.slots import SLOTS, hash_tag, key_slot, slot_tags, slots_of
from rideout.waitingroom.model import EventSettings, InletSettings
from rideout.waitingroom.store import RoomStore
from tests.conftest import (
    ADMIN,
    MATRIX,
    examples,
    free_port,
    load_library,
    locked_auth,
    set_epoch,
)

ADDRESS = "127.0.1.100"

# --------------------------------------------------------------------- the slot rule


def test_the_cluster_specifications_examples() -> None:
    assert key_slot("123456789") == 0x31C3  # CRC-16/XMODEM's check value
    assert key_slot("{user1000}.following") == key_slot("{user1000}.followers")
    assert hash_tag("foo{}{bar}") == b"foo{}{bar}"  # an empty tag: the whole key
    assert hash_tag("foo{{bar}}zap") == b"{bar"
    assert hash_tag("foo{bar}{zap}") == b"bar"
    assert slots_of([]) == frozenset()


CLUSTER_ADDRESS = "127.0.7.1"
"""The cluster node's address; the two-node clusters use 127.0.7.2-4, one for each line
of the matrix. No other test uses 127.0.7.x: a node also binds its cluster bus (its port
+ 10000), which may be in another worker's block of ports, and on an address of its own
it collides with nobody (tests/conftest.py, _port_block)."""


def _cluster_port(address: str) -> int:
    """A free port whose cluster bus port (+10000) is free too."""
    for _ in range(50):
        port = free_port(address)
        with contextlib.suppress(OSError), socket.socket() as bus:
            bus.bind((address, port + 10_000))
            return port
    raise AssertionError(f"no port with a free bus port on {address}")


@contextlib.asynccontextmanager
async def cluster_mode(spec: RedisSpec) -> AsyncIterator[aioredis.Redis]:
    """`spec`'s server (rideout's users, with the test superuser) in cluster mode, no
    slots assigned; the superuser's client once it answers. Stopped on every way out."""
    process = ManagedProcess(
        spec.name,
        [*spec.argv(find_redis_server()), "--cluster-enabled", "yes",
         "--cluster-config-file", str(spec.data_dir / "nodes.conf")],
        log_file=spec.log_file,
    )  # fmt: skip
    admin = aioredis.Redis(host=spec.address, port=spec.port, decode_responses=True, **ADMIN)
    try:
        await process.start()
        deadline = time.monotonic() + 30
        while True:
            try:
                await admin.ping()
                break
            except (ConnectionError, OSError, aioredis.ConnectionError) as exc:
                if time.monotonic() > deadline:
                    raise AssertionError(f"no cluster node: {process.tail()}") from exc
                await asyncio.sleep(0.05)
        yield admin
    finally:
        await admin.aclose()
        await process.stop()


def _node_spec(directory: Path, address: str, name: str = "cluster-node") -> RedisSpec:
    return RedisSpec(
        name, address, _cluster_port(address), directory, directory / "redis.log",
        auth=locked_auth(directory / "keys"),
    )  # fmt: skip


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def cluster_node(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[aioredis.Redis]:
    """A real server in cluster mode (no slots assigned: it answers CLUSTER KEYSLOT),
    locked, on loopback."""
    spec = _node_spec(tmp_path_factory.mktemp("cluster-node"), CLUSTER_ADDRESS)
    async with cluster_mode(spec) as admin:
        yield admin


keys_with_braces = st.lists(
    st.sampled_from(["{", "}", "a", "é", ":", "x"]) | st.binary(max_size=3).map(bytes.hex),
    max_size=12,
).map("".join)


@pytest.mark.asyncio(loop_scope="module")
async def test_every_slot_is_the_servers(cluster_node: aioredis.Redis) -> None:
    found: list[tuple[str | bytes, int]] = []

    @settings(max_examples=examples(300))
    @given(key=keys_with_braces | st.binary(max_size=24))
    def collect(key: str | bytes) -> None:
        found.append((key, key_slot(key)))

    collect()
    keys_made = found + [(k, key_slot(k)) for k in _rideout_keys()]
    for key, slot in keys_made:
        assert await cluster_node.execute_command("CLUSTER", "KEYSLOT", key) == slot, key
    assert all(0 <= slot < SLOTS for _, slot in keys_made)


def _rideout_keys() -> list[str]:
    event = keys.waitingroom_event_keys("launch")
    return [keys.room_state("r:{1}"), keys.room_session("r:{1}", "alice"), keys.EPOCH,
            keys.epoch_copy(keys.room_state("r:{1}")), keys.bid_ack("alice", "r", "q"),
            *event.values(), keys.REVOCATIONS]  # fmt: skip


# ------------------------------------------------------------------------ the tour

# A call (what the tour did, as "store.method") -> the slots its keys span, each as the
# families of keys it holds ("a+b"). Today's: what issue #31 must place in one slot
# each before a cluster can run.
CROSSING: dict[str, tuple[str, ...]] = {
    # One XREAD over every followed room's stream (refused even where one node holds
    # every slot it names: docs/capacity.md has the way out).
    "auction.read_updates": ("room", "room"),
}


def _family(key: str) -> str:
    """Which family of rideout.store.keys a key is of (what CROSSING names)."""
    if key == keys.EPOCH:
        return "epoch"
    if key == keys.WAITINGROOM_INDEX:
        return "wr-index"
    rest = key.removeprefix(keys.PREFIX)
    return rest.split(":", 1)[0].strip("{}")


@contextlib.contextmanager
def recording(
    monkeypatch: pytest.MonkeyPatch, server: RedisSpec
) -> Iterator[list[tuple[Any, ...]]]:
    """Every command a redis-py asyncio connection to `server` packs (alone or in a
    pipeline). Only `server`'s: the patch is the class's, and a clean-clone run recorded
    a store probe sent meanwhile by something else in the worker's process (redis-py
    packs a command before it connects, so even a sender whose server is gone)."""
    sent: list[tuple[Any, ...]] = []
    pack = AbstractConnection.pack_command

    def record(self: AbstractConnection, *args: Any) -> list[bytes]:
        if (getattr(self, "host", None), getattr(self, "port", None)) == (
            server.address,
            server.port,
        ):
            sent.append(args)
        return pack(self, *args)

    with monkeypatch.context() as patch:
        patch.setattr(AbstractConnection, "pack_command", record)
        yield sent


# Each function's Lua by the names FCALL calls it by (its own, its read-only twin's).
_FUNCTIONS = {r.name: r.source for r in functions.ROUTINES} | {
    r.replica_name: r.source for r in functions.ROUTINES
}
_KEYLESS = {"PING", "INFO", "HELLO", "AUTH", "CLIENT", "SELECT", "FUNCTION", "TIME", "MULTI",
            "EXEC", "SCRIPT", "WAIT", "READONLY", "COMMAND"}  # fmt: skip


async def _keys_of(
    admin: aioredis.Redis, command: tuple[Any, ...], scripts: dict[str, str]
) -> list[str]:
    """The keys `command` touches: what the server says, plus those a script reads by
    the name it is given in ARGV (the epoch's copy; the acks under a user's tag)."""
    name = str(command[0]).split()[0].upper()
    if name in _KEYLESS:
        return []
    try:
        found = [str(k) for k in await admin.execute_command("COMMAND GETKEYS", *command)]
    except ResponseError as exc:
        if "no key arguments" not in str(exc):
            raise
        return []
    # A script's: a function by its name, a script (EVALSHA: Redis 6.2, and the control
    # plane's lease) by its SHA-1, as registered during the test.
    if name in ("FCALL", "EVALSHA"):
        known = {"FCALL": _FUNCTIONS, "EVALSHA": scripts}[name]
        assert str(command[1]) in known, f"{name} of an unknown script: {command[1]}"
        found += [str(a) for a in command[3:] if str(a).startswith(keys.PREFIX)]
    return found


@pytest_asyncio.fixture(loop_scope="module")
async def clients(redis_server: RedisSpec) -> AsyncIterator[dict[str, aioredis.Redis]]:
    spec = redis_server
    made = {
        role: state_client(spec.address, spec.port,
                           credentials=load_credentials(spec.data_dir / "keys", role))
        for role in (RedisRole.APP, RedisRole.CONTROLLER)
    }  # fmt: skip
    made["admin"] = aioredis.Redis(
        host=spec.address, port=spec.port, decode_responses=True, **ADMIN
    )
    try:
        yield made
    finally:
        for client in made.values():
            await client.aclose()


@pytest.mark.asyncio(loop_scope="module")
async def test_which_calls_span_more_than_one_slot(
    clients: dict[str, aioredis.Redis], redis_server: RedisSpec, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = redis_server
    app, controller, admin = clients[RedisRole.APP], clients[RedisRole.CONTROLLER], clients["admin"]
    scripts: dict[str, str] = {}  # EVALSHA's scripts: SHA-1 -> Lua
    register = aioredis.Redis.register_script

    def registering(self: aioredis.Redis, script: Any) -> Any:
        made = register(self, script)
        scripts[made.sha] = script.decode() if isinstance(script, bytes) else script
        return made

    monkeypatch.setattr(aioredis.Redis, "register_script", registering)
    await set_epoch(admin, "1")
    crossing: dict[str, tuple[str, ...]] = {}
    seen: set[str] = set()

    async def call(label: str, work: Any) -> None:
        with recording(monkeypatch, server) as sent:
            await work
        for command in sent:
            names = await _keys_of(admin, tuple(command), scripts)
            seen.update(_family(k) for k in names)
            if len(slots_of(names)) > 1:
                by_slot: dict[int, set[str]] = {}
                for name in names:
                    by_slot.setdefault(key_slot(name), set()).add(_family(name))
                crossing[label] = tuple(sorted("+".join(sorted(f)) for f in by_slot.values()))

    await _tour(app, controller, call)
    assert crossing == CROSSING

    # A store that reads the acks earlier versions kept under the user's tag (the
    # default, for upgrades of one Redis; a cluster has none): its bid reads a key of
    # the user's slot too.
    legacy = AuctionStore(app, AuctionSettings(legacy_acks=True), "us-east-1")
    await call("legacy.bid", legacy.bid("r1", "alice", 20, "q2", epoch=1))
    assert crossing.pop("legacy.bid") == ("epoch+room", "user")
    # The tour reached every family of keys rideout names: a family added later without
    # a place in the tour fails here.
    assert seen == FAMILIES


Call = Callable[[str, Awaitable[Any]], Awaitable[None]]
"""What the tour does with each labelled call: record what it sends, or run it."""


async def _tour(app: aioredis.Redis, controller: aioredis.Redis, call: Call) -> None:
    """Every operation of every store, each through `call` with its label (what
    CROSSING names), as a cluster's deployment would run them (no legacy acks); the
    epoch is set already."""
    auction = AuctionStore(app, AuctionSettings(legacy_acks=False), "us-east-1")
    room = RoomStore(app, region="us-east-1")
    revocations = RevocationStore(controller, "us-east-1")
    lease = RedisLease(controller, "cp-a", ttl=5.0)
    event = EventSettings("launch", validity=600, inlet=InletSettings("max_size", max_size=10))
    now = int(time.time() * 1000)
    await call("auction.bid", auction.bid("r1", "alice", 10, "q1", epoch=1))
    await call("auction.get_state", auction.get_state("r1", "alice", Position(1, "0-0")))
    await call("auction.read_room", auction.read_room("r1"))
    await call("auction.read_session", auction.read_session("r1", "alice"))
    await call("auction.last_offset", auction.last_offset("r1"))
    await call("auction.current_epoch", auction.current_epoch())
    await call(
        "auction.probe", auction.probe(keys.canary_probe("us-east-1", "use1-az1"), "v", epoch=1)
    )
    await call("auction.read_updates",
               auction.read_updates({"r1": "0-0", "r2": "0-0"}, count=10, block_ms=1))  # fmt: skip
    await call("revocations.record", revocations.record(
        "sub:mallory", until_ms=now, expires_ms=now + 60_000, at_ms=now, now_ms=now))  # fmt: skip
    await call("revocations.load", revocations.load())
    await call("lease.tick", lease.tick())
    await call("lease.save_state", lease.save_state("{}"))
    await call("lease.load_state", lease.load_state())
    await call("demo.claim_name", claim_name(
        app, "Alice", "holder", 60, address="127.0.0.1", auth=AuthConfig()))  # fmt: skip
    claim = functions.StoreFunction(app, functions.IDEMPOTENCY_CLAIM)
    record = keys.idempotency("private", "key-1", "operator")
    await call("idempotency.claim", claim(keys=[record], args=["in-flight", 60_000]))
    await call("room.create_event", room.create_event(event))
    await call("room.list_events", room.list_events())
    position = await room.assign("launch")
    await call("room.assign", room.assign("launch"))
    await call("room.poll", room.poll("launch", position.request_id))
    await call("room.touch_many", room.touch_many({"launch": {position.request_id: now / 1000}}))
    await call("room.admit", room.admit("launch", 5))
    await call("room.claim_token", room.claim_token("launch", position.request_id))
    await call("room.update_session", room.update_session("launch", position.request_id, 1))
    await call("room.status", room.status("launch"))
    await call("room.expired_tokens", room.expired_tokens("launch"))
    await call("room.sweep", room.sweep("launch"))
    await call("room.use_stamp", room.use_stamp("launch", "stamp", 60))
    await call("room.claim_tick", room.claim_tick("launch", "admit", 1, 5))
    await call("room.delete_event", room.delete_event("launch"))


FAMILIES = {"epoch", "room", "user", "canary", "demo", "idem", "wr", "wr-index", "revocations",
            "controlplane"}  # fmt: skip
"""Every family of rideout.store.keys, as :func:`_family` names them."""


def test_the_families_are_every_pattern_of_the_keys_module() -> None:
    patterns = [getattr(keys, name) for name in keys.__all__ if name.endswith("_KEYS")]
    assert {_family(p) for p in patterns} | {"epoch", "wr-index"} == FAMILIES


# ------------------------------------------------------------- a real cluster's verdict

CROSSSLOT, NON_LOCAL = "CROSSSLOT", "non-local key"
REFUSAL: dict[str, str] = {
    # Streams of several slots: refused before anything runs, even where one node holds
    # every slot named.
    "auction.read_updates": CROSSSLOT,
}
"""How a cluster refuses each call of :data:`CROSSING`."""


def _refusal(exc: BaseException) -> str | None:
    """What refused a call, from the error or what it was raised from: CROSSSLOT,
    NON_LOCAL, "MOVED" (a cluster client would follow it), or None (a failure)."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ClusterCrossSlotError):
            return CROSSSLOT
        if isinstance(seen, MovedError):
            return "MOVED"
        if "non local key" in str(seen):
            return NON_LOCAL
        seen = seen.__cause__ or seen.__context__
    return None


@contextlib.asynccontextmanager
async def two_nodes(directory: Path, address: str) -> AsyncIterator[RedisSpec]:
    """A cluster of two nodes: the second holds the epoch's slot, the first every other
    (and rideout's function library, and the epoch's copies in its slots). The first
    node's spec once both say the cluster is ok."""
    first, second = (_node_spec(directory / n, address, f"node-{n}") for n in ("a", "b"))
    async with cluster_mode(first) as a, cluster_mode(second) as b:
        epoch_slot = key_slot(keys.EPOCH)
        await a.execute_command(
            "CLUSTER", "ADDSLOTS", *(s for s in range(SLOTS) if s != epoch_slot)
        )
        await b.execute_command("CLUSTER", "ADDSLOTS", epoch_slot)
        await a.execute_command("CLUSTER", "MEET", address, second.port)
        deadline = time.monotonic() + 30
        while not all(
            ["cluster_state:ok" in await n.execute_command("CLUSTER", "INFO") for n in (a, b)]
        ):
            assert time.monotonic() < deadline, "the two nodes never agreed on the cluster"
            await asyncio.sleep(0.05)
        await b.set(keys.EPOCH, "1")
        async with a.pipeline(transaction=False) as pipe:
            for slot, copy in enumerate(keys.epoch_copies()):
                if slot != epoch_slot:
                    pipe.set(copy, "1")
            await pipe.execute()
        await load_library(first)
        yield first


@pytest.mark.asyncio
async def test_a_cluster_refuses_the_crossing_calls_and_runs_the_rest(
    matrix_server: Path, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """The tour on a real cluster, on every server of the matrix: the calls CROSSING
    lists are refused (as REFUSAL says), and every other call runs: the scripts that
    fence on the epoch read its copy in their own slot, on their own node. Each line of
    the matrix on its own address (xdist may run them at once)."""
    address = f"127.0.7.{2 + MATRIX.index(request.node.callspec.id)}"
    refused: dict[str, str] = {}
    moved: set[str] = set()

    async def call(label: str, work: Awaitable[Any]) -> None:
        try:
            await work
        except Exception as exc:
            kind = _refusal(exc)
            if kind is None:
                raise
            if kind == "MOVED":
                moved.add(label)
            else:
                refused[label] = kind

    async with two_nodes(tmp_path, address) as spec:
        app, controller = (
            state_client(spec.address, spec.port,
                         credentials=load_credentials(spec.data_dir / "keys", role))
            for role in (RedisRole.APP, RedisRole.CONTROLLER)
        )  # fmt: skip
        try:
            await _tour(app, controller, call)
        finally:
            await app.aclose()
            await controller.aclose()

    assert refused == REFUSAL
    assert REFUSAL.keys() == CROSSING.keys()
    # The epoch read alone: a cluster client follows MOVED to the epoch's node.
    assert moved == {"auction.current_epoch"}


def test_the_slots_tags_are_the_shortest_of_each_slot() -> None:
    """slot_tags.txt is this search's result: per slot, the first string of [0-9a-z]
    (shortest first, then in alphabet order) that hashes to it."""
    alphabet = b"0123456789abcdefghijklmnopqrstuvwxyz"
    found: dict[int, str] = {}
    for length in range(1, 5):
        for letters in itertools.product(alphabet, repeat=length):
            found.setdefault(key_slot(bytes(letters)), bytes(letters).decode())
        if len(found) == SLOTS:
            break
    assert slot_tags() == tuple(found[slot] for slot in range(SLOTS))


@pytest.mark.asyncio(loop_scope="module")
async def test_each_copy_of_the_epoch_is_in_its_own_slot(cluster_node: aioredis.Redis) -> None:
    copies = keys.epoch_copies()
    async with cluster_node.pipeline(transaction=False) as pipe:
        for copy in copies:
            pipe.execute_command("CLUSTER", "KEYSLOT", copy)
        slots = await pipe.execute()
    assert slots == list(range(SLOTS))
    assert keys.epoch_copy(keys.room_state("r1")) == copies[key_slot(keys.room_state("r1"))]
