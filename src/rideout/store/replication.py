"""Redis replication: read a server's role and link, and move the writer.

Reading never raises for an unreachable server (it is reported). The role changes
(``REPLICAOF``, ``FAILOVER``) raise :class:`ReplicationError` with a message naming the
server, so the failover controller can log a step that did not happen and try again.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, Literal

import redis.asyncio as aioredis
from redis.exceptions import BusyLoadingError, ReadOnlyError, RedisError

from rideout.store import keys
from rideout.store.errors import StoreError
from rideout.store.slots import slot_tags

__all__ = [
    "Comparison",
    "ReplicationError",
    "ReplicationStatus",
    "StillLoading",
    "bump_epoch",
    "compare",
    "count_unreplicated",
    "ensure_epoch",
    "find_writer",
    "follow",
    "is_fenced",
    "promote",
    "read_epoch",
    "replication_status",
    "server_label",
    "switch_over",
    "sync_epoch_copies",
]


class ReplicationError(StoreError, RuntimeError):
    """A role change did not happen (server unreachable, refused, or timed out)."""


class StillLoading(ReplicationError):
    """The server answers but is still loading its data set (Redis's ``LOADING``): a
    restarted Redis, not a failure; the step can be taken once it has loaded."""


def _failed(message: str, exc: BaseException) -> ReplicationError:
    """The error to raise for a step that `exc` stopped."""
    kind = StillLoading if isinstance(exc, BusyLoadingError) else ReplicationError
    return kind(f"{message}: {exc}")


@dataclass(frozen=True, slots=True)
class ReplicationStatus:
    """What one Redis says about its place in replication."""

    reachable: bool
    role: Literal["master", "replica", "unknown"]
    link: Literal["up", "down", "n/a"]  # a replica's link to its master; n/a for a master
    offset: int | None  # master_repl_offset (writer) or slave_repl_offset (replica)
    master: str | None  # host:port a replica follows
    connected_replicas: int
    error: str | None = None
    replica_lag: float | None = None  # a writer's: seconds since its replica last acked
    replica_offset: int | None = None  # a writer's: the offset its replica acknowledged
    failover_state: str | None = None  # master_failover_state while FAILOVER runs
    replica_online: bool = False  # a writer's: it counts its replica online (FAILOVER TO needs it)
    # A writer's replicas, each {address, offset, lag, online}; the replica_* fields
    # above are the first of them (a writer with an in-region replica has two).
    replicas: tuple[dict[str, Any], ...] = ()
    server: str | None = None  # "valkey 8.1.8", "redis 7.0.15": what INFO server says

    def replica_online_at(self, address: str) -> bool:
        """Whether this writer counts the replica announcing `address` (host:port) online."""
        return any(r["address"] == address and r["online"] for r in self.replicas)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


UNREACHABLE_ROLE: Literal["unknown"] = "unknown"


def server_label(info: Mapping[str, Any]) -> str | None:
    """``valkey 8.1.8`` or ``redis 7.0.15`` from ``INFO server`` (Valkey also reports the
    Redis version it is compatible with as ``redis_version``)."""
    if info.get("server_name") == "valkey" and info.get("valkey_version"):
        return f"valkey {info['valkey_version']}"
    version = info.get("redis_version")
    return f"redis {version}" if version else None


async def replication_status(client: aioredis.Redis) -> ReplicationStatus:
    """Ask `client`'s server; an unreachable server is reported, not raised."""
    try:
        async with client.pipeline(transaction=False) as pipe:
            pipe.info("server")
            pipe.info("replication")
            server_info, info = await pipe.execute()
    except (RedisError, OSError) as exc:
        return ReplicationStatus(
            False, UNREACHABLE_ROLE, "n/a", None, None, 0, f"{type(exc).__name__}: {exc}"
        )
    server = server_label(server_info)
    if info.get("role") == "slave":
        return ReplicationStatus(
            reachable=True,
            role="replica",
            link="up" if info.get("master_link_status") == "up" else "down",
            offset=_int(info.get("slave_repl_offset")),
            master=f"{info.get('master_host')}:{info.get('master_port')}",
            connected_replicas=_int(info.get("connected_slaves")) or 0,
            server=server,
        )
    replica = info.get("slave0")  # redis-py parses "ip=..,port=..,offset=..,lag=.." into a dict
    replicas = tuple(
        {
            "address": f"{entry.get('ip')}:{entry.get('port')}",
            "offset": _int(entry.get("offset")),
            "lag": _int(entry.get("lag")),
            "online": entry.get("state") == "online",
        }
        for name, entry in sorted(info.items())
        if name.startswith("slave") and name[5:].isdigit() and isinstance(entry, dict)
    )
    return ReplicationStatus(
        reachable=True,
        role="master",
        link="n/a",
        offset=_int(info.get("master_repl_offset")),
        master=None,
        connected_replicas=_int(info.get("connected_slaves")) or 0,
        replica_lag=float(replica["lag"])
        if isinstance(replica, dict) and "lag" in replica
        else None,
        replica_offset=_int(replica.get("offset")) if isinstance(replica, dict) else None,
        replica_online=isinstance(replica, dict) and replica.get("state") == "online",
        failover_state=str(info.get("master_failover_state"))
        if "master_failover_state" in info
        else None,
        replicas=replicas,
        server=server,
    )


async def read_epoch(client: aioredis.Redis) -> int | None:
    """The writer's epoch as this server holds it; None if unset or unreachable."""
    try:
        value = await client.get(keys.EPOCH)
    except (RedisError, OSError):
        return None
    return _int(value)


async def ensure_epoch(client: aioredis.Redis) -> int | None:
    """Give a new writer epoch 1; an existing epoch is kept; either way every copy of
    it (:func:`~rideout.store.keys.epoch_copy`) is made equal to it. Returns the epoch,
    or None when the server is a replica: it takes its writer's epoch. (A writer
    restarted from its AOF can be demoted by the failover controller as soon as it
    answers.)"""
    try:
        await client.set(keys.EPOCH, 1, nx=True)
    except ReadOnlyError:
        return None
    epoch = _int(await client.get(keys.EPOCH))
    if epoch is None:
        raise ValueError(f"{keys.EPOCH} holds something that is not an integer")
    return await _raise_epoch(client, epoch)


async def find_writer(clients: Mapping[str, aioredis.Redis]) -> tuple[str, int] | None:
    """Of the servers (by name) that answer as a master, the one with the highest epoch,
    and its epoch (an unset epoch counts as 0); None when none answers as a master. A
    stale writer that came back as a master holds an older epoch than the current one."""
    candidates = []
    for name, client in clients.items():
        status = await replication_status(client)
        if status.reachable and status.role == "master":
            candidates.append((await read_epoch(client) or 0, name))
    if not candidates:
        return None
    epoch, name = max(candidates)
    return name, epoch


def _name(client: aioredis.Redis) -> str:
    kwargs = client.connection_pool.connection_kwargs
    return f"{kwargs.get('host')}:{kwargs.get('port')}"


async def promote(client: aioredis.Redis) -> None:
    """Make the server a writer: ``REPLICAOF NO ONE`` (it keeps the data it has)."""
    try:
        await client.replicaof("NO", "ONE")
    except (RedisError, OSError) as exc:
        raise _failed(f"cannot promote {_name(client)}", exc) from exc


async def follow(client: aioredis.Redis, host: str, port: int) -> None:
    """Make the server a replica of host:port; it drops what the new master lacks."""
    try:
        await client.replicaof(host, port)
    except (RedisError, OSError) as exc:
        raise _failed(f"cannot make {_name(client)} a replica of {host}:{port}", exc) from exc


_RAISE_EPOCH = """
local e = tonumber(redis.call('GET', KEYS[1]) or '0') or 0
local n = tonumber(ARGV[1])
if e < n then
  redis.call('SET', KEYS[1], ARGV[1])
  e = n
end
local value = string.format('%d', e)
for tag in string.gmatch(TAGS, '[^,]+') do
  local copy = COPY .. tag .. '}'
  if redis.call('GET', copy) ~= value then redis.call('SET', copy, value) end
end
return e
"""
"""KEYS: 1 the epoch; ARGV: 1 at least this (decimal). The epoch raised to ARGV[1]
unless it is there already, and every copy of it (``keys.epoch_copy``: COPY and a
slot's tag, TAGS holding every slot's) made equal to it, writing only those that are
not: one atomic call, so no script ever reads a copy that disagrees with the epoch.
Blocks the server ~15-35 ms for the 16,384 copies."""


@functools.cache
def _raise_epoch_source() -> str:
    """The script with the slots' tags in it (~70 KB, made on first use): sent once per
    server (``EVALSHA``, loaded again after ``NOSCRIPT``), so a raise is a small request,
    which even a Redis still loading its data reads at once (and refuses: LOADING)."""
    return (
        f"local COPY, TAGS = '{keys.EPOCH_COPY_PREFIX}', '{','.join(slot_tags())}'\n" + _RAISE_EPOCH
    )


async def _raise_epoch(client: aioredis.Redis, at_least: int) -> int:
    script = client.register_script(_raise_epoch_source())
    return int(await script(keys=[keys.EPOCH], args=[at_least]))


async def sync_epoch_copies(client: aioredis.Redis) -> int:
    """Make every copy of the epoch equal to the epoch (an unset epoch: 0), which stays
    as it is; the epoch. The failover controller runs it once per writer: a writer whose
    data predates the copies gets them (until then its scripts read the epoch itself,
    which only one Redis allows, not a cluster)."""
    try:
        return await _raise_epoch(client, 0)
    except (RedisError, OSError) as exc:
        raise _failed(f"cannot write the epoch's copies on {_name(client)}", exc) from exc


async def bump_epoch(client: aioredis.Redis, at_least: int) -> int:
    """Raise the writer's epoch to ``at_least + 1`` unless it is there already, with
    every copy of it; the epoch it holds then (never lowered).

    Idempotent, one Lua call: a controller that retries after its first call timed out
    (the write done, the reply lost) finds its target in place and gets it back, rather
    than raising the epoch once more for the same promotion (seen at load ~10: 2 → 3 → 4
    with one promotion logged). A server already past the target keeps its epoch.
    """
    try:
        return await _raise_epoch(client, at_least + 1)
    except (RedisError, OSError) as exc:
        raise _failed(f"cannot bump the epoch on {_name(client)}", exc) from exc


async def switch_over(
    writer: aioredis.Redis, target: aioredis.Redis, host: str, port: int, timeout: float
) -> None:
    """Coordinated switchover with Redis 6.2's ``FAILOVER TO host port TIMEOUT ms``.

    The writer pauses writes, waits until its replica at host:port (`target`) has
    caught up, becomes that replica's replica and hands over; on timeout it rolls back
    and this raises. No write the old writer acknowledged is lost. Returns once the old
    writer is a replica *and* the target is a writer (its promotion lags a moment).
    """
    try:
        # redis-py deliberately has no failover() method; the raw command is the API.
        command = ("FAILOVER", "TO", host, port, "TIMEOUT", int(timeout * 1000))
        await writer.execute_command(*command)  # type: ignore[no-untyped-call]
    except (RedisError, OSError) as exc:
        raise _failed(f"FAILOVER TO {host}:{port} refused by {_name(writer)}", exc) from exc
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout + 2.0
    while loop.time() < deadline:
        old, new = await replication_status(writer), await replication_status(target)
        if old.role == "master" and old.failover_state == "no-failover":
            raise ReplicationError(
                f"FAILOVER TO {host}:{port} on {_name(writer)} rolled back (the replica did not catch up)"
            )
        if old.role == "replica" and new.role == "master":
            return
        await asyncio.sleep(0.02)
    raise ReplicationError(f"FAILOVER TO {host}:{port} on {_name(writer)} did not finish in time")


async def count_unreplicated(stale: aioredis.Redis, writer: aioredis.Redis) -> int:
    """Room changes the stale writer holds that the current writer does not.

    Run before a returning writer is demoted: these are the bids it accepted (and, in
    async mode, acknowledged) that never reached the other region; demotion discards them.
    Counted per room, from the stale's newest entry back to the first one the writer holds
    alike (same id, same fields): replication copies a stream in order, so every older
    entry is shared. Not "the entries past the writer's newest": once the new writer has
    taken a bid in a room, that hid every older entry it lacked (the partition drill's
    split-brain runs lost 2 and 97 acknowledged bids that no count showed).
    """
    lost = 0
    try:
        async for key in stale.scan_iter(match=keys.ROOM_STREAMS, count=500):
            lost += await _missing_from(stale, writer, key)
    except (RedisError, OSError) as exc:
        raise _failed(f"cannot compare {_name(stale)} with {_name(writer)}", exc) from exc
    return lost


_COMPARE_BATCH = 100


def _stream_id(value: object) -> tuple[int, int]:
    ms, _, seq = _text(value).partition("-")
    return int(ms), int(seq or 0)


async def _missing_from(stale: aioredis.Redis, writer: aioredis.Redis, key: Any) -> int:
    """The entries of stream `key` on `stale` that `writer` lacks (see
    :func:`count_unreplicated`), a pipelined batch at a time. Entries older than the
    writer's oldest are not counted: a room's history is capped, and the writer may have
    trimmed what it shared (nothing tells a trimmed entry from a missing one)."""
    oldest: Any = await writer.xrange(key, count=1)
    floor = _stream_id(oldest[0][0]) if oldest else None
    lost, end = 0, "+"
    while True:
        batch: Any = await stale.xrevrange(key, max=end, count=_COMPARE_BATCH)
        if not batch:
            return lost
        async with writer.pipeline(transaction=False) as pipe:
            for entry_id, _ in batch:
                pipe.xrange(key, min=entry_id, max=entry_id)
            held: Any = await pipe.execute()
        for (entry_id, fields), theirs in zip(batch, held, strict=True):
            if theirs and theirs[0][1] == fields:
                return lost  # the shared prefix
            if floor is not None and _stream_id(entry_id) < floor:
                return lost
            lost += 1
        end = f"({_text(batch[-1][0])}"


def is_fenced(status: ReplicationStatus, endpoint: str) -> bool:
    """Whether the server at `endpoint` (host:port) is fenced: a replica of itself, as
    rideout restarts every Redis (:attr:`rideout.store.embedded.RedisSpec.fenced`)."""
    return status.reachable and status.role == "replica" and status.master == endpoint


@dataclass(frozen=True, slots=True)
class Comparison:
    """What a restarted Redis (`node`) holds against another (`other`)."""

    lacks: int  # room changes `other` holds that `node` does not
    extra: int  # room changes `node` holds that `other` does not
    epoch: int | None  # `node`'s epoch (None: the key is gone)
    keys: int  # how many keys `node` holds

    @property
    def lost(self) -> bool:
        """`node` came back without its data: no epoch (every writer has one from its
        first start, so only a dataset lost from the start lacks it)."""
        return self.epoch is None

    @property
    def behind(self) -> bool:
        """`node` lacks something `other` holds: trusting it would lose that."""
        return self.lost or self.lacks > 0


async def compare(node: aioredis.Redis, other: aioredis.Redis) -> Comparison:
    """Compare `node`'s dataset with `other`'s: the epoch and every room's changes
    (the auction's acknowledged bids), both ways. Raises ReplicationError (StillLoading
    for a server still loading its data)."""
    lacks = await count_unreplicated(other, node)
    extra = await count_unreplicated(node, other)
    try:
        epoch, size = await node.get(keys.EPOCH), await node.dbsize()
    except (RedisError, OSError) as exc:
        raise _failed(f"cannot read the dataset of {_name(node)}", exc) from exc
    return Comparison(lacks=lacks, extra=extra, epoch=_int(epoch), keys=int(size))


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _int(value: object) -> int | None:
    try:
        return int(value)  # type: ignore[call-overload, no-any-return]
    except (TypeError, ValueError):
        return None
