"""The control plane's own metrics on ``/metrics``: alarms, health checks, the writer and
its epoch, what was lost, the canaries' datapoints, zones, damping, the drain and the
lease. Declared once here; the plane updates them each round (:meth:`PlaneMetrics.update`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge

from rideout.controlplane.drain import FailbackDrain
from rideout.controlplane.lease import RedisLease
from rideout.controlplane.zones import ZoneState
from rideout.failover.controller import FailoverController
from rideout.health.alarm import Alarm
from rideout.health.check import HealthCheckState

__all__ = ["ALARM_STATES", "PlaneMetrics"]

ALARM_STATES = ("OK", "ALARM", "INSUFFICIENT_DATA")


class Plane(Protocol):
    """What the metrics read of the control plane."""

    @property
    def alarms(self) -> Mapping[str, Alarm]: ...

    @property
    def checks(self) -> Mapping[str, HealthCheckState]: ...

    @property
    def controller(self) -> FailoverController: ...

    @property
    def drain(self) -> FailbackDrain: ...

    @property
    def lease(self) -> RedisLease | None: ...

    @property
    def active(self) -> bool: ...


class PlaneMetrics:
    """The control plane's gauges and counters, registered in one registry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self._alarm_state = Gauge(
            "rideout_alarm_state",
            "1 for each alarm's current state.",
            ["alarm", "state"],
            registry=r,
        )
        self._alarm_recovering = Gauge(
            "rideout_alarm_recovering",
            "1 while an alarm is in ALARM only by its recovery threshold (failback "
            "datapoints), its newest datapoint good.",
            ["alarm"],
            registry=r,
        )
        self._healthy = Gauge(
            "rideout_region_healthy",
            "1 while a region's health check is healthy.",
            ["region"],
            registry=r,
        )
        self._writer = Gauge(
            "rideout_writer", "1 for the region whose Redis is the writer.", ["region"], registry=r
        )
        self._epoch = Gauge("rideout_writer_epoch", "The writer's epoch.", registry=r)
        self._lost = Gauge(
            "rideout_lost_writes",
            "Writes discarded when stale writers, or restarted Redis servers, were made to follow.",
            registry=r,
        )
        self._datasets_lost = Gauge(
            "rideout_redis_datasets_lost",
            "Redis restarts that came back without all their data (not trusted).",
            registry=r,
        )
        self._moves = Gauge(
            "rideout_writer_moves",
            "Writer moves since the state began, by kind.",
            ["kind"],
            registry=r,
        )
        self._lag_bytes = Gauge(
            "rideout_replication_lag_bytes", "Writer offset minus its replica's.", registry=r
        )
        self._lag_seconds = Gauge(
            "rideout_replication_lag_seconds",
            "Seconds since the replica last acknowledged.",
            registry=r,
        )
        self.ingested = Counter(
            "rideout_datapoints", "Datapoints received from canaries.", registry=r
        )
        self.rounds = Counter(
            "rideout_evaluation_rounds", "Evaluation rounds run by the control loop.", registry=r
        )
        self.round_delay = Gauge(
            "rideout_evaluation_delay_seconds",
            "How late the latest evaluation round started against its schedule.",
            registry=r,
        )
        self.canary = Gauge(
            "rideout_canary_health", "The latest App/WebSocketHealth datapoint (1 healthy, 0 not).",
            ["region", "zone"], registry=r,
        )  # fmt: skip
        self.canary_seen = Gauge(
            "rideout_canary_timestamp_seconds", "Time of the latest canary datapoint.",
            ["region", "zone"], registry=r,
        )  # fmt: skip
        self._zone_evacuated = Gauge(
            "rideout_zone_evacuated", "1 while a zone is evacuated (out of DNS, drained).",
            ["region", "zone"], registry=r,
        )  # fmt: skip
        self._zone_full = Gauge(
            "rideout_zone_full",
            "1 while a zone is at its connection cap (healthy; DNS prefers zones with room).",
            ["region", "zone"], registry=r,
        )  # fmt: skip
        self._zone_busy = Gauge(
            "rideout_zone_busy",
            "1 while a zone says it is shedding load (healthy: busy is not down).",
            ["region", "zone"], registry=r,
        )  # fmt: skip
        self._damping_metrics(r)

    def update_zones(self, zones: ZoneState) -> None:
        """Each zone's evacuated, full and busy gauges."""
        evacuated, full, busy = zones.evacuated, zones.full(), zones.busy()
        for zone, region in zones.regions.items():
            self._zone_evacuated.labels(region, zone).set(1 if zone in evacuated else 0)
            self._zone_full.labels(region, zone).set(1 if zone in full else 0)
            self._zone_busy.labels(region, zone).set(1 if zone in busy else 0)

    def _damping_metrics(self, r: CollectorRegistry) -> None:
        self._damping_penalty = Gauge(
            "rideout_failover_damping_penalty",
            "Failback damping's figure of merit: recent writer moves, decayed.",
            registry=r,
        )
        self._failback_hold = Gauge(
            "rideout_failback_hold_seconds",
            "Seconds a failback is still held by flap damping (0: not held).",
            registry=r,
        )
        self._move_grace = Gauge(
            "rideout_move_grace_seconds",
            "Seconds left in which a failing writer region whose Redis answers keeps the "
            "writer after the latest move, failover or failback (the clients sent to it "
            "are arriving).",
            registry=r,
        )
        self._drain_active = Gauge(
            "rideout_failback_drain_active",
            "1 while the control plane drains the zones of the region the writer left "
            "(after a failback, or a failover from a region that still serves).",
            registry=r,
        )
        self._lease_held = Gauge(
            "rideout_control_plane_lease_held",
            "1 while this instance holds the lease and acts (always 1 without a lease).",
            registry=r,
        )
        self._lease_fence = Gauge(
            "rideout_control_plane_lease_fence",
            "The fencing number of the lease as last seen (0: no lease, or unknown).",
            registry=r,
        )

    def update(self, plane: Plane) -> None:
        """Every gauge from the plane's alarms, checks, controller, drain and lease."""
        for name, alarm in plane.alarms.items():
            for state in ALARM_STATES:
                self._alarm_state.labels(alarm.config.name, state).set(
                    1 if alarm.state == state else 0
                )
            self._alarm_recovering.labels(alarm.config.name).set(1 if alarm.recovering else 0)
            self._healthy.labels(name).set(1 if plane.checks[name].healthy else 0)
            self._writer.labels(name).set(1 if plane.controller.writer == name else 0)
        status = plane.controller.status()
        if status["epoch"] is not None:
            self._epoch.set(status["epoch"])
        self._lost.set(status["lost_writes"])
        self._datasets_lost.set(status["datasets_lost"])
        self._moves.labels("fail-over").set(status["failovers"])
        self._moves.labels("fail-back").set(status["failbacks"])
        if status["lag_bytes"] is not None:
            self._lag_bytes.set(status["lag_bytes"])
        if status["lag_seconds"] is not None:
            self._lag_seconds.set(status["lag_seconds"])
        damping = status["damping"] or {}
        self._damping_penalty.set(damping.get("penalty", 0.0))
        self._failback_hold.set(damping.get("hold_seconds", 0.0))
        self._move_grace.set(status["move_grace_seconds"])
        self._drain_active.set(1 if plane.drain.running else 0)
        self._lease_held.set(1 if plane.active else 0)
        lease = plane.lease
        self._lease_fence.set(lease.view.fence or 0 if lease is not None else 0)
