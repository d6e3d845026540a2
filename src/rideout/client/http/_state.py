"""The failover loop's decisions with no I/O: :class:`RetryState` and the steps it answers.

A driver (the two clients here, or your own transport) owns the I/O and the loop; the
state owns every decision: which domain, how long to wait, how long an attempt may
take, whether an outcome is the result, a reason to retry or a reason to stop.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, Generic, TypeAlias, TypeVar

from rideout.backoff import Deadline, RetryBudget
from rideout.client.http._errors import (
    AllAttemptsFailed,
    Attempt,
    GiveUpReason,
    Outcome,
    RetryBudgetExhausted,
)
from rideout.client.http._metrics import (
    ClientMetrics,
    RetryRateAlarm,
    _call_hook,
    _record_retry,
)
from rideout.client.http._policy import (
    _TIMEOUTS,
    RetryPolicy,
    _header,
    _HeadersIn,
    _join,
    is_retryable,
    parse_retry_after,
)
from rideout.errors import InvalidArgument

__all__ = ["Action", "Done", "Fail", "RetryState", "Send", "Sleep"]

R = TypeVar("R")

_PHASES = 4  # httpx bounds pool wait, connect, write and read, each by the timeout

# RetryBudget is not thread-safe; a budget may be shared by clients in many threads.
_BUDGET_LOCK = threading.Lock()


# -------------------------------------------------------------------------- steps


class _Step:
    """What the steps share: equality, hash and repr by their fields.

    Steps are values: read them, do not change them. They are plain slotted classes,
    not frozen dataclasses, because one or two are built per request on the hot path
    and a frozen dataclass costs several times as much to build.
    """

    __slots__ = ()
    __match_args__: ClassVar[tuple[str, ...]] = ()

    def _values(self) -> tuple[object, ...]:
        return tuple(getattr(self, name) for name in self.__match_args__)

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        assert isinstance(other, _Step)
        return self._values() == other._values()

    def __hash__(self) -> int:
        return hash((type(self), self._values()))

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__match_args__)
        return f"{type(self).__name__}({fields})"


class Send(_Step):
    """Step: send attempt ``number`` to ``domain`` at ``url`` (the domain + the path),
    all of it (connect, request, whole response) within ``timeout`` seconds; then
    report how it ended with :meth:`RetryState.finished`.

    ``tight`` is True when the attempt's phases (pool, connect, write, read: each
    bounded by ``timeout`` in httpx) could together pass the deadline, so the driver
    must hold the attempt as a whole to ``timeout``.
    """

    __slots__ = ("domain", "number", "tight", "timeout", "url")
    __match_args__ = ("number", "domain", "url", "timeout", "tight")

    def __init__(
        self, number: int, domain: str, url: str, timeout: float, tight: bool = True
    ) -> None:
        self.number = number
        self.domain = domain
        self.url = url
        self.timeout = timeout
        self.tight = tight


class Sleep(_Step):
    """Step: sleep ``seconds``, then call :meth:`RetryState.slept`."""

    __slots__ = ("seconds",)
    __match_args__ = ("seconds",)

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds


class Done(_Step, Generic[R]):
    """Step: the request is over; return ``response`` (the one just reported) to the caller."""

    __slots__ = ("response",)
    __match_args__ = ("response",)

    def __init__(self, response: R) -> None:
        self.response = response


class Fail(_Step):
    """Step: the request is over and did not succeed; raise ``error`` (its ``reason``
    says why the state gave up)."""

    __slots__ = ("error",)
    __match_args__ = ("error",)

    def __init__(self, error: AllAttemptsFailed) -> None:
        self.error = error


Action: TypeAlias = Send | Sleep | Done[R] | Fail
"""What :class:`RetryState` answers: the next thing the driver must do."""


# -------------------------------------------------------------------------- state

_AttemptFields: TypeAlias = tuple[str, int, float, float, Outcome, str, str | None]
"""An :class:`Attempt`'s fields, in order: kept as they are until something asks."""


class RetryState(Generic[R]):
    """The failover loop's decisions for one request, with no I/O (sans-I/O).

    Build one per request and drive it with three calls, each answering the next
    :data:`Action`::

        action = state.start()
        while True:
            if isinstance(action, Send):     # attempt action.url within action.timeout
                action = state.finished(outcome, response=..., error=...)
            elif isinstance(action, Sleep):  # wait action.seconds
                action = state.slept()
            elif isinstance(action, Done):
                return action.response
            else:                            # Fail
                raise action.error

    ``outcome`` is the HTTP status received (pass the ``response`` and its
    ``response_headers`` too) or the :class:`ErrorKind` of the failure (with an
    ``error`` message). The sequence is finite: at most ``policy.max_attempts`` sends,
    and no sleep or send that would pass ``policy.total_timeout``, which starts when
    the state is built. ``targets`` are the base URLs of each attempt
    (:meth:`DomainPlan.targets`); ``path`` must start with ``/``. ``clock`` measures
    the deadline and the attempts; ``wall_clock`` (Unix time) only reads HTTP-date
    ``Retry-After`` values. ``budget``, ``metrics``, ``on_attempt`` and ``alarm`` are
    the client's options of the same names. The response type ``R`` is whatever the
    driver passes to :meth:`finished`.
    """

    # Where a request starts; set on the instance only when they change, so a request
    # that succeeds first time writes few attributes.
    _next = 0  # the number of the next attempt
    _in_flight = False  # a Send was answered and its outcome not reported yet
    _started = 0.0  # when the attempt in flight was sent
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
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        budget: RetryBudget | None = None,
        metrics: ClientMetrics | None = None,
        on_attempt: Callable[[Attempt], None] | None = None,
        alarm: RetryRateAlarm | None = None,
    ) -> None:
        delays = policy.schedule.delays
        if len(targets) < len(delays):
            raise InvalidArgument(f"need a domain for each of {len(delays)} attempts")
        _join("", path)
        self.policy = policy
        self.method = method.upper()
        self.path = path
        self.headers = headers
        self._targets = tuple(targets)
        self._delays = delays
        self._clock = clock
        self._wall_clock = wall_clock
        self._budget = budget
        self._metrics = metrics
        self._on_attempt = on_attempt
        self._alarm = alarm
        self._deadline = Deadline(policy.total_timeout, clock)  # it starts now
        self._attempts: list[Attempt] = []

    @property
    def attempts(self) -> tuple[Attempt, ...]:
        """The attempts so far."""
        return tuple(self._all_attempts())

    def remaining(self) -> float:
        """Seconds left before the deadline."""
        return self._deadline.remaining()

    def start(self) -> Action[R]:
        """The first step of the request: usually :class:`Send` attempt 0 at once."""
        if self._next or self._over or self._in_flight:
            raise RuntimeError("RetryState.start() called twice")
        if self._alarm is not None:
            self._alarm.record_request()
        return self._wait_then_send(self._delays[0])

    def slept(self) -> Action[R]:
        """The step after a :class:`Sleep`: the attempt it waited for (or :class:`Fail`
        if the deadline came first)."""
        return self._send_next()

    def finished(
        self,
        outcome: Outcome,
        *,
        error: str = "",
        response: R | None = None,
        response_headers: _HeadersIn | None = None,
        address: str | None = None,
    ) -> Action[R]:
        """Record how the current :class:`Send` ended; the next step.

        ``address`` is the address connected to, if the driver resolved the name itself.
        The step is :class:`Done` with ``response`` when that response is the result
        (a success, or a failure that may not be retried), :class:`Sleep` or
        :class:`Send` for a retry, :class:`Fail` when the state gives up.
        """
        if not self._in_flight:
            raise RuntimeError("RetryState.finished() without a Send in progress")
        self._in_flight = False
        number = self._next - 1
        domain = self._targets[number]
        started = self._started
        fields: _AttemptFields = (
            domain,
            number,
            started,
            max(0.0, self._clock() - started),
            outcome,
            error,
            address,
        )
        hook = self._on_attempt
        if hook is None:
            self._pending = fields  # the Attempt is built if something needs it
        else:
            self._attempts.append(Attempt(*fields))
        metrics = self._metrics
        if metrics is not None:
            metrics.count_attempt(domain, outcome)
        if hook is not None:
            _call_hook(hook, self._attempts[-1])
        if response is not None:
            self._last_response = response
        policy = self.policy
        if not is_retryable(self.method, outcome, self.headers, policy, response_headers):
            if isinstance(outcome, int) and response is not None:
                budget = self._budget
                # A refund to a full bucket changes nothing, so the lock is skipped then:
                # reading the count is atomic, and the refund may as well have come first.
                if budget is not None and outcome < 500 and budget.available < budget.capacity:
                    with _BUDGET_LOCK:
                        budget.record_success()
                self._over = True
                if metrics is not None:
                    error_kind = "client_error" if outcome < 500 else "server_error"
                    metrics.count_request("ok" if outcome < 400 else error_kind)
                return Done(response)
            return self._give_up(GiveUpReason.NOT_RETRYABLE)
        return self._retry(outcome, response_headers)

    def _retry(self, outcome: Outcome, response_headers: _HeadersIn | None) -> Action[R]:
        """The step after a retryable failure: a sleep, the next attempt or a stop."""
        if self._next >= len(self._delays):
            return self._give_up(GiveUpReason.ATTEMPTS)
        policy = self.policy
        delay = self._delays[self._next]
        if (
            isinstance(outcome, int)
            and policy.respect_retry_after
            and outcome in policy.retry_after_statuses
        ):
            asked = parse_retry_after(
                _header(response_headers, "retry-after"), now=self._wall_clock()
            )
            if asked is not None:
                delay = max(delay, min(asked, policy.max_retry_after))
        if not self._deadline.allows(delay):
            return self._give_up(GiveUpReason.DEADLINE)
        budget = self._budget
        if budget is not None:
            with _BUDGET_LOCK:
                paid = budget.try_acquire(is_timeout=outcome in _TIMEOUTS)
            if not paid:
                return self._give_up(GiveUpReason.BUDGET)
        failed = self._all_attempts()[-1]
        next_domain = self._targets[self._next]
        _record_retry(
            self._metrics, self._alarm, self.method, self.path, failed, next_domain, delay
        )
        return self._wait_then_send(delay)

    def _all_attempts(self) -> list[Attempt]:
        pending = self._pending
        if pending is not None:
            self._pending = None
            self._attempts.append(Attempt(*pending))
        return self._attempts

    def _wait_then_send(self, delay: float) -> Action[R]:
        if delay > 0:
            if not self._deadline.allows(delay):
                return self._give_up(GiveUpReason.DEADLINE)
            return Sleep(delay)
        return self._send_next()

    def _send_next(self) -> Send | Fail:
        """Make the next attempt the one in flight, or give up at the deadline."""
        number = self._next
        if self._over or self._in_flight or number >= len(self._delays):
            raise RuntimeError("RetryState: no attempt is due")
        remaining = self._deadline.remaining()
        if remaining <= 0:
            return self._give_up(GiveUpReason.DEADLINE)
        self._next = number + 1
        self._in_flight = True
        self._started = self._clock()
        domain = self._targets[number]
        timeout = self.policy.attempt_timeout
        return Send(
            number,
            domain,
            domain + self.path,
            timeout if timeout < remaining else remaining,
            remaining < _PHASES * timeout,
        )

    def _give_up(self, reason: GiveUpReason) -> Fail:
        self._over = True
        if self._metrics is not None:
            self._metrics.count_request(reason.value)
        cls = RetryBudgetExhausted if reason is GiveUpReason.BUDGET else AllAttemptsFailed
        error = cls(self.method, self.path, reason, self._all_attempts(), self._last_response)
        return Fail(error)
