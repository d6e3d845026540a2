"""What the client reports: the retry-rate alarm on its own (pure), then metrics, the
alarm, the retry log and the on_attempt hook through both clients on real servers.
"""

from __future__ import annotations

import logging

import pytest
from prometheus_client import CollectorRegistry

from rideout.backoff import RetryBudget
from rideout.client import (
    Attempt,
    ClientMetrics,
    RetryRateAlarm,
    RetryRateAlert,
)
from tests.client.conftest import Domains
from tests.client.http.conftest import MakeClient
from tests.conftest import FakeClock

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


# ======================================================== through the clients


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
