"""Whether this zone's state store can take a write, as its heartbeats and probes say.

The canary's ``probe`` and each app server's own store probe (every canary interval,
:class:`StoreProber`) write and read the zone's probe key through the path a bid takes
(:meth:`~rideout.store.auction.AuctionStore.probe`: the same client and pipeline, the
epoch fence, ``WAIT`` in sync mode). The canary's is bounded by :func:`probe_timeout`,
shorter than the canary's own timeout; the server's own by :func:`prober_timeout`,
on the heartbeat's scale. What they see, and what bids and reads see, lands in
:class:`~rideout.realtime.zone.BackendHealth`: while the latest outcome is a failure the zone's heartbeats are
answered with ``error/unavailable`` (docs/realtime-api.md: an error object instead of
``pong`` when the backend is degraded), so clients' two-bad-heartbeats rule reconnects them, and the canary's
probe fails, so the region's alarm goes off and the controller fails over.

A heartbeat never waits on Redis itself: it reads the latest outcome.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from typing import TYPE_CHECKING

from rideout._tasks import TaskSupervisor
from rideout.config import Timing
from rideout.realtime.polling import Polling
from rideout.store import keys
from rideout.store.auction import ProbeOutcome
from rideout.store.errors import StoreError, StoreUnavailable

if TYPE_CHECKING:
    from rideout.realtime.zone import ZoneServer

__all__ = [
    "StoreProber",
    "probe_store",
    "probe_timeout",
    "prober_timeout",
    "record_failure",
    "record_ok",
]

log = logging.getLogger("rideout.realtime.backend")


def probe_timeout(timing: Timing) -> float:
    """How long a store probe may take: three quarters of the canary's timeout, so that
    the canary hears *why* (``the state store did not answer within …``) rather than
    timing out itself, with the rest left for its connection and heartbeat."""
    return timing.canary_timeout * 0.75


def prober_timeout(timing: Timing) -> float:
    """The bound of an app server's own probes: half the clients' heartbeat timeout
    (1 s in the fast profile). Their failures make the zone's heartbeats fail, and so
    move its clients: a store that is merely slow on a loaded machine must not set off
    that herd, only one that does not answer."""
    return timing.heartbeat_timeout / 2


async def probe_store(
    server: ZoneServer, budget: float | None = None, *, record: bool = True
) -> ProbeOutcome:
    """One store probe of `server`'s zone within `budget` (default
    :func:`probe_timeout`); with `record`, its outcome goes to ``server.backend`` (the
    canary's tight bound does not: only the server's own, lenient probes and real bids
    decide what heartbeats say).

    A probe fenced on the epoch refreshes the server's epoch and tries once more (the
    writer may just have moved); fenced again, the store is not the writer it should be
    (a stale writer, or a replica behind), which fails the probe. Raises
    :class:`~rideout.store.errors.StoreError` when the probe fails.
    """
    if budget is None:
        budget = probe_timeout(server.config.timing)
    failover = server.config.failover
    wait = 1 if failover.replication == "sync" else 0
    key = keys.canary_probe(server.region.name, server.zone.name)
    try:
        async with asyncio.timeout(budget):
            outcome = await _probe_once(server, key, wait, budget)
            if outcome.role == "stale":
                await server.epoch.refresh()
                outcome = await _probe_once(server, key, wait, budget)
    except TimeoutError:
        error: StoreError = StoreUnavailable(
            f"the state store did not answer the probe within {budget:g} s"
        )
    except StoreError as exc:
        error = exc
    else:
        if outcome.role != "stale":
            if record:
                record_ok(server)
            return outcome
        error = StoreUnavailable(
            f"fenced: the state store holds epoch {outcome.epoch}, "
            f"the writer's is {server.epoch.value}"
        )
    if record:
        record_failure(server, str(error))
    raise error


async def _probe_once(server: ZoneServer, key: str, wait: int, budget: float) -> ProbeOutcome:
    epoch = server.epoch.value
    if epoch is None:
        epoch = await server.epoch.refresh()
    if epoch is None:
        raise StoreUnavailable("the writer's epoch is unknown")
    # WAIT gets a share of the budget; a writer without a replica still answers (a sync
    # bid it would refuse is the bid path's business, reported as replicas=0). Through
    # the probes' own connection: a pool full of users' replays must not hold it up.
    store = server.probe_store or server.store
    return await store.probe(
        key, secrets.token_hex(8), epoch=epoch, wait_replicas=wait, wait_timeout=budget / 4
    )


def _record_ok(server: ZoneServer) -> None:
    if server.backend.ok():
        log.info("the state store answers again")
        server.metrics.backend_up.set(1)


def record_failure(server: ZoneServer, reason: str) -> None:
    """Note that a store call failed for want of the store (heartbeats now fail)."""
    if server.backend.failed(reason):
        log.warning("the state store is failing: %s", reason)
        server.metrics.backend_up.set(0)


def record_ok(server: ZoneServer) -> None:
    """Note that a store call went through."""
    if server.backend.failures:
        _record_ok(server)


class StoreProber:
    """Probes `server`'s store every canary interval, so that heartbeats reflect it even
    while no bid or canary arrives at this process."""

    def __init__(self, server: ZoneServer) -> None:
        self._server = server
        self._polling = Polling(self.step, server.config.timing.canary_interval, "store-probe")

    async def step(self) -> None:
        """One probe; a failure is recorded, never raised."""
        server = self._server
        try:
            await probe_store(server, prober_timeout(server.config.timing))
        except StoreError:
            server.metrics.store_errors.labels("probe").inc()

    def start(self, tasks: TaskSupervisor | None = None) -> None:
        self._polling.start(tasks)

    async def stop(self) -> None:
        await self._polling.stop()
