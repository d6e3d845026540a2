"""The deadline of an attempt, whatever the server does: a trickling response is cut at the
attempt's bound (both clients), and the sync client's deadline backend is in place.
"""

from __future__ import annotations

import time

import pytest

from rideout.backoff import FixedSchedule
from rideout.client import (
    AllAttemptsFailed,
    DomainPlan,
    ErrorKind,
    FailoverClient,
    RetryPolicy,
)
from rideout.client.http._deadline import _DeadlineBackend
from tests.client.conftest import Domains
from tests.client.http.conftest import MakeClient


async def test_a_response_trickling_in_is_cut_at_the_attempt_timeout(
    make_client: MakeClient, domains: Domains
) -> None:
    """A server that sends its body a byte every 0.1 s: every read is well inside the
    read timeout, yet the response would take ~3 s. Each attempt ends at its timeout
    and the request at its deadline (the sync client caps each socket operation by the
    attempt's end; the async one cancels the attempt)."""
    domains.all(200, trickle=0.1)
    total = 1.5
    policy = RetryPolicy(
        schedule=FixedSchedule((0, 0.05, 0.05)), attempt_timeout=0.5, total_timeout=total
    )
    client = make_client(policy=policy)
    started = time.monotonic()
    with pytest.raises(AllAttemptsFailed) as info:
        await client.get("/drip")
    elapsed = time.monotonic() - started
    assert elapsed <= total + 0.3, elapsed
    attempts = info.value.attempts
    assert len(attempts) >= 2
    for attempt in attempts:
        assert attempt.outcome in (ErrorKind.READ_TIMEOUT, ErrorKind.TIMEOUT), attempt
        assert attempt.elapsed <= 0.5 + 0.2, attempt


def test_the_sync_client_reads_through_the_deadline_backend() -> None:
    """The sync client's deadline rests on an attribute of httpx's connection pool (httpx
    takes no network backend): this fails if a new httpx moves it."""
    with FailoverClient(DomainPlan({"test": ("http://127.0.0.1:1",)}), "test") as client:
        pool = client._client._transport._pool  # type: ignore[attr-defined]
        assert isinstance(pool._network_backend, _DeadlineBackend)
