"""The canary: traffic-independent detection of a regional failure (seed 000/002).

One canary runs in each region, beside the region's servers (so it dies with the
region). Every interval it opens a WebSocket to each of its region's zone endpoints
directly (not through DNS), authenticates with a token of its own, sends a heartbeat
and a ``probe``, and expects ``pong`` and the probe's answer within the timeout. The
probe goes through the state store the way a bid does (a write and a read of the
zone's probe key behind the epoch fence, ``WAIT`` in sync mode: see
:mod:`rideout.realtime.backend`), so a dead, frozen or fenced writer Redis fails it
even while the app servers answer. It pushes one datapoint per probe, 1 for
healthy and 0 for unhealthy, as metric ``App/WebSocketHealth`` with dimensions
``ApiId=<region>`` and ``Zone=<zone>``, to the control plane's PutMetricData-like
ingest endpoint, signed with the region's canary key (an HMAC over the exact body, a
timestamp and a nonce: :mod:`rideout.auth.request_signing`). When the region dies the
datapoints stop; the alarm counts the silence as breaching.

Each round also goes to every :class:`DatapointPublisher` the canary was given (on AWS:
CloudWatch's PutMetricData, :mod:`rideout.aws.metrics`); a publisher queues and sends on
its own time, so a slow or failing one never delays the next probe.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeAlias

import httpx
from websockets.asyncio.client import connect
from websockets.exceptions import WebSocketException

from rideout import _http, routes
from rideout._looplag import LagReport, LoopLag, watch
from rideout._tasks import TaskSupervisor
from rideout.auth import SigningKey, TokenIssuer
from rideout.auth.canary_keys import load_or_create_canary_key
from rideout.auth.request_signing import RequestSigner
from rideout.config import Config
from rideout.health.names import (
    BUSY_METRIC_NAME,
    CANARY_PROBE,
    FULL_METRIC_NAME,
    METRIC_NAME,
    NAMESPACE,
    PROBE_CLAIM,
    REGION_DIMENSION,
    ZONE_DIMENSION,
)
from rideout.protocol import (
    PONG,
    ErrorMsg,
    Heartbeat,
    Pong,
    Probe,
    ProbeMsg,
    ProtocolError,
    encode_client_message,
    parse_server_message,
)

__all__ = [
    "METRIC_NAME",
    "NAMESPACE",
    "Canary",
    "DatapointPublisher",
    "ProbeOutcome",
    "ProbeResult",
    "metric_data",
    "probe",
]

log = logging.getLogger("rideout.canary")


@dataclass(frozen=True, slots=True)
class ProbeResult:
    """One probe of one zone endpoint."""

    region: str
    zone: str
    healthy: bool
    latency: float
    error: str | None
    timestamp: float
    full: bool = False  # healthy, but at its connection cap (the probe's answer said so)
    busy: bool = False  # healthy, but shedding load: answered late, within the busy grace


class DatapointPublisher(Protocol):
    """Somewhere else a round of datapoints goes (the canary's port for CloudWatch).

    :meth:`publish` must return at once (queue, send in the background) and never raise:
    the probe schedule is the canary's first duty.
    """

    def publish(self, results: Sequence[ProbeResult]) -> None: ...


ProbeOutcome: TypeAlias = (
    tuple[bool, str | None] | tuple[bool, str | None, bool] | tuple[bool, str | None, bool, bool]
)
"""What probing a zone says: (healthy, why not), (healthy, why not, full) or (healthy,
why not, full, busy)."""


async def probe(url: str, token: str, timeout: float, grace: float = 0.0) -> ProbeOutcome:
    """Connect, heartbeat and probe the store, expect ``pong`` and the probe's answer,
    all within `timeout`: (healthy, why not, full, busy).

    Busy is not down: an answer that comes within `grace` seconds more counts as healthy
    only if it says the zone is shedding load (``busy``: its event loop runs late, so it
    refuses part of the new connections and bids). Failing over would move that load,
    not end it. A late answer that does not say so fails, as does none at all.

    A timeout says what it was waiting for and, past the handshake, how long that took:
    a zone whose accept queue is full of a herd's handshakes answers late for another
    reason than one whose store is slow."""
    replies: list[str | bytes] = []
    started = time.monotonic()
    opened: float | None = None
    try:
        async with asyncio.timeout(timeout + grace):
            async with connect(
                url,
                additional_headers={"Authorization": f"Bearer {token}"},
                compression=None,
                open_timeout=None,
                close_timeout=0.1,
                ping_interval=None,
            ) as ws:
                opened = time.monotonic() - started
                # Both at once: the server answers a connection's messages in order.
                await ws.send(encode_client_message(Heartbeat()))
                await ws.send(encode_client_message(Probe()))
                replies.append(await ws.recv())
                replies.append(await ws.recv())
    except TimeoutError:
        within = f"{timeout:g} s" + (f" (nor {grace:g} s more)" if grace > 0 else "")
        if opened is None:
            return False, f"no WebSocket handshake within {within}"
        waiting = "pong" if not replies else "answer to the store probe"
        return False, f"no {waiting} within {within} (the handshake took {opened:.2f} s)"
    except (OSError, WebSocketException) as exc:
        return False, f"{type(exc).__name__}: {exc}"
    outcome = _judge(replies[0], replies[1])
    took = time.monotonic() - started
    if took <= timeout or not outcome[0]:
        return outcome
    if len(outcome) > 3 and outcome[3]:
        return outcome  # late, but busy: healthy
    return False, (
        f"the store probe's answer came after {took:.2f} s, past the {timeout:g} s timeout, "
        "from a zone that does not say it is shedding load"
    )


def _judge(heartbeat: str | bytes, store: str | bytes) -> ProbeOutcome:
    if heartbeat != PONG:
        return False, f"expected pong, got {_said(heartbeat)}"
    try:
        message = parse_server_message(store)
    except ProtocolError:
        message = None
    if isinstance(message, ProbeMsg):
        return True, None, message.full, message.busy
    return False, f"expected the store probe's answer, got {_said(store)}"


def _said(reply: str | bytes) -> str:
    """A reply as a log line shows it: an error's message, else the start of the text."""
    try:
        message = parse_server_message(reply)
    except ProtocolError:
        return repr(str(reply)[:80])
    if isinstance(message, ErrorMsg):
        return f"{message.code}: {message.message[:160]}"
    return "pong" if isinstance(message, Pong) else repr(str(reply)[:80])


def metric_data(results: list[ProbeResult]) -> dict[str, object]:
    """The PutMetricData-shaped body for a round of probes: each zone's health and, for
    a healthy probe, whether it is full (:data:`FULL_METRIC_NAME`) and busy
    (:data:`BUSY_METRIC_NAME`): a control plane that does not know a metric stores it and
    ignores it."""

    def datum(r: ProbeResult, name: str, value: bool) -> dict[str, object]:
        return {
            "MetricName": name,
            "Dimensions": [
                {"Name": REGION_DIMENSION, "Value": r.region},
                {"Name": ZONE_DIMENSION, "Value": r.zone},
            ],
            "Value": 1.0 if value else 0.0,
            "Timestamp": r.timestamp,
        }

    data = [datum(r, METRIC_NAME, r.healthy) for r in results]
    data += [datum(r, FULL_METRIC_NAME, r.full) for r in results if r.healthy]
    data += [datum(r, BUSY_METRIC_NAME, r.busy) for r in results if r.healthy]
    return {"Namespace": NAMESPACE, "MetricData": data}


class Canary:
    """Probes `region`'s zones every ``timing.canary_interval`` and pushes the results.

    `clock` (wall-clock seconds) stamps the rounds and `sleep` waits for the next one;
    tests pass a fake pair so rounds run without waiting.
    """

    def __init__(
        self,
        config: Config,
        region: str,
        *,
        probe_zone: Callable[[str, str, float], Awaitable[ProbeOutcome]] | None = None,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        publishers: Sequence[DatapointPublisher] = (),
    ) -> None:
        self.config = config
        self.region = config.region(region)
        self.publishers = tuple(publishers)
        grace = config.timing.canary_busy_grace
        self._probe = probe_zone or (lambda url, token, timeout: probe(url, token, timeout, grace))
        self._clock = clock
        self._sleep = sleep
        key = SigningKey.load_or_create(config.keys_dir)
        self._issuer = TokenIssuer(
            key, config.auth.issuer, config.auth.audience, config.auth.token_ttl
        )
        self._token = ""
        self._token_expires = 0.0
        self.ingest_url = routes.control_plane_url(config, routes.METRICS_INGEST)
        # Every control plane instance gets every round: a standby keeps its datapoints
        # current, so it can evaluate at once when it takes over.
        self.ingest_urls = routes.control_plane_urls(config, routes.METRICS_INGEST)
        self.rounds = 0
        # The canary's own loop (measured while run() runs): a timeout it reports names
        # how late the canary itself was, since a stalled canary times out on its own.
        self.lag = LoopLag()
        self._watching = False
        self.last_round_at: float | None = None  # wall clock
        self.last_pushed_at: float | None = None  # wall clock, a push that some instance took
        self.last_results: list[ProbeResult] = []
        # Pushes in a row each instance did not take: its failure is logged when it
        # starts and when it ends, not every round (a standby that is down for an hour
        # would otherwise fill the log with two lines a second in the fast profile).
        self.failed_pushes: dict[str, int] = dict.fromkeys(self.ingest_urls, 0)
        self._signer = RequestSigner(
            self.region.name,
            load_or_create_canary_key(config.keys_dir, self.region.name),
            clock=clock,
        )

    def _current_token(self) -> str:
        now = self._clock()
        if now > self._token_expires - 60 or not self._token:
            self._token = self._issuer.issue(
                f"canary-{self.region.name}", extra_claims={PROBE_CLAIM: CANARY_PROBE}
            )
            self._token_expires = now + self.config.auth.token_ttl
        return self._token

    async def probe_all(self, at: float | None = None) -> list[ProbeResult]:
        """One round: every zone of the region, concurrently, stamped `at` (default now)."""
        timing = self.config.timing
        token = self._current_token()
        stamp = self._clock() if at is None else at

        async def one(zone_name: str, address: str) -> ProbeResult:
            started = time.monotonic()
            url = f"ws://{address}:{self.config.app_port}/ws"
            outcome = await self._probe(url, token, timing.canary_timeout)
            healthy, error = outcome[0], outcome[1]
            full = len(outcome) > 2 and bool(outcome[2])
            busy = len(outcome) > 3 and bool(outcome[3])
            if error is not None and error.startswith("no ") and self._watching:
                late = self.lag.worst(time.monotonic())
                error = f"{error}; this canary's own loop ran up to {late:.2f} s late"
            return ProbeResult(
                self.region.name,
                zone_name,
                healthy,
                time.monotonic() - started,
                error,
                stamp,
                full=healthy and full,
                busy=healthy and busy,
            )

        return list(await asyncio.gather(*(one(z.name, z.address) for z in self.region.zones)))

    async def push(self, http: httpx.AsyncClient, results: list[ProbeResult]) -> bool:
        """Send a round to every control plane instance, signed (each request signed
        anew: a nonce is used once); whether one took it. Failures are logged, never
        raised."""
        body = json.dumps(metric_data(results), separators=(",", ":")).encode()

        async def one(url: str) -> bool:
            headers = self._signer.headers("POST", routes.METRICS_INGEST, body)
            headers["Content-Type"] = "application/json"
            try:
                response = await http.post(url, content=body, headers=headers)
                if response.status_code == 200:
                    self._pushed(url)
                    return True
                self._not_pushed(
                    url, "the control plane at %s refused the datapoints: HTTP %s %s",
                    url, response.status_code, response.text[:200],
                )  # fmt: skip
            except httpx.HTTPError as exc:
                self._not_pushed(url, "cannot reach the control plane at %s: %s", url, exc)
            return False

        taken = any(await asyncio.gather(*(one(url) for url in self.ingest_urls)))
        if taken:
            self.last_pushed_at = self._clock()
        return taken

    def _not_pushed(self, url: str, message: str, *args: object) -> None:
        failed = self.failed_pushes.get(url, 0)
        self.failed_pushes[url] = failed + 1
        if failed == 0:  # the first of a run of failures; the rest are counted
            log.warning(message + " (logged again when it takes a push)", *args)

    def _pushed(self, url: str) -> None:
        failed = self.failed_pushes.get(url, 0)
        self.failed_pushes[url] = 0
        if failed:
            log.info("the control plane at %s takes the datapoints again, after %d failed "
                     "pushes", url, failed)  # fmt: skip

    async def run(self, rounds: int | None = None) -> None:
        """Probe and push every interval (forever, or `rounds` times).

        Rounds run on the alarm's period grid, a quarter into each period, and every
        datapoint carries its round's scheduled time: exactly one datapoint per zone per
        period, however long a probe takes. (A point stamped when its probe finished
        could fall into the next period and leave a gap, which the alarm counts as
        breaching.)
        """
        interval = self.config.timing.canary_interval
        report = LagReport(self.config.timing.canary_timeout / 2)
        # Restarted if it dies (logged); lives and ends with this run.
        watcher = TaskSupervisor().spawn(
            "canary-lag",
            lambda: watch(self.lag, interval=min(0.05, interval / 10), log=log, report=report),
            critical=False,
        )
        self._watching = True
        try:
            await self._run(interval, rounds)
        finally:
            self._watching = False
            await watcher.stop()

    async def _run(self, interval: float, rounds: int | None) -> None:
        previous: dict[str, tuple[bool, bool, bool]] = {}
        async with _http.async_client(timeout=max(1.0, interval)) as http:
            done = 0
            scheduled = (math.floor(self._clock() / interval) + 1.25) * interval
            while rounds is None or done < rounds:
                await self._sleep(max(0.0, scheduled - self._clock()))
                results = await self.probe_all(at=scheduled)
                for r in results:
                    if previous.get(r.zone) != (r.healthy, r.full, r.busy):
                        state = "healthy" if r.healthy else f"UNHEALTHY ({r.error})"
                        if r.full:
                            state += ", but full (at its connection cap)"
                        if r.busy:
                            state += f", but busy (shedding load; answered in {r.latency:.2f} s)"
                        log.info("%s %s: %s", r.region, r.zone, state)
                        previous[r.zone] = (r.healthy, r.full, r.busy)
                for publisher in self.publishers:
                    publisher.publish(results)
                await self.push(http, results)
                self.rounds += 1
                self.last_round_at = self._clock()
                self.last_results = results
                done += 1
                scheduled += interval
                if scheduled < self._clock():  # fell behind (a stall): skip missed rounds
                    scheduled = (math.floor(self._clock() / interval) + 1.25) * interval
