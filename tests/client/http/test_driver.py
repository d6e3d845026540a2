"""What both failover clients do, each test run against the sync and the async client
(the `make_client` fixture) on real servers (uvicorn on 127.0.5.1-4, one "domain" each,
see tests/client/conftest.py).

Where a test checks the schedule it injects a :class:`FakeClock` (the clock and the
sleep), so the delays are recorded instead of slept; the deadline tests also run once
in real time with a tiny schedule.
"""

from __future__ import annotations

import ast
import email.utils
import inspect
import time
import uuid
from types import ModuleType

import pytest
from prometheus_client import CollectorRegistry

from rideout.backoff import FixedSchedule, RetryBudget
from rideout.client import (
    AllAttemptsFailed,
    Attempt,
    ClientMetrics,
    DomainPlan,
    ErrorKind,
    GiveUpReason,
    RetryBudgetExhausted,
    RetryPolicy,
    RetryState,
)
from rideout.client.http import _async, _driver, _sync
from tests.client.conftest import Act, Domains
from tests.client.http.conftest import MakeClient
from tests.conftest import FakeClock, free_port


async def test_success_needs_one_attempt(make_client: MakeClient, domains: Domains) -> None:
    seen: list[Attempt] = []
    client = make_client(on_attempt=seen.append)
    response = await client.get("/v1/items", params={"q": "1"})
    assert response.status_code == 200
    assert response.json() == {"domain": "primary", "count": 1}
    assert domains.counts() == [1, 0, 0, 0]
    assert domains[0].seen[0].path == "/v1/items"
    assert [a.outcome for a in seen] == [200]


async def test_default_schedule_domains_and_delays(
    make_client: MakeClient, domains: Domains, clock: FakeClock
) -> None:
    domains.all(503)
    seen: list[Attempt] = []
    client = make_client(fake=clock, on_attempt=seen.append)
    started = time.monotonic()
    with pytest.raises(AllAttemptsFailed) as info:
        await client.get("/v1/items")
    assert time.monotonic() - started < 5  # the 20 s of delays were recorded, not slept
    assert clock.sleeps == [1, 3, 6, 10]
    assert [a.domain for a in seen] == [*domains.urls, domains.urls[3]]
    assert [a.number for a in seen] == [0, 1, 2, 3, 4]
    assert [a.started - 1000 for a in seen] == [0, 1, 4, 10, 20]
    assert domains.counts() == [1, 1, 1, 2]
    error = info.value
    assert error.reason is GiveUpReason.ATTEMPTS
    assert [a.outcome for a in error.attempts] == [503] * 5
    assert error.last_response is not None
    assert error.last_response.status_code == 503
    assert error.last_response.json()["domain"] == "regional2"


async def test_fails_over_to_backup_and_counts_metrics(
    make_client: MakeClient, domains: Domains, clock: FakeClock
) -> None:
    domains[0].always(500)
    registry = CollectorRegistry()
    client = make_client(fake=clock, metrics=ClientMetrics(registry))
    for _ in range(3):
        response = await client.get("/v1/items")
        assert response.json()["domain"] == "backup"
    assert clock.sleeps == [1, 1, 1]

    def value(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(name, labels)

    primary, backup = domains.urls[0], domains.urls[1]
    assert value("rideout_http_client_attempts_total", domain=primary, outcome="500") == 3
    assert value("rideout_http_client_attempts_total", domain=backup, outcome="200") == 3
    assert value("rideout_http_client_retries_total", domain=primary, cause="500") == 3
    assert value("rideout_http_client_requests_total", outcome="ok") == 3


@pytest.mark.parametrize("status", [500, 502, 503, 504])
async def test_each_retry_status_fails_over(
    make_client: MakeClient, domains: Domains, clock: FakeClock, status: int
) -> None:
    domains[0].always(status)
    client = make_client(fake=clock)
    response = await client.get("/x")
    assert response.status_code == 200
    assert domains.counts() == [1, 1, 0, 0]


@pytest.mark.parametrize("status", [400, 401, 403, 404, 409, 422, 429, 501])
async def test_client_errors_are_not_retried(
    make_client: MakeClient, domains: Domains, clock: FakeClock, status: int
) -> None:
    domains[0].always(status)
    registry = CollectorRegistry()
    client = make_client(fake=clock, metrics=ClientMetrics(registry))
    response = await client.get("/x")
    assert response.status_code == status
    assert domains.counts() == [1, 0, 0, 0]
    assert clock.sleeps == []
    outcome = "client_error" if status < 500 else "server_error"
    assert registry.get_sample_value("rideout_http_client_requests_total", {"outcome": outcome})


async def test_timeout_fails_over(make_client: MakeClient, domains: Domains) -> None:
    domains[0].always(200, hang=10)
    seen: list[Attempt] = []
    policy = RetryPolicy(schedule=FixedSchedule((0, 0.05)), attempt_timeout=0.3)
    client = make_client(policy=policy, on_attempt=seen.append)
    started = time.monotonic()
    response = await client.get("/slow")
    assert response.json()["domain"] == "backup"
    assert time.monotonic() - started < 2
    assert seen[0].outcome in (ErrorKind.READ_TIMEOUT, ErrorKind.TIMEOUT)
    assert 0.25 <= seen[0].elapsed <= 0.8


async def test_deadline_is_never_overrun_in_real_time(
    make_client: MakeClient, domains: Domains
) -> None:
    domains.all(200, hang=10)
    total = 0.5
    policy = RetryPolicy(
        schedule=FixedSchedule((0, 0.05, 0.05, 0.05, 0.05)),
        attempt_timeout=0.2,
        total_timeout=total,
    )
    client = make_client(policy=policy)
    started = time.monotonic()
    with pytest.raises(AllAttemptsFailed) as info:
        await client.get("/slow")
    elapsed = time.monotonic() - started
    attempts = info.value.attempts
    # On the client's own clock (real time here): from the first attempt's start to
    # the last one's end, within the total (plus the few µs of reading the clock).
    assert attempts[-1].started + attempts[-1].elapsed - attempts[0].started <= total + 0.02
    # Seen from outside, with the slack of scheduling on a busy machine.
    assert elapsed <= total + 0.3, elapsed
    assert info.value.reason is GiveUpReason.DEADLINE
    # 0-0.2, 0.25-0.45, then 0.05 s are left: the last attempt gets only those.
    assert 2 <= len(info.value.attempts) <= 3
    assert all(a.elapsed <= 0.2 + 0.1 for a in info.value.attempts)


async def test_deadline_with_injected_clock(
    make_client: MakeClient, domains: Domains, clock: FakeClock
) -> None:
    domains.all(503)
    policy = RetryPolicy(total_timeout=7.5)
    client = make_client(policy=policy, fake=clock)
    with pytest.raises(AllAttemptsFailed) as info:
        await client.get("/x")
    # Delays 1 and 3 fit (t=4); the 6 s delay would end at 10 > 7.5: stop before it.
    assert clock.sleeps == [1, 3]
    assert info.value.reason is GiveUpReason.DEADLINE
    assert domains.counts() == [1, 1, 1, 0]


async def test_unresolvable_domain_fails_over_quickly(
    make_client: MakeClient, domains: Domains, clock: FakeClock
) -> None:
    plan = DomainPlan({"test": (f"http://primary.rideout.invalid:{domains.port}", domains.urls[1])})
    seen: list[Attempt] = []
    client = make_client(plan, fake=clock, on_attempt=seen.append)
    started = time.monotonic()
    response = await client.get("/x")
    assert time.monotonic() - started < 3
    assert response.json()["domain"] == "backup"
    assert seen[0].outcome is ErrorKind.DNS_ERROR


async def test_connection_refused_fails_over(
    make_client: MakeClient, domains: Domains, clock: FakeClock
) -> None:
    dead = f"http://127.0.5.9:{free_port('127.0.5.9')}"
    seen: list[Attempt] = []
    client = make_client(
        DomainPlan({"test": (dead, domains.urls[1])}), fake=clock, on_attempt=seen.append
    )
    response = await client.post("/orders")  # POST: the request never left
    assert response.json()["domain"] == "backup"
    assert seen[0].outcome is ErrorKind.CONNECT_ERROR


async def test_retry_after_is_honoured_and_capped(
    make_client: MakeClient, domains: Domains, clock: FakeClock
) -> None:
    policy = RetryPolicy(max_retry_after=5.0)
    domains[0].then(Act(503, (("Retry-After", "2"),)))
    domains[1].then(Act(429, (("Retry-After", "100"),)))
    date = email.utils.formatdate(time.time() + 4, usegmt=True)
    domains[2].then(Act(503, (("Retry-After", date),)))
    client = make_client(policy=policy, fake=clock, wall_clock=time.time)
    response = await client.get("/x")
    assert response.json()["domain"] == "regional2"
    # 503 asks 2 s (more than the schedule's 1 s); 429 asks 100 s, capped at 5 (more
    # than the schedule's 3 s); the HTTP-date asks ~4 s, less than the schedule's 6 s.
    assert clock.sleeps[0] == 2
    assert clock.sleeps[1] == 5
    assert clock.sleeps[2] == 6


async def test_post_without_key_is_not_retried(
    make_client: MakeClient, domains: Domains, clock: FakeClock
) -> None:
    domains[0].always(503)
    client = make_client(fake=clock)
    response = await client.request("POST", "/orders", json={"item": 1})
    assert response.status_code == 503  # returned as is: retrying could order twice
    assert domains.counts() == [1, 0, 0, 0]
    assert "idempotency-key" not in domains[0].seen[0].headers


async def test_post_timeout_without_key_gives_up(make_client: MakeClient, domains: Domains) -> None:
    domains[0].always(200, hang=10)
    client = make_client(policy=RetryPolicy(schedule=FixedSchedule((0, 0.01)), attempt_timeout=0.2))
    with pytest.raises(AllAttemptsFailed) as info:
        await client.request("POST", "/orders", content=b"x")
    assert info.value.reason is GiveUpReason.NOT_RETRYABLE
    assert len(info.value.attempts) == 1


async def test_post_with_auto_key_is_retried_with_the_same_key(
    make_client: MakeClient, domains: Domains, clock: FakeClock
) -> None:
    domains[0].always(503)
    domains[1].always(502)
    client = make_client(policy=RetryPolicy(idempotency_keys=True), fake=clock)
    response = await client.request("POST", "/orders", json={"item": 1})
    assert response.json()["domain"] == "regional1"
    seen = [d.seen[0] for d in domains.items[:3]]
    keys = {s.headers["idempotency-key"] for s in seen}
    assert len(keys) == 1
    assert uuid.UUID(keys.pop()).version == 4
    assert all(s.body == b'{"item":1}' for s in seen)
    # A second request gets a key of its own.
    domains.all(200)
    await client.request("PATCH", "/orders/1", json={"item": 2})
    assert domains[0].seen[-1].headers["idempotency-key"] != seen[0].headers["idempotency-key"]


async def test_explicit_key_is_kept(
    make_client: MakeClient, domains: Domains, clock: FakeClock
) -> None:
    domains[0].always(503)
    client = make_client(fake=clock)
    response = await client.request("POST", "/orders", idempotency_key="order-42", content=b"x")
    assert response.status_code == 200
    assert [d.seen[0].headers["idempotency-key"] for d in domains.items[:2]] == ["order-42"] * 2


async def test_budget_exhaustion_fails_fast_across_clients(
    make_client: MakeClient, domains: Domains, clock: FakeClock
) -> None:
    domains.all(503)
    budget = RetryBudget(capacity=10, retry_cost=5)
    first = make_client(fake=clock, budget=budget)
    second = make_client(fake=clock, budget=budget)
    with pytest.raises(RetryBudgetExhausted) as info:
        await first.get("/x")
    assert len(info.value.attempts) == 3  # two retries paid, the third refused
    assert info.value.last_response is not None
    with pytest.raises(RetryBudgetExhausted) as info:
        await second.get("/x")
    assert len(info.value.attempts) == 1
    assert isinstance(info.value, AllAttemptsFailed)
    assert "retry budget is exhausted" in str(info.value)


async def test_paths_must_be_paths(make_client: MakeClient) -> None:
    client = make_client()
    with pytest.raises(ValueError, match="path must start with '/'"):
        await client.get("http://elsewhere/x")


@pytest.mark.parametrize("module", [_driver, _sync, _async], ids=lambda m: m.__name__)
def test_the_clients_drive_the_state_through_its_public_protocol(module: ModuleType) -> None:
    """No side door: the clients use no private attribute of a RetryState or of its
    steps, and do not subclass it (any transport can do what they do)."""
    tree = ast.parse(inspect.getsource(module))
    private = {
        f"{node.value.id}.{node.attr}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id in ("state", "action", "send")
        and node.attr.startswith("_")
    }
    assert private == set()
    classes = [c for c in vars(module).values() if isinstance(c, type) and c is not RetryState]
    assert not any(issubclass(c, RetryState) for c in classes)
