"""The surge drill's visitors: many asyncio visitors per process, each doing what a
waiting room's browser does, with every step recorded.

A visitor arrives (``POST /assign_queue_num`` with an ``Idempotency-Key``, so a retry
across a failover keeps its one position), polls ``serving_num`` (and, every few polls,
its own ``queue_num``: that keeps its abandonment clock running and proves its
position is still there), takes its token when served (``generate_token``), connects
to the auction's ``/ws`` with it, holds the session, closes, and ends the session
(``update_session`` 1, with the admin token: the site's part). A share of visitors
abandon while waiting (stop polling) and a share never take their token once served
(no-shows, which expire). The app domain is resolved through the deployment's DNS;
any failed request is retried after a full-jitter backoff, against a fresh answer.

:func:`run_visitors` runs one :class:`VisitorSpec` (a group) and is the runner the
drill's :class:`~rideout.drill.clients.ClientFleet` spawns in worker processes.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

import httpx
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus, WebSocketException

from rideout import _http, routes
from rideout.auth.admin import load_or_create_admin_token
from rideout.backoff import FullJitter
from rideout.client.resolve import CachingResolver, NameserverResolver, ResolutionError
from rideout.config import Config
from rideout.drill.clients import flush_every, region_of
from rideout.drill.errors import DrillError
from rideout.store.client import cancel_and_wait

__all__ = [
    "ArrivedRecord",
    "ClosedRecord",
    "LeftRecord",
    "LoadRecord",
    "LostRecord",
    "OpenedRecord",
    "RefusedRecord",
    "ServedRecord",
    "VisitorRecord",
    "VisitorSpec",
    "run_visitors",
]

log = logging.getLogger(__name__)


class ArrivedRecord(NamedTuple):
    """A visitor got its position."""

    visitor: int
    t: float
    request_id: str
    queue_number: int
    region: str


class ServedRecord(NamedTuple):
    """A visitor took its token (``generate_token`` answered 200)."""

    visitor: int
    t: float
    queue_number: int
    region: str


class OpenedRecord(NamedTuple):
    """``/ws`` accepted the visitor's token: a session is open."""

    visitor: int
    t: float
    region: str


class ClosedRecord(NamedTuple):
    """The visitor's ``/ws`` connection ended (closed by it, or dropped)."""

    visitor: int
    t: float
    dropped: bool


class RefusedRecord(NamedTuple):
    """``/ws`` refused the visitor's token (an HTTP status at the handshake)."""

    visitor: int
    t: float
    status: int
    region: str


class LostRecord(NamedTuple):
    """A position the room no longer knows, or knows with another number."""

    visitor: int
    t: float
    request_id: str
    detail: str


class LeftRecord(NamedTuple):
    """How a visitor's visit ended: ``done``, ``abandoned``, ``expired`` (410 once served:
    too slow), ``no_show`` (served, never took the token), ``lost`` or ``gave_up`` (out of
    time)."""

    visitor: int
    t: float
    how: str


class LoadRecord(NamedTuple):
    """A process's requests sent, by path, and their answers by path and status (or the
    exception's name); ``visitor`` is the group's first index."""

    visitor: int
    t: float
    requests: dict[str, int]
    answers: dict[str, int]


VisitorRecord = (
    ArrivedRecord
    | ServedRecord
    | OpenedRecord
    | ClosedRecord
    | RefusedRecord
    | LostRecord
    | LeftRecord
    | LoadRecord
)
Sink = Callable[[list[VisitorRecord]], None]


class _Flag(Protocol):
    def is_set(self) -> bool: ...


@dataclass(frozen=True, slots=True)
class VisitorSpec:
    """A group of visitors (picklable: it crosses into worker processes)."""

    config: Config
    first: int
    count: int
    event_id: str
    start_at: float
    """Wall-clock time the burst begins."""
    burst: float = 2.0
    """Seconds over which the group's arrivals are spread (uniformly at random)."""
    poll_interval: float = 1.0
    hold: float = 2.0
    """Seconds a visitor keeps its auction session open."""
    touch_interval: float = 1.0
    """Seconds between a waiting visitor's polls that name its request id (``queue_num``):
    well under the room's abandonment hold, or a patient visitor would be abandoned."""
    abandon_share: float = 0.0
    noshow_share: float = 0.0
    deadline: float = 120.0
    """Seconds after the burst began after which a visitor still waiting gives up."""
    seed: int = 0


class _Gone(DrillError):
    """The room answered that this visit is over (404 lost, 410 expired): control flow
    inside a visitor, never raised out of it."""

    def __init__(self, how: str, detail: str) -> None:
        super().__init__(detail)
        self.how = how


class _Origin:
    """The app domain, resolved through the deployment's DNS; one HTTP client per process."""

    def __init__(self, config: Config, rng: random.Random) -> None:
        cp = config.control_plane
        self.config = config
        self.resolver = CachingResolver(NameserverResolver(cp.address, cp.dns_port, timeout=2.0))
        self.http = _http.async_client(
            timeout=httpx.Timeout(10.0, connect=5.0),
            limits=_http.limits(max_connections=200, max_keepalive_connections=100),
        )
        self.regions = region_of(config)
        self.rng = rng
        self.backoff = FullJitter(config.timing.backoff_base, config.timing.backoff_cap)
        self.sent: Counter[str] = Counter()
        self.answers: Counter[str] = Counter()  # "PATH STATUS" (or the exception's name)
        self.admin = {"Authorization": f"Bearer {load_or_create_admin_token(config.keys_dir)}"}

    async def address(self) -> str:
        answer = await self.resolver.resolve(self.config.app_domain)
        if not answer.addresses:
            raise httpx.ConnectError("no address for the app domain")
        return self.rng.choice(answer.addresses)

    async def request(
        self, method: str, path: str, *, until: float, **kwargs: Any
    ) -> tuple[httpx.Response, str]:
        """Send until the origin answers something other than a 5xx (or ``until``, wall
        clock, passes: TimeoutError). The answer and the region that gave it."""
        attempt = 0
        while True:
            try:
                address = await self.address()
                self.sent[path] += 1
                response = await self.http.request(
                    method, routes.zone_url(self.config, address, path), **kwargs
                )
                self.answers[f"{path} {response.status_code}"] += 1
                if response.status_code < 500:
                    return response, self.regions.get(address, "?")
            except (httpx.HTTPError, OSError, RuntimeError, ResolutionError) as exc:
                # A name server that timed out is a failed request too (under load one
                # did, and its visitor's task died: "unfinished" in the report).
                self.answers[f"{path} {type(exc).__name__}"] += 1
                log.debug("%s %s: %s", method, path, exc)
            if time.time() >= until:
                raise TimeoutError(f"{method} {path}: no answer in time")
            await asyncio.sleep(self.backoff.delay(min(attempt, 16), self.rng))
            attempt += 1

    async def aclose(self) -> None:
        await self.http.aclose()


class _Visitor:
    """One visitor's whole visit; every step a record in ``out``."""

    def __init__(
        self, spec: VisitorSpec, vid: int, origin: _Origin, out: list[VisitorRecord]
    ) -> None:
        self.spec = spec
        self.vid = vid
        self.origin = origin
        self.out = out
        self.rng = random.Random(spec.seed * 1_000_003 + vid)
        self.event = spec.event_id
        self.until = spec.start_at + spec.deadline
        self.request_id = ""
        self.number = 0

    async def run(self) -> None:
        spec, rng = self.spec, self.rng
        await asyncio.sleep(max(0.0, spec.start_at + rng.uniform(0, spec.burst) - time.time()))
        draw = rng.random()
        abandons = draw < spec.abandon_share
        noshow = not abandons and draw < spec.abandon_share + spec.noshow_share
        try:
            await self._arrive()
            if abandons:
                # Waits a little, then closes the tab: no poll ever again.
                await self._wait_served(give_up_after=rng.uniform(0.5, 2.0) * spec.poll_interval)
                self._left("abandoned")
                return
            await self._wait_served()
            if noshow:
                self._left("no_show")  # served, never takes the token: it expires
                return
            token = await self._token()
            await self._session(token)
            await self._end_session()
            self._left("done")
        except _Gone as gone:
            if gone.how == "lost":
                self.out.append(LostRecord(self.vid, time.time(), self.request_id, str(gone)))
            self._left(gone.how)
        except TimeoutError:
            self._left("gave_up")

    def _left(self, how: str) -> None:
        self.out.append(LeftRecord(self.vid, time.time(), how))

    async def _arrive(self) -> None:
        key = str(uuid.UUID(int=self.rng.getrandbits(128), version=4))
        while True:
            response, region = await self.origin.request(
                "POST", routes.ROOM_ASSIGN_QUEUE_NUM, until=self.until,
                json={"event_id": self.event}, headers={"Idempotency-Key": key},
            )  # fmt: skip
            if response.status_code == 200:
                body = response.json()
                self.request_id = str(body["api_request_id"])
                self.number = int(body["queue_number"])
                self.out.append(
                    ArrivedRecord(self.vid, time.time(), self.request_id, self.number, region)
                )
                return
            if time.time() >= self.until:
                raise TimeoutError("no position")
            # A 409 (the first try with this key still in flight) or a closed room: again.
            await asyncio.sleep(self.spec.poll_interval)

    async def _check_position(self) -> None:
        response, _ = await self.origin.request(
            "GET", routes.ROOM_QUEUE_NUM, until=self.until,
            params={"event_id": self.event, "request_id": self.request_id},
        )  # fmt: skip
        if response.status_code == 404:
            raise _Gone("lost", "queue_num: 404 for a position the room handed out")
        if response.status_code == 200:
            number = int(response.json()["queue_number"])
            if number != self.number:
                raise _Gone("lost", f"queue_num: {number}, was {self.number}")

    async def _wait_served(self, give_up_after: float | None = None) -> None:
        """Poll until the serving counter reaches this position (or ``give_up_after``)."""
        started, touched = time.time(), 0.0
        interval = self.spec.poll_interval
        while True:
            if time.time() - touched >= self.spec.touch_interval:
                touched = time.time()
                await self._check_position()
            response, _ = await self.origin.request(
                "GET", routes.ROOM_SERVING_NUM, until=self.until, params={"event_id": self.event}
            )
            serving = response.json() if response.status_code == 200 else {}
            if int(serving.get("serving_counter", -1)) >= self.number:
                return
            if give_up_after is not None and time.time() - started >= give_up_after:
                return
            if time.time() >= self.until:
                raise TimeoutError("not served in time")
            await asyncio.sleep(interval * self.rng.uniform(0.8, 1.2))

    async def _token(self) -> str:
        body = {"event_id": self.event, "request_id": self.request_id}
        while True:
            response, region = await self.origin.request(
                "POST", routes.ROOM_GENERATE_TOKEN, until=self.until, json=body
            )
            if response.status_code == 200:
                self.out.append(ServedRecord(self.vid, time.time(), self.number, region))
                return str(response.json()["access_token"])
            if response.status_code == 404:
                raise _Gone("lost", "generate_token: 404 for a served position")
            if response.status_code == 410:
                raise _Gone("expired", "generate_token: 410")
            if time.time() >= self.until:
                raise TimeoutError("no token")
            await asyncio.sleep(self.spec.poll_interval)  # 202: not yet (a counter moved back)

    async def _session(self, token: str) -> None:
        """Hold a ``/ws`` session for ``hold`` seconds, reconnecting (same token) if the
        region under it dies."""
        config = self.origin.config
        ends = None
        attempt = 0
        while ends is None or time.time() < ends:
            address = ""
            try:
                address = await self.origin.address()
                region = self.origin.regions.get(address, "?")
                async with connect(
                    f"ws://{address}:{config.app_port}/ws",
                    additional_headers={"Authorization": f"Bearer {token}"},
                    proxy=None, open_timeout=3.0, close_timeout=1.0,
                ) as ws:  # fmt: skip
                    self.out.append(OpenedRecord(self.vid, time.time(), region))
                    ends = ends or time.time() + self.spec.hold
                    dropped = False
                    try:
                        await asyncio.wait_for(ws.wait_closed(), max(0.0, ends - time.time()))
                        dropped = True
                    except TimeoutError:
                        pass
                    self.out.append(ClosedRecord(self.vid, time.time(), dropped))
                    if not dropped:
                        return
            except InvalidStatus as exc:
                status = exc.response.status_code
                region = self.origin.regions.get(address, "?")
                self.out.append(RefusedRecord(self.vid, time.time(), status, region))
                if status < 500:
                    return
            except (
                OSError, TimeoutError, WebSocketException, httpx.HTTPError, ResolutionError
            ) as exc:  # fmt: skip
                log.debug("ws: %s", exc)
            if time.time() >= self.until:
                raise TimeoutError("no session")
            await asyncio.sleep(self.origin.backoff.delay(min(attempt, 16), self.rng))
            attempt += 1

    async def _end_session(self) -> None:
        body = {"event_id": self.event, "request_id": self.request_id, "status": 1}
        await self.origin.request(
            "POST", routes.ROOM_PRIVATE_UPDATE_SESSION, until=self.until + 30,
            json=body, headers=self.origin.admin,
        )  # fmt: skip


async def run_visitors(spec: VisitorSpec, sink: Sink, started: _Flag, stop: _Flag) -> None:
    """Run ``spec``'s visitors until they are all done or ``stop`` is set (``started``
    is unused: the burst's start time is in the spec)."""
    del started
    out: list[VisitorRecord] = []
    origin = _Origin(spec.config, random.Random(spec.seed))
    visitors = [
        asyncio.create_task(_Visitor(spec, vid, origin, out).run())
        for vid in range(spec.first, spec.first + spec.count)
    ]

    flusher = asyncio.create_task(flush_every(out, sink, 0.1))
    try:
        # `stop` is a threading or multiprocessing event (set from another process).
        while not stop.is_set() and not all(v.done() for v in visitors):  # noqa: ASYNC110
            await asyncio.sleep(0.1)
    finally:
        for task in visitors:
            task.cancel()
        for outcome in await asyncio.gather(*visitors, return_exceptions=True):
            if isinstance(outcome, Exception):  # a bug: named in the report, not hidden
                origin.answers[f"visitor crashed: {type(outcome).__name__}: {outcome}"] += 1
                log.error("a visitor crashed", exc_info=outcome)
        await cancel_and_wait(flusher)
        out.append(LoadRecord(spec.first, time.time(), dict(origin.sent), dict(origin.answers)))
        await origin.aclose()
        sink(out[:])
        out.clear()
