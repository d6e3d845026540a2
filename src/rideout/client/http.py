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
  attempt's timeout is ``min(attempt_timeout, time left)`` and bounds the whole
  attempt. The async client cancels an attempt at its end; the sync client cannot
  interrupt a blocking read, so it caps every connect, read and write by the time left
  of the attempt (:class:`_DeadlineBackend`, under httpx's default transport; with a
  caller's own client or transport it can only cap each phase by the time left when
  the phase starts).
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
import ssl
import threading
import time
import uuid
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum, StrEnum
from types import MappingProxyType
from typing import Any, Final, Generic, Literal, TypeAlias, TypeVar, cast

import httpcore
import httpx
from prometheus_client import CollectorRegistry, Counter

from rideout._metrics import LabelCache
from rideout.backoff import FixedSchedule, RetryBudget
from rideout.client.errors import ClientError
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


class AllAttemptsFailed(ClientError):
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


class UnknownGeoError(ClientError, ValueError):
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
    ``attempt_timeout``: the most one attempt may take (connecting, sending and the
    whole response), never more than the time left of ``total_timeout``, the
    per-request deadline.
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
        return float(text)  # inf for an absurdly long value (int() would refuse it)
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):
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


@dataclass(frozen=True, slots=True)
class _Observers:
    metrics: ClientMetrics | None = None
    on_attempt: Callable[[Attempt], None] | None = None
    alarm: RetryRateAlarm | None = None

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


_AttemptFields: TypeAlias = tuple[str, int, float, float, Outcome, str, str | None]
"""An :class:`Attempt`'s fields, in order: kept as they are until something asks."""


class _Setup:
    """What every request of one client shares: the policy's numbers, checked once."""

    __slots__ = (
        "alarm",
        "attempt_timeout",
        "budget",
        "clock",
        "delays",
        "max_attempts",
        "metrics",
        "observers",
        "on_attempt",
        "policy",
        "targets",
        "tight_below",
        "total_timeout",
        "wall_clock",
    )

    def __init__(
        self,
        policy: RetryPolicy,
        targets: Sequence[str],
        clock: Callable[[], float],
        wall_clock: Callable[[], float],
        budget: RetryBudget | None,
        observers: _Observers | None,
    ) -> None:
        self.max_attempts = policy.max_attempts
        if len(targets) < self.max_attempts:
            raise ValueError(f"need a domain for each of {self.max_attempts} attempts")
        self.policy = policy
        self.targets = tuple(targets)
        self.delays = policy.schedule.delays
        self.attempt_timeout = policy.attempt_timeout
        self.total_timeout = policy.total_timeout
        # With less time left than this, the phases (each bounded by the timeout) could
        # together pass the deadline: see Send.tight.
        self.tight_below = _PHASES * policy.attempt_timeout
        self.clock = clock
        self.wall_clock = wall_clock
        self.budget = budget
        self.observers = observers = observers if observers is not None else _Observers()
        self.metrics = observers.metrics
        self.on_attempt = observers.on_attempt
        self.alarm = observers.alarm


class _Step(Enum):
    """The drivers' private protocol: what :class:`RetryState` answers besides an action."""

    DUE = "an attempt is due now; its parameters are on the state"
    DONE = "the response just reported is the request's result"


# Module constants: an enum member is slow to look up on its class.
_DUE: Final = _Step.DUE
_DONE: Final = _Step.DONE

_Due: TypeAlias = Sleep | GiveUp | Literal[_Step.DUE]
_Next: TypeAlias = _Due | Literal[_Step.DONE]
"""What RetryState's private methods answer the drivers: no Send or Done to build."""


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

    # The clients drive the same decisions through _open, _due and _close, which answer
    # _DUE / _DONE instead of building a Send and a Done (frozen dataclasses are slow to
    # build); start, slept and finished wrap them.

    # Where a request starts; set on the instance only when they change, so a request
    # that succeeds first time writes few attributes.
    _next = 0
    _in_flight = False
    _path_checked = False  # True when the driver has checked the path (see _join)
    # The attempt in flight (valid while _in_flight): a Send's fields.
    _number = 0
    _domain = ""
    _url = ""
    _timeout = 0.0
    _tight = False
    _started = 0.0
    _pending: _AttemptFields | None = None
    _last_response: Any = None
    _over = False

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
        setup = _Setup(policy, targets, clock, wall_clock, budget, observers)
        self._begin(setup, method.upper(), path, headers)

    def _begin(self, setup: _Setup, method: str, path: str, headers: _HeadersIn | None) -> None:
        self.policy = setup.policy
        self.method = method
        self.path = path
        self.headers = headers
        self._setup = setup
        # The deadline starts now (rideout.backoff.Deadline's arithmetic, inlined).
        self._expires_at = setup.clock() + setup.total_timeout
        self._attempts: list[Attempt] = []

    @property
    def attempts(self) -> tuple[Attempt, ...]:
        """The attempts so far."""
        return tuple(self._all_attempts())

    def _all_attempts(self) -> list[Attempt]:
        pending = self._pending
        if pending is not None:
            self._pending = None
            self._attempts.append(Attempt(*pending))
        return self._attempts

    def remaining(self) -> float:
        """Seconds left before the deadline."""
        return max(0.0, self._expires_at - self._setup.clock())

    def _allows(self, delay: float) -> bool:
        """True only if, after sleeping ``delay`` seconds, some time would be left."""
        return delay < self.remaining()

    def start(self) -> Action[R]:
        """The first action of the request."""
        return self._action(self._open())

    def slept(self) -> Action[R]:
        """The action after a :class:`Sleep`."""
        return self._action(self._due())

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
        step = self._close(outcome, error, response, response_headers, address)
        if step is _DONE:
            return Done(cast(R, response))
        return self._action(step)

    def _action(self, step: _Due) -> Action[R]:
        if step is _DUE:
            return Send(self._number, self._domain, self._url, self._timeout, self._tight)
        return step

    def _open(self) -> _Due:
        """:meth:`start`'s decision: usually _DUE (attempt 0 at once)."""
        if self._next or self._over or self._in_flight:
            raise RuntimeError("RetryState.start() called twice")
        setup = self._setup
        if setup.alarm is not None:
            setup.alarm.record_request()
        return self._wait_then_send(setup.delays[0])

    def _close(
        self,
        outcome: Outcome,
        error: str,
        response: R | None,
        response_headers: _HeadersIn | None,
        address: str | None,
    ) -> _Next:
        """:meth:`finished`'s decision: _DONE when ``response`` is the result."""
        if not self._in_flight:
            raise RuntimeError("RetryState.finished() without a Send in progress")
        self._in_flight = False
        setup = self._setup
        started = self._started
        domain = self._domain
        fields: _AttemptFields = (
            domain,
            self._number,
            started,
            max(0.0, setup.clock() - started),
            outcome,
            error,
            address,
        )
        hook = setup.on_attempt
        if hook is None:
            self._pending = fields  # the Attempt is built if something needs it
        else:
            self._attempts.append(Attempt(*fields))
        if setup.metrics is not None:
            setup.metrics.count_attempt(domain, outcome)
        if hook is not None:
            _call_hook(hook, self._attempts[-1])
        if response is not None:
            self._last_response = response
        policy = setup.policy
        if not is_retryable(self.method, outcome, self.headers, policy, response_headers):
            if isinstance(outcome, int) and response is not None:
                budget = setup.budget
                # A refund to a full bucket changes nothing, so the lock is skipped then:
                # reading the count is atomic, and the refund may as well have come first.
                if budget is not None and outcome < 500 and budget.available < budget.capacity:
                    with _BUDGET_LOCK:
                        budget.record_success()
                self._over = True
                metrics = setup.metrics
                if metrics is not None:
                    error_kind = "client_error" if outcome < 500 else "server_error"
                    metrics.count_request("ok" if outcome < 400 else error_kind)
                return _DONE
            return self._give_up(GiveUpReason.NOT_RETRYABLE)
        if self._next >= setup.max_attempts:
            return self._give_up(GiveUpReason.ATTEMPTS)
        delay = policy.schedule.delay(self._next)
        if (
            isinstance(outcome, int)
            and policy.respect_retry_after
            and outcome in policy.retry_after_statuses
        ):
            asked = parse_retry_after(
                _header(response_headers, "retry-after"), now=setup.wall_clock()
            )
            if asked is not None:
                delay = max(delay, min(asked, policy.max_retry_after))
        if not self._allows(delay):
            return self._give_up(GiveUpReason.DEADLINE)
        if setup.budget is not None:
            with _BUDGET_LOCK:
                paid = setup.budget.try_acquire(is_timeout=outcome in _TIMEOUTS)
            if not paid:
                return self._give_up(GiveUpReason.BUDGET)
        failed = self._all_attempts()[-1]
        setup.observers.retry(self.method, self.path, failed, setup.targets[self._next], delay)
        return self._wait_then_send(delay)

    def _wait_then_send(self, delay: float) -> _Due:
        if delay > 0:
            if not self._allows(delay):
                return self._give_up(GiveUpReason.DEADLINE)
            return Sleep(delay)
        return self._due()

    def _due(self) -> _Due:
        """Make the next attempt the one in flight (_DUE), or give up at the deadline."""
        setup = self._setup
        number = self._next
        if self._over or self._in_flight or number >= setup.max_attempts:
            raise RuntimeError("RetryState: no attempt is due")
        now = setup.clock()
        remaining = self._expires_at - now
        if remaining <= 0:
            return self._give_up(GiveUpReason.DEADLINE)
        self._next = number + 1
        domain = setup.targets[number]
        timeout = setup.attempt_timeout
        self._number = number
        self._domain = domain
        self._url = domain + self.path if self._path_checked else _join(domain, self.path)
        self._timeout = min(timeout, remaining)
        self._tight = remaining < setup.tight_below
        self._in_flight = True
        self._started = now
        return _DUE

    def _give_up(self, reason: GiveUpReason) -> GiveUp:
        self._over = True
        self._setup.observers.final(reason.value)
        cls = RetryBudgetExhausted if reason is GiveUpReason.BUDGET else AllAttemptsFailed
        error = cls(self.method, self.path, reason, self._all_attempts(), self._last_response)
        return GiveUp(error)


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


class _Request(RetryState[httpx.Response]):
    """A client's request: its decisions (a :class:`RetryState`) and what each attempt sends.

    Built per request, so cheaply: the client checked the setup once and the path in
    :meth:`_ClientBase._prepare`.
    """

    _path_checked = True

    def __init__(
        self,
        setup: _Setup,
        method: str,
        path: str,
        headers: httpx.Headers | None,
        params: Any,
        content: bytes | str | None,
        data: Mapping[str, Any] | None,
        json: Any,
    ) -> None:
        self._begin(setup, method, path, headers)
        self.params = params
        self.content = content
        self.data = data
        self.json = json

    def _responded(self, response: httpx.Response, address: str | None) -> httpx.Response | _Due:
        """Record the attempt's response: the response itself when it is the result."""
        step = self._close(response.status_code, "", response, response.headers, address)
        return response if step is _DONE else step

    def _failed(self, outcome: Outcome, error: str, address: str | None) -> _Due:
        """Record the attempt's failure (no response): the next step."""
        step = self._close(outcome, error, None, None, address)
        assert step is not _DONE  # only a response is ever the result
        return step


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
        self._clock = clock
        observers = _Observers(metrics, on_attempt, alarm)
        self._setup = _Setup(policy, self._targets, clock, wall_clock, budget, observers)
        self._auto_key_methods = policy.key_methods if policy.idempotency_keys else frozenset()

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
    ) -> _Request:
        """The request, not started."""
        verb = method.upper()
        _join("", path)  # validate the path before anything is sent
        auto_key = verb in self._auto_key_methods
        merged: httpx.Headers | None = None
        if headers is not None or idempotency_key is not None or auto_key:
            merged = httpx.Headers(headers)
            if idempotency_key is not None:
                merged[IDEMPOTENCY_KEY_HEADER] = idempotency_key
            elif auto_key and IDEMPOTENCY_KEY_HEADER not in merged:
                merged[IDEMPOTENCY_KEY_HEADER] = str(uuid.uuid4())
        return _Request(self._setup, verb, path, merged, params, content, data, json)

    @staticmethod
    def _build(
        client: httpx.Client | httpx.AsyncClient,
        request: _Request,
        url: str,
        extensions: dict[str, Any],
        host_header: str | None = None,
    ) -> httpx.Request:
        """The attempt's request; ``extensions`` holds its ``timeout`` (see :func:`_timeouts`)."""
        headers = request.headers
        if host_header is not None:
            with_host = headers.copy() if isinstance(headers, httpx.Headers) else httpx.Headers()
            with_host["Host"] = host_header
            headers = with_host
        return client.build_request(
            request.method,
            url,
            params=request.params,
            headers=headers,
            content=request.content,
            data=request.data,
            json=request.json,
            extensions=extensions,
        )


def _timeouts(seconds: float) -> dict[str, float]:
    return {"connect": seconds, "read": seconds, "write": seconds, "pool": seconds}


_MIN_PHASE = 0.001  # a phase timeout of 0 would make the socket non-blocking


class _Deadlines(threading.local):
    """The attempt in flight on this thread: when it must be over (``time.monotonic``)."""

    at: float | None = None


class _DeadlineStream(httpcore.NetworkStream):
    """A connection whose every read and write stops at the attempt's deadline."""

    def __init__(self, stream: httpcore.NetworkStream, deadlines: _Deadlines) -> None:
        self._stream = stream
        self._deadlines = deadlines

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._stream.read(max_bytes, _capped(self._deadlines, timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._stream.write(buffer, _capped(self._deadlines, timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._stream.close()

    def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.NetworkStream:
        timeout = _capped(self._deadlines, timeout, httpcore.ConnectTimeout)
        return _DeadlineStream(
            self._stream.start_tls(ssl_context, server_hostname, timeout), self._deadlines
        )

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)


class _DeadlineBackend(httpcore.NetworkBackend):
    """httpcore's network backend with every connect, read and write capped by the
    deadline of the attempt in flight on the calling thread.

    httpx bounds each phase (connect, write, read) by its timeout and each socket
    operation within a phase anew, so a server that trickles a response a byte at a
    time, just inside the read timeout, could hold a blocking client past any deadline;
    capped here, the read that would pass the deadline times out instead.
    """

    def __init__(self, inner: httpcore.NetworkBackend, deadlines: _Deadlines) -> None:
        self._inner = inner
        self._deadlines = deadlines

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        timeout = _capped(self._deadlines, timeout, httpcore.ConnectTimeout)
        stream = self._inner.connect_tcp(host, port, timeout, local_address, socket_options)
        return _DeadlineStream(stream, self._deadlines)

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore.NetworkStream:
        timeout = _capped(self._deadlines, timeout, httpcore.ConnectTimeout)
        stream = self._inner.connect_unix_socket(path, timeout, socket_options)
        return _DeadlineStream(stream, self._deadlines)

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


def _capped(deadlines: _Deadlines, timeout: float | None, error: type[Exception]) -> float | None:
    at = deadlines.at
    if at is None:
        return timeout
    left = at - time.monotonic()
    if left <= 0:
        raise error("the attempt's deadline has passed")
    return left if timeout is None or left < timeout else timeout


def _deadline_transport(trust_env: bool, deadlines: _Deadlines) -> httpx.HTTPTransport:
    """httpx's default transport on a :class:`_DeadlineBackend`.

    httpx does not take a network backend, so this sets the one attribute of its
    connection pool that holds it; a test fails if a new httpx moves it.
    """
    transport = httpx.HTTPTransport(trust_env=trust_env)
    pool = getattr(transport, "_pool", None)
    inner = getattr(pool, "_network_backend", None)
    if isinstance(inner, httpcore.NetworkBackend):
        pool._network_backend = _DeadlineBackend(inner, deadlines)  # type: ignore[union-attr]
    return transport


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
        self._deadlines = _Deadlines()
        if client is None and transport is None:
            transport = _deadline_transport(trust_env, self._deadlines)
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
        state = self._prepare(
            method, path, params=params, headers=headers, content=content, data=data,
            json=json, idempotency_key=idempotency_key,
        )  # fmt: skip
        step = state._open()
        while True:
            if step is _DUE:
                result = self._attempt(state)
                if isinstance(result, httpx.Response):
                    return result
                step = result
            elif isinstance(step, Sleep):
                self._sleep(step.seconds)
                step = state._due()
            else:
                raise step.error

    def _attempt(self, state: _Request) -> httpx.Response | _Due:
        """Send the attempt in flight: the response if it is the result, else the next step."""
        seconds = state._timeout
        timeouts = _timeouts(seconds)
        extensions: dict[str, Any] = {"timeout": timeouts}
        if state._tight:
            extensions["trace"] = self._tightener(timeouts, seconds)
        self._deadlines.at = time.monotonic() + seconds
        try:
            request = self._build(self._client, state, state._url, extensions)
            response = self._client.send(request)
        except httpx.HTTPError as exc:
            return state._failed(classify(exc), _message(exc), None)
        finally:
            self._deadlines.at = None
        return state._responded(response, None)

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
        state = self._prepare(
            method, path, params=params, headers=headers, content=content, data=data,
            json=json, idempotency_key=idempotency_key,
        )  # fmt: skip
        step = state._open()
        while True:
            if step is _DUE:
                result = await self._attempt(state)
                if isinstance(result, httpx.Response):
                    return result
                step = result
            elif isinstance(step, Sleep):
                await self._sleep(step.seconds)
                step = state._due()
            else:
                raise step.error

    async def _attempt(self, state: _Request) -> httpx.Response | _Due:
        """Send the attempt in flight: the response if it is the result, else the next step."""
        seconds = state._timeout
        address: str | None = None
        resolving = self.resolver is not None
        try:
            async with asyncio.timeout(seconds):
                if resolving:
                    url, host_header, extensions, address = await self._target(state)
                    resolving = False
                else:  # no resolver: no coroutine to call (this is the hot path)
                    url, host_header, extensions = state._url, None, {}
                extensions["timeout"] = _timeouts(seconds)
                request = self._build(self._client, state, url, extensions, host_header)
                response = await self._client.send(request)
        except ResolutionError as exc:
            return state._failed(ErrorKind.DNS_ERROR, str(exc), address)
        except httpx.HTTPError as exc:
            return state._failed(classify(exc), _message(exc), address)
        except TimeoutError:
            if resolving:
                error = f"name resolution took over {seconds:.3g} s"
                return state._failed(ErrorKind.DNS_ERROR, error, None)
            error = f"no complete response within {seconds:.3g} s"
            return state._failed(ErrorKind.TIMEOUT, error, address)
        return state._responded(response, address)

    async def _target(
        self, state: RetryState[httpx.Response]
    ) -> tuple[str, str | None, dict[str, Any], str | None]:
        """The URL to connect to, the Host header, extensions and the address used
        (called only with a resolver)."""
        assert self.resolver is not None
        url = httpx.URL(state._url)
        host = url.host
        if _is_ip(host):
            return state._url, None, {}, None
        resolved = await self.resolver.resolve(host)
        # Repeated attempts on one domain walk through its addresses.
        repeats = sum(1 for d in self._targets[: state._number] if d == state._domain)
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
