"""The zone: what one app server process holds, the mode it serves in, and draining.

A leaf of :mod:`rideout.realtime`: the endpoints (:mod:`~rideout.realtime.connection`,
:mod:`~rideout.realtime.admin`) and the composition root (:mod:`~rideout.realtime.app`)
import it, it imports none of them, and importing it loads neither Starlette, uvicorn nor
redis (the local supervisor takes the mode signals from here).

Modes, switched by ``POST /admin/mode`` or by signal:

- ``serving``: normal service;
- ``degraded``: connections stay open, but every message, heartbeats included, is
  answered with ``error/unavailable``: the backend-failing-behind-an-open-socket case
  that the client's consecutive-failure detection exists for;
- ``draining``: every connection is closed with 1012 (reconnect now) and new
  handshakes are refused with 503 until the mode changes back.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Final, Protocol

from rideout.config import RealtimeConfig
from rideout.protocol import CloseCode
from rideout.realtime.limits import ConnectionCaps, CostBudget

if TYPE_CHECKING:
    import redis.asyncio as aioredis

    from rideout.auth import TokenIssuer, TokenVerifier
    from rideout.auth.revocation import RevocationList
    from rideout.config import Config, RegionConfig, ZoneConfig
    from rideout.realtime.epoch import EpochTracker
    from rideout.realtime.hub import Hub
    from rideout.realtime.metrics import AppMetrics
    from rideout.store.auction import AuctionStore

__all__ = [
    "DEGRADE_SIGNAL",
    "SERVE_SIGNAL",
    "ZoneConnection",
    "ZoneMode",
    "ZoneServer",
    "drain",
]


class ZoneMode(StrEnum):
    """How a zone serves; the values are what ``/health`` and ``/admin/mode`` show."""

    SERVING = "serving"
    DEGRADED = "degraded"
    DRAINING = "draining"


# `rideout serve` also switches on signals, which reach every worker of a zone (an
# HTTP request reaches only the worker the kernel picks): `rideout chaos throttle`.
DEGRADE_SIGNAL: Final = signal.SIGUSR1
"""Puts a zone in :attr:`ZoneMode.DEGRADED`."""
SERVE_SIGNAL: Final = signal.SIGUSR2
"""Puts a zone back to :attr:`ZoneMode.SERVING`."""


class ZoneConnection(Protocol):
    """What the zone needs of an open connection (a
    :class:`~rideout.realtime.connection.Connection`): a way to close it."""

    def close_soon(self, code: int, reason: str) -> None:
        """Drop what is queued and close with `code`."""


_DEFAULTS = RealtimeConfig()


@dataclass(eq=False)
class ZoneServer:
    """What one app server process holds; kept on ``app.state.zone``."""

    config: Config
    region: RegionConfig
    zone: ZoneConfig
    redis: aioredis.Redis
    store: AuctionStore
    hub: Hub
    epoch: EpochTracker
    verifier: TokenVerifier
    issuer: TokenIssuer
    jwks: dict[str, object]
    admin_token: str
    metrics: AppMetrics
    started_at: float
    origins: frozenset[str]
    revocations: RevocationList  # kept current by the revocation follower
    mode: ZoneMode = ZoneMode.SERVING
    connections: set[ZoneConnection] = field(default_factory=set)
    unreplicated_acks: int = 0  # sync mode degraded to async for these acknowledgements
    # What users and addresses may take of this process (see rideout.realtime.limits);
    # the app builds both from its [realtime]; the defaults are the default settings'.
    caps: ConnectionCaps = field(default_factory=lambda: ConnectionCaps.for_config(_DEFAULTS))
    budget: CostBudget = field(default_factory=lambda: CostBudget.for_config(_DEFAULTS))

    def __post_init__(self) -> None:
        self._show_mode()

    def origin_allowed(self, origin: str) -> bool:
        return "*" in self.origins or origin in self.origins

    def set_mode(self, mode: ZoneMode) -> None:
        """Serve in `mode`; draining closes every connection at once."""
        self.mode = mode
        self._show_mode()
        if mode == ZoneMode.DRAINING:
            drain(self)

    def _show_mode(self) -> None:
        for name in ZoneMode:
            self.metrics.modes.labels(name).set(1 if name == self.mode else 0)


def drain(server: ZoneServer) -> None:
    """Close every connection with 1012 so clients reconnect (elsewhere) at once."""
    for connection in list(server.connections):
        connection.close_soon(CloseCode.DRAINING, "zone draining; reconnect now")
