"""The failover HTTP client: pure decisions first, then real servers on loopback.

The servers are real (uvicorn on 127.0.5.1-4, one "domain" each, see conftest.py).
Where a test checks the schedule it injects a :class:`FakeClock` (the clock and the
sleep), so the delays are recorded instead of slept; the deadline tests also run once
in real time with a tiny schedule.
"""

from __future__ import annotations

import asyncio
import dataclasses
import email.utils
import logging
import math
import pickle
import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from rideout.backoff import FixedSchedule, RetryBudget
from rideout.client import (
    DEFAULT_SCHEDULE,
    AllAttemptsFailed,
    AsyncFailoverClient,
    Attempt,
    CachingResolver,
    ClientMetrics,
    DomainPlan,
    ErrorKind,
    FailoverClient,
    GiveUpReason,
    NameserverResolver,
    RetryBudgetExhausted,
    RetryPolicy,
    RetryRateAlarm,
    RetryRateAlert,
    RetryState,
    UnknownGeoError,
    is_retryable,
    parse_retry_after,
)
from rideout.client.http import Done, GiveUp, Send, Sleep, _DeadlineBackend, classify
from tests.client.conftest import Act, DnsServer, Domains, FakeClock
from tests.conftest import free_port

FAST = RetryPolicy(schedule=FixedSchedule((0, 0.01, 0.01, 0.01, 0.01)), attempt_timeout=2.0)


# =============================================================== policy and predicate


def test_default_policy_is_seed_001() -> None:
    policy = RetryPolicy()
    assert policy.schedule == DEFAULT_SCHEDULE
    assert policy.schedule.delays == (0, 1, 3, 6, 10)
    assert policy.max_attempts == 5
    assert sum(policy.schedule.delays) == 20
    assert policy.retry_statuses == {500, 502, 503, 504}
    assert policy.retry_methods == {"GET", "HEAD", "PUT", "DELETE", "OPTIONS"}
    assert policy.key_methods == {"POST", "PATCH"}
    assert policy.attempt_timeout == 10.0
    with pytest.raises(dataclasses.FrozenInstanceError):
        policy.total_timeout = 5


def test_policy_normalises_and_validates() -> None:
    policy = RetryPolicy(retry_methods={"get", "put"}, retry_statuses=[503])  # type: ignore[arg-type]
    assert policy.retry_methods == frozenset({"GET", "PUT"})
    assert policy.retry_statuses == frozenset({503})
    with pytest.raises(TypeError, match="FixedSchedule"):
        RetryPolicy(schedule=(0, 1))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="total_timeout"):
        RetryPolicy(total_timeout=0)
    with pytest.raises(ValueError, match="attempt_timeout"):
        RetryPolicy(attempt_timeout=float("inf"))
    with pytest.raises(ValueError, match="not an HTTP status"):
        RetryPolicy(retry_statuses=frozenset({1000}))
    with pytest.raises(TypeError, match="bool"):
        RetryPolicy(idempotency_keys=1)  # type: ignore[arg-type]


P = RetryPolicy()
KEY = {"Idempotency-Key": "k-1"}


@pytest.mark.parametrize(
    ("method", "outcome", "headers", "response_headers", "expected"),
    [
        ("GET", 500, None, None, True),
        ("GET", 502, None, None, True),
        ("GET", 503, None, None, True),
        ("GET", 504, None, None, True),
        ("GET", 501, None, None, False),
        ("GET", 200, None, None, False),
        ("GET", 400, None, None, False),
        ("GET", 404, None, None, False),
        ("GET", 409, None, None, False),
        ("GET", 429, None, None, False),  # 429 only with Retry-After
        ("GET", 429, None, {"Retry-After": "3"}, True),
        ("GET", 429, None, {"retry-after": "garbage"}, False),
        ("put", 503, None, None, True),
        ("DELETE", ErrorKind.READ_TIMEOUT, None, None, True),
        ("POST", 503, None, None, False),
        ("POST", 503, KEY, None, True),
        ("PATCH", 503, {"idempotency-key": "x"}, None, True),
        ("POST", 429, KEY, {"Retry-After": "1"}, True),
        ("POST", ErrorKind.READ_TIMEOUT, None, None, False),
        ("POST", ErrorKind.READ_TIMEOUT, KEY, None, True),
        ("POST", ErrorKind.TIMEOUT, None, None, False),
        ("POST", ErrorKind.PROTOCOL_ERROR, None, None, False),
        # The request never left: safe whatever the method.
        ("POST", ErrorKind.DNS_ERROR, None, None, True),
        ("POST", ErrorKind.CONNECT_ERROR, None, None, True),
        ("POST", ErrorKind.CONNECT_TIMEOUT, None, None, True),
        ("POST", "pool_timeout", None, None, True),
        ("GET", ErrorKind.REQUEST_ERROR, None, None, False),
    ],
)
def test_is_retryable(
    method: str,
    outcome: Any,
    headers: dict[str, str] | None,
    response_headers: dict[str, str] | None,
    expected: bool,
) -> None:
    assert is_retryable(method, outcome, headers, P, response_headers) is expected


def test_is_retryable_follows_the_policy() -> None:
    strict = RetryPolicy(retry_unsent=False, retry_statuses=frozenset({503}))
    assert not is_retryable("POST", ErrorKind.CONNECT_ERROR, None, strict)
    assert not is_retryable("GET", 500, None, strict)
    assert is_retryable("GET", 503, None, strict)
    no_ra = RetryPolicy(respect_retry_after=False)
    assert not is_retryable("GET", 429, None, no_ra, {"Retry-After": "1"})
    with pytest.raises(ValueError, match="nonsense"):
        is_retryable("GET", "nonsense", None, P)


def test_parse_retry_after() -> None:
    assert parse_retry_after(None) is None
    assert parse_retry_after("120") == 120.0
    assert parse_retry_after(" 0 ") == 0.0
    assert parse_retry_after("-5") is None
    assert parse_retry_after("1.5") is None
    assert parse_retry_after("soon") is None
    now = 1_700_000_000.0
    date = email.utils.formatdate(now + 42, usegmt=True)
    assert parse_retry_after(date, now=now) == pytest.approx(42)
    past = email.utils.formatdate(now - 42, usegmt=True)
    assert parse_retry_after(past, now=now) == 0.0
    # A hostile server's absurd value is "forever" (then capped by max_retry_after),
    # not an OverflowError or int()'s digit limit escaping from the client.
    assert parse_retry_after("9" * 400) == math.inf
    assert parse_retry_after("9" * 5000) == math.inf


@given(st.text(max_size=60))
def test_parse_retry_after_never_raises(value: str) -> None:
    seconds = parse_retry_after(value, now=1_700_000_000.0)
    assert seconds is None or seconds >= 0


# ======================================================================= domain plan

SEED_PLAN = DomainPlan(
    {
        "cn": (
            "https://api.sd-rtn.com",
            "https://api.agora.io",
            "https://api-cn-east-1.sd-rtn.com",
            "https://api-cn-north-1.sd-rtn.com",
        ),
        "overseas": (
            "https://api.agora.io/",
            "https://api.sd-rtn.com",
            "https://api-us-west-1.agora.io",
            "https://api-us-east-1.agora.io",
        ),
    }
)


def test_domain_plan_per_geo() -> None:
    assert SEED_PLAN.for_geo("cn")[0] == "https://api.sd-rtn.com"
    assert SEED_PLAN.for_geo("overseas")[0] == "https://api.agora.io"  # slash dropped
    assert SEED_PLAN.targets("cn", 5) == (
        "https://api.sd-rtn.com",
        "https://api.agora.io",
        "https://api-cn-east-1.sd-rtn.com",
        "https://api-cn-north-1.sd-rtn.com",
        "https://api-cn-north-1.sd-rtn.com",
    )
    with pytest.raises(UnknownGeoError, match=r"unknown geo 'eu'.*'cn', 'overseas'"):
        SEED_PLAN.for_geo("eu")
    with pytest.raises(UnknownGeoError):
        FailoverClient(SEED_PLAN, "eu")
    with pytest.raises(TypeError):
        SEED_PLAN.geos["cn"] = ()  # type: ignore[index]
    assert hash(SEED_PLAN) == hash(DomainPlan(dict(SEED_PLAN.geos)))


def test_domain_plan_order_gives_the_seed_table() -> None:
    # The seed's table retries the primary once before switching; its code does not.
    table = DomainPlan(SEED_PLAN.geos, order=(0, 0, 1, 2, 3))
    urls = SEED_PLAN.for_geo("cn")
    assert table.targets("cn", 5) == (urls[0], urls[0], urls[1], urls[2], urls[3])
    with pytest.raises(ValueError, match="order"):
        DomainPlan(SEED_PLAN.geos, order=(0, 4))


@pytest.mark.parametrize(
    ("geos", "match"),
    [
        ({}, "at least one"),
        ({"x": ()}, "non-empty"),
        ({"x": "http://a"}, "non-empty sequence"),
        ({"x": ("ftp://a",)}, "http"),
        ({"x": ("/relative",)}, "absolute"),
        ({"x": ("http://a/?q=1",)}, "query"),
    ],
)
def test_domain_plan_rejects_bad_input(geos: Any, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        DomainPlan(geos)


# ================================================================= sans-I/O RetryState

TARGETS = ("http://a", "http://b", "http://c", "http://d", "http://d")


def drive(
    state: RetryState[str],
    outcomes: list[Any],
    clock: FakeClock,
    durations: list[float] | None = None,
) -> tuple[list[Any], Any]:
    """Run the state against scripted outcomes; the actions seen and the final one."""
    actions: list[Any] = []
    action = state.start()
    durations = list(durations or [])
    while not isinstance(action, Done | GiveUp):
        actions.append(action)
        if isinstance(action, Sleep):
            clock.sleep(action.seconds)
            action = state.slept()
        else:
            clock.advance(min(durations.pop(0), action.timeout) if durations else 0.0)
            outcome = outcomes.pop(0)
            response = f"response {outcome}" if isinstance(outcome, int) else None
            action = state.finished(outcome, response=response)
    return actions, action


def test_state_walks_the_default_schedule(clock: FakeClock) -> None:
    state: RetryState[str] = RetryState(RetryPolicy(), TARGETS, "GET", "/v1/items", clock=clock)
    actions, final = drive(state, [503, ErrorKind.CONNECT_ERROR, 502, 500, 504], clock)
    sends = [a for a in actions if isinstance(a, Send)]
    assert [s.url for s in sends] == [t + "/v1/items" for t in TARGETS]
    assert [a.seconds for a in actions if isinstance(a, Sleep)] == [1, 3, 6, 10]
    assert isinstance(final, GiveUp)
    assert final.error.reason is GiveUpReason.ATTEMPTS
    assert final.error.last_response == "response 504"
    assert [a.outcome for a in final.error.attempts] == [503, "connect_error", 502, 500, 504]
    assert [a.started - 1000 for a in final.error.attempts] == [0, 1, 4, 10, 20]


def test_state_returns_the_first_non_retryable_response(clock: FakeClock) -> None:
    state: RetryState[str] = RetryState(RetryPolicy(), TARGETS, "GET", "/x", clock=clock)
    _actions, final = drive(state, [503, 404], clock)
    assert final == Done("response 404")
    assert len(state.attempts) == 2


def test_state_keeps_the_attempt_of_a_first_time_success(clock: FakeClock) -> None:
    # Without an on_attempt hook, a success's Attempt is built only when asked for.
    state: RetryState[str] = RetryState(RetryPolicy(), TARGETS, "GET", "/x", clock=clock)
    actions, final = drive(state, [200], clock, durations=[0.25])
    assert actions == [Send(0, "http://a", "http://a/x", 10.0, False)]
    assert final == Done("response 200")
    assert state.attempts == (Attempt("http://a", 0, 1000.0, 0.25, 200),)
    assert state.attempts[0] is state.attempts[0]
    assert state.remaining() == 59.75


def test_state_never_passes_the_deadline(clock: FakeClock) -> None:
    # Attempts that each hang for their whole timeout (4 s): 0-4, sleep 1, 5-9,
    # sleep 3, 12-15 (only 3 s left), then the 6 s sleep would pass 15 s: give up.
    policy = RetryPolicy(attempt_timeout=4.0, total_timeout=15.0)
    state: RetryState[str] = RetryState(policy, TARGETS, "GET", "/x", clock=clock)
    actions, final = drive(state, [ErrorKind.READ_TIMEOUT] * 5, clock, durations=[99] * 5)
    assert [a.timeout for a in actions if isinstance(a, Send)] == [4.0, 4.0, 3.0]
    assert isinstance(final, GiveUp)
    assert final.error.reason is GiveUpReason.DEADLINE
    assert clock.now - 1000 == 15.0


@settings(max_examples=200, deadline=None)
@given(
    delays=st.lists(st.floats(0, 5), min_size=1, max_size=8),
    durations=st.lists(st.floats(0, 10), min_size=8, max_size=8),
    attempt_timeout=st.floats(0.01, 10),
    total_timeout=st.floats(0.01, 30),
)
def test_state_deadline_property(
    delays: list[float], durations: list[float], attempt_timeout: float, total_timeout: float
) -> None:
    clock = FakeClock()
    policy = RetryPolicy(
        schedule=FixedSchedule(tuple(delays)),
        attempt_timeout=attempt_timeout,
        total_timeout=total_timeout,
    )
    state: RetryState[str] = RetryState(
        policy, ["http://a"] * len(delays), "GET", "/x", clock=clock
    )
    actions, final = drive(state, [503] * len(delays), clock, durations=durations)
    assert clock.now - 1000 <= total_timeout + 1e-9
    assert sum(isinstance(a, Send) for a in actions) <= len(delays)
    assert isinstance(final, GiveUp)


def test_state_budget(clock: FakeClock) -> None:
    budget = RetryBudget(capacity=10, retry_cost=5, timeout_cost=10)
    state: RetryState[str] = RetryState(
        RetryPolicy(), TARGETS, "GET", "/x", clock=clock, budget=budget
    )
    _, final = drive(state, [503, 503, 503], clock)
    assert isinstance(final, GiveUp)
    assert isinstance(final.error, RetryBudgetExhausted)
    assert len(final.error.attempts) == 3
    assert budget.available == 0
    refunded = RetryBudget()
    state = RetryState(RetryPolicy(), TARGETS, "GET", "/x", clock=clock, budget=refunded)
    _, final = drive(state, [ErrorKind.READ_TIMEOUT, 200], clock)
    assert final == Done("response 200")
    assert refunded.available == 500 - 10 + 1  # a timeout's retry, then a success's refund
    state = RetryState(RetryPolicy(), TARGETS, "GET", "/x", clock=clock, budget=refunded)
    drive(state, [404], clock)
    assert refunded.available == 492  # a 4xx is a success for the budget too
    full = RetryBudget(capacity=10)
    state = RetryState(RetryPolicy(), TARGETS, "GET", "/x", clock=clock, budget=full)
    drive(state, [200], clock)
    assert full.available == full.capacity == 10


def test_state_misuse_is_refused(clock: FakeClock) -> None:
    state: RetryState[str] = RetryState(RetryPolicy(), TARGETS, "GET", "/x", clock=clock)
    with pytest.raises(RuntimeError, match="without a Send"):
        state.finished(200)
    state.start()
    with pytest.raises(RuntimeError, match="twice"):
        state.start()
    with pytest.raises(ValueError, match="a domain for each"):
        RetryState(RetryPolicy(), TARGETS[:2], "GET", "/x")
    with pytest.raises(ValueError, match="path must start"):
        RetryState(RetryPolicy(), TARGETS, "GET", "x", clock=clock).start()


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


def test_classify_maps_httpx_errors() -> None:
    request = httpx.Request("GET", "http://x")
    assert classify(httpx.ConnectTimeout("t", request=request)) is ErrorKind.CONNECT_TIMEOUT
    assert classify(httpx.ReadTimeout("t", request=request)) is ErrorKind.READ_TIMEOUT
    assert classify(httpx.WriteTimeout("t", request=request)) is ErrorKind.WRITE_TIMEOUT
    assert classify(httpx.PoolTimeout("t", request=request)) is ErrorKind.POOL_TIMEOUT
    assert classify(httpx.ConnectError("refused")) is ErrorKind.CONNECT_ERROR
    assert classify(httpx.ReadError("reset")) is ErrorKind.READ_ERROR
    assert classify(httpx.WriteError("broken")) is ErrorKind.WRITE_ERROR
    assert classify(httpx.RemoteProtocolError("eof")) is ErrorKind.PROTOCOL_ERROR
    assert classify(httpx.LocalProtocolError("bad")) is ErrorKind.REQUEST_ERROR
    assert classify(httpx.UnsupportedProtocol("gopher")) is ErrorKind.REQUEST_ERROR


# ========================================================================== the alarm


def test_retry_rate_alarm_fires_once_and_clears(clock: FakeClock) -> None:
    events: list[RetryRateAlert] = []
    alarm = RetryRateAlarm(
        events.append,
        threshold=0.5,
        window=10.0,
        min_requests=4,
        buckets=10,
        on_clear=events.append,
        clock=clock,
    )
    for _ in range(3):
        alarm.record_request()
        alarm.record_retry()
    assert events == []
    assert not alarm.firing
    alarm.record_request()
    alarm.record_retry()
    assert alarm.firing
    assert events == [RetryRateAlert(True, 0.75, 3, 4, 10.0)]  # fires on the 4th request
    alarm.record_request()
    alarm.record_retry()
    assert len(events) == 1  # fires once
    clock.advance(11)  # the window slides past every retry
    assert alarm.rate() == 0.0
    for _ in range(4):
        alarm.record_request()
    assert not alarm.firing
    assert events[-1].firing is False
    assert events[-1].rate == 0.0
    with pytest.raises(ValueError, match="min_requests"):
        RetryRateAlarm(events.append, min_requests=0)


def test_retry_rate_alarm_memory_is_bounded(clock: FakeClock) -> None:
    alarm = RetryRateAlarm(lambda _: None, window=10.0, buckets=10, clock=clock)
    for _ in range(1000):
        alarm.record_request()
        clock.advance(0.37)
    assert len(alarm._slices) <= 11


# ============================================================ real servers: helpers


class Client:
    """The sync or the async client behind one awaitable interface.

    The sync client runs in a worker thread (the servers share this event loop).
    """

    def __init__(self, kind: str, plan: DomainPlan, **kwargs: Any) -> None:
        self.kind = kind
        fake: FakeClock | None = kwargs.pop("fake", None)
        if fake is not None:
            kwargs["clock"] = fake
            kwargs["sleep"] = fake.sleep if kind == "sync" else fake.asleep
        kwargs.setdefault("trust_env", False)
        self.sync = FailoverClient(plan, "test", **kwargs) if kind == "sync" else None
        self.async_ = AsyncFailoverClient(plan, "test", **kwargs) if kind == "async" else None

    async def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        if self.sync is not None:
            return await asyncio.to_thread(self.sync.request, method, path, **kwargs)
        assert self.async_ is not None
        return await self.async_.request(method, path, **kwargs)

    async def get(self, path: str, **kwargs: Any) -> httpx.Response:
        return await self.request("GET", path, **kwargs)

    async def post(self, path: str, **kwargs: Any) -> httpx.Response:
        return await self.request("POST", path, **kwargs)

    async def close(self) -> None:
        if self.sync is not None:
            self.sync.close()
        if self.async_ is not None:
            await self.async_.aclose()


MakeClient = Callable[..., Client]


@pytest.fixture(params=["sync", "async"])
async def make_client(
    request: pytest.FixtureRequest, domains: Domains
) -> AsyncIterator[MakeClient]:
    made: list[Client] = []

    def make(plan: DomainPlan | None = None, **kwargs: Any) -> Client:
        client = Client(request.param, plan or DomainPlan({"test": domains.urls}), **kwargs)
        made.append(client)
        return client

    yield make
    for client in made:
        await client.close()


# ========================================================== real servers: behaviour


async def test_success_needs_one_attempt(make_client: MakeClient, domains: Domains) -> None:
    seen: list[Attempt] = []
    client = make_client(on_attempt=seen.append)
    response = await client.get("/v1/items", params={"q": "1"})
    assert response.status_code == 200
    assert response.json() == {"domain": "primary", "count": 1}
    assert domains.counts() == [1, 0, 0, 0]
    assert domains[0].seen[0].path == "/v1/items"
    assert [a.outcome for a in seen] == [200]


async def test_success_with_every_observer_but_a_hook(
    make_client: MakeClient, domains: Domains
) -> None:
    # The benchmark's client: metrics, a budget and an alarm, no on_attempt hook.
    registry = CollectorRegistry()
    budget = RetryBudget()
    alarm = RetryRateAlarm(lambda _: None, min_requests=1)
    client = make_client(metrics=ClientMetrics(registry), budget=budget, alarm=alarm)
    for _ in range(3):
        assert (await client.get("/v1/items")).status_code == 200
    primary = domains.urls[0]
    assert (
        registry.get_sample_value(
            "rideout_http_client_attempts_total", {"domain": primary, "outcome": "200"}
        )
        == 3
    )
    assert registry.get_sample_value("rideout_http_client_requests_total", {"outcome": "ok"}) == 3
    assert budget.available == budget.capacity
    assert alarm.rate() == 0.0
    assert not alarm.firing


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


async def test_retry_rate_alarm_hook(
    make_client: MakeClient, domains: Domains, clock: FakeClock
) -> None:
    alerts: list[RetryRateAlert] = []
    alarm = RetryRateAlarm(
        alerts.append, threshold=0.5, window=30, min_requests=4, on_clear=alerts.append, clock=clock
    )
    client = make_client(fake=clock, alarm=alarm)
    for _ in range(3):
        await client.get("/x")
    assert alerts == []
    domains[0].always(503)  # the primary goes dark: every request retries once
    for _ in range(3):
        await client.get("/x")
    assert len(alerts) == 1
    assert alerts[0].firing
    assert alerts[0].rate == pytest.approx(0.5)
    domains[0].always(200)
    clock.advance(31)
    for _ in range(4):
        await client.get("/x")
    assert [a.firing for a in alerts] == [True, False]


async def test_every_retry_is_logged(
    make_client: MakeClient, domains: Domains, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    domains[0].always(503)
    caplog.set_level(logging.WARNING, logger="rideout.client.http")
    client = make_client(fake=clock)
    await client.get("/v1/items")
    records = [r for r in caplog.records if r.name == "rideout.client.http"]
    assert len(records) == 1
    record = records[0]
    assert record.__dict__["domain"] == domains.urls[0]
    assert record.__dict__["attempt"] == 0
    assert record.__dict__["cause"] == "503"
    assert record.__dict__["next_domain"] == domains.urls[1]
    assert "GET /v1/items: attempt 0" in record.getMessage()


async def test_a_broken_hook_does_not_break_requests(
    make_client: MakeClient, domains: Domains, caplog: pytest.LogCaptureFixture
) -> None:
    def hook(attempt: Attempt) -> None:
        raise RuntimeError("hook bug")

    client = make_client(on_attempt=hook)
    response = await client.get("/x")
    assert response.status_code == 200
    assert "hook raised" in caplog.text


async def test_paths_must_be_paths(make_client: MakeClient) -> None:
    client = make_client()
    with pytest.raises(ValueError, match="path must start with '/'"):
        await client.get("http://elsewhere/x")


# ====================================================== async-only: resolver hook


async def test_async_client_resolves_through_a_nameserver(
    domains: Domains, dns_server: DnsServer, clock: FakeClock
) -> None:
    dns_server.records["backup.rideout.test"] = (["127.0.5.2"], 30)
    dns_server.modes["primary.rideout.test"] = "nxdomain"
    plan = DomainPlan(
        {
            "test": (
                f"http://primary.rideout.test:{domains.port}",
                f"http://backup.rideout.test:{domains.port}",
            )
        }
    )
    resolver = CachingResolver(NameserverResolver("127.0.0.1", dns_server.port, timeout=1.0))
    seen: list[Attempt] = []
    async with AsyncFailoverClient(
        plan, "test", resolver=resolver, clock=clock, sleep=clock.asleep, on_attempt=seen.append,
        trust_env=False,
    ) as client:  # fmt: skip
        response = await client.get("/v1/items")
    assert response.json()["domain"] == "backup"
    assert seen[0].outcome is ErrorKind.DNS_ERROR
    assert "nxdomain" in seen[0].error
    assert seen[1].address == "127.0.5.2"
    assert domains[1].seen[0].headers["host"] == f"backup.rideout.test:{domains.port}"


async def test_async_client_resolver_timeout_is_a_dns_error(
    domains: Domains, dns_server: DnsServer, clock: FakeClock
) -> None:
    dns_server.modes["primary.rideout.test"] = "silent"
    plan = DomainPlan({"test": (f"http://primary.rideout.test:{domains.port}", domains.urls[1])})
    policy = RetryPolicy(attempt_timeout=0.3)
    resolver = NameserverResolver("127.0.0.1", dns_server.port, timeout=5.0)
    seen: list[Attempt] = []
    async with AsyncFailoverClient(
        plan, "test", policy=policy, resolver=resolver, clock=clock, sleep=clock.asleep,
        on_attempt=seen.append, trust_env=False,
    ) as client:  # fmt: skip
        response = await client.post("/orders")  # unsent: retried even without a key
    assert response.json()["domain"] == "backup"
    assert seen[0].outcome is ErrorKind.DNS_ERROR
