"""What the failover client reports: Prometheus metrics, the retry-rate alarm, the retry log."""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, Counter

from rideout._metrics import LabelCache
from rideout._validate import count, number, seconds
from rideout.client.http._errors import Attempt, Outcome
from rideout.errors import InvalidArgument

__all__ = ["ClientMetrics", "RetryRateAlarm", "RetryRateAlert"]

# The package's logger (not this module's): what users configure and tests capture.
log = logging.getLogger("rideout.client.http")


class ClientMetrics:
    """The failover client's Prometheus metrics, in ``registry`` (a new one by default).

    Names are stable: ``rideout_http_client_attempts_total{domain,outcome}``,
    ``rideout_http_client_retries_total{domain,cause}`` (domain = the attempt that
    failed) and ``rideout_http_client_requests_total{outcome}`` (the final outcome:
    ``ok``, ``client_error``, ``server_error`` for a response returned, or a
    :class:`GiveUpReason`). Share one object between clients to count them together.
    """

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        r = self.registry = registry if registry is not None else CollectorRegistry()
        self.attempts = Counter(
            "rideout_http_client_attempts",
            "HTTP attempts, by domain and outcome (status code or error kind).",
            ["domain", "outcome"],
            registry=r,
        )
        self.retries = Counter(
            "rideout_http_client_retries",
            "Retries, by the domain that failed and the cause.",
            ["domain", "cause"],
            registry=r,
        )
        self.requests = Counter(
            "rideout_http_client_requests",
            "Requests, by final outcome.",
            ["outcome"],
            registry=r,
        )
        self._attempts = LabelCache(self.attempts)
        self._retries = LabelCache(self.retries)
        self._requests = LabelCache(self.requests)

    def count_attempt(self, domain: str, outcome: Outcome) -> None:
        """Count one attempt."""
        self._attempts(domain, str(outcome)).inc()

    def count_retry(self, domain: str, cause: str) -> None:
        """Count one retry after a failed attempt on ``domain``."""
        self._retries(domain, cause).inc()

    def count_request(self, outcome: str) -> None:
        """Count one request's final outcome."""
        self._requests(outcome).inc()


@dataclass(frozen=True, slots=True)
class RetryRateAlert:
    """The retry rate over the alarm's window when it started (or stopped) firing."""

    firing: bool
    rate: float
    retries: int
    requests: int
    window: float


class RetryRateAlarm:
    """Calls ``on_alert`` when retries per request over a sliding window reach ``threshold``.

    The window is ``window`` seconds on ``clock`` (injectable), counted in ``buckets``
    slices, so memory stays bounded whatever the request rate. The alarm needs at
    least ``min_requests`` requests in the window to fire; it fires once when the rate
    reaches the threshold and calls ``on_clear`` (if given) once when it falls back
    below. Thread-safe; share one between clients to watch them together.
    """

    def __init__(
        self,
        on_alert: Callable[[RetryRateAlert], None],
        *,
        threshold: float = 0.2,
        window: float = 60.0,
        min_requests: int = 20,
        buckets: int = 60,
        on_clear: Callable[[RetryRateAlert], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.threshold = number("threshold", threshold, what="a number of retries per request")
        if self.threshold <= 0:
            raise InvalidArgument(f"threshold must be > 0, not {threshold!r}")
        self.window = seconds("window", window)
        self.min_requests = count("min_requests", min_requests, low=1)
        buckets = count("buckets", buckets, low=1)
        self._on_alert = on_alert
        self._on_clear = on_clear
        self._clock = clock
        self._width = self.window / buckets
        self._buckets = buckets
        self._slices: deque[list[int]] = deque()  # [slice index, requests, retries]
        self._requests = 0
        self._retries = 0
        self._firing = False
        self._lock = threading.Lock()

    @property
    def firing(self) -> bool:
        """Whether the alarm is firing now."""
        return self._firing

    def rate(self) -> float:
        """Retries per request over the window (0 with no requests)."""
        with self._lock:
            self._prune(self._slice())
            return self._retries / self._requests if self._requests else 0.0

    def record_request(self) -> None:
        """Count a request (call once per request, before its first attempt)."""
        self._record(1, 0)

    def record_retry(self) -> None:
        """Count a retry (an attempt after the first)."""
        self._record(0, 1)

    def _slice(self) -> int:
        return math.floor(self._clock() / self._width)

    def _prune(self, current: int) -> None:
        while self._slices and self._slices[0][0] <= current - self._buckets:
            _, requests, retries = self._slices.popleft()
            self._requests -= requests
            self._retries -= retries

    def _record(self, requests: int, retries: int) -> None:
        # Called on every request: locals and one prune test keep the common case short.
        event: RetryRateAlert | None = None
        with self._lock:
            current = math.floor(self._clock() / self._width)
            slices = self._slices
            if slices and slices[0][0] <= current - self._buckets:
                self._prune(current)
            if slices and slices[-1][0] == current:
                last = slices[-1]
                last[1] += requests
                last[2] += retries
            else:
                slices.append([current, requests, retries])
            total = self._requests = self._requests + requests
            retried = self._retries = self._retries + retries
            rate = retried / total if total else 0.0
            if self._firing:
                if rate < self.threshold:
                    self._firing = False
                    event = RetryRateAlert(False, rate, retried, total, self.window)
            elif total >= self.min_requests and rate >= self.threshold:
                self._firing = True
                event = RetryRateAlert(True, rate, retried, total, self.window)
        if event is not None:
            hook = self._on_alert if event.firing else self._on_clear
            if hook is not None:
                _call_hook(hook, event)


def _call_hook(hook: Callable[[Any], None], argument: object) -> None:
    """A broken hook is logged, never allowed to break a request."""
    try:
        hook(argument)
    except Exception:
        log.exception("a failover client hook raised")


def _record_retry(
    metrics: ClientMetrics | None,
    alarm: RetryRateAlarm | None,
    method: str,
    path: str,
    failed: Attempt,
    domain: str,
    delay: float,
) -> None:
    """Log and count a retry: ``failed`` is the attempt that failed, ``domain`` the next one's."""
    cause = str(failed.outcome)
    log.warning(
        "%s %s: attempt %d on %s failed (%s%s); attempt %d on %s in %.3g s",
        method,
        path,
        failed.number,
        failed.domain,
        cause,
        f": {failed.error}" if failed.error else "",
        failed.number + 1,
        domain,
        delay,
        extra={
            "domain": failed.domain,
            "attempt": failed.number,
            "cause": cause,
            "next_domain": domain,
            "delay": delay,
        },
    )
    if metrics is not None:
        metrics.count_retry(failed.domain, cause)
    if alarm is not None:
        alarm.record_retry()
