"""The client's exceptions: readable and picklable."""

from __future__ import annotations

import pickle

from rideout.client import (
    AllAttemptsFailed,
    Attempt,
    ErrorKind,
    GiveUpReason,
    RetryBudgetExhausted,
)


def test_all_attempts_failed_is_readable_and_picklable() -> None:
    attempts = [
        Attempt("http://a", 0, 0.0, 0.5, 503),
        Attempt("http://b", 1, 1.5, 2.0, ErrorKind.READ_TIMEOUT, "timed out"),
    ]
    error = AllAttemptsFailed("GET", "/x", GiveUpReason.ATTEMPTS, attempts)
    text = str(error)
    assert "GET /x failed after 2 attempt(s)" in text
    assert "#1 http://b read_timeout: timed out" in text
    again = pickle.loads(pickle.dumps(error))
    assert again.attempts == error.attempts
    assert again.reason is GiveUpReason.ATTEMPTS
    budget = pickle.loads(pickle.dumps(RetryBudgetExhausted("GET", "/x", attempts=attempts)))
    assert isinstance(budget, RetryBudgetExhausted)
    assert budget.reason is GiveUpReason.BUDGET
