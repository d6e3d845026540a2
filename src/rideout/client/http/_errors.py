"""How an attempt ends, and what the client raises when a request cannot succeed."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, TypeAlias

import httpx

from rideout.client.errors import ClientError

__all__ = [
    "AllAttemptsFailed",
    "Attempt",
    "ErrorKind",
    "GiveUpReason",
    "Outcome",
    "RetryBudgetExhausted",
    "UnknownGeoError",
]


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
