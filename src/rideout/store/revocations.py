"""Revoked tokens in the region's Redis, replicated to the other region with the state.

Layout (key names from :mod:`rideout.store.keys`):

``REVOCATIONS`` (hash)
    One field per revocation, ``sub:NAME`` or ``jti:ID`` (see
    :mod:`rideout.auth.revocation`), whose value is ``{"until","expires","at"}`` in
    integer milliseconds. Every write drops the entries past their ``expires`` and sets
    the hash to expire with its last entry, so it holds only what is in force.
``REVOCATIONS_VERSION`` (string)
    A random value, replaced by every revocation. App servers read it every
    ``auth.revocation_interval`` and read the hash again only when it changed: a poll
    is one ``GET``. It is random rather than a counter so that a list rebuilt by a
    failover (an older replica promoted, then another revocation) never looks unchanged.

Writes go to the writer region (``rideout token revoke`` finds it), as one ``EVAL``
(rare: the script is not cached); reads work on a replica, as one ``FCALL`` (``EVALSHA`` on 6.2). Errors
are the store's own (:mod:`rideout.store.auction`): redis-py never leaks out.
"""

from __future__ import annotations

import secrets
from contextlib import AbstractContextManager
from typing import Any, NamedTuple

import redis.asyncio as aioredis

from rideout.config import Config
from rideout.store import functions, keys, scripts
from rideout.store.acl import RedisRole, credentials_for
from rideout.store.auction import StoreCorrupt, _describe, _pairs, _store_errors, _text
from rideout.store.client import state_client
from rideout.store.errors import StoreError
from rideout.store.replication import find_writer

__all__ = ["NoWriter", "RevocationRecords", "RevocationStore", "record_on_writer"]


class RevocationRecords(NamedTuple):
    """The revocation hash as read at one moment, and its version then."""

    version: str | None
    entries: dict[str, str]  # field -> the stored JSON


class RevocationStore:
    """Revocations in one region's Redis. ``region`` names the server in errors."""

    def __init__(self, client: aioredis.Redis, region: str) -> None:
        self.client = client
        self._server = _describe(client, region)
        self._read = functions.StoreFunction(client, functions.READ_REVOCATIONS)

    def _errors(self, what: str) -> AbstractContextManager[None]:
        return _store_errors(self._server, what)

    async def record(
        self, field: str, *, until_ms: int, expires_ms: int, at_ms: int, now_ms: int
    ) -> int:
        """Record one revocation (only ever extending one already there) and drop the
        expired ones; the number of entries in force. Raises :class:`NotWriter` on a
        replica."""
        for name, value in (("until_ms", until_ms), ("expires_ms", expires_ms),
                            ("at_ms", at_ms), ("now_ms", now_ms)):  # fmt: skip
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**53:
                raise ValueError(f"{name} must be an integer number of milliseconds")
        with self._errors("record a revocation"):
            count: Any = await self.client.eval(
                scripts.REVOKE, 2, keys.REVOCATIONS, keys.REVOCATIONS_VERSION,
                field, until_ms, expires_ms, at_ms, now_ms, secrets.token_hex(8),
            )  # fmt: skip
        return int(count)

    async def version(self) -> str | None:
        """The current version (None before the first revocation)."""
        with self._errors("read the revocation version"):
            value = await self.client.get(keys.REVOCATIONS_VERSION)
        return None if value is None else _text(value, keys.REVOCATIONS_VERSION)

    async def load(self) -> RevocationRecords:
        """The version and every entry, read at one moment."""
        with self._errors("read the revocations"):
            reply: Any = await self._read(keys=[keys.REVOCATIONS, keys.REVOCATIONS_VERSION])
        if not isinstance(reply, list) or len(reply) != 2 or not isinstance(reply[1], list):
            raise StoreCorrupt(f"{keys.REVOCATIONS}: unexpected reply {reply!r:.80}")
        version, flat = reply
        return RevocationRecords(
            None if version is None else _text(version, keys.REVOCATIONS_VERSION),
            _pairs(flat, keys.REVOCATIONS),
        )


class NoWriter(StoreError):
    """No region's Redis could take a revocation (none answers as the writer, or the
    writer refused it)."""


async def record_on_writer(
    config: Config, field: str, *, until_ms: int, expires_ms: int, at_ms: int, now_ms: int
) -> tuple[str, int, int]:
    """Record a revocation on the deployment's writer, as the controller's Redis user (an
    operator's change): (region, epoch, replicas that have it). The writer is found by
    :func:`~rideout.store.replication.find_writer`; :class:`NoWriter` says why not."""
    try:
        controller = credentials_for(config, RedisRole.CONTROLLER)
    except StoreError as exc:
        raise NoWriter(f"cannot record the revocation: {exc}") from exc
    clients = {
        r.name: state_client(r.redis.address, r.redis.port, credentials=controller, tls=r.redis.tls)
        for r in config.regions
    }
    try:
        found = await find_writer(clients)
        if found is None:
            tried = ", ".join(f"{r.name} {r.redis.address}:{r.redis.port}" for r in config.regions)
            raise NoWriter(
                "no region's Redis answers as the writer: is the deployment running? "
                f"(tried {tried})"
            )
        region, epoch = found
        client = clients[region]
        try:
            await RevocationStore(client, region).record(
                field, until_ms=until_ms, expires_ms=expires_ms, at_ms=at_ms, now_ms=now_ms
            )
            replicas = int(await client.wait(1, 2000))
        except StoreError as exc:
            raise NoWriter(f"cannot record the revocation: {exc}") from exc
        return region, epoch, replicas
    finally:
        for client in clients.values():
            await client.aclose()
