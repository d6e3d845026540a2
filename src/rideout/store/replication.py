"""Read a Redis server's replication role and link state (``INFO replication``)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from rideout.store import keys

__all__ = ["ReplicationStatus", "ensure_epoch", "read_epoch", "replication_status"]


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

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


UNREACHABLE_ROLE: Literal["unknown"] = "unknown"


async def replication_status(client: aioredis.Redis) -> ReplicationStatus:
    """Ask `client`'s server; an unreachable server is reported, not raised."""
    try:
        info: dict[str, Any] = await client.info("replication")
    except (RedisError, OSError) as exc:
        return ReplicationStatus(
            False, UNREACHABLE_ROLE, "n/a", None, None, 0, f"{type(exc).__name__}: {exc}"
        )
    if info.get("role") == "slave":
        return ReplicationStatus(
            reachable=True,
            role="replica",
            link="up" if info.get("master_link_status") == "up" else "down",
            offset=_int(info.get("slave_repl_offset")),
            master=f"{info.get('master_host')}:{info.get('master_port')}",
            connected_replicas=_int(info.get("connected_slaves")) or 0,
        )
    return ReplicationStatus(
        reachable=True,
        role="master",
        link="n/a",
        offset=_int(info.get("master_repl_offset")),
        master=None,
        connected_replicas=_int(info.get("connected_slaves")) or 0,
    )


async def read_epoch(client: aioredis.Redis) -> int | None:
    """The writer's epoch as this server holds it; None if unset or unreachable."""
    try:
        value = await client.get(keys.EPOCH)
    except (RedisError, OSError):
        return None
    return _int(value)


async def ensure_epoch(client: aioredis.Redis) -> int:
    """Give a new writer epoch 1; an existing epoch is kept. Returns the epoch."""
    await client.set(keys.EPOCH, 1, nx=True)
    epoch = _int(await client.get(keys.EPOCH))
    if epoch is None:
        raise ValueError(f"{keys.EPOCH} holds something that is not an integer")
    return epoch


def _int(value: object) -> int | None:
    try:
        return int(value)  # type: ignore[call-overload, no-any-return]
    except (TypeError, ValueError):
        return None
