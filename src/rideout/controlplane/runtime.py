"""The control plane's loop: canary datapoints → alarms → health checks → the writer → DNS.

Every period it evaluates each region's canary alarm (CloudWatch semantics,
``TreatMissingData: breaching``: a region whose canary went silent is failing), feeds
the alarm state to the region's health check (Route 53 ``CLOUDWATCH_METRIC`` semantics,
``InsufficientDataHealthStatus: LastKnownStatus``), lets the failover controller move
the writer, and answers DNS from the controller's view (or, given a ``dns_feed``,
publishes that view to a DNS server in another process: see :mod:`rideout.dns.feed`).
After a failback it drains the old writer's zones gradually
(:mod:`~rideout.controlplane.drain`), so that the clients still there move to the
primary too, at a rate it can take.

Restarts: alarm, health check and controller state (with its failback damping) are saved to
``DATA_DIR/controlplane/state.json`` on every change and restored at start. With
``[control_plane] state_redis_url`` (external mode) they are saved in that Redis instead,
under a lease (:mod:`~rideout.controlplane.lease`): only the instance holding it
evaluates, acts and saves; the others stand by, reload the saved state every round
(so their ``/v1/writer`` and DNS views stay current) and take over when it lapses. Datapoints
are in memory only, so a restarted control plane does not evaluate the periods before
it was listening (nor, per region, before that region's first datapoint since the start,
up to a grace period after the first datapoint of any region): the silence of its own
absence, or of canaries still starting, is not a region's failure, and DNS does not flip
for lack of data.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from rideout import routes
from rideout._files import replace_atomically
from rideout._tasks import Supervised, TaskSupervisor
from rideout.config import Config, Timing
from rideout.controlplane.autoshift import Autoshift
from rideout.controlplane.drain import FailbackDrain
from rideout.controlplane.errors import IngestError, IngestForbidden
from rideout.controlplane.lease import (
    LeaseError,
    RedisLease,
    default_instance,
    describe_holder,
    state_redis_client,
)
from rideout.controlplane.metrics import PlaneMetrics
from rideout.controlplane.zones import ZoneState
from rideout.dns.feed import DnsView, ViewPublisher
from rideout.dns.records import (
    Answer,
    DnsZoneConfig,
    Resolution,
    bump_serial,
    failover_answer,
    resolve,
)
from rideout.dns.server import DnsMetrics, DnsServer
from rideout.failover.controller import ControllerState, FailoverController
from rideout.failover.mover import ManagedWriter
from rideout.health.alarm import Alarm, canary_alarm
from rideout.health.check import HealthCheck, HealthCheckState
from rideout.health.metrics import MetricError, MetricKey, MetricStore
from rideout.health.names import (
    BUSY_METRIC_NAME,
    FULL_METRIC_NAME,
    METRIC_NAME,
    NAMESPACE,
    REGION_DIMENSION,
    ZONE_DIMENSION,
)
from rideout.store.client import check_cancelled

__all__ = ["ControlPlane", "IngestError", "evaluation_offset", "state_path"]

log = logging.getLogger("rideout.controlplane")

STATE_FILE = "state.json"
# Seconds after which an unchanged DNS view is published again, so that the DNS
# process's view age (rideout_dns_view_age_seconds) tells a stale view from a quiet one.
VIEW_REPUBLISH = 5.0


def evaluation_offset(timing: Timing) -> float:
    """Seconds after a period boundary at which a round evaluates the period that just
    ended: once its canary datapoints are in (each canary round starts a quarter into
    the period and its probes take at most ``canary_timeout``, and a busy zone's late
    answer ``canary_busy_grace`` more), plus a tenth of a period for the post. 0.125 s in
    the fast profile, 6 s in seed."""
    period = timing.canary_interval
    probes = timing.canary_timeout + timing.canary_busy_grace
    return max(0.0, 0.25 * period + probes - period) + 0.1 * period


def state_path(config: Config) -> Path:
    """Where a deployment's control plane keeps its state."""
    return config.data_dir / "controlplane" / STATE_FILE


class ControlPlane:
    """Alarms, health checks, failover controller and DNS for one deployment."""

    def __init__(
        self,
        config: Config,
        *,
        clock: Callable[[], float] = time.time,
        dns_feed: ViewPublisher | None = None,
        managed: ManagedWriter | None = None,
        lease: RedisLease | None = None,
        instance: str | None = None,
        dns_address: tuple[str, int] | None = None,
    ) -> None:
        """`lease` (default: one in ``[control_plane] state_redis_url``, when set, named
        `instance`) makes this one of several instances; see the module docstring.
        `dns_address` is where DNS is served (default: ``address:dns_port``)."""
        self.config = config
        cp = config.control_plane
        if lease is None and cp.state_redis_url:
            lease = RedisLease(
                state_redis_client(config), instance or default_instance(), cp.lease_ttl
            )
        self.lease = lease
        self._dirty = False
        self.dns_feed = dns_feed
        self._published: DnsView | None = None
        self._clock = clock
        timing = config.timing
        self.period = timing.canary_interval
        self.store = MetricStore(retention=max(600.0, 50 * self.period))
        self.alarms = {
            r.name: Alarm(
                canary_alarm(
                    r.name, self.period,
                    failover_datapoints=timing.failover_datapoints,
                    failback_datapoints=timing.failback_datapoints,
                )
            )
            for r in config.regions
        }  # fmt: skip
        self.checks = {
            name: HealthCheckState(HealthCheck(name, alarm.config.name, "LastKnownStatus"))
            for name, alarm in self.alarms.items()
        }
        self.state_file = state_path(config)
        self.zones = ZoneState(config, clock=clock)
        self._zone_drains: dict[str, FailbackDrain] = {}
        restored = self._load() if lease is None else None
        self.controller = FailoverController(
            config, state=restored, clock=clock, on_change=self._controller_changed,
            managed=managed, guard=lease.may_act if lease is not None else None,
            drain_ends=lambda: self.drain.ends_at(),
        )  # fmt: skip
        self.registry = CollectorRegistry()
        # The control loop, the lease's renewal, the drains and the dashboard's feed run
        # supervised (rideout._tasks); /health is red while the loop or the lease's
        # renewal is down (the control plane decides nothing, or loses its lease).
        self.tasks = TaskSupervisor(registry=self.registry)
        self.drain = FailbackDrain(
            config, clock=clock, strained=self._strained, tasks=self.tasks, name="drain"
        )
        self.autoshift = Autoshift(self) if config.evacuate.autoshift else None
        self.zone = DnsZoneConfig.from_config(config)
        self.dns_metrics = DnsMetrics(self.registry)
        dns_host, dns_port = dns_address or (cp.address, cp.dns_port)
        self.dns = DnsServer(
            self.resolve,
            dns_host,
            dns_port,
            metrics=self.dns_metrics,
            generation=self.dns_generation,
            warm=self.zone.questions(),
        )
        self._serial = 1
        self._answer: Answer | None = None
        self.started_at = clock()
        self._first_seen: dict[str, float] = {}
        self._task: Supervised | None = None
        self._one_round = asyncio.Lock()
        self._renewing: Supervised | None = None
        self.rounds = 0  # evaluation rounds the loop has run
        self.metrics = PlaneMetrics(self.registry)
        self.metrics.update_zones(self.zones)
        self.ingested = self.metrics.ingested

    # ------------------------------------------------------------------ state

    def _load(self) -> ControllerState | None:
        try:
            data = json.loads(self.state_file.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            log.warning(
                "cannot read %s (%s): starting without remembered state", self.state_file, exc
            )
            return None
        state = self._restore(data, str(self.state_file))
        if state is not None:
            log.info("restored state from %s (writer %s)", self.state_file, state.writer)
        return state

    def _restore(self, data: Any, where: str) -> ControllerState | None:
        """Take alarms and health checks from saved `data`; its controller state."""
        try:
            for name, saved in data.get("alarms", {}).items():
                if name in self.alarms:
                    self.alarms[name] = Alarm.from_dict(saved, config=self.alarms[name].config)
            for name, saved in data.get("checks", {}).items():
                if name in self.checks:
                    self.checks[name] = HealthCheckState.from_dict(
                        saved, check=self.checks[name].check
                    )
            controller = data.get("controller")
            state = ControllerState.from_dict(controller) if controller else None
            self.zones.restore(data.get("zones", {}))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            log.warning("%s is damaged (%s): starting without remembered state", where, exc)
            return None
        if state is not None and state.writer not in self.alarms:
            return None
        return state

    def _snapshot(self) -> dict[str, Any]:
        return {
            "alarms": {name: a.to_dict() for name, a in self.alarms.items()},
            "checks": {name: c.to_dict() for name, c in self.checks.items()},
            "controller": self.controller.state.to_dict() if self.controller.state else None,
            "zones": self.zones.to_dict(),
        }

    def save(self) -> None:
        """Write the state atomically (a reader never sees half a file); with a lease,
        mark it for the next :meth:`flush` instead."""
        if self.lease is not None:
            self._dirty = True
            return
        data = self._snapshot()
        self.state_file.parent.mkdir(parents=True, exist_ok=True)
        replace_atomically(self.state_file, json.dumps(data).encode("utf-8"))

    async def flush(self) -> None:
        """With a lease: write the state to its Redis if it changed (only the holder's
        write lands; a standby's is refused by the lease script)."""
        if self.lease is None or not self._dirty:
            return
        try:
            if await self.lease.save_state(json.dumps(self._snapshot())):
                self._dirty = False
            else:
                log.warning("state not saved: %s", describe_holder(self.lease.view))
        except LeaseError as exc:
            log.warning("%s (tried again next round)", exc)

    async def reload(self) -> bool:
        """With a lease: take the state the holder saved last; whether there was one."""
        if self.lease is None:
            return False
        try:
            text = await self.lease.load_state()
        except LeaseError as exc:
            log.warning("%s", exc)
            return False
        if text is None:
            return False
        try:
            data = json.loads(text)
        except ValueError as exc:
            log.warning("the saved state is damaged (%s): ignored", exc)
            return False
        state = self._restore(data, "the saved state")
        if state is not None:
            self.controller.state = state
        return True

    @property
    def running(self) -> bool:
        """Whether the control loop runs (started, not stopped; a loop that died and
        awaits its restart still counts: /health says so)."""
        return self._task is not None and not self._task.done()

    @property
    def active(self) -> bool:
        """Whether this instance acts: no lease (the only one), or it holds the lease."""
        return self.lease is None or self.lease.view.mine

    def readiness(self) -> tuple[bool, dict[str, Any]]:
        """(ready, body) for ``/ready``: running its loop and acting, or why not."""
        body: dict[str, Any] = {"rounds": self.rounds}
        if self.lease is not None:
            body["lease"] = self.lease.view.to_dict()
        if not self.running:
            return False, {
                **body,
                "status": "stopped",
                "message": "the control loop is not running",
            }
        if self.lease is not None and not self.lease.view.mine:
            return False, {**body, "status": "standby", "message": describe_holder(self.lease.view)}
        return True, {**body, "status": "active"}

    # ------------------------------------------------------------------ ingest

    def put_metric_data(self, body: object, *, region: str | None = None) -> int:
        """Store a PutMetricData-shaped request; the number of datapoints stored.

        With `region` (the region the request's credential is for), every datapoint must
        name that region in its ``ApiId`` dimension, or :class:`IngestForbidden` is raised
        and nothing is stored.
        """
        if not isinstance(body, Mapping):
            raise IngestError("expected a JSON object with Namespace and MetricData")
        namespace, data = body.get("Namespace"), body.get("MetricData")
        if not isinstance(namespace, str) or not isinstance(data, list) or not data:
            raise IngestError("Namespace must be a string and MetricData a non-empty list")
        if len(data) > 1000:
            raise IngestError("at most 1000 datapoints per request")
        if region is not None:
            _check_region(data, region)
        now = self._clock()
        stored = 0
        fullness = False  # whether a zone's fullness changed
        for i, datum in enumerate(data):
            try:
                name = datum["MetricName"]
                dimensions = {d["Name"]: d["Value"] for d in datum.get("Dimensions", [])}
                key = MetricKey.of(namespace, name, dimensions)
                timestamp = datum.get("Timestamp", now)
                stored += self.store.put(key, datum["Value"], timestamp, now=now)
            except (KeyError, TypeError, AttributeError) as exc:
                raise IngestError(f"MetricData[{i}]: missing or malformed {exc}") from None
            except MetricError as exc:
                raise IngestError(f"MetricData[{i}]: {exc}") from None
            if namespace == NAMESPACE and name == METRIC_NAME:
                region = dimensions.get(REGION_DIMENSION)
                if isinstance(region, str) and region in self.alarms:
                    self._first_seen.setdefault(region, float(timestamp))
                    zone = str(dimensions.get(ZONE_DIMENSION, ""))
                    self.metrics.canary.labels(region, zone).set(float(datum["Value"]))
                    self.metrics.canary_seen.labels(region, zone).set(float(timestamp))
            elif namespace == NAMESPACE and name in (FULL_METRIC_NAME, BUSY_METRIC_NAME):
                zone = str(dimensions.get(ZONE_DIMENSION, ""))
                if self.zones.regions.get(zone) == dimensions.get(REGION_DIMENSION):
                    value = float(datum["Value"]) >= 0.5
                    if name == FULL_METRIC_NAME:
                        fullness |= self.zones.note("full", zone, value, float(timestamp))
                    elif self.zones.note("busy", zone, value, float(timestamp)):
                        busy = ", ".join(sorted(self.zones.busy())) or "none"
                        log.info("busy zones (shedding load, healthy): %s", busy)
                        self.metrics.update_zones(self.zones)
        if fullness:  # DNS prefers the region's zones with room: at once, not next round
            log.info("full zones: %s", ", ".join(sorted(self.zones.full())) or "none")
            self.metrics.update_zones(self.zones)
            self._refresh_answer()
        return stored

    # ------------------------------------------------------------------ evaluation

    def _grace(self) -> float:
        return max(5.0, 10 * self.period)

    def _may_evaluate(self, region: str, now: float) -> bool:
        """Only periods this control plane has watched, once the region has reported
        (or, for a region that never does, once the grace period is over since the first
        datapoint of any region: canaries start after the servers, which a loaded machine
        can take longer than the grace period to start)."""
        start, _ = self.alarms[region].window(now)
        watched = start >= self.started_at
        seen = self._first_seen.get(region)
        reported = seen is not None and start >= seen - self.period
        first = min(self._first_seen.values(), default=None)
        overdue = first is not None and now >= max(self.started_at, first) + self._grace()
        return watched and (reported or overdue)

    def now(self) -> float:
        """The control plane's clock."""
        return self._clock()

    def healthy(self) -> dict[str, bool]:
        return {name: check.healthy for name, check in self.checks.items()}

    async def _lease_round(self) -> bool:
        """Renew or take the lease; a standby reloads the saved state. Whether to act."""
        assert self.lease is not None
        was = self.lease.view.mine
        view = await self.lease.tick()
        if view.mine and not was:
            await self.reload()  # the last holder's state, before acting on it
        elif not view.mine:
            if view.error is None:  # an unreachable store is said once, by the lease
                await self.reload()
            self._refresh_answer()
            self.metrics.update(self)
        return view.mine

    async def evaluate(self) -> None:
        """One round: alarms, health checks, the controller, the DNS answer (with a
        lease, only while holding it; a standby follows the saved state).

        One round at a time, whoever asks: two at once would both act on the same view
        (two ``FAILOVER`` commands for one move, the second refused "already in
        progress" and recorded as an error while the first completes)."""
        async with self._one_round:
            await self._evaluate()

    async def _evaluate(self) -> None:
        now = self._clock()
        self.store.prune(now)
        if self.lease is not None and not await self._lease_round():
            return
        changed = False
        if self.autoshift is not None:
            # Before the alarms: a zone shifted now is out of its region's alarm already.
            try:
                await self.autoshift.round(now, lambda region: self._may_evaluate(region, now))
            except Exception:  # autoshift failing must not stop failover
                log.exception("autoshift round failed")
        for name, alarm in self.alarms.items():
            if not self._may_evaluate(name, now):
                continue
            # An evacuated zone serves no one: its canary no longer speaks for the region.
            change = alarm.evaluate(now, self.store, exclude=self._excluded())
            if change is not None:
                changed = True
                log.info(
                    "alarm %s: %s -> %s (%s)",
                    alarm.config.name,
                    change.old,
                    change.new,
                    change.reason,
                )
            before = self.checks[name].healthy
            if self.checks[name].observe(alarm.state, now) != before:
                changed = True
                log.info(
                    "health check %s: %s",
                    name,
                    "healthy" if self.checks[name].healthy else "UNHEALTHY",
                )
        writer = self._writer_region()
        await self.controller.tick(
            self.healthy(), {name: alarm.recovering for name, alarm in self.alarms.items()}
        )
        self._refresh_answer()
        self._after_moves(writer)
        if changed:
            self.save()
        await self.flush()
        self.metrics.update(self)

    def _controller_changed(self, _state: object) -> None:
        """Each step the controller records: keep it, and let DNS follow a moved writer at
        once. The round goes on after a move (it reads every Redis again, and a frozen
        one costs its timeout), and DNS waiting for the round's end answered the old
        region for that second more."""
        self.save()
        self._refresh_answer()

    def _excluded(self) -> dict[str, frozenset[str]] | None:
        evacuated = self.zones.evacuated
        return {ZONE_DIMENSION: evacuated} if evacuated else None

    def _writer_region(self) -> str | None:
        state = self.controller.state
        return state.writer if state else None

    def _after_moves(self, before: str | None) -> None:
        """When the writer has left a region (a failover, or a failback away from the
        secondary), drain that region's zones gradually: its clients' writes are refused
        there, and DNS (already moved) sends them to the writer. Starting it ends a
        drain of the region taking over, which then serves at once. External mode's
        zones do the same for themselves (``_leave_with_the_writer``)."""
        after = self._writer_region()
        if before is not None and after is not None and after != before:
            self.drain.start(before, toward=after)

    def _strained(self, region: str) -> bool:
        """Whether `region`'s latest datapoint breaches its alarm (a probe failed): the
        first sign that the clients a drain sends it are too many, a period or more
        before the alarm could fire."""
        alarm = self.alarms.get(region)
        if alarm is None:
            return False
        points = alarm.datapoints(self._clock(), self.store, exclude=self._excluded())
        latest = next((p for p in reversed(points) if p is not None), None)
        return latest is not None and alarm.config.breaches(latest)

    def _refresh_answer(self) -> Answer:
        answer = failover_answer(
            self.zone,
            self.controller.dns_health(self.healthy()),
            self.zones.evacuated,
            self.zones.full(),
        )
        if self._answer is None or (answer.region, answer.addresses) != (
            self._answer.region,
            self._answer.addresses,
        ):
            if self._answer is not None:
                log.info("DNS %s now answers %s %s (%s)", self.zone.app_domain, answer.region,
                         ",".join(answer.addresses), answer.reason)  # fmt: skip
            self._serial = bump_serial(self._serial, self._answer, answer)
            self._answer = answer
        self._publish()
        return answer

    def _publish(self) -> None:
        """Hand the DNS view to the DNS server of another process, when it changed."""
        if self.dns_feed is None:
            return
        health = self.controller.dns_health(self.healthy())
        view = DnsView(
            self.zone.app_domain,
            health,
            self._serial,
            self._clock(),
            self.zones.evacuated,
            self.zones.full(),
        )
        last = self._published
        if (
            last is not None
            and view.same_decision(last)
            and view.serial == last.serial
            and view.published_at - last.published_at < VIEW_REPUBLISH
        ):
            return
        try:
            self.dns_feed.publish(view)
        except OSError as exc:  # tried again next round; DNS keeps the last view meanwhile
            log.warning("cannot publish the DNS view: %s", exc)
            return
        self._published = view

    def dns_generation(self) -> object:
        """What the DNS answers depend on (the routing health and the serial): the DNS
        server's and DoH's precomputed answers are rebuilt when it changes."""
        return (self._serial, tuple(sorted(self.controller.dns_health(self.healthy()).items())))

    def resolve(self, qname: str, qtype: str) -> Resolution:
        """The DNS server's (and DoH endpoint's) resolver: answers from the current view."""
        return resolve(
            self.zone,
            qname,
            qtype,
            self.controller.dns_health(self.healthy()),
            self.zones.evacuated,
            serial=self._serial,
            full=self.zones.full(),
        )

    # ------------------------------------------------------------------ zones

    async def evacuate_zone(
        self,
        zone: str,
        *,
        operator: str,
        reason: str = "manual",
        expires_in: float | None = None,
    ) -> dict[str, Any]:
        """Stop answering ``zone``'s address in DNS and drain its clients to the region's
        other zones (ZoneRefused: an unknown zone, or the region's last serving one)."""
        evacuation, new = self.zones.evacuate(
            zone, operator=operator, reason=reason, expires_in=expires_in
        )
        self.save()
        self._refresh_answer()
        self.metrics.update_zones(self.zones)
        if new:
            log.info(
                "zone %s of %s evacuated by %s (%s)", zone, evacuation.region, operator, reason
            )
            drain = self._zone_drains.get(zone)
            if drain is None:
                drain = FailbackDrain(
                    self.config,
                    clock=self._clock,
                    spread=self.config.evacuate.drain_seconds,
                    destination=f"{evacuation.region}'s other zones",
                    tasks=self.tasks,
                    name=f"drain-{zone}",
                )
                self._zone_drains[zone] = drain
            # Caches that still hold the zone's address expire within a TTL: drain after.
            drain.start(evacuation.region, zones=[zone], delay=float(self.config.timing.dns_ttl))
        return self._zone_view(zone)

    async def recover_zone(self, zone: str) -> dict[str, Any]:
        """Answer ``zone``'s address in DNS again (ZoneRefused: an unknown zone)."""
        ended = self.zones.recover(zone)
        if ended is not None:
            drain = self._zone_drains.get(zone)
            if drain is not None:
                drain.cancel()
            self.save()
            self._refresh_answer()
            self.metrics.update_zones(self.zones)
            log.info("zone %s of %s recovered", zone, ended.region)
        return self._zone_view(zone)

    def _zone_view(self, zone: str) -> dict[str, Any]:
        view = next(z for z in self.zones.status() if z["zone"] == zone)
        drain = self._zone_drains.get(zone)
        return {**view, "drain": drain.status() if drain is not None else None}

    def zones_status(self) -> list[dict[str, Any]]:
        """Every zone, evacuated or not, with its drain."""
        return [self._zone_view(z["zone"]) for z in self.zones.status()]

    # ------------------------------------------------------------------ running

    async def start(self) -> None:
        if self.lease is not None:
            await self._lease_round()
        if self.dns_feed is None:
            await self.dns.start()
        else:
            self._refresh_answer()  # the restored decision, before the first round
        self._task = self.tasks.spawn("control-loop", self._run)
        if self.lease is not None:
            self._renewing = self.tasks.spawn("lease", self._keep_lease)

    async def _keep_lease(self) -> None:
        """Renew a held lease every third of its TTL, however long a round is (the seed
        profile's rounds are a minute apart, longer than a lease lasts)."""
        assert self.lease is not None
        while True:
            check_cancelled()
            await asyncio.sleep(self.lease.ttl / 3)
            if self.lease.view.mine:
                await self.lease.tick()

    async def stop(self) -> None:
        if self._renewing is not None:
            await self._renewing.stop()
            self._renewing = None
        if self._task is not None:
            await self._task.stop()
            self._task = None
        await self.drain.stop()
        for drain in self._zone_drains.values():
            await drain.stop()
        await self.dns.stop()
        await self.controller.close()
        if self.lease is not None:
            if self.lease.view.mine:
                self._dirty = True
                await self.flush()
            await self.lease.release()
            await self.lease.client.aclose()
            return
        with contextlib.suppress(OSError):
            self.save()

    async def _run(self) -> None:
        """A round now, then one just after every period boundary (see
        :func:`evaluation_offset`): a round at a random phase of the period would judge
        each period up to a whole period late (0.25 s on average in the fast profile)."""
        offset = evaluation_offset(self.config.timing)
        next_round = self._clock()
        while True:
            check_cancelled()
            self.metrics.round_delay.set(max(0.0, self._clock() - next_round))
            try:
                await self.evaluate()
            except Exception:  # one bad round must not stop failover for good
                log.exception("control plane evaluation failed")
            self.rounds += 1
            self.metrics.rounds.inc()
            now = self._clock()
            next_round = (math.floor((now - offset) / self.period) + 1) * self.period + offset
            await asyncio.sleep(max(0.0, next_round - now))

    # ------------------------------------------------------------------ views

    def summary(self) -> dict[str, Any]:
        """Alarms, health checks, the DNS answer and the writer: what operators watch."""
        answer = self._answer or self._refresh_answer()
        cp = self.config.control_plane
        return {
            "alarms": {
                name: {
                    "name": a.config.name,
                    "state": a.state,
                    "reason": a.state_reason,
                    # In ALARM only by the recovery threshold, its newest datapoint good.
                    "recovering": a.recovering,
                    "evaluation": a.last_evaluation.reason if a.last_evaluation else None,
                    "history": [c.to_dict() for c in a.history][-10:],
                }
                for name, a in self.alarms.items()
            },
            "health_checks": {name: c.healthy for name, c in self.checks.items()},
            "dns": {
                "server": f"{cp.address}:{cp.dns_port}",
                "doh": routes.control_plane_url(self.config, routes.RESOLVE),
                "name": self.zone.app_domain,
                "region": answer.region,
                "addresses": list(answer.addresses),
                "ttl": answer.ttl,
                "reason": answer.reason,
                "serial": self._serial,
            },
            "failover": {**self.controller.status(), "drain": self.drain.status()},
            "zones": self.zones.status(),
            "autoshift": self.autoshift.status() if self.autoshift else {"enabled": False},
            **({"lease": self.lease.view.to_dict()} if self.lease is not None else {}),
        }

    def canary_history(self, seconds: float = 60.0) -> dict[str, list[tuple[float, float]]]:
        """Each region's canary datapoints (per zone merged) over the last `seconds`."""
        now = self._clock()
        return {
            name: self.store.datapoints_matching(
                NAMESPACE, METRIC_NAME, {REGION_DIMENSION: name}, now - seconds, now + 1
            )
            for name in self.alarms
        }


def _check_region(data: list[Any], region: str) -> None:
    """Every datapoint names `region` in its region dimension (else IngestForbidden)."""
    for i, datum in enumerate(data):
        try:
            named = [
                d["Value"] for d in datum.get("Dimensions", []) if d["Name"] == REGION_DIMENSION
            ]
        except (KeyError, TypeError, AttributeError):
            raise IngestError(f"MetricData[{i}]: malformed Dimensions") from None
        if named != [region]:
            raise IngestForbidden(
                f"MetricData[{i}]: every datapoint must have the dimension "
                f"{REGION_DIMENSION}={region}, the region this credential is for"
            )
