"""A REST client that rides out DNS failures, timeouts and 5xx by switching domains.

Seed 001's design: a plan of base URLs per geography (primary, backup global, regional
1, regional 2), a fixed backoff schedule of delays before each attempt (default
``(0, 1, 3, 6, 10)`` s: five requests, about twenty seconds of waiting), and attempt
``k`` sent to domain ``min(k, len(domains) - 1)``::

    plan = DomainPlan({
        "cn": ("https://api.sd-rtn.com", "https://api.agora.io",
               "https://api-cn-east-1.sd-rtn.com", "https://api-cn-north-1.sd-rtn.com"),
        "overseas": ("https://api.agora.io", "https://api.sd-rtn.com",
                     "https://api-us-west-1.agora.io", "https://api-us-east-1.agora.io"),
    })
    with FailoverClient(plan, "overseas") as client:
        response = client.get("/v1/rooms")

(The seed's table repeats the primary once before moving on while its code does not;
``DomainPlan(..., order=(0, 0, 1, 2, 3))`` gives the table's sequence.)

How the pieces divide the work, following urllib3's ``Retry`` and stamina:

- :class:`RetryPolicy` is immutable data: the schedule, what is retried, the caps.
- :func:`is_retryable` is the pure predicate: may this outcome of this request be
  retried? Timeouts, connection errors, DNS failures and the statuses in
  ``retry_statuses`` (429 only with ``Retry-After``) are; other 4xx never are. A
  request that provably never left (DNS, connect, pool) may be retried whatever its
  method; one that may have reached the server only if its method is idempotent
  (GET, HEAD, PUT, DELETE, OPTIONS) or it carries an ``Idempotency-Key`` (POST,
  PATCH).
- :class:`RetryState` is the loop's decisions with no I/O: it answers "send attempt
  ``k`` to domain X with timeout T", "sleep S", "done" or "give up", and records the
  history. :class:`FailoverClient` (sync) and :class:`AsyncFailoverClient` (async)
  are thin drivers around it; the clock and the sleep are injectable.
- The loop is bounded by the schedule's length and by ``total_timeout``, which is
  never overrun: a sleep that would pass the deadline is not taken, and each
  attempt's timeout is ``min(attempt_timeout, time left)``. The async client cancels
  an attempt at the deadline; the sync client cannot interrupt a blocking read, so it
  caps every phase of the attempt (pool, connect, send, headers, body) by the time
  left when that phase starts.
- An optional shared :class:`~rideout.backoff.RetryBudget` makes a fleet fail fast
  (:class:`RetryBudgetExhausted`) instead of multiplying an outage's load.
- Every retry is logged (logger ``rideout.client.http``), every attempt reaches the
  ``on_attempt`` hook and :class:`ClientMetrics`, and :class:`RetryRateAlarm` calls
  its hook when retries become frequent (the seed's "alert when retries are
  frequent").
- When the request cannot succeed, one exception: :class:`AllAttemptsFailed` (or its
  subclass :class:`RetryBudgetExhausted`) with every :class:`Attempt` and the last
  response, if any. httpx exceptions never escape.
"""

from __future__ import annotations

import asyncio
import email.utils
import ipaddress
import logging
import math
import socket
import threading
import time
import uuid
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import Any, Generic, TypeAlias, TypeVar

import httpx
from prometheus_client import CollectorRegistry, Counter

from rideout.backoff import Deadline, FixedSchedule, RetryBudget
from rideout.client.resolve import ResolutionError, Resolver

__all__ = [
    "DEFAULT_SCHEDULE",
    "IDEMPOTENCY_KEY_HEADER",
    "AllAttemptsFailed",
    "AsyncFailoverClient",
    "Attempt",
    "ClientMetrics",
    "DomainPlan",
    "Done",
    "ErrorKind",
    "FailoverClient",
    "GiveUp",
    "GiveUpReason",
    "Outcome",
    "RetryBudgetExhausted",
    "RetryPolicy",
    "RetryRateAlarm",
    "RetryRateAlert",
    "RetryState",
    "Send",
    "Sleep",
    "UnknownGeoError",
    "classify",
    "is_retryable",
    "parse_retry_after",
]

log = logging.getLogger("rideout.client.http")

DEFAULT_SCHEDULE = FixedSchedule((0.0, 1.0, 3.0, 6.0, 10.0))
"""Seed 001's schedule: delays before each of five attempts, about 20 s of waiting."""

IDEMPOTENCY_KEY_HEADER = "Idempotency-Key"

_HeadersIn: TypeAlias = Mapping[str, str] | Sequence[tuple[str, str]] | httpx.Headers
R = TypeVar("R")


# ------------------------------------------------------------------------ outcomes


class ErrorKind(StrEnum):
    """What went wrong in an attempt that got no HTTP response."""

    DNS_ERROR = "dns_error"
    """The domain's name did not resolve (the request never left)."""
    CONNECT_ERROR = "connect_error"
    """No connection: refused, unreachable, TLS handshake failed (never left)."""
    CONNECT_TIMEOUT = "connect_timeout"
    """No connection within the timeout (never left)."""
    POOL_TIMEOUT = "pool_timeout"
    """No free connection in the client's pool within the timeout (never left)."""
    WRITE_TIMEOUT = "write_timeout"
    """Sending the request timed out (it may have reached the server)."""
    READ_TIMEOUT = "read_timeout"
    """No response within the timeout (the server may be processing it)."""
    TIMEOUT = "timeout"
    """The attempt as a whole ran out of time (async client: cut at its bound)."""
    WRITE_ERROR = "write_error"
    """The connection broke while sending."""
    READ_ERROR = "read_error"
    """The connection broke while receiving."""
    PROTOCOL_ERROR = "protocol_error"
    """The server broke HTTP (e.g. closed the connection without a response)."""
    REQUEST_ERROR = "request_error"
    """The request itself is unusable (bad header, unsupported URL); never retried."""


Outcome: TypeAlias = int | ErrorKind
"""An attempt's outcome: the HTTP status it got, or the kind of error."""

_UNSENT = frozenset(
    {
        ErrorKind.DNS_ERROR,
        ErrorKind.CONNECT_ERROR,
        ErrorKind.CONNECT_TIMEOUT,
        ErrorKind.POOL_TIMEOUT,
    }
)
_TIMEOUTS = frozenset(
    {
        ErrorKind.CONNECT_TIMEOUT,
        ErrorKind.POOL_TIMEOUT,
        ErrorKind.WRITE_TIMEOUT,
        ErrorKind.READ_TIMEOUT,
        ErrorKind.TIMEOUT,
    }
)


@dataclass(frozen=True, slots=True)
class Attempt:
    """One attempt of a request: where, when (on the client's clock), how long, and how it ended."""

    domain: str
    number: int
    started: float
    elapsed: float
    outcome: Outcome
    error: str = ""
    address: str | None = None
    """The address connected to, when the client resolved the name itself."""

    def describe(self) -> str:
        """``#1 https://b.example 503 (0.012 s)``: one line for messages and logs."""
        what = str(self.outcome)
        if self.error:
            what += f": {self.error}"
        return f"#{self.number} {self.domain} {what} ({self.elapsed:.3f} s)"


class GiveUpReason(StrEnum):
    """Why the client stopped trying."""

    ATTEMPTS = "attempts_exhausted"
    """Every attempt of the schedule was made."""
    DEADLINE = "deadline"
    """The next sleep or attempt would have passed ``total_timeout``."""
    NOT_RETRYABLE = "not_retryable"
    """The failure may not be retried (e.g. a POST without a key timed out mid-request)."""
    BUDGET = "retry_budget"
    """The shared retry budget refused the retry."""


class AllAttemptsFailed(Exception):
    """The request did not succeed and the client stopped trying.

    ``attempts`` is the history, ``last_response`` the last HTTP response received (a
    retryable 5xx, say) or None, ``reason`` why the client stopped.
    """

    def __init__(
        self,
        method: str,
        path: str,
        reason: GiveUpReason,
        attempts: Sequence[Attempt],
        last_response: httpx.Response | None = None,
    ) -> None:
        self.method = method
        self.path = path
        self.reason = reason
        self.attempts: tuple[Attempt, ...] = tuple(attempts)
        self.last_response = last_response
        super().__init__(method, path, reason, self.attempts)

    @property
    def last_attempt(self) -> Attempt | None:
        """The last attempt made, if any."""
        return self.attempts[-1] if self.attempts else None

    def __str__(self) -> str:
        why = {
            GiveUpReason.ATTEMPTS: "every attempt of the schedule failed",
            GiveUpReason.DEADLINE: "the total timeout left no time for another attempt",
            GiveUpReason.NOT_RETRYABLE: "the failure is not safe to retry",
            GiveUpReason.BUDGET: "the retry budget is exhausted",
        }[self.reason]
        history = "; ".join(a.describe() for a in self.attempts) or "no attempt made"
        return f"{self.method} {self.path} failed after {len(self.attempts)} attempt(s): {why} [{history}]"

    def __reduce__(self) -> tuple[Any, ...]:
        return (
            type(self),
            (self.method, self.path, self.reason, self.attempts, self.last_response),
        )


class RetryBudgetExhausted(AllAttemptsFailed):
    """A retry was due but the shared :class:`~rideout.backoff.RetryBudget` could not pay."""

    def __init__(
        self,
        method: str,
        path: str,
        reason: GiveUpReason = GiveUpReason.BUDGET,
        attempts: Sequence[Attempt] = (),
        last_response: httpx.Response | None = None,
    ) -> None:
        super().__init__(method, path, reason, attempts, last_response)


class UnknownGeoError(ValueError):
    """The client was asked for a geography its :class:`DomainPlan` does not have."""


# ------------------------------------------------------------------------ policy


def _seconds(name: str, value: object, *, positive: bool = True) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{name} must be a number of seconds, not {value!r}")
    if not math.isfinite(value) or value < 0 or (positive and value == 0):
        raise ValueError(
            f"{name} must be a finite number {'>' if positive else '>='} 0, not {value!r}"
        )
    return float(value)


def _statuses(name: str, values: object) -> frozenset[int]:
    if isinstance(values, str | bytes) or not isinstance(values, Iterable):
        raise TypeError(f"{name} must be a set of HTTP status codes, not {values!r}")
    result = frozenset(values)
    for status in result:
        if isinstance(status, bool) or not isinstance(status, int) or not 100 <= status <= 599:
            raise ValueError(f"{name} holds {status!r}, which is not an HTTP status code")
    return result


def _methods(name: str, values: object) -> frozenset[str]:
    if isinstance(values, str | bytes) or not isinstance(values, Iterable):
        raise TypeError(f"{name} must be a set of HTTP methods, not {values!r}")
    result = set()
    for method in values:
        if not isinstance(method, str) or not method.isalpha():
            raise ValueError(f"{name} holds {method!r}, which is not an HTTP method")
        result.add(method.upper())
    return frozenset(result)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """What the failover client retries, when, and for how long. Immutable.

    ``schedule``: the delay before each attempt; its length bounds the attempts.
    ``attempt_timeout``: each attempt's timeout (connect, write, read and pool each),
    never more than the time left of ``total_timeout``, the per-request deadline.
    ``retry_statuses`` are retried; 429 only when it carries ``Retry-After``.
    ``retry_methods`` are retried after any retryable failure; ``key_methods`` only
    when the request carries an ``Idempotency-Key`` (``idempotency_keys=True`` adds a
    fresh UUID4 key to such requests, the same one on every attempt). With
    ``retry_unsent`` any method is retried when the attempt provably never reached a
    server (DNS failure, no connection). ``Retry-After`` (delta-seconds or HTTP-date)
    on ``retry_after_statuses`` lengthens the next delay to what the server asks, up to
    ``max_retry_after`` seconds, when ``respect_retry_after`` is on.
    """

    schedule: FixedSchedule = DEFAULT_SCHEDULE
    attempt_timeout: float = 10.0
    total_timeout: float = 60.0
    retry_statuses: frozenset[int] = frozenset({500, 502, 503, 504})
    retry_methods: frozenset[str] = frozenset({"GET", "HEAD", "PUT", "DELETE", "OPTIONS"})
    key_methods: frozenset[str] = frozenset({"POST", "PATCH"})
    idempotency_keys: bool = False
    retry_unsent: bool = True
    respect_retry_after: bool = True
    retry_after_statuses: frozenset[int] = frozenset({429, 503})
    max_retry_after: float = 30.0

    def __post_init__(self) -> None:
        if not isinstance(self.schedule, FixedSchedule):
            raise TypeError(
                f"schedule must be a rideout.backoff.FixedSchedule, not {self.schedule!r}"
            )
        set_ = object.__setattr__
        set_(self, "attempt_timeout", _seconds("attempt_timeout", self.attempt_timeout))
        set_(self, "total_timeout", _seconds("total_timeout", self.total_timeout))
        set_(
            self,
            "max_retry_after",
            _seconds("max_retry_after", self.max_retry_after, positive=False),
        )
        set_(self, "retry_statuses", _statuses("retry_statuses", self.retry_statuses))
        set_(
            self,
            "retry_after_statuses",
            _statuses("retry_after_statuses", self.retry_after_statuses),
        )
        set_(self, "retry_methods", _methods("retry_methods", self.retry_methods))
        set_(self, "key_methods", _methods("key_methods", self.key_methods))
        for name in ("idempotency_keys", "retry_unsent", "respect_retry_after"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{name} must be a bool, not {getattr(self, name)!r}")

    @property
    def max_attempts(self) -> int:
        """How many attempts a request may make (the schedule's length)."""
        return self.schedule.max_attempts


def _header(headers: _HeadersIn | None, name: str) -> str | None:
    """The value of header ``name`` (case-insensitive), or None."""
    if headers is None:
        return None
    if isinstance(headers, httpx.Headers):
        value: str | None = headers.get(name)
        return value
    wanted = name.lower()
    items = headers.items() if isinstance(headers, Mapping) else headers
    for key, value in items:
        if key.lower() == wanted:
            return value
    return None


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds a ``Retry-After`` value asks for, or None when absent or invalid.

    Accepts delta-seconds (``"120"``) and an HTTP-date (``"Wed, 21 Oct 2015 07:28:00
    GMT"``, measured from ``now``, Unix seconds, default the wall clock; a date in the
    past means 0).
    """
    if value is None:
        return None
    text = value.strip()
    if text.isdigit() and text.isascii():
        return float(int(text))
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    current = time.time() if now is None else now
    return max(0.0, when.timestamp() - current)


def _method_may_retry(method: str, headers: _HeadersIn | None, policy: RetryPolicy) -> bool:
    if method in policy.retry_methods:
        return True
    return method in policy.key_methods and bool(_header(headers, IDEMPOTENCY_KEY_HEADER))


def is_retryable(
    method: str,
    outcome: Outcome | str,
    headers: _HeadersIn | None,
    policy: RetryPolicy,
    response_headers: _HeadersIn | None = None,
) -> bool:
    """Whether an attempt of ``method`` that ended in ``outcome`` may be retried.

    ``headers`` are the request's (an ``Idempotency-Key`` makes POST and PATCH
    retryable), ``response_headers`` the response's (``Retry-After`` makes 429
    retryable). Pure: no clock, no I/O.
    """
    verb = method.upper()
    if isinstance(outcome, bool):
        raise TypeError(f"outcome must be a status code or an ErrorKind, not {outcome!r}")
    if isinstance(outcome, int):
        if outcome in policy.retry_statuses:
            return _method_may_retry(verb, headers, policy)
        if (
            outcome == 429
            and policy.respect_retry_after
            and 429 in policy.retry_after_statuses
            and parse_retry_after(_header(response_headers, "retry-after"), now=0.0) is not None
        ):
            return _method_may_retry(verb, headers, policy)
        return False
    kind = ErrorKind(outcome)
    if kind is ErrorKind.REQUEST_ERROR:
        return False
    if policy.retry_unsent and kind in _UNSENT:
        return True
    return _method_may_retry(verb, headers, policy)


# -------------------------------------------------------------------------- domains


def _base_url(geo: str, url: object) -> str:
    if not isinstance(url, str):
        raise TypeError(f"geo {geo!r}: a base URL must be a str, not {url!r}")
    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL as exc:
        raise ValueError(f"geo {geo!r}: {url!r} is not a URL: {exc}") from None
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise ValueError(f"geo {geo!r}: {url!r} must be an absolute http(s) URL")
    if parsed.query or parsed.fragment:
        raise ValueError(f"geo {geo!r}: {url!r} must not have a query or a fragment")
    return url.rstrip("/")


@dataclass(frozen=True, slots=True)
class DomainPlan:
    """Base URLs per geography, in failover order: primary, backup, regional, ...

    Attempt ``k`` goes to domain ``min(k, len - 1)`` of the chosen geography, or, with
    ``order``, to domain ``order[min(k, len(order) - 1)]`` (seed 001's table is
    ``order=(0, 0, 1, 2, 3)``: the primary twice, then each other domain). A base URL
    may carry a path prefix; request paths are joined to it.
    """

    geos: Mapping[str, Sequence[str]]
    order: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.geos, Mapping) or not self.geos:
            raise ValueError("a DomainPlan needs at least one geography")
        frozen: dict[str, tuple[str, ...]] = {}
        for geo, urls in self.geos.items():
            if not isinstance(geo, str) or not geo:
                raise ValueError(f"a geography must be a non-empty str, not {geo!r}")
            if isinstance(urls, str) or not isinstance(urls, Sequence) or not urls:
                raise ValueError(f"geo {geo!r} needs a non-empty sequence of base URLs")
            frozen[geo] = tuple(_base_url(geo, url) for url in urls)
        object.__setattr__(self, "geos", MappingProxyType(frozen))
        if self.order is not None:
            order = tuple(self.order)
            shortest = min(len(urls) for urls in frozen.values())
            if not order or any(
                isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < shortest
                for i in order
            ):
                raise ValueError(
                    f"order must be a non-empty tuple of domain indexes below {shortest}, "
                    f"not {self.order!r}"
                )
            object.__setattr__(self, "order", order)

    def __hash__(self) -> int:
        return hash((tuple((g, tuple(u)) for g, u in self.geos.items()), self.order))

    def for_geo(self, geo: str) -> tuple[str, ...]:
        """The base URLs of ``geo``, in failover order; UnknownGeoError if there is none."""
        urls = self.geos.get(geo)
        if urls is None:
            known = ", ".join(repr(g) for g in self.geos)
            raise UnknownGeoError(f"unknown geo {geo!r}: the domain plan has {known}")
        return tuple(urls)

    def targets(self, geo: str, attempts: int) -> tuple[str, ...]:
        """The base URL for each of ``attempts`` attempts."""
        urls = self.for_geo(geo)
        if self.order is None:
            return tuple(urls[min(k, len(urls) - 1)] for k in range(attempts))
        order = self.order
        return tuple(urls[order[min(k, len(order) - 1)]] for k in range(attempts))


def _join(base: str, path: str) -> str:
    if not isinstance(path, str) or not path.startswith("/"):
        raise ValueError(f"path must start with '/', not {path!r} (the domain comes from the plan)")
    return base + path


# --------------------------------------------------------------------- observability


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
        # labels() takes a lock and builds a key on every call: keep the children.
        self._children: dict[tuple[str, ...], Any] = {}

    def _child(self, counter: Counter, *labels: str) -> Any:
        key = (str(id(counter)), *labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = counter.labels(*labels)
        return child

    def count_attempt(self, domain: str, outcome: Outcome) -> None:
        """Count one attempt."""
        self._child(self.attempts, domain, str(outcome)).inc()

    def count_retry(self, domain: str, cause: str) -> None:
        """Count one retry after a failed attempt on ``domain``."""
        self._child(self.retries, domain, cause).inc()

    def count_request(self, outcome: str) -> None:
        """Count one request's final outcome."""
        self._child(self.requests, outcome).inc()


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
        self.threshold = _seconds("threshold", threshold)
        self.window = _seconds("window", window)
        for name, value in (("min_requests", min_requests), ("buckets", buckets)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, not {value!r}")
        self.min_requests = min_requests
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
        with self._lock:
            current = self._slice()
            self._prune(current)
            if self._slices and self._slices[-1][0] == current:
                self._slices[-1][1] += requests
                self._slices[-1][2] += retries
            else:
                self._slices.append([current, requests, retries])
            self._requests += requests
            self._retries += retries
            rate = self._retries / self._requests if self._requests else 0.0
            event: RetryRateAlert | None = None
            if not self._firing and self._requests >= self.min_requests and rate >= self.threshold:
                self._firing = True
                event = RetryRateAlert(True, rate, self._retries, self._requests, self.window)
            elif self._firing and rate < self.threshold:
                self._firing = False
                event = RetryRateAlert(False, rate, self._retries, self._requests, self.window)
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


@dataclass(frozen=True, slots=True)
class _Observers:
    metrics: ClientMetrics | None = None
    on_attempt: Callable[[Attempt], None] | None = None
    alarm: RetryRateAlarm | None = None

    def request(self) -> None:
        if self.alarm is not None:
            self.alarm.record_request()

    def attempt(self, attempt: Attempt) -> None:
        if self.metrics is not None:
            self.metrics.count_attempt(attempt.domain, attempt.outcome)
        if self.on_attempt is not None:
            _call_hook(self.on_attempt, attempt)

    def retry(self, method: str, path: str, failed: Attempt, domain: str, delay: float) -> None:
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
        if self.metrics is not None:
            self.metrics.count_retry(failed.domain, cause)
        if self.alarm is not None:
            self.alarm.record_retry()

    def final(self, outcome: str) -> None:
        if self.metrics is not None:
            self.metrics.count_request(outcome)


# ------------------------------------------------------------------- sans-I/O state

_PHASES = 4  # httpx bounds pool wait, connect, write and read, each by the timeout

# RetryBudget is not thread-safe; a budget may be shared by clients in many threads.
_BUDGET_LOCK = threading.Lock()


@dataclass(frozen=True, slots=True)
class Send:
    """Action: send attempt ``number`` to ``domain`` (base URL ``url`` + path) within ``timeout`` s.

    ``tight`` is True when the attempt's phases (pool, connect, write, read: each
    bounded by ``timeout`` in httpx) could together pass the deadline, so the driver
    must hold the attempt as a whole to ``timeout``.
    """

    number: int
    domain: str
    url: str
    timeout: float
    tight: bool = True


@dataclass(frozen=True, slots=True)
class Sleep:
    """Action: sleep ``seconds``, then call :meth:`RetryState.slept`."""

    seconds: float


@dataclass(frozen=True, slots=True)
class Done(Generic[R]):
    """Action: return ``response`` to the caller."""

    response: R


@dataclass(frozen=True, slots=True)
class GiveUp:
    """Action: raise ``error``."""

    error: AllAttemptsFailed


Action: TypeAlias = Send | Sleep | Done[R] | GiveUp


class RetryState(Generic[R]):
    """The failover loop's decisions for one request, with no I/O (sans-I/O).

    Drive it with::

        action = state.start()
        while True:
            if isinstance(action, Sleep):   sleep(action.seconds); action = state.slept()
            elif isinstance(action, Send):  ...attempt...; action = state.finished(outcome, ...)
            elif isinstance(action, Done):  return action.response
            else:                           raise action.error

    The sequence is finite: at most ``policy.max_attempts`` sends, and no sleep or
    send that would pass the deadline. ``clock`` measures the deadline and the
    attempts; ``wall_clock`` (Unix time) only reads HTTP-date ``Retry-After`` values.
    The response type ``R`` is whatever the driver passes to :meth:`finished`.
    """

    def __init__(
        self,
        policy: RetryPolicy,
        targets: Sequence[str],
        method: str,
        path: str,
        headers: _HeadersIn | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        budget: RetryBudget | None = None,
        observers: _Observers | None = None,
    ) -> None:
        if len(targets) < policy.max_attempts:
            raise ValueError(f"need a domain for each of {policy.max_attempts} attempts")
        self.policy = policy
        self.method = method.upper()
        self.path = path
        self.headers = headers
        self._targets = tuple(targets)
        self._clock = clock
        self._wall_clock = wall_clock
        self._budget = budget
        self._observers = observers if observers is not None else _Observers()
        self._deadline = Deadline(policy.total_timeout, clock)
        self._attempts: list[Attempt] = []
        self._next = 0
        self._current: Send | None = None
        self._started = 0.0
        self._last_response: Any = None
        self._over = False

    @property
    def attempts(self) -> tuple[Attempt, ...]:
        """The attempts so far."""
        return tuple(self._attempts)

    def remaining(self) -> float:
        """Seconds left before the deadline."""
        return self._deadline.remaining()

    def start(self) -> Action[R]:
        """The first action of the request."""
        if self._next or self._over or self._current is not None:
            raise RuntimeError("RetryState.start() called twice")
        self._observers.request()
        return self._wait_then_send(self.policy.schedule.delays[0])

    def slept(self) -> Action[R]:
        """The action after a :class:`Sleep`."""
        return self._send()

    def finished(
        self,
        outcome: Outcome,
        *,
        error: str = "",
        response: R | None = None,
        response_headers: _HeadersIn | None = None,
        address: str | None = None,
    ) -> Action[R]:
        """Record the outcome of the current :class:`Send`; the next action."""
        send = self._current
        if send is None:
            raise RuntimeError("RetryState.finished() without a Send in progress")
        self._current = None
        attempt = Attempt(
            domain=send.domain,
            number=send.number,
            started=self._started,
            elapsed=max(0.0, self._clock() - self._started),
            outcome=outcome,
            error=error,
            address=address,
        )
        self._attempts.append(attempt)
        self._observers.attempt(attempt)
        if response is not None:
            self._last_response = response
        if not is_retryable(self.method, outcome, self.headers, self.policy, response_headers):
            if isinstance(outcome, int) and response is not None:
                if self._budget is not None and outcome < 500:
                    with _BUDGET_LOCK:
                        self._budget.record_success()
                self._over = True
                self._observers.final(
                    "ok" if outcome < 400 else "client_error" if outcome < 500 else "server_error"
                )
                return Done(response)
            return self._give_up(GiveUpReason.NOT_RETRYABLE)
        if self._next >= self.policy.max_attempts:
            return self._give_up(GiveUpReason.ATTEMPTS)
        delay = self.policy.schedule.delay(self._next)
        if (
            isinstance(outcome, int)
            and self.policy.respect_retry_after
            and outcome in self.policy.retry_after_statuses
        ):
            asked = parse_retry_after(
                _header(response_headers, "retry-after"), now=self._wall_clock()
            )
            if asked is not None:
                delay = max(delay, min(asked, self.policy.max_retry_after))
        if not self._deadline.allows(delay):
            return self._give_up(GiveUpReason.DEADLINE)
        if self._budget is not None:
            with _BUDGET_LOCK:
                paid = self._budget.try_acquire(is_timeout=outcome in _TIMEOUTS)
            if not paid:
                return self._give_up(GiveUpReason.BUDGET)
        self._observers.retry(self.method, self.path, attempt, self._targets[self._next], delay)
        return self._wait_then_send(delay)

    def _wait_then_send(self, delay: float) -> Action[R]:
        if delay > 0:
            if not self._deadline.allows(delay):
                return self._give_up(GiveUpReason.DEADLINE)
            return Sleep(delay)
        return self._send()

    def _send(self) -> Action[R]:
        if self._over or self._current is not None or self._next >= self.policy.max_attempts:
            raise RuntimeError("RetryState: no attempt is due")
        remaining = self._deadline.remaining()
        if remaining <= 0:
            return self._give_up(GiveUpReason.DEADLINE)
        number = self._next
        self._next += 1
        domain = self._targets[number]
        timeout = self.policy.attempt_timeout
        send = Send(
            number,
            domain,
            _join(domain, self.path),
            min(timeout, remaining),
            remaining < _PHASES * timeout,
        )
        self._current = send
        self._started = self._clock()
        return send

    def _give_up(self, reason: GiveUpReason) -> GiveUp:
        self._over = True
        self._observers.final(reason.value)
        cls = RetryBudgetExhausted if reason is GiveUpReason.BUDGET else AllAttemptsFailed
        return GiveUp(cls(self.method, self.path, reason, self._attempts, self._last_response))


# ------------------------------------------------------------------------- drivers


def classify(exc: httpx.HTTPError | ResolutionError) -> ErrorKind:
    """The :class:`ErrorKind` of an httpx (or resolution) exception."""
    if isinstance(exc, ResolutionError):
        return ErrorKind.DNS_ERROR
    if isinstance(exc, httpx.ConnectTimeout):
        return ErrorKind.CONNECT_TIMEOUT
    if isinstance(exc, httpx.ReadTimeout):
        return ErrorKind.READ_TIMEOUT
    if isinstance(exc, httpx.WriteTimeout):
        return ErrorKind.WRITE_TIMEOUT
    if isinstance(exc, httpx.PoolTimeout):
        return ErrorKind.POOL_TIMEOUT
    if isinstance(exc, httpx.TimeoutException):
        return ErrorKind.TIMEOUT
    if isinstance(exc, httpx.ConnectError):
        return ErrorKind.DNS_ERROR if _caused_by_dns(exc) else ErrorKind.CONNECT_ERROR
    if isinstance(exc, httpx.ReadError):
        return ErrorKind.READ_ERROR
    if isinstance(exc, httpx.WriteError):
        return ErrorKind.WRITE_ERROR
    if isinstance(exc, httpx.RemoteProtocolError):
        return ErrorKind.PROTOCOL_ERROR
    if isinstance(exc, httpx.NetworkError):
        return ErrorKind.READ_ERROR  # CloseError and any future network failure
    return ErrorKind.REQUEST_ERROR


def _caused_by_dns(exc: BaseException) -> bool:
    """Whether a connect error comes from name resolution (``getaddrinfo``)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, socket.gaierror):
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    text = str(exc)
    return (
        "Name or service not known" in text
        or "getaddrinfo failed" in text
        or ("nodename nor servname" in text)
    )


def _message(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


@dataclass(slots=True)
class _Prepared:
    method: str
    path: str
    headers: httpx.Headers | None
    params: Any
    content: bytes | str | None
    data: Mapping[str, Any] | None
    json: Any
    extensions: dict[str, Any] = field(default_factory=dict)


class _ClientBase:
    """What the sync and async clients share: configuration and request preparation."""

    def __init__(
        self,
        plan: DomainPlan,
        geo: str,
        *,
        policy: RetryPolicy,
        budget: RetryBudget | None,
        metrics: ClientMetrics | None,
        on_attempt: Callable[[Attempt], None] | None,
        alarm: RetryRateAlarm | None,
        clock: Callable[[], float],
        wall_clock: Callable[[], float],
    ) -> None:
        if not isinstance(plan, DomainPlan):
            raise TypeError(f"plan must be a DomainPlan, not {plan!r}")
        if not isinstance(policy, RetryPolicy):
            raise TypeError(f"policy must be a RetryPolicy, not {policy!r}")
        self.plan = plan
        self.geo = geo
        self.policy = policy
        self.budget = budget
        self.metrics = metrics
        self.domains = plan.for_geo(geo)
        self._targets = plan.targets(geo, policy.max_attempts)
        self._observers = _Observers(metrics, on_attempt, alarm)
        self._clock = clock
        self._wall_clock = wall_clock

    def _prepare(
        self,
        method: str,
        path: str,
        *,
        params: Any,
        headers: _HeadersIn | None,
        content: bytes | str | None,
        data: Mapping[str, Any] | None,
        json: Any,
        idempotency_key: str | None,
    ) -> _Prepared:
        verb = method.upper()
        _join("", path)  # validate the path before anything is sent
        auto_key = self.policy.idempotency_keys and verb in self.policy.key_methods
        merged: httpx.Headers | None = None
        if headers is not None or idempotency_key is not None or auto_key:
            merged = httpx.Headers(headers)
            if idempotency_key is not None:
                merged[IDEMPOTENCY_KEY_HEADER] = idempotency_key
            elif auto_key and IDEMPOTENCY_KEY_HEADER not in merged:
                merged[IDEMPOTENCY_KEY_HEADER] = str(uuid.uuid4())
        return _Prepared(verb, path, merged, params, content, data, json)

    def _state(self, prepared: _Prepared) -> RetryState[httpx.Response]:
        return RetryState(
            self.policy,
            self._targets,
            prepared.method,
            prepared.path,
            prepared.headers,
            clock=self._clock,
            wall_clock=self._wall_clock,
            budget=self.budget,
            observers=self._observers,
        )

    @staticmethod
    def _build(
        client: httpx.Client | httpx.AsyncClient,
        prepared: _Prepared,
        url: str,
        timeouts: dict[str, float],
        extensions: dict[str, Any],
        host_header: str | None = None,
    ) -> httpx.Request:
        headers = prepared.headers
        if host_header is not None:
            headers = headers.copy() if headers is not None else httpx.Headers()
            headers["Host"] = host_header
        return client.build_request(
            prepared.method,
            url,
            params=prepared.params,
            headers=headers,
            content=prepared.content,
            data=prepared.data,
            json=prepared.json,
            extensions={"timeout": timeouts, **extensions},
        )


def _timeouts(seconds: float) -> dict[str, float]:
    return {"connect": seconds, "read": seconds, "write": seconds, "pool": seconds}


_MIN_PHASE = 0.001  # a phase timeout of 0 would make the socket non-blocking


class FailoverClient(_ClientBase):
    """Synchronous failover client on ``httpx.Client``.

    Requests take a path (``client.get("/v1/items")``) that is joined to each
    attempt's domain. Returns the ``httpx.Response`` of the first attempt that is not
    retryable (a 2xx, a 4xx, ...); raises :class:`AllAttemptsFailed` otherwise. Pass
    ``transport`` (an httpx transport) or a ready ``client`` (not closed by this
    object). ``clock`` and ``sleep`` are injectable (tests record the delays instead of
    sleeping). Thread-safe as far as ``httpx.Client`` is.
    """

    def __init__(
        self,
        plan: DomainPlan,
        geo: str,
        *,
        policy: RetryPolicy | None = None,
        budget: RetryBudget | None = None,
        metrics: ClientMetrics | None = None,
        on_attempt: Callable[[Attempt], None] | None = None,
        alarm: RetryRateAlarm | None = None,
        headers: _HeadersIn | None = None,
        transport: httpx.BaseTransport | None = None,
        client: httpx.Client | None = None,
        trust_env: bool = True,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(
            plan,
            geo,
            policy=policy if policy is not None else RetryPolicy(),
            budget=budget,
            metrics=metrics,
            on_attempt=on_attempt,
            alarm=alarm,
            clock=clock,
            wall_clock=wall_clock,
        )
        self._owns_client = client is None
        self._client = (
            client
            if client is not None
            else httpx.Client(
                headers=headers,
                transport=transport,
                trust_env=trust_env,
                timeout=self.policy.attempt_timeout,
            )
        )
        self._sleep = sleep

    def __enter__(self) -> FailoverClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the underlying ``httpx.Client`` if this object made it."""
        if self._owns_client:
            self._client.close()

    def request(
        self,
        method: str,
        path: str,
        *,
        params: Any = None,
        headers: _HeadersIn | None = None,
        content: bytes | str | None = None,
        data: Mapping[str, Any] | None = None,
        json: Any = None,
        idempotency_key: str | None = None,
    ) -> httpx.Response:
        """Send ``method path`` through the domain plan; see the class docstring."""
        prepared = self._prepare(
            method, path, params=params, headers=headers, content=content, data=data,
            json=json, idempotency_key=idempotency_key,
        )  # fmt: skip
        state = self._state(prepared)
        action = state.start()
        while True:
            if isinstance(action, Send):
                action = self._attempt(state, prepared, action)
            elif isinstance(action, Sleep):
                self._sleep(action.seconds)
                action = state.slept()
            elif isinstance(action, Done):
                return action.response
            else:
                raise action.error

    def _attempt(
        self, state: RetryState[httpx.Response], prepared: _Prepared, send: Send
    ) -> Action[httpx.Response]:
        timeouts = _timeouts(send.timeout)
        extensions = {"trace": self._tightener(timeouts, send.timeout)} if send.tight else {}
        try:
            request = self._build(self._client, prepared, send.url, timeouts, extensions)
            response = self._client.send(request)
        except httpx.HTTPError as exc:
            return state.finished(classify(exc), error=_message(exc))
        return state.finished(
            response.status_code, response=response, response_headers=response.headers
        )

    def _tightener(self, timeouts: dict[str, float], seconds: float) -> Callable[[str, Any], None]:
        """An httpcore trace hook that caps each phase's timeout by the time left.

        httpcore reads a phase's timeout when the phase starts; lowering it then keeps
        the phases together within the attempt's bound (used when that bound is the
        deadline's, see :attr:`Send.tight`).
        """
        clock = self._clock
        expires_at = clock() + seconds

        def tighten(event: str, info: Any) -> None:
            if event.endswith(".started"):
                left = max(_MIN_PHASE, expires_at - clock())
                for phase in timeouts:
                    timeouts[phase] = min(timeouts[phase], left)

        return tighten

    def get(self, path: str, **kwargs: Any) -> httpx.Response:
        """``request("GET", path, ...)``."""
        return self.request("GET", path, **kwargs)

    def head(self, path: str, **kwargs: Any) -> httpx.Response:
        """``request("HEAD", path, ...)``."""
        return self.request("HEAD", path, **kwargs)

    def options(self, path: str, **kwargs: Any) -> httpx.Response:
        """``request("OPTIONS", path, ...)``."""
        return self.request("OPTIONS", path, **kwargs)

    def post(self, path: str, **kwargs: Any) -> httpx.Response:
        """``request("POST", path, ...)``."""
        return self.request("POST", path, **kwargs)

    def put(self, path: str, **kwargs: Any) -> httpx.Response:
        """``request("PUT", path, ...)``."""
        return self.request("PUT", path, **kwargs)

    def patch(self, path: str, **kwargs: Any) -> httpx.Response:
        """``request("PATCH", path, ...)``."""
        return self.request("PATCH", path, **kwargs)

    def delete(self, path: str, **kwargs: Any) -> httpx.Response:
        """``request("DELETE", path, ...)``."""
        return self.request("DELETE", path, **kwargs)


class AsyncFailoverClient(_ClientBase):
    """Asynchronous failover client on ``httpx.AsyncClient``; same API as :class:`FailoverClient`.

    Each attempt is cancelled at its bound (``min(attempt_timeout, time left)``), so
    the deadline holds whatever the server does. With ``resolver`` (see
    :mod:`rideout.client.resolve`) the client resolves each domain's name itself,
    connects to the address it got (rotating through the answer on repeated attempts
    to one domain) and sends the original ``Host`` (and TLS SNI); a resolution failure
    is an attempt with outcome ``dns_error``. Runs on asyncio.
    """

    def __init__(
        self,
        plan: DomainPlan,
        geo: str,
        *,
        policy: RetryPolicy | None = None,
        budget: RetryBudget | None = None,
        metrics: ClientMetrics | None = None,
        on_attempt: Callable[[Attempt], None] | None = None,
        alarm: RetryRateAlarm | None = None,
        headers: _HeadersIn | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        client: httpx.AsyncClient | None = None,
        resolver: Resolver | None = None,
        trust_env: bool = True,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(
            plan,
            geo,
            policy=policy if policy is not None else RetryPolicy(),
            budget=budget,
            metrics=metrics,
            on_attempt=on_attempt,
            alarm=alarm,
            clock=clock,
            wall_clock=wall_clock,
        )
        self._owns_client = client is None
        self._client = (
            client
            if client is not None
            else httpx.AsyncClient(
                headers=headers,
                transport=transport,
                trust_env=trust_env,
                timeout=self.policy.attempt_timeout,
            )
        )
        self._sleep = sleep
        self.resolver = resolver

    async def __aenter__(self) -> AsyncFailoverClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the underlying ``httpx.AsyncClient`` if this object made it."""
        if self._owns_client:
            await self._client.aclose()

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Any = None,
        headers: _HeadersIn | None = None,
        content: bytes | str | None = None,
        data: Mapping[str, Any] | None = None,
        json: Any = None,
        idempotency_key: str | None = None,
    ) -> httpx.Response:
        """Send ``method path`` through the domain plan; see :class:`FailoverClient`."""
        prepared = self._prepare(
            method, path, params=params, headers=headers, content=content, data=data,
            json=json, idempotency_key=idempotency_key,
        )  # fmt: skip
        state = self._state(prepared)
        action = state.start()
        while True:
            if isinstance(action, Send):
                action = await self._attempt(state, prepared, action)
            elif isinstance(action, Sleep):
                await self._sleep(action.seconds)
                action = state.slept()
            elif isinstance(action, Done):
                return action.response
            else:
                raise action.error

    async def _attempt(
        self, state: RetryState[httpx.Response], prepared: _Prepared, send: Send
    ) -> Action[httpx.Response]:
        address: str | None = None
        resolving = self.resolver is not None
        try:
            async with asyncio.timeout(send.timeout):
                url, host_header, extensions, address = await self._target(send)
                resolving = False
                request = self._build(
                    self._client, prepared, url, _timeouts(send.timeout), extensions, host_header
                )
                response = await self._client.send(request)
        except ResolutionError as exc:
            return state.finished(ErrorKind.DNS_ERROR, error=str(exc), address=address)
        except httpx.HTTPError as exc:
            return state.finished(classify(exc), error=_message(exc), address=address)
        except TimeoutError:
            if resolving:
                return state.finished(
                    ErrorKind.DNS_ERROR,
                    error=f"name resolution took over {send.timeout:.3g} s",
                )
            return state.finished(
                ErrorKind.TIMEOUT,
                error=f"no complete response within {send.timeout:.3g} s",
                address=address,
            )
        return state.finished(
            response.status_code,
            response=response,
            response_headers=response.headers,
            address=address,
        )

    async def _target(self, send: Send) -> tuple[str, str | None, dict[str, Any], str | None]:
        """The URL to connect to, the Host header, extensions and the address used."""
        if self.resolver is None:
            return send.url, None, {}, None
        url = httpx.URL(send.url)
        host = url.host
        if _is_ip(host):
            return send.url, None, {}, None
        resolved = await self.resolver.resolve(host)
        # Repeated attempts on one domain walk through its addresses.
        repeats = sum(1 for d in self._targets[: send.number] if d == send.domain)
        address = resolved.addresses[repeats % len(resolved.addresses)]
        host_header = host if url.port is None else f"{host}:{url.port}"
        extensions = {"sni_hostname": host} if url.scheme == "https" else {}
        return str(url.copy_with(host=address)), host_header, extensions, address

    async def get(self, path: str, **kwargs: Any) -> httpx.Response:
        """``request("GET", path, ...)``."""
        return await self.request("GET", path, **kwargs)

    async def head(self, path: str, **kwargs: Any) -> httpx.Response:
        """``request("HEAD", path, ...)``."""
        return await self.request("HEAD", path, **kwargs)

    async def options(self, path: str, **kwargs: Any) -> httpx.Response:
        """``request("OPTIONS", path, ...)``."""
        return await self.request("OPTIONS", path, **kwargs)

    async def post(self, path: str, **kwargs: Any) -> httpx.Response:
        """``request("POST", path, ...)``."""
        return await self.request("POST", path, **kwargs)

    async def put(self, path: str, **kwargs: Any) -> httpx.Response:
        """``request("PUT", path, ...)``."""
        return await self.request("PUT", path, **kwargs)

    async def patch(self, path: str, **kwargs: Any) -> httpx.Response:
        """``request("PATCH", path, ...)``."""
        return await self.request("PATCH", path, **kwargs)

    async def delete(self, path: str, **kwargs: Any) -> httpx.Response:
        """``request("DELETE", path, ...)``."""
        return await self.request("DELETE", path, **kwargs)


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True
