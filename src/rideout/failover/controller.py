"""The failover controller: the state's writer moves with the traffic.

Each tick it takes the regions' health (from the health checks that follow the canary
alarms) and what each region's Redis says about itself, and:

- **fails over** when the writer's region is unhealthy and the other is healthy:
  ``REPLICAOF NO ONE`` on the other region's Redis, then a higher epoch on it, and only
  then does DNS answer with that region (:meth:`FailoverController.dns_health`);
- **fails back** when the primary is healthy again (and ``failover.auto_failback``):
  Redis 6.2's ``FAILOVER TO`` on the current writer pauses writes, waits until the
  primary's Redis has caught up, and hands over; then a higher epoch, then DNS. No
  acknowledged write is lost, in either replication mode. A primary that keeps losing
  the writer again gets it back only after a hold that grows with its recent moves
  (:mod:`~rideout.failover.damping`); leaving a failed region is never held, except
  that just after any move the region that took the writer keeps it while its Redis
  answers, for a grace in which the clients sent to it arrive, and that a writer region
  that passes its canary again keeps it while its alarm counts its way back to OK (a
  lost Redis is moved away from at once);
- **reconciles** roles: a writer that restarted as a replica is promoted again; a stale
  writer that comes back (a region restored after a kill or freeze) is demoted to a
  replica of the current writer as soon as it is reachable, after counting the writes it
  holds that never reached the current writer (lost in async mode).

Fencing: app servers learn the epoch from the control plane (``/v1/writer``) and send it
with every bid; a stale writer still holds the old epoch, so the bid script refuses
their writes until the stale writer is demoted.

The decision (:func:`~rideout.failover.decision.decide`) is pure; :class:`FailoverController`
executes it; what it remembers is :mod:`~rideout.failover.state`. How the
writer moves is a :class:`~rideout.failover.mover.WriterMover` (Redis's own replication
commands by default); a :class:`~rideout.failover.mover.ManagedWriter` (``--provider aws``:
ElastiCache Global Datastore, :mod:`rideout.aws.writer`) replaces the whole move and the
replica bookkeeping of the reconcile step when a managed service owns replication. The
epoch fence is the controller's in every case.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import asdict, replace
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import BusyLoadingError, RedisError

from rideout.config import Config, FailoverConfig
from rideout.failover.damping import DampingPolicy, DampingState
from rideout.failover.decision import Decision, Move, decide
from rideout.failover.mover import ManagedWriter, ReplicationMover, WriterMover
from rideout.failover.state import ControllerState, FailoverEvent, repeats_note
from rideout.failover.topology import (
    NodeView,
    desired_masters,
    head,
    in_region_candidate,
    nodes,
)
from rideout.store.acl import RedisRole, credentials_for
from rideout.store.client import probe_client
from rideout.store.functions import ensure_library
from rideout.store.replication import (
    Comparison,
    ReplicationError,
    ReplicationStatus,
    StillLoading,
    bump_epoch,
    compare,
    count_unreplicated,
    follow,
    is_fenced,
    promote,
    read_epoch,
    replication_status,
    sync_epoch_copies,
)

__all__ = [
    "ControllerState",
    "Decision",
    "FailoverController",
    "FailoverEvent",
    "damping_policy",
    "decide",
    "repeats_note",
]

log = logging.getLogger("rideout.failover")


def damping_policy(failover: FailoverConfig) -> DampingPolicy | None:
    """The ``[failover]`` settings' damping policy; None when ``flap_damping`` is off."""
    if not failover.flap_damping:
        return None
    return DampingPolicy(
        half_life=failover.damping_half_life,
        max_hold=failover.damping_max_hold,
        suppress=failover.damping_suppress,
        reuse=failover.damping_reuse,
    )


class FailoverController:
    """Moves the writer between the config's two regions; see the module docstring."""

    def __init__(
        self,
        config: Config,
        *,
        state: ControllerState | None = None,
        clock: Callable[[], float] = time.time,
        on_change: Callable[[ControllerState], None] | None = None,
        mover: WriterMover | None = None,
        managed: ManagedWriter | None = None,
        guard: Callable[[], Awaitable[str | None]] | None = None,
        drain_ends: Callable[[], float | None] | None = None,
    ) -> None:
        """`mover` moves the writer (default: :class:`ReplicationMover` on the topology's
        Redis); `managed`, when given, does the whole move instead and keeps the replicas
        (the controller then only fences). `guard`, when given, is asked before every act
        that changes a Redis (the control plane's lease): None to go ahead, else why not
        (the act is skipped, and the tick records that as an error event). `drain_ends`,
        when given, says when the drain of the region the writer left ends (see
        :meth:`move_grace_left`)."""
        self.config = config
        self.state = state
        self.managed = managed
        self._clock = clock
        self._on_change = on_change
        self._guard = guard
        self._drain_ends = drain_ends
        # When each region last failed its canary while it held the writer and its Redis
        # answered (in memory: a restart forgets, and at worst moves once more).
        self._strained_at: dict[str, float] = {}
        # When the primary last failed under the clients a failback had just given it
        # (within the damping window of that failback, its Redis answering).
        self._flapped_at: float | None = None
        credentials = credentials_for(config, RedisRole.CONTROLLER)
        # Every Redis by node key: a region's name for its main one, REGION/replica for
        # its in-region replica.
        self.topology = nodes(config)
        self._clients: dict[str, aioredis.Redis] = {
            key: probe_client(
                node.address,
                node.port,
                credentials=credentials,
                tls=config.region(node.region).redis.tls,
            )
            for key, node in self.topology.items()
        }
        self.mover: WriterMover = mover or ReplicationMover(self.topology, self._clients)
        self.redis: dict[str, ReplicationStatus] = {}
        self._library_on: str | None = None  # the writer whose library was made sure of
        self.last_decision: Decision | None = None
        self._waiting_since: float | None = None
        self.damping = damping_policy(config.failover)

    async def close(self) -> None:
        for client in self._clients.values():
            await client.aclose()

    # ------------------------------------------------------------------ views

    @property
    def writer(self) -> str:
        return self.state.writer if self.state else self.config.primary.name

    @property
    def writer_node(self) -> str:
        """The node key of the writer's Redis."""
        if self.state is not None and self.state.writer_node:
            return self.state.writer_node
        return self.writer

    @property
    def writer_endpoint(self) -> str:
        """host:port of the writer's Redis (app servers of its region connect there)."""
        return self.topology[self.writer_node].endpoint

    @property
    def epoch(self) -> int | None:
        return self.state.epoch if self.state else None

    def _grace(self) -> float:
        timing = self.config.timing
        periods = timing.failback_datapoints + timing.failover_datapoints + 4
        return periods * timing.canary_interval

    def in_region_grace(self) -> bool:
        """Whether an in-region promotion is recent enough that its region's alarm is
        still expected to be clearing."""
        at = self.state.promoted_in_region_at if self.state else None
        return at is not None and self._clock() - at < self._grace()

    def move_grace(self) -> bool:
        """Whether the writer's latest move (a failover or a failback) is recent enough
        that the drain of the region it left may still be sending clients over: until
        the drain has sent the last of them, then the periods an alarm needs to go to
        ALARM and back (as for an in-region promotion)."""
        return self.move_grace_left() > 0

    def move_grace_left(self) -> float:
        """Seconds left of the grace after the latest move (0: none). It runs from the
        drain's end: at least the drain's spread after the move, later if the drain
        paused (``drain_ends``; the drain bounds its pauses)."""
        at = self.state.moved_at if self.state else None
        if at is None:
            return 0.0
        ends = at + self.config.failover.failback_drain_seconds
        drained = self._drain_ends() if self._drain_ends is not None else None
        if drained is not None and drained > ends:
            ends = drained
        return max(0.0, ends + self._grace() - self._clock())

    def strained_recently(self, region: str) -> bool:
        """Whether `region` failed its canary while it held the writer, its Redis
        answering, within the last damping half-life (never with damping off)."""
        at = self._strained_at.get(region)
        if self.damping is None or at is None:
            return False
        return self._clock() - at < self.damping.half_life

    def _other(self, region: str) -> str:
        primary, secondary = self.config.primary.name, self.config.secondary.name
        return secondary if region == primary else primary

    def failback_hold(self) -> float:
        """Seconds a failback is still held by flap damping (0: not held): by the figure
        of merit, or for a damping half-life after the primary failed under the clients
        a failback had just given it (:meth:`strain_hold`)."""
        if self.damping is None or self.state is None:
            return 0.0
        return max(self.state.damping.hold(self.damping, self._clock()), self.strain_hold())

    def strain_hold(self) -> float:
        """Seconds left of the damping half-life since the primary last failed its canary
        under the clients a failback had just given it (within the damping window after
        that failback, its Redis answering); 0: none, or damping off.

        A failover away from such a primary, once its grace is over, says it could not
        take the clients it got back; failing back as soon as it passes again sends them
        straight back. The figure of merit alone does not hold that failback when the
        grace made the failover come more than a half-life after the failback."""
        at = self._flapped_at
        if self.damping is None or at is None:
            return 0.0
        return max(0.0, at + self.damping.half_life - self._clock())

    def damping_status(self) -> dict[str, Any] | None:
        """The damping view ``status`` shows (``holding``: a failback is being held
        now); None when damping is off."""
        if self.damping is None:
            return None
        state = self.state.damping if self.state else DampingState()
        view = state.view(self.damping, self._clock())
        view["strain_hold_seconds"] = round(self.strain_hold(), 3)
        view["hold_seconds"] = max(view["hold_seconds"], view["strain_hold_seconds"])
        view["holding"] = self.writer != self.config.primary.name and view["hold_seconds"] > 0
        return view

    def dns_health(self, healthy: Mapping[str, bool]) -> dict[str, bool]:
        """The health view DNS answers from: the writer's region, and nothing else.

        DNS must never send clients to a region whose Redis cannot take their bids, so
        the region that is not the writer counts as unhealthy for routing. The answer
        moves only after the writer has (the controller promotes, then DNS follows).
        """
        return {r.name: r.name == self.writer for r in self.config.regions}

    def status(self) -> dict[str, Any]:
        """Writer, epoch, counters, recent events, and each Redis's replication view."""
        writer_view = self.redis.get(self.writer_node)
        lag_bytes = None
        if (
            writer_view
            and writer_view.offset is not None
            and writer_view.replica_offset is not None
        ):
            lag_bytes = max(0, writer_view.offset - writer_view.replica_offset)
        return {
            "writer": self.writer,
            "writer_redis": self.writer_node,
            "writer_endpoint": self.writer_endpoint,
            "epoch": self.epoch,
            "in_region_promotions": self.state.in_region_promotions if self.state else 0,
            "replication": self.config.failover.replication,
            "auto_failback": self.config.failover.auto_failback,
            "decision": asdict(self.last_decision) if self.last_decision else None,
            "lost_writes": self.state.lost_writes if self.state else 0,
            "datasets_lost": self.state.datasets_lost if self.state else 0,
            "failovers": self.state.failovers if self.state else 0,
            "failbacks": self.state.failbacks if self.state else 0,
            "lag_bytes": lag_bytes,
            "lag_seconds": writer_view.replica_lag if writer_view else None,
            "damping": self.damping_status(),
            "move_grace_seconds": round(self.move_grace_left(), 3),
            "redis": {name: view.to_dict() for name, view in self.redis.items()},
            "topology": self.topology_view(),
            "events": [asdict(e) for e in (self.state.events if self.state else ())][-20:],
        }

    def topology_view(self) -> list[dict[str, Any]]:
        """Each Redis: where it lives, its part (writer / in-region replica /
        cross-region replica), its link and lag as last observed."""
        writer = self.writer_node
        w_region = self.topology[writer].region
        w_view = self.redis.get(writer)
        acked = {r["address"]: r for r in (w_view.replicas if w_view else ())}
        rows = []
        for key, node in self.topology.items():
            view = self.redis.get(key)
            if key == writer:
                part = "writer"
            elif node.region == w_region:
                part = "in-region replica"
            else:
                part = "cross-region replica"
            row: dict[str, Any] = {
                "redis": key, "region": node.region, "zone": node.zone,
                "endpoint": node.endpoint, "part": part,
                "reachable": bool(view and view.reachable),
                "role": view.role if view else "unknown",
                "link": view.link if view else "n/a",
                "master": view.master if view else None,
                "lag_bytes": None,
            }  # fmt: skip
            direct = acked.get(node.endpoint)
            if (
                direct is not None
                and w_view
                and w_view.offset is not None
                and direct["offset"] is not None
            ):
                row["lag_bytes"] = max(0, w_view.offset - int(direct["offset"]))
            rows.append(row)
        return rows

    # ------------------------------------------------------------------ ticking

    def _event(self, kind: str, message: str) -> None:
        assert self.state is not None
        events, now = self.state.events, self._clock()
        last = events[-1] if events else None
        if last is not None and (last.kind, last.message) == (kind, message):
            # The same step stopped the same way again, round after round (a Redis still
            # loading, a refusal that lasts): one event that counts, so that a long spell
            # neither pushes the moves out of the bounded history nor floods the log.
            events[-1] = replace(last, repeats=last.repeats + 1, last_at=now)
            log.debug("%s again (%d): %s", kind, last.repeats + 1, message)
        else:
            events.append(FailoverEvent(now, kind, message, self.state.writer, self.state.epoch))
            (log.warning if kind == "error" else log.info)("%s: %s", kind, message)
        if self._on_change is not None:
            self._on_change(self.state)

    async def _may_act(self) -> None:
        """Ask the guard; ReplicationError (so the tick records it) when it says no."""
        if self._guard is not None:
            refused = await self._guard()
            if refused is not None:
                raise ReplicationError(f"not acting: {refused}")

    async def _observe(self) -> None:
        # Side by side: a frozen Redis costs its timeout once per round, not once per
        # region in turn (with the writer frozen, rounds took longer than a period).
        names = list(self._clients)
        views = await asyncio.gather(*(replication_status(self._clients[n]) for n in names))
        self.redis.update(zip(names, views, strict=True))

    async def _bootstrap(self) -> None:
        """No remembered state: the writer is the reachable master (the primary if both)."""
        masters = [n for n, v in self.redis.items() if v.reachable and v.role == "master"]
        node = (
            self.config.primary.name
            if (not masters or self.config.primary.name in masters)
            else masters[0]
        )
        writer = self.topology[node].region
        epoch = await read_epoch(self._clients[node]) or 1
        self.state = ControllerState(
            writer=writer, epoch=epoch, writer_node=None if node == writer else node
        )
        self._event("start", f"writer {writer} ({node}) at epoch {epoch}")

    async def tick(
        self, healthy: Mapping[str, bool], recovering: Mapping[str, bool] | None = None
    ) -> Decision:
        """Observe, decide, act; returns the decision (steps and errors become events).
        `recovering`: the regions whose alarm is in ALARM only by its recovery threshold
        (:attr:`~rideout.health.alarm.Alarm.recovering`)."""
        await self._observe()
        if self.state is None:
            await self._bootstrap()
        assert self.state is not None
        candidate = self.in_region_candidate()
        writer, reachable = self.state.writer, self._writer_reachable()
        if not healthy.get(writer, True) and reachable:
            now = self._clock()
            self._strained_at[writer] = now  # failing while its Redis answers
            moved = self.state.moved_at
            if (
                writer == self.config.primary.name
                and self.damping is not None
                and moved is not None
                and now - moved < self.damping.max_hold
            ):
                self._flapped_at = now
        decision = decide(
            writer=self.state.writer,
            primary=self.config.primary.name,
            secondary=self.config.secondary.name,
            healthy=healthy,
            auto_failback=self.config.failover.auto_failback,
            failback_hold=self.failback_hold(),
            in_region_replica={self.state.writer: candidate is not None},
            in_region_grace=self.in_region_grace(),
            move_grace=self.move_grace(),
            writer_reachable=reachable,
            other_strained=self.strained_recently(self._other(writer)),
            writer_recovering=(recovering or {}).get(writer, False),
        )
        self._log_hold(decision)
        self.last_decision = decision
        try:
            if decision.move == "promote-in-region":
                assert candidate is not None
                await self._promote_in_region(candidate, decision)
            elif decision.move != "none" and decision.target is not None:
                await self._move(decision)
            await self._reconcile()
        except StillLoading as exc:
            # A restarted Redis answers INFO before it has loaded its data: not a failure.
            self._event("wait", f"{exc} (a restarted Redis: acting once it has loaded)")
        except ReplicationError as exc:
            self._event("error", str(exc))
        return decision

    def _log_hold(self, decision: Decision) -> None:
        """Log when a rule starts (or stops) keeping the writer where it is: moves are
        events, and without this the holds between them are seen only in the summary."""
        before = self.last_decision.held if self.last_decision else None
        if decision.held == before:
            return
        if decision.held is not None:
            log.info("holding the writer in %s (%s): %s", self.writer, decision.held,
                     decision.reason)  # fmt: skip
        elif decision.move == "none":
            log.info("the writer in %s is no longer held (%s): %s", self.writer, before,
                     decision.reason)  # fmt: skip

    def _writer_reachable(self) -> bool:
        view = self.redis.get(self.writer_node)
        return view is not None and view.reachable

    def in_region_candidate(self) -> str | None:
        """The writer region's other Redis, when it may be promoted now (topology)."""
        views = {key: NodeView(v.reachable, v.role, v.offset) for key, v in self.redis.items()}
        return in_region_candidate(self.writer_node, self.topology, views)

    async def _promote_in_region(self, candidate: str, decision: Decision) -> None:
        """The writer's Redis is lost, its region's other one holds every acknowledged
        write: promote it, raise the epoch; DNS does not change."""
        assert self.state is not None
        old = self.writer_node
        await self._may_act()
        await promote(self._clients[candidate])
        epoch = await bump_epoch(self._clients[candidate], self.state.epoch)
        region = self.topology[candidate].region
        self.state.writer_node = None if candidate == region else candidate
        self.state.epoch = epoch
        self.state.in_region_promotions += 1
        self.state.promoted_in_region_at = self._clock()
        self._library_on = None
        self._event(
            "promote-in-region",
            f"writer {old} -> {candidate} (REPLICAOF NO ONE; {old} unreachable); "
            f"epoch {epoch}; {decision.reason}",
        )
        await self._observe()

    async def _move(self, decision: Decision) -> None:
        assert self.state is not None
        assert decision.target is not None
        new_region = decision.target
        reachable = {k: v.reachable for k, v in self.redis.items()}
        old, new = self.writer_node, head(new_region, self.topology, reachable)
        old_view, new_view = self.redis[old], self.redis[new]
        if not new_view.reachable:
            raise ReplicationError(
                f"cannot move the writer to {new_region}: its Redis is unreachable "
                f"({new_view.error})"
            )
        if self.managed is not None:
            await self._may_act()
            how: str | None = await self.managed.move(
                self.state.writer, new_region, old_reachable=old_view.reachable
            )
        else:
            how = await self._move_by_redis(decision, old, new, old_view, new_view)
        if how is None:  # waiting for the target to catch up
            return
        self._waiting_since = None
        epoch = await bump_epoch(self._clients[new], self.state.epoch)
        self.state.writer, self.state.epoch = new_region, epoch
        self.state.writer_node = None if new == new_region else new
        self.state.promoted_in_region_at = None
        self.state.moved_at = self._clock()
        self._library_on = None
        if self.damping is not None:
            self.state.damping = self.state.damping.record_move(self.damping, self._clock())
        if decision.move == "fail-over":
            self.state.failovers += 1
        else:
            self.state.failbacks += 1
        self._event(
            decision.move, f"writer {old} -> {new} by {how}; epoch {epoch}; {decision.reason}"
        )
        await self._observe()

    async def _move_by_redis(
        self,
        decision: Decision,
        old: str,
        new: str,
        old_view: ReplicationStatus,
        new_view: ReplicationStatus,
    ) -> str | None:
        """Move the writer from node `old` to node `new` with Redis's commands: how it
        moved, or None while waiting."""
        target = self.topology[new]
        source = self.topology[old]
        # Both sides must agree the target follows the writer: the writer's view of its
        # replica lags the replica's own, and FAILOVER TO refuses a replica not online.
        linked = (
            new_view.role == "replica"
            and new_view.link == "up"
            and new_view.master == f"{source.address}:{source.port}"
            and (
                old_view.replica_online_at(f"{target.address}:{target.port}")
                or not old_view.reachable
            )
        )
        now = self._clock()
        waited = now - self._waiting_since if self._waiting_since is not None else 0.0
        patience = max(5.0, 10 * self.config.timing.canary_interval)
        if (
            old_view.reachable
            and old_view.role == "master"
            and (linked or not decision.urgent or waited < patience)
        ):
            # The writer is alive: hand over without losing an acknowledged write, or
            # wait until the target follows it and has caught up (reconcile makes it
            # follow). An urgent move waits only so long.
            if not linked:
                if self._waiting_since is None:
                    self._waiting_since = now
                    self._event(
                        "wait",
                        f"moving the writer to {new} once its Redis has caught up with {old}",
                    )
                return None
            timeout = max(2.0, 10 * self.config.timing.canary_interval)
            await self._may_act()
            await self.mover.hand_over(old, new, timeout=timeout)
            how = "coordinated FAILOVER (writes paused until the replica caught up)"
        else:
            # The writer is gone (or would not let go in time): promote; whatever it had
            # not replicated is lost (async mode) and counted when it is demoted.
            await self._may_act()
            await self.mover.promote(new)
            if not old_view.reachable:
                why = "unreachable"
            elif old_view.role != "master":
                why = "restarted without all its data"
            else:
                why = f"no handover within {patience:g} s"
            how = f"REPLICAOF NO ONE ({old} {why})"
        return how

    def _restart_candidates(self, writer: str) -> list[str]:
        """The other Redis servers that answer, as a restarted writer's stand-ins: its
        own region's first (no region move), then the other region's."""
        region = self.topology[writer].region
        found = [k for k, v in self.redis.items() if k != writer and v.reachable]
        return sorted(found, key=lambda k: self.topology[k].region != region)

    async def _writer_came_back(self, writer: str) -> bool:
        """The writer's Redis answers as a replica: restarted (fenced), or restored in a
        role it had once. Trust it again only if it holds everything another Redis holds.

        It is compared with every other Redis that answers (:func:`compare`: the epoch,
        and every room's changes both ways). Behind one that holds more (or back with no
        data at all), it is not trusted: the writer moves to that one (in its region if
        it can, else to the other region, a failover), what the restarted one held that
        the new writer lacks is counted in ``lost_writes``, and the event says
        ``dataset-lost`` or ``behind``. A restarted writer that came back with no data
        while no other Redis answers is held (a ``wait``), not promoted: when the others
        return it would be their source of a sync. Returns True when it did not promote
        the writer (moved, or waiting); False to promote it again."""
        assert self.state is not None
        w_client = self._clients[writer]
        seen: list[tuple[str, Comparison]] = []
        for key in self._restart_candidates(writer):
            found = await compare(w_client, self._clients[key])
            seen.append((key, found))
            if found.behind and await read_epoch(self._clients[key]) is not None:
                await self._replace_writer(writer, key, found)
                return True
        if await read_epoch(w_client) is not None:
            return False
        if not seen:
            self._event(
                "wait",
                f"{writer}'s Redis came back without its data and no other Redis answers: "
                "not promoted until one that holds the data does",
            )
            return True
        # Every Redis that answers lost its data too: this one is all there is.
        self.state.datasets_lost += 1
        self._event(
            "dataset-lost",
            f"{writer}'s Redis came back without its data, and so did "
            f"{', '.join(k for k, _ in seen)}: no Redis holds it; promoted as it is",
        )
        return False

    async def _replace_writer(self, writer: str, key: str, found: Comparison) -> None:
        """Move the writer from the restarted `writer` to `key`, which holds more."""
        assert self.state is not None
        kind = "dataset-lost" if found.lost else "behind"
        what = (
            f"came back without its data ({found.keys} keys, no epoch)"
            if found.lost
            else f"came back behind {key} ({found.lacks} room changes it lacks)"
        )
        self.state.datasets_lost += 1
        self.state.lost_writes += found.extra
        self._event(
            kind,
            f"{writer}'s Redis {what}: not trusted; the writer moves to {key}; "
            f"{found.extra} writes only it held are discarded",
        )
        region = self.topology[key].region
        reason = f"{writer}'s Redis {what}"
        if region == self.topology[writer].region:
            await self._promote_in_region(
                key, Decision("promote-in-region", region, reason, urgent=True)
            )
        else:
            move: Move = "fail-over" if region == self.config.secondary.name else "fail-back"
            await self._move(Decision(move, region, reason, urgent=True))

    async def _ensure_library(self, writer: str) -> None:
        """Make sure the writer's Redis has rideout's function library (7.0+; the app user
        may run nothing else): once per writer, again after every move. A Redis started
        from data older than the library (an upgrade), or set up by hand in external mode,
        gets it here before the app servers find it missing."""
        if self._library_on == writer:
            return
        await self._may_act()
        try:
            loaded = await ensure_library(self._clients[writer])
        except BusyLoadingError as exc:
            raise StillLoading(f"cannot load the function library on {writer}: {exc}") from exc
        except (RedisError, OSError) as exc:
            raise ReplicationError(
                f"cannot load rideout's function library on {writer}'s Redis: {exc}"
            ) from exc
        # The scripts fence on the epoch's copies: a writer whose data predates them (an
        # upgrade) gets them here (its scripts read the epoch itself meanwhile).
        await sync_epoch_copies(self._clients[writer])
        self._library_on = writer
        if loaded:
            self._event("library", f"loaded rideout's function library on {writer}'s Redis")

    async def _fence(self, writer: str, w_view: ReplicationStatus) -> None:
        """Make sure the writer's Redis holds the current epoch and the function library."""
        assert self.state is not None
        if w_view.reachable and w_view.role == "master":
            await self._ensure_library(writer)
        if w_view.reachable:
            w_client = self._clients[writer]
            epoch = await read_epoch(w_client)
            if epoch is None or epoch < self.state.epoch:
                await self._may_act()
                await bump_epoch(w_client, self.state.epoch - 1)
                self._event(
                    "epoch", f"{writer}'s Redis had epoch {epoch}: set to {self.state.epoch}"
                )

    async def _reconcile(self) -> None:
        """Make the writer's Redis a master and every other Redis follow its place in
        the topology (:func:`~rideout.failover.topology.desired_masters`)."""
        assert self.state is not None
        writer = self.writer_node
        w_view = self.redis[writer]
        w_client = self._clients[writer]
        if self.managed is not None:
            # The managed service keeps the replicas (and refuses REPLICAOF): only fence.
            await self._fence(writer, w_view)
            return
        if w_view.reachable and w_view.role == "replica":
            if await self._writer_came_back(writer):
                return  # moved elsewhere (the next tick reconciles), or waiting
            await self._may_act()
            await promote(w_client)
            self._library_on = None
            self._event("promote", f"{writer}'s Redis came back as a replica: promoted again")
        await self._fence(writer, w_view)
        reachable = {k: v.reachable for k, v in self.redis.items()}
        wanted = desired_masters(writer, self.topology, reachable)
        for name, view in self.redis.items():
            if name == writer or not view.reachable:
                continue
            master = self.topology[wanted[name]]
            fenced = is_fenced(view, self.topology[name].endpoint)
            if view.role == "master" or fenced:
                # A stale writer, or a restarted Redis (fenced): what it holds that the
                # writer lacks is discarded when it follows, so it is counted first.
                await self._may_act()
                lost = (
                    await count_unreplicated(self._clients[name], w_client)
                    if w_view.reachable
                    else 0
                )
                await follow(self._clients[name], master.address, master.port)
                self.state.lost_writes += lost
                stale = view.role == "master"
                what = "was a stale writer" if stale else "restarted (fenced)"
                self._event(
                    "demote" if stale else "follow",
                    f"{name}'s Redis {what}: now a replica of {master.key}; "
                    f"{lost} writes it held that never reached {writer} were discarded",
                )
            elif view.master != master.endpoint:
                await self._may_act()
                await follow(self._clients[name], master.address, master.port)
                self._event(
                    "follow", f"{name}'s Redis followed {view.master}: now follows {master.key}"
                )
