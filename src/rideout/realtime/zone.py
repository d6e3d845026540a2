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

A drain can also be *gradual* (``drain_over`` seconds, :func:`drain_gradually`): the
connections open when it starts are closed with 1012 in batches at random moments over
that time (:func:`drain_schedule`), then any that opened meanwhile, so that the clients
arrive elsewhere at a rate the other region can take, not as one herd. In ``draining``
mode that is a slow drain; in ``serving`` mode (the control plane's failback drain) the
zone keeps accepting handshakes while its clients leave, so its own region's canary
keeps succeeding: a standby that refused handshakes would raise its region's alarm, and
a primary failing meanwhile would then find no healthy region to fail over to.
"""

from __future__ import annotations

import asyncio
import math
import random
import signal
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Final, Protocol

from rideout._looplag import LoopLag
from rideout._singleflight import SingleFlight
from rideout._tasks import TaskSupervisor
from rideout.config import RealtimeConfig
from rideout.protocol import CloseCode
from rideout.realtime.admission import AdmissionPolicy, Denied, ReplayGate
from rideout.realtime.limits import ConnectionCaps, CostBudget, LoadShedder
from rideout.store.sync import SyncRule, rule_for

if TYPE_CHECKING:
    import redis.asyncio as aioredis

    from rideout.auth import Claims, TokenIssuer, TokenVerifier
    from rideout.auth.resume import ResumeTickets
    from rideout.auth.revocation import RevocationList
    from rideout.config import Config, RegionConfig, ZoneConfig
    from rideout.protocol import Position
    from rideout.realtime.epoch import EpochTracker
    from rideout.realtime.hub import Hub
    from rideout.realtime.metrics import AppMetrics
    from rideout.store.auction import AuctionStore, StateResult

__all__ = [
    "DEGRADE_SIGNAL",
    "SERVE_SIGNAL",
    "BackendHealth",
    "HandshakeAuthority",
    "ZoneConnection",
    "ZoneMode",
    "ZoneServer",
    "drain",
    "drain_gradually",
    "drain_schedule",
    "early_mode",
    "hold_mode_signals",
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

# A mode signal that arrives before the zone is up (or after it is down). Process-wide,
# as signal dispositions are: SIGUSR1/2 terminate a process by default, and a worker
# still starting (the kernel spreads health checks over a zone's workers, so a sibling
# may answer them) was killed by `chaos restore`'s SIGUSR2.
_early_mode: ZoneMode | None = None


def hold_mode_signals() -> None:
    """Until the zone handles them: remember the latest mode signal instead of dying."""

    def remember(signum: int, frame: object) -> None:
        global _early_mode
        _early_mode = ZoneMode.DEGRADED if signum == DEGRADE_SIGNAL else ZoneMode.SERVING

    signal.signal(DEGRADE_SIGNAL, remember)
    signal.signal(SERVE_SIGNAL, remember)


def early_mode() -> ZoneMode | None:
    """The mode the last signal held by :func:`hold_mode_signals` asked for, if any."""
    return _early_mode


class ZoneConnection(Protocol):
    """What the zone needs of an open connection (a
    :class:`~rideout.realtime.connection.Connection`): a way to close it, and whether it
    is the canary's probe."""

    probe: bool

    def close_soon(self, code: int, reason: str) -> None:
        """Drop what is queued and close with `code`."""


class HandshakeAuthority(Protocol):
    """Another issuer whose tokens ``/ws`` accepts (the waiting room's, say), asked in
    turn when the auction's own verifier refuses a token.

    Passed to :func:`~rideout.realtime.app.create_app` by whoever composes the
    deployment, so ``realtime`` never imports the part that issues them.
    """

    async def authorize(self, token: str) -> Claims | None:
        """The token's claims when this authority issued it and accepts it; None when
        the token is not its own. Raises :class:`~rideout.auth.AuthError` for its own
        token refused (401/403), :class:`~rideout.auth.AuthUnavailable` when it cannot
        tell now (503)."""


class BackendHealth:
    """The latest outcomes of this process's calls to its state store (pure; `clock`
    stamps the changes). Degraded after `limit` failures in a row (one slow call on a
    loaded machine is not an outage), until a call goes through."""

    __slots__ = ("_clock", "failures", "limit", "reason", "since")

    def __init__(self, clock: Callable[[], float] = time.monotonic, *, limit: int = 2) -> None:
        self._clock = clock
        self.limit = limit
        self.failures = 0  # in a row
        self.reason: str | None = None  # why the latest call failed; None after a success
        self.since = clock()  # when `degraded` last changed

    @property
    def degraded(self) -> bool:
        """Whether the latest `limit` store calls failed for want of the store."""
        return self.failures >= self.limit

    def ok(self) -> bool:
        """A store call went through; True when this ended a degradation."""
        ended = self.degraded
        self.failures, self.reason = 0, None
        if ended:
            self.since = self._clock()
        return ended

    def failed(self, reason: str) -> bool:
        """A store call failed (unreachable, timed out, fenced); True when this began a
        degradation."""
        self.failures += 1
        self.reason = reason
        began = self.failures == self.limit
        if began:
            self.since = self._clock()
        return began


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
    # Asked, in order, about a token the auction's verifier refuses (HandshakeAuthority).
    authorities: tuple[HandshakeAuthority, ...] = ()
    mode: ZoneMode = ZoneMode.SERVING
    connections: set[ZoneConnection] = field(default_factory=set)
    unreplicated_acks: int = 0  # sync mode degraded to async for these acknowledgements
    # What users and addresses may take of this process (see rideout.realtime.limits);
    # the app builds both from its [realtime]; the defaults are the default settings'.
    caps: ConnectionCaps = field(default_factory=lambda: ConnectionCaps.for_config(_DEFAULTS))
    budget: CostBudget = field(default_factory=lambda: CostBudget.for_config(_DEFAULTS))
    draining: asyncio.Task[None] | None = field(default=None, repr=False)  # drain_gradually
    backend: BackendHealth = field(default_factory=BackendHealth)  # see realtime.backend
    # Sync replication's rule for this region's writer (store.sync); None in async mode.
    sync_rule: SyncRule | None = None
    lag: LoopLag = field(default_factory=LoopLag)  # kept by the app's watcher (rideout._looplag)
    shedder: LoadShedder | None = None  # refuses upgrades and bids while `lag` is high; None: off
    # Replays in flight and waiting (realtime.admission), and the store the canary's probe
    # and the server's own go through: a Redis connection of their own, so that no user's
    # work queues ahead of them in a pool or a pipeline (None: `store`).
    replays: ReplayGate = field(default_factory=lambda: ReplayGate(AdmissionPolicy()))
    probe_store: AuctionStore | None = None
    # The process's background tasks (hub, followers, prober, lag watcher): rideout._tasks.
    tasks: TaskSupervisor = field(default_factory=TaskSupervisor)
    # getState's reads of a room from one position in flight, shared by identical ones
    # (rideout._singleflight): the read and its `missed` encoded once. None: each reads.
    # A replay's read holds a place of `replays` (or is refused: the reason, to all).
    reads: SingleFlight[tuple[str, Position | None], tuple[StateResult, str] | Denied] | None = (
        field(default_factory=SingleFlight)
    )
    # Resumption tickets (rideout.auth.resume): minted for connections opened with the
    # auction's own tokens, accepted at the handshake instead of one. None: off.
    tickets: ResumeTickets | None = None

    def __post_init__(self) -> None:
        # (Unit tests build servers without a config: no sync rule for them.)
        failover = getattr(self.config, "failover", None)
        if self.sync_rule is None and failover is not None and failover.replication == "sync":
            self.sync_rule = rule_for(self.config, self.region)
        self._show_mode()

    def origin_allowed(self, origin: str) -> bool:
        return "*" in self.origins or origin in self.origins

    def busy(self) -> bool:
        """Whether the load shedder refuses work at the loop's lag now. The canary's probe
        and ``/health`` say so, and the canary may then take a late answer for busy, not
        down (``timing.canary_busy_grace``)."""
        shedder = self.shedder
        return shedder is not None and shedder.sheds(
            self.lag.typical(time.monotonic(), shedder.samples)
        )

    def set_mode(self, mode: ZoneMode, *, drain_over: float = 0.0) -> None:
        """Serve in `mode`; draining closes every connection at once. With `drain_over`
        (serving or draining), the connections are closed over that many seconds
        instead; asked again while that runs, in the same mode, it goes on unchanged."""
        if drain_over > 0 and mode != ZoneMode.DEGRADED:
            _start_gradual_drain(self, mode, drain_over)
            return
        _stop_gradual_drain(self)
        self.mode = mode
        self._show_mode()
        if mode == ZoneMode.DRAINING:
            drain(self)

    def _show_mode(self) -> None:
        for name in ZoneMode:
            self.metrics.modes.labels(name).set(1 if name == self.mode else 0)


_DRAIN_REASON = "zone draining; reconnect now"


def drain(server: ZoneServer, *, probes: bool = True) -> None:
    """Close every connection with 1012 so clients reconnect (elsewhere) at once; the
    canary's probes too unless `probes` is False."""
    for connection in list(server.connections):
        if probes or not connection.probe:
            connection.close_soon(CloseCode.DRAINING, _DRAIN_REASON)


def drain_schedule(
    count: int, spread: float, rng: random.Random | None = None, *, step: float = 0.05
) -> list[tuple[float, int]]:
    """When to close `count` connections over `spread` seconds: ``(offset, how many)``
    batches, in order. Each connection gets a uniformly random moment in
    ``[0, spread)`` (full jitter), and moments within one `step` close together."""
    draw = rng.random if rng is not None else random.random
    batches: dict[int, int] = {}
    for _ in range(count):
        slot = math.floor(draw() * spread / step) if spread > 0 else 0
        batches[slot] = batches.get(slot, 0) + 1
    return [(slot * step, batches[slot]) for slot in sorted(batches)]


_DRAIN_STEP = 0.05  # seconds: drain_schedule's step, and the lateness a drain absorbs


async def drain_gradually(
    server: ZoneServer,
    spread: float,
    *,
    rng: random.Random | None = None,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    clock: Callable[[], float] | None = None,
) -> None:
    """Close the zone's connections with 1012 over `spread` seconds, on the schedule of
    :func:`drain_schedule`; at the end, also those that opened meanwhile.

    The canary's probe connections are left alone while the zone serves: each lives for
    one probe (well under a second), and closing one failed the canary of a region that
    was only handing its clients to the writer (in drills, the standby's alarm went off
    during the failback's drain). In draining mode the last sweep closes them too.

    A drain that wakes late (its event loop stalled under load) does not close the
    batches that fell due meanwhile all at once: the rest of the schedule moves later by
    the delay, so the clients still leave at the planned rate and the drain ends that
    much later. (It did burst: 55 of 200 reconnects within 100 ms in one loaded test run,
    where the schedule allows about 2.)"""
    now = clock or asyncio.get_running_loop().time
    start = now()
    waiting = [c for c in server.connections if not c.probe]
    (rng or random).shuffle(waiting)
    for offset, count in drain_schedule(len(waiting), spread, rng, step=_DRAIN_STEP):
        await sleep(max(0.0, start + offset - now()))
        late = now() - (start + offset)
        if late > _DRAIN_STEP:
            start += late  # the schedule resumes from here, at its own pace
        batch, waiting = waiting[:count], waiting[count:]
        for connection in batch:
            if connection in server.connections:
                connection.close_soon(CloseCode.DRAINING, _DRAIN_REASON)
    await sleep(max(0.0, start + spread - now()))
    # Those that came meanwhile (a client's DNS cache not yet expired).
    drain(server, probes=server.mode == ZoneMode.DRAINING)


def _start_gradual_drain(server: ZoneServer, mode: ZoneMode, spread: float) -> None:
    running = server.draining is not None and not server.draining.done()
    if server.mode == mode and running:
        return  # asked again (another caller, a retry): one schedule is enough
    _stop_gradual_drain(server)
    server.mode = mode
    server._show_mode()
    server.draining = asyncio.get_running_loop().create_task(
        drain_gradually(server, spread), name="rideout-zone-drain"
    )


def _stop_gradual_drain(server: ZoneServer) -> None:
    if server.draining is not None:
        server.draining.cancel()
        server.draining = None
