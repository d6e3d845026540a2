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
- :class:`RetryState` is the loop's decisions with no I/O: driven through
  ``start()``, ``slept()`` and ``finished(outcome, ...)``, it answers each with the
  next step, :class:`Send` (attempt ``k`` to domain X within T seconds),
  :class:`Sleep`, :class:`Done` (return this response) or :class:`Fail` (raise this
  :class:`AllAttemptsFailed`), and records the history. :class:`FailoverClient`
  (sync) and :class:`AsyncFailoverClient` (async) are thin drivers around it, and
  anyone may write another on the same three calls; the clock and the sleep are
  injectable.
- The loop is bounded by the schedule's length and by ``total_timeout``, which is
  never overrun: a sleep that would pass the deadline is not taken, and each
  attempt's timeout is ``min(attempt_timeout, time left)`` and bounds the whole
  attempt. The async client cancels an attempt at its end; the sync client cannot
  interrupt a blocking read, so it caps every connect, read and write by the time left
  of the attempt (a network backend under httpx's default transport; with a
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

The modules, one per concern (import from this package, not from them):
``_errors`` (outcomes and the exceptions), ``_policy`` (:class:`RetryPolicy`,
:func:`is_retryable`, :func:`classify`, :class:`DomainPlan`), ``_metrics``
(:class:`ClientMetrics`, :class:`RetryRateAlarm`, the retry log), ``_state``
(:class:`RetryState` and its steps), ``_deadline`` (the sync client's deadline under
httpx), ``_driver`` (what both clients share), ``_sync`` and ``_async`` (the clients).
"""

from __future__ import annotations

from rideout.client.http._async import AsyncFailoverClient
from rideout.client.http._errors import (
    AllAttemptsFailed,
    Attempt,
    ErrorKind,
    GiveUpReason,
    Outcome,
    RetryBudgetExhausted,
    UnknownGeoError,
)
from rideout.client.http._metrics import ClientMetrics, RetryRateAlarm, RetryRateAlert
from rideout.client.http._policy import (
    DEFAULT_SCHEDULE,
    IDEMPOTENCY_KEY_HEADER,
    DomainPlan,
    RetryPolicy,
    classify,
    is_retryable,
    parse_retry_after,
)
from rideout.client.http._state import Action, Done, Fail, RetryState, Send, Sleep
from rideout.client.http._sync import FailoverClient

__all__ = [
    "DEFAULT_SCHEDULE",
    "IDEMPOTENCY_KEY_HEADER",
    "Action",
    "AllAttemptsFailed",
    "AsyncFailoverClient",
    "Attempt",
    "ClientMetrics",
    "DomainPlan",
    "Done",
    "ErrorKind",
    "Fail",
    "FailoverClient",
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
