"""What the sync and async clients share: configuration, and each request's headers and
:class:`RetryState`."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import httpx

from rideout.backoff import RetryBudget
from rideout.client.http._errors import Attempt
from rideout.client.http._metrics import ClientMetrics, RetryRateAlarm
from rideout.client.http._policy import IDEMPOTENCY_KEY_HEADER, DomainPlan, RetryPolicy, _HeadersIn
from rideout.client.http._state import RetryState
from rideout.errors import InvalidArgumentType

__all__: list[str] = []


class _ClientBase:
    """The configuration of a failover client, checked once, and what each request needs
    from it."""

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
            raise InvalidArgumentType(f"plan must be a DomainPlan, not {plan!r}")
        if not isinstance(policy, RetryPolicy):
            raise InvalidArgumentType(f"policy must be a RetryPolicy, not {policy!r}")
        self.plan = plan
        self.geo = geo
        self.policy = policy
        self.budget = budget
        self.metrics = metrics
        self.domains = plan.for_geo(geo)
        self._targets = plan.targets(geo, policy.max_attempts)
        self._on_attempt = on_attempt
        self._alarm = alarm
        self._clock = clock
        self._wall_clock = wall_clock
        self._auto_key_methods = policy.key_methods if policy.idempotency_keys else frozenset()

    def _retry_state(
        self, method: str, path: str, headers: httpx.Headers | None
    ) -> RetryState[httpx.Response]:
        """A request's decisions; its deadline starts now. Checks the path."""
        # Positional: a class called with keywords builds a dict of them on every call.
        return RetryState(
            self.policy,
            self._targets,
            method,
            path,
            headers,
            self._clock,
            self._wall_clock,
            self.budget,
            self.metrics,
            self._on_attempt,
            self._alarm,
        )

    def _headers(
        self, method: str, headers: _HeadersIn | None, idempotency_key: str | None
    ) -> httpx.Headers | None:
        """The request's own headers with its ``Idempotency-Key``, if it has one (the
        same on every attempt); None when there are none (the client's apply)."""
        auto_key = method in self._auto_key_methods
        if headers is None and idempotency_key is None and not auto_key:
            return None
        merged = httpx.Headers(headers)
        if idempotency_key is not None:
            merged[IDEMPOTENCY_KEY_HEADER] = idempotency_key
        elif auto_key and IDEMPOTENCY_KEY_HEADER not in merged:
            merged[IDEMPOTENCY_KEY_HEADER] = str(uuid.uuid4())
        return merged


def _timeouts(seconds: float) -> dict[str, float]:
    """httpx's per-phase timeouts (the ``timeout`` extension), each ``seconds``."""
    return {"connect": seconds, "read": seconds, "write": seconds, "pool": seconds}


def _message(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__
