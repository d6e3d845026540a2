"""What is retried, when, and where: the policy, the predicate and the domain plan.

Pure: no clock (``parse_retry_after``, from :mod:`rideout.protocol`, reads the wall clock
only when not given ``now``) and no I/O.
"""

from __future__ import annotations

import socket
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import TypeAlias

import httpx

from rideout._validate import seconds
from rideout.backoff import FixedSchedule
from rideout.client.http._errors import ErrorKind, Outcome, UnknownGeoError
from rideout.client.resolve import ResolutionError
from rideout.errors import InvalidArgument, InvalidArgumentType
from rideout.protocol import parse_retry_after

__all__ = [
    "DEFAULT_SCHEDULE",
    "IDEMPOTENCY_KEY_HEADER",
    "DomainPlan",
    "RetryPolicy",
    "classify",
    "is_retryable",
    "parse_retry_after",
]

DEFAULT_SCHEDULE = FixedSchedule((0.0, 1.0, 3.0, 6.0, 10.0))
"""Seed 001's schedule: delays before each of five attempts, about 20 s of waiting."""

IDEMPOTENCY_KEY_HEADER = "Idempotency-Key"

_HeadersIn: TypeAlias = Mapping[str, str] | Sequence[tuple[str, str]] | httpx.Headers

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


# ------------------------------------------------------------------------ policy


def _statuses(name: str, values: object) -> frozenset[int]:
    if isinstance(values, str | bytes) or not isinstance(values, Iterable):
        raise InvalidArgumentType(f"{name} must be a set of HTTP status codes, not {values!r}")
    result = frozenset(values)
    for status in result:
        if isinstance(status, bool) or not isinstance(status, int) or not 100 <= status <= 599:
            raise InvalidArgument(f"{name} holds {status!r}, which is not an HTTP status code")
    return result


def _methods(name: str, values: object) -> frozenset[str]:
    if isinstance(values, str | bytes) or not isinstance(values, Iterable):
        raise InvalidArgumentType(f"{name} must be a set of HTTP methods, not {values!r}")
    result = set()
    for method in values:
        if not isinstance(method, str) or not method.isalpha():
            raise InvalidArgument(f"{name} holds {method!r}, which is not an HTTP method")
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
            raise InvalidArgumentType(
                f"schedule must be a rideout.backoff.FixedSchedule, not {self.schedule!r}"
            )
        set_ = object.__setattr__
        set_(self, "attempt_timeout", seconds("attempt_timeout", self.attempt_timeout))
        set_(self, "total_timeout", seconds("total_timeout", self.total_timeout))
        set_(
            self,
            "max_retry_after",
            seconds("max_retry_after", self.max_retry_after, zero_ok=True),
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
                raise InvalidArgumentType(f"{name} must be a bool, not {getattr(self, name)!r}")

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
        raise InvalidArgumentType(f"outcome must be a status code or an ErrorKind, not {outcome!r}")
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
        raise InvalidArgumentType(f"geo {geo!r}: a base URL must be a str, not {url!r}")
    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL as exc:
        raise InvalidArgument(f"geo {geo!r}: {url!r} is not a URL: {exc}") from None
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise InvalidArgument(f"geo {geo!r}: {url!r} must be an absolute http(s) URL")
    if parsed.query or parsed.fragment:
        raise InvalidArgument(f"geo {geo!r}: {url!r} must not have a query or a fragment")
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
            raise InvalidArgument("a DomainPlan needs at least one geography")
        frozen: dict[str, tuple[str, ...]] = {}
        for geo, urls in self.geos.items():
            if not isinstance(geo, str) or not geo:
                raise InvalidArgument(f"a geography must be a non-empty str, not {geo!r}")
            if isinstance(urls, str) or not isinstance(urls, Sequence) or not urls:
                raise InvalidArgument(f"geo {geo!r} needs a non-empty sequence of base URLs")
            frozen[geo] = tuple(_base_url(geo, url) for url in urls)
        object.__setattr__(self, "geos", MappingProxyType(frozen))
        if self.order is not None:
            order = tuple(self.order)
            shortest = min(len(urls) for urls in frozen.values())
            if not order or any(
                isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < shortest
                for i in order
            ):
                raise InvalidArgument(
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
        raise InvalidArgument(
            f"path must start with '/', not {path!r} (the domain comes from the plan)"
        )
    return base + path


# ------------------------------------------------------------------ classification


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
