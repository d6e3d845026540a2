"""The dashboard's panels beyond the failover loop: the zones, the evacuation ledger and
the waiting rooms, and its zone buttons (issue #33).

Everything here is computed in the shared feed (:mod:`.shared`): at most once per
period, only while someone watches, whatever the number of readers. Per period that is

- **zones**: nothing read: the control plane's own zone state (evacuated by whom and
  why, full, the drain) and each zone's latest canary datapoint from its metric store;
- **ledger**: one read of the ledger this control plane's evacuations are recorded in
  (``DATA_DIR/evacuations.sqlite3``: autoshift's, practice runs', ``rideout evacuate
  --provider local``'s, the buttons'), one ``SELECT`` in a worker thread; a missing file
  is read as empty and never created; with ``[evacuate_aws] dashboard = true`` also the
  DynamoDB ledger ``rideout evacuate --provider aws`` records in (:class:`AwsLedger`, one
  ``Scan`` in a worker thread; a missing table is empty and never created);
- **rooms**: the room's private API on one app server of the writer's region, as
  ``rideout room`` calls it (the admin token): one ``GET /private/events`` and one
  ``GET /private/events/{id}`` per event (at most :data:`MAX_ROOMS`), each answered
  from one read of the event's counters (the room's STATUS script). Admissions per
  minute come from the feed's own successive reads of the serving counter
  (:class:`AdmissionRates`); the estimated wait is the room's rule
  (:func:`rideout.waitingroom.model.estimated_wait`) for a new arrival at that rate.

The rooms and the ledger are read within the same bound as the zones' ``/health``
polls; a late read keeps the last view, marked with when it was read.
"""

from __future__ import annotations

import asyncio
import math
from collections import deque
from collections.abc import Container, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import httpx

from rideout import routes
from rideout.auth.admin import load_or_create_admin_token
from rideout.config import Config
from rideout.controlplane.autoshift import Plane, run_engine
from rideout.controlplane.zones import ZoneRefused
from rideout.errors import RideoutError
from rideout.evacuate.errors import EvacuationError
from rideout.evacuate.ledger import LEDGER_FILE, SqliteLedger
from rideout.evacuate.model import Ledger, Record
from rideout.health.names import METRIC_NAME, NAMESPACE, REGION_DIMENSION, ZONE_DIMENSION
from rideout.waitingroom.model import (
    ALARM,
    InletKind,
    InletSettings,
    alarm_state_in,
    estimated_wait,
    periodic_increment,
    serving_rate,
)

__all__ = [
    "ADMISSION_WINDOW",
    "MAX_LEDGER_ROWS",
    "MAX_ROOMS",
    "OPERATOR",
    "AdmissionRates",
    "AwsLedger",
    "DashboardPanels",
    "inlet_view",
    "ledger_row",
    "read_ledger",
    "room_view",
    "zone_verdict",
]

MAX_ROOMS: Final = 8
"""Events the rooms panel reads per period (by id); the rest are counted, not read."""
MAX_LEDGER_ROWS: Final = 50
"""Ledger rows the panel shows (the count says how many there are)."""
ADMISSION_WINDOW: Final = 60.0
"""Seconds of serving-counter reads an event's admissions per minute are taken over."""
OPERATOR: Final = "dashboard"
"""Who the ledger records for an evacuation or recovery made with the dashboard's buttons."""


# ---------------------------------------------------------------------- pure parts


def zone_verdict(points: Sequence[tuple[float, float]]) -> bool | None:
    """A zone's canary verdict from its recent datapoints ``[(time, value), ...]``: the
    latest passed (1) or failed (0); None when there is none (a silent canary)."""
    if not points:
        return None
    return max(points)[1] >= 1


class AdmissionRates:
    """Admissions per second of each event, from the feed's successive reads of its
    serving counter over the last `window` seconds, by the room's own rule
    (:func:`~rideout.waitingroom.model.serving_rate`). Pure: the times are passed in."""

    def __init__(self, window: float = ADMISSION_WINDOW, *, max_samples: int = 512) -> None:
        self.window = window
        self._max = max_samples
        self._samples: dict[str, deque[tuple[float, int]]] = {}

    def observe(self, event_id: str, at: float, serving: int) -> float:
        """Note a read of `event_id`'s serving counter at `at`; its rate now."""
        samples = self._samples.setdefault(event_id, deque(maxlen=self._max))
        if samples and serving < samples[-1][1]:
            samples.clear()  # the event was reset (or made again): a new history
        samples.append((at, serving))
        since = at - self.window
        while len(samples) > 1 and samples[1][0] <= since:
            samples.popleft()  # keep one read at or before the window's start: its base
        return serving_rate(list(samples), at, self.window)

    def keep(self, event_ids: Sequence[str]) -> None:
        """Forget the events not among `event_ids` (deleted)."""
        for event_id in set(self._samples) - set(event_ids):
            del self._samples[event_id]


def inlet_view(
    inlet: Mapping[str, Any], alarms: Mapping[str, object], now: float
) -> dict[str, Any]:
    """What an event's inlet does now: its kind, and for a periodic one whether it
    admits this period or why not (before its start, after its end, or held by its
    alarm in ALARM: :func:`~rideout.waitingroom.model.periodic_increment`)."""
    settings = InletSettings.from_dict(inlet)
    state = alarm_state_in(alarms, settings.alarm) if settings.alarm else None
    held = settings.kind is InletKind.PERIODIC and state == ALARM
    if settings.kind is InletKind.NONE:
        doing = "only increment_serving_counter moves the counter"
    elif settings.kind is InletKind.MAX_SIZE:
        doing = f"admits up to {settings.max_size} less capacity held every {settings.period:g} s"
    elif held:
        doing = f"held: alarm {settings.alarm} is in ALARM"
    elif now < settings.start:
        doing = "not started"
    elif settings.end and now >= settings.end:
        doing = "ended"
    else:
        by = periodic_increment(settings, now, state)
        doing = f"admits {by} every {settings.period:g} s"
    return {
        "kind": settings.kind.value,
        "period": settings.period,
        "alarm": settings.alarm or None,
        "alarm_state": state,
        "held": held,
        "doing": doing,
    }


def room_view(
    shown: Mapping[str, Any], alarms: Mapping[str, object], rate: float, now: float
) -> dict[str, Any]:
    """One event's row from the room's answer ``{event, counters, active_tokens,
    holding}``, its admission `rate` (per second) and the control plane's `alarms`."""
    event, counters = shown["event"], shown["counters"]
    inlet = inlet_view(event.get("inlet", {}), alarms, now)
    capacity, capacity_from = None, None
    if inlet["kind"] == InletKind.MAX_SIZE.value:
        capacity, capacity_from = int(event["inlet"]["max_size"]), "inlet max_size"
    elif event.get("auto_open_threshold"):
        capacity, capacity_from = int(event["auto_open_threshold"]), "auto_open_threshold"
    # The room's own estimate for a new arrival (GET /estimated_wait without a request).
    ahead = int(counters["queue"]) + 1 - int(counters["serving"])
    wait = estimated_wait(ahead, rate)
    return {
        "event_id": event["event_id"],
        "open": bool(event.get("open", True)),
        "queue": counters["queue"],
        "serving": counters["serving"],
        "waiting": counters["waiting"],
        "tokens": counters["tokens"],
        "expired": counters["expired"],
        "abandoned": counters["abandoned"],
        "active": shown["active_tokens"],
        "holding": shown["holding"],
        "capacity": capacity,
        "capacity_from": capacity_from,
        "admitted_per_minute": round(rate * 60, 1),
        "estimated_wait": None if wait is None else math.ceil(wait),
        "inlet": inlet,
    }


def ledger_row(record: Record) -> dict[str, Any]:
    """One ledger row as the panel shows it (``seen`` left out, as ``evacuate list``)."""
    return {
        "zone": record.zone_id,
        "type": record.kind,
        "resource": record.resource,
        "removed": list(record.removed),
        "operator": record.operator,
        "since": record.at,
        "outcome": record.outcome or None,
    }


def _ledger_view(path: Path) -> dict[str, Any]:
    return {"kind": "sqlite", "where": str(path), "exists": False, "rows": [], "total": 0,
            "error": None}  # fmt: skip


def _rows(view: dict[str, Any], records: Sequence[Record]) -> dict[str, Any]:
    view["rows"] = [ledger_row(r) for r in records[:MAX_LEDGER_ROWS]]
    view["total"] = len(records)
    return view


def read_ledger(path: Path) -> dict[str, Any]:
    """The ledger at `path` for the panel (blocking: run it in a thread). A missing file
    is an empty ledger, never created; a file it cannot read says why."""
    view = _ledger_view(path)
    view["exists"] = path.exists()
    if not view["exists"]:
        return view
    try:
        # A write holds the file for milliseconds; never wait long for one (the feed
        # drops a late read, but its thread would still wait).
        records = SqliteLedger(path, create=False, busy_timeout=1.0).records()
    except EvacuationError as exc:
        view["error"] = str(exc)
        return view
    return _rows(view, records)


class AwsLedger:
    """The ``[evacuate_aws]`` DynamoDB ledger for the panel, when ``dashboard = true``:
    what ``rideout evacuate --provider aws`` recorded (blocking: read it in a thread).
    Never creates the table; a missing table is an empty ledger."""

    def __init__(self, config: Config) -> None:
        self.aws = config.evacuate_aws
        self._ledger: Ledger | None = None

    def where(self) -> str:
        aws = self.aws
        at = ", ".join(x for x in (aws.region, aws.endpoint_url) if x) or "boto3's region"
        return f"{aws.table} ({at})"

    def empty(self) -> dict[str, Any]:
        return {"kind": "dynamodb", "where": self.where(), "exists": None, "rows": [],
                "total": 0, "error": None}  # fmt: skip

    def read(self) -> dict[str, Any]:
        view = {**self.empty(), "exists": True}
        try:
            if self._ledger is None:
                self._ledger = self._open()
            return _rows(view, self._ledger.records())
        except ImportError as exc:  # boto3: the aws extra
            view["error"] = f"{exc} (install the aws extra: pip install 'rideout[aws]')"
        except RideoutError as exc:  # no region or credentials, a refused or failed call
            view["error"] = str(exc)
        return view

    def _open(self) -> Ledger:
        from rideout.evacuate.aws.connect import settings_from
        from rideout.evacuate.dynamo import DynamoLedger

        return DynamoLedger(settings_from(self.aws), table=self.aws.table, create=False)


def _settled(
    task: asyncio.Future[dict[str, Any]],
    done: Container[Any],
    last: dict[str, Any],
) -> dict[str, Any]:
    """A panel's new view: the read's, the last one when it is late, or the last one
    saying why the read failed."""
    if task not in done:
        return last
    failed = task.exception()
    if failed is not None:
        return {**last, "error": f"{type(failed).__name__}: {failed}"}
    return task.result()


# ------------------------------------------------------------------------ the panels


class DashboardPanels:
    """Collects the zones, ledger and rooms panels for the feed's frame, and carries out
    the dashboard's zone buttons (the caller checks who may press them)."""

    def __init__(
        self,
        config: Config,
        plane: Plane,
        http: httpx.AsyncClient,
        *,
        timeout: float,
        rates: AdmissionRates | None = None,
    ) -> None:
        self.config = config
        self.plane = plane
        self.http = http
        self.timeout = timeout
        self.rates = rates or AdmissionRates()
        self.ledger_path = Path(config.data_dir) / LEDGER_FILE
        self._ledger: SqliteLedger | None = None
        self._ledger_view: dict[str, Any] = {**_ledger_view(self.ledger_path), "exists": None}
        self.aws_ledger = AwsLedger(config) if config.evacuate_aws.dashboard else None
        self._aws_view: dict[str, Any] | None = self.aws_ledger.empty() if self.aws_ledger else None
        self._rooms: dict[str, Any] = {"enabled": config.waitingroom.enabled, "events": [],
                                       "more": 0, "server": None, "error": None, "at": None}  # fmt: skip

    # ------------------------------------------------------------------ the frame

    def zones(self, zones: list[dict[str, Any]], now: float) -> list[dict[str, Any]]:
        """Every zone as :meth:`ControlPlane.zones_status` gives it, with its canary's
        latest verdict within the last three canary periods."""
        horizon = now - 3 * self.config.timing.canary_interval
        out = []
        for zone in zones:
            points = self.plane.store.datapoints_matching(
                NAMESPACE, METRIC_NAME,
                {REGION_DIMENSION: zone["region"], ZONE_DIMENSION: zone["zone"]},
                horizon, now + 1,
            )  # fmt: skip
            out.append({**zone, "healthy": zone_verdict(points)})
        return out

    async def add_to(self, view: dict[str, Any], zones: list[dict[str, Any]]) -> None:
        """Put the three panels into the feed's `view` (read within the bound; a late
        read keeps the last one)."""
        view["zones"] = self.zones(zones, self.plane.now())
        alarms = view.get("alarms", {})
        writer = view.get("failover", {}).get("writer")
        evacuated = {z["zone"] for z in zones if z["evacuated"]}
        ledger = asyncio.ensure_future(asyncio.to_thread(read_ledger, self.ledger_path))
        rooms = asyncio.ensure_future(self._read_rooms(writer, evacuated, alarms))
        tasks = {ledger, rooms}
        aws = None
        if self.aws_ledger is not None:
            aws = asyncio.ensure_future(asyncio.to_thread(self.aws_ledger.read))
            tasks.add(aws)
        done, pending = await asyncio.wait(tasks, timeout=self.timeout)
        for task in pending:
            task.cancel()  # a ledger's thread finishes on its own; its answer is dropped
        self._ledger_view = _settled(ledger, done, self._ledger_view)
        self._rooms = _settled(rooms, done, self._rooms)
        view["ledger"] = self._ledger_view
        view["rooms"] = self._rooms
        if aws is not None and self._aws_view is not None:
            self._aws_view = _settled(aws, done, self._aws_view)
            view["aws_ledger"] = self._aws_view

    def _room_bases(self, writer: str | None, evacuated: set[str]) -> list[str]:
        """App servers to ask, in order: the writer region's zones that serve, its
        evacuated ones, then the other region's (a replica's room still reads)."""
        zones = [(r, z) for r in self.config.regions for z in r.zones]
        zones.sort(key=lambda rz: (rz[0].name != writer, rz[1].name in evacuated))
        return [routes.zone_url(self.config, z.address) for _, z in zones]

    async def _get(self, base: str, path: str, token: str) -> httpx.Response:
        return await self.http.get(base + path, headers={"Authorization": f"Bearer {token}"},
                                   timeout=self.timeout)  # fmt: skip

    async def _read_rooms(
        self, writer: str | None, evacuated: set[str], alarms: Mapping[str, object]
    ) -> dict[str, Any]:
        rooms: dict[str, Any] = {"enabled": self.config.waitingroom.enabled, "events": [],
                                 "more": 0, "server": None, "error": None, "at": self.plane.now()}  # fmt: skip
        if not rooms["enabled"]:
            return rooms
        token = load_or_create_admin_token(self.config.keys_dir)
        listed: tuple[str, httpx.Response] | None = None
        for base in self._room_bases(writer, evacuated):
            try:
                answer = await self._get(base, routes.ROOM_PRIVATE_EVENTS, token)
            except httpx.HTTPError:
                continue
            if answer.status_code < 500:
                listed = base, answer
                break
        if listed is None or listed[1].status_code != 200:
            rooms["error"] = (
                "no app server answered" if listed is None
                else f"the room answered HTTP {listed[1].status_code}"
            )  # fmt: skip
            return rooms
        base = listed[0]
        ids = sorted(str(e["event_id"]) for e in listed[1].json().get("events", []))
        rooms["server"], rooms["more"] = base, max(0, len(ids) - MAX_ROOMS)
        shown = await asyncio.gather(
            *(
                self._get(base, routes.ROOM_PRIVATE_EVENT.format(event_id=i), token)
                for i in ids[:MAX_ROOMS]
            ),
            return_exceptions=True,
        )
        now = self.plane.now()
        for reply in shown:
            if isinstance(reply, BaseException) or reply.status_code != 200:
                continue  # deleted meanwhile, or late: the next period reads it
            body = reply.json()
            event_id = str(body["event"]["event_id"])
            rate = self.rates.observe(event_id, now, int(body["counters"]["serving"]))
            rooms["events"].append(room_view(body, alarms, rate, now))
        self.rates.keep(ids)
        return rooms

    # ---------------------------------------------------------------- the buttons

    def _ledger_for_writes(self) -> SqliteLedger:
        if self._ledger is None:
            self._ledger = SqliteLedger(self.ledger_path)
        return self._ledger

    async def zone_action(self, op: str, zone: str) -> tuple[int, dict[str, Any]]:
        """Evacuate or recover `zone` as ``rideout evacuate`` / ``rideout recover`` do
        (the engine, locked and recorded in the ledger, operator ``dashboard``); the
        HTTP status and body to answer with."""
        if zone not in self.plane.zones.regions:
            return 404, {"error": "not_found", "message": f"no zone {zone!r} in this deployment"}
        current = self.plane.zones.evacuations.get(zone)
        reason = current.reason if current is not None and op == "recover" else "manual"
        try:
            outcome = await run_engine(
                self.plane, op, zone, self._ledger_for_writes(), operator=OPERATOR,
                reason=reason, expires_in=None, owner=f"{OPERATOR}:{id(self)}",
            )  # fmt: skip
        except EvacuationError as exc:
            return 409, {"error": "refused", "message": str(exc)}
        if outcome.exit_code != 0:
            detail = (
                outcome.refused or outcome.aborted or "; ".join(f.error for f in outcome.failed)
            )
            return 409, {"error": "refused", "message": f"{op} {zone}: {detail}"}
        if op == "recover" and zone in self.plane.zones.evacuations:
            # Evacuated without a ledger row (POST /v1/zones/.../evacuate alone): the
            # ledger has nothing to merge back, so put the zone back directly.
            try:
                await self.plane.recover_zone(zone)
            except ZoneRefused as exc:
                return exc.status, {"error": "refused", "message": str(exc)}
        done = "evacuated" if op == "evacuate" else "recovered"
        return 200, {"message": f"{done} {zone}", "changed": len(outcome.changed)}
