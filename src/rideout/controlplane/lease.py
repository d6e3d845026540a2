"""The control plane's lease and state in Redis: one instance acts, any number stand by.

External mode runs two or more control planes; only the holder of the lease evaluates
alarms into actions, moves the writer and writes the shared state. The lease is one
Redis key, taken with ``SET NX PX`` (inside a script that also increments a fencing
counter, so every holder gets a number larger than any before it), renewed every third
of its TTL by a compare-and-expire script, and given up on a clean stop.

Fencing: every act re-checks the lease first (:meth:`RedisLease.may_act`: a renewal
that must succeed with at least a third of the TTL left), and every state write is a
script that writes only while the caller's lease value is the one in Redis
(:meth:`RedisLease.save_state`), so a holder that stalled past its TTL cannot overwrite
what its successor wrote. The regions' Redis servers cannot check a lease (REPLICAOF
takes no token), so an act in flight when a stall begins can still land: the TTL bounds
that window, and the writer epoch still fences the app servers' bids.

:func:`lease_deadline` and :func:`describe_holder` are pure; the rest is I/O.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import urlsplit

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from rideout.config import Config, RedisTLS
from rideout.controlplane.errors import ControlPlaneError
from rideout.store import keys
from rideout.store.acl import RedisRole, credentials_for
from rideout.store.client import state_client

__all__ = [
    "LeaseError",
    "LeaseView",
    "RedisLease",
    "default_instance",
    "describe_holder",
    "lease_deadline",
    "state_redis_client",
]

log = logging.getLogger("rideout.controlplane.lease")

# KEYS: lease, fence. ARGV: holder, token, ttl_ms. Free: take it with the next fence
# number. Returns {1 if taken, the lease's value, its remaining ms}.
_ACQUIRE: Final = """
local current = redis.call('get', KEYS[1])
if current then return {0, current, redis.call('pttl', KEYS[1])} end
local fence = redis.call('incr', KEYS[2])
local value = cjson.encode({holder = ARGV[1], token = ARGV[2], fence = fence})
redis.call('set', KEYS[1], value, 'PX', ARGV[3])
return {1, value, tonumber(ARGV[3])}
"""
# KEYS: lease. ARGV: value, ttl_ms. Renew only our own lease.
_RENEW: Final = """
local current = redis.call('get', KEYS[1])
if current == ARGV[1] then
  redis.call('pexpire', KEYS[1], ARGV[2])
  return {1, current, tonumber(ARGV[2])}
end
if current then return {0, current, redis.call('pttl', KEYS[1])} end
return {0, false, -2}
"""
_RELEASE: Final = """
if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end
return 0
"""
# KEYS: lease, state. ARGV: value, state. Write the state only under our own lease.
_SAVE: Final = """
if redis.call('get', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('set', KEYS[2], ARGV[2])
return 1
"""


class LeaseError(ControlPlaneError):
    """The lease store cannot be reached or answered something unexpected."""


@dataclass(frozen=True, slots=True)
class LeaseView:
    """Who holds the lease, as of the last round (``holder`` None: nobody)."""

    mine: bool
    holder: str | None
    fence: int | None
    expires_at: float | None  # wall-clock seconds
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "role": "active" if self.mine else "standby",
            "holder": self.holder,
            "fence": self.fence,
            "expires_at": self.expires_at,
            "error": self.error,
        }


def lease_deadline(renewed_at: float, ttl: float) -> float:
    """Until when a lease renewed at `renewed_at` (taken before the request was sent)
    may be acted on: a third of the TTL is kept back for clock drift and slow acts."""
    return renewed_at + ttl * 2 / 3


def describe_holder(view: LeaseView) -> str:
    """What a standby says about the lease (its /ready body, its log line)."""
    if view.error is not None:
        return f"standby: the lease store does not answer ({view.error})"
    if view.holder is None:
        return "standby: nobody holds the lease (taking it next round)"
    until = (
        time.strftime("%H:%M:%S", time.gmtime(view.expires_at))
        if view.expires_at is not None
        else "?"
    )
    return f"standby: lease held by {view.holder} (fence {view.fence}) until {until} UTC"


def default_instance() -> str:
    """This control plane's name in the lease: host name and process id."""
    return f"{socket.gethostname()}:{os.getpid()}"


def state_redis_client(config: Config) -> aioredis.Redis:
    """A client for ``[control_plane] state_redis_url``, as the controller's ACL user."""
    url = config.control_plane.state_redis_url
    parts = urlsplit(url)
    access = config.redis
    tls = (
        RedisTLS(access.ca_file, access.cert_file, access.key_file, access.check_hostname)
        if parts.scheme == "rediss"
        else None
    )
    return state_client(
        parts.hostname or "",
        parts.port or 6379,
        credentials=credentials_for(config, RedisRole.CONTROLLER),
        timeout=max(0.5, config.control_plane.lease_ttl / 6),
        tls=tls,
    )


class RedisLease:
    """One control plane's side of the lease (see the module docstring)."""

    def __init__(
        self,
        client: aioredis.Redis,
        instance: str,
        ttl: float,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.client = client
        self.instance = instance
        self.ttl = ttl
        self._clock = clock
        self._wall = wall
        self._token = secrets.token_hex(16)
        self._value: str | None = None  # our lease's value while we hold it
        self._deadline = 0.0
        self.view = LeaseView(False, None, None, None, "not asked yet")
        self._acquire = client.register_script(_ACQUIRE)
        self._renew = client.register_script(_RENEW)
        self._release = client.register_script(_RELEASE)
        self._save = client.register_script(_SAVE)

    @property
    def held(self) -> bool:
        """Whether this instance holds the lease, with time to act left."""
        return self._value is not None and self._clock() < self._deadline

    def _ms(self) -> int:
        return max(1, round(self.ttl * 1000))

    def _seen(self, taken: int, value: Any, pttl: Any, started: float) -> LeaseView:
        mine = bool(taken)
        holder = fence = expires = None
        if isinstance(value, str):
            try:
                data = json.loads(value)
                holder, fence = str(data["holder"]), int(data["fence"])
            except (ValueError, KeyError, TypeError):
                holder = "an unreadable lease"
            if isinstance(pttl, int) and pttl > 0:
                expires = self._wall() + pttl / 1000
        if mine:
            self._value = str(value)
            self._deadline = lease_deadline(started, self.ttl)
        else:
            self._value = None
        return LeaseView(mine, holder, fence, expires)

    async def tick(self) -> LeaseView:
        """Renew our lease, or take it if it is free; the view after this round."""
        started = self._clock()
        was = self.view
        try:
            if self._value is not None:
                taken, value, pttl = await self._renew(
                    keys=[keys.CONTROL_PLANE_LEASE], args=[self._value, self._ms()]
                )
                if not taken:
                    self._value = None
            if self._value is None:
                taken, value, pttl = await self._acquire(
                    keys=[keys.CONTROL_PLANE_LEASE, keys.CONTROL_PLANE_FENCE],
                    args=[self.instance, self._token, self._ms()],
                )
            view = self._seen(taken, value, pttl, started)
        except RedisError as exc:
            self._value = None
            view = LeaseView(False, None, None, None, f"{type(exc).__name__}: {exc}")
        self.view = view
        if view.mine and not was.mine:
            log.warning("took the lease (fence %s): this control plane acts now", view.fence)
        elif was.mine and not view.mine:
            log.warning("lost the lease: %s", describe_holder(view))
        elif not view.mine and (was.holder, was.error) != (view.holder, view.error):
            log.info("%s", describe_holder(view))
        return view

    async def may_act(self) -> str | None:
        """None if this instance may act now (its lease renewed just now), else why not."""
        if self._value is None:
            return describe_holder(self.view)
        view = await self.tick()
        if not view.mine or not self.held:
            return describe_holder(view)
        return None

    async def release(self) -> None:
        """Give the lease up (a clean stop), so a standby takes over at once."""
        if self._value is None:
            return
        try:
            await self._release(keys=[keys.CONTROL_PLANE_LEASE], args=[self._value])
            log.info("released the lease")
        except RedisError as exc:
            log.warning("cannot release the lease (it expires by itself): %s", exc)
        self._value = None
        self.view = LeaseView(False, None, None, None)

    async def save_state(self, text: str) -> bool:
        """Write the shared state, only while holding the lease; whether it was written."""
        if self._value is None:
            return False
        try:
            written = await self._save(
                keys=[keys.CONTROL_PLANE_LEASE, keys.CONTROL_PLANE_STATE], args=[self._value, text]
            )
        except RedisError as exc:
            raise LeaseError(f"cannot save the control plane's state: {exc}") from exc
        return bool(written)

    async def load_state(self) -> str | None:
        """The shared state last written by a holder, if any."""
        try:
            text = await self.client.get(keys.CONTROL_PLANE_STATE)
        except RedisError as exc:
            raise LeaseError(f"cannot read the control plane's state: {exc}") from exc
        return text if isinstance(text, str) else None
