"""Clients that ride out failures: the reconnecting WebSocket client, the failover HTTP
client and name resolution.

:mod:`rideout.client.ws` is the auction's WebSocket client (heartbeat, full-jitter
reconnects, state restore, exactly-once bids), a sans-I/O core with an asyncio driver;
:mod:`rideout.client.http` is seed 001's REST client (domain plan, backoff schedule,
retry triggers, idempotency keys) around a public retry state machine;
:mod:`rideout.client.resolve` resolves names through a chosen nameserver or
DNS-over-HTTPS, honouring TTLs. Every error is a :class:`ClientError`.

The names below are imported on first use, so ``import rideout.client`` costs nothing
until one is touched. The WebSocket client's sans-I/O parts (``ClientCore``,
``ReconnectPlanner``, ...) are in :mod:`rideout.client.ws`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rideout.client.errors import (
        ClientError,
    )
    from rideout.client.http import (
        DEFAULT_SCHEDULE,
        IDEMPOTENCY_KEY_HEADER,
        Action,
        AllAttemptsFailed,
        AsyncFailoverClient,
        Attempt,
        ClientMetrics,
        DomainPlan,
        Done,
        ErrorKind,
        Fail,
        FailoverClient,
        GiveUpReason,
        Outcome,
        RetryBudgetExhausted,
        RetryPolicy,
        RetryRateAlarm,
        RetryRateAlert,
        RetryState,
        Send,
        Sleep,
        UnknownGeoError,
        classify,
        is_retryable,
        parse_retry_after,
    )
    from rideout.client.resolve import (
        CachingResolver,
        DohResolver,
        NameserverResolver,
        ResolutionError,
        ResolutionFailure,
        Resolved,
        Resolver,
        SystemResolver,
    )
    from rideout.client.ws import (
        Acked,
        AllReconnectsFailed,
        AuctionClient,
        AuctionClientMetrics,
        Cause,
        ClientClosed,
        ClientSettings,
        ClientStats,
        Connected,
        Disconnected,
        Event,
        EventStream,
        GaveUp,
        HeartbeatFailed,
        QueueFull,
        ReconnectScheduled,
        RegionChanged,
        StateRestored,
        TokenProvider,
        Updated,
    )

_MODULES: dict[str, str] = {
    "ClientError": "errors",
    "DEFAULT_SCHEDULE": "http",
    "IDEMPOTENCY_KEY_HEADER": "http",
    "Action": "http",
    "AllAttemptsFailed": "http",
    "AsyncFailoverClient": "http",
    "Attempt": "http",
    "ClientMetrics": "http",
    "DomainPlan": "http",
    "Done": "http",
    "ErrorKind": "http",
    "Fail": "http",
    "FailoverClient": "http",
    "GiveUpReason": "http",
    "Outcome": "http",
    "RetryBudgetExhausted": "http",
    "RetryPolicy": "http",
    "RetryRateAlarm": "http",
    "RetryRateAlert": "http",
    "RetryState": "http",
    "Send": "http",
    "Sleep": "http",
    "UnknownGeoError": "http",
    "classify": "http",
    "is_retryable": "http",
    "parse_retry_after": "http",
    "CachingResolver": "resolve",
    "DohResolver": "resolve",
    "NameserverResolver": "resolve",
    "ResolutionError": "resolve",
    "ResolutionFailure": "resolve",
    "Resolved": "resolve",
    "Resolver": "resolve",
    "SystemResolver": "resolve",
    "Acked": "ws",
    "AllReconnectsFailed": "ws",
    "AuctionClient": "ws",
    "AuctionClientMetrics": "ws",
    "Cause": "ws",
    "ClientClosed": "ws",
    "ClientSettings": "ws",
    "ClientStats": "ws",
    "Connected": "ws",
    "Disconnected": "ws",
    "Event": "ws",
    "EventStream": "ws",
    "GaveUp": "ws",
    "HeartbeatFailed": "ws",
    "QueueFull": "ws",
    "ReconnectScheduled": "ws",
    "RegionChanged": "ws",
    "StateRestored": "ws",
    "TokenProvider": "ws",
    "Updated": "ws",
}
"""Where each public name lives (``rideout.client.<module>``)."""

__all__ = [
    "DEFAULT_SCHEDULE",
    "IDEMPOTENCY_KEY_HEADER",
    "Acked",
    "Action",
    "AllAttemptsFailed",
    "AllReconnectsFailed",
    "AsyncFailoverClient",
    "Attempt",
    "AuctionClient",
    "AuctionClientMetrics",
    "CachingResolver",
    "Cause",
    "ClientClosed",
    "ClientError",
    "ClientMetrics",
    "ClientSettings",
    "ClientStats",
    "Connected",
    "Disconnected",
    "DohResolver",
    "DomainPlan",
    "Done",
    "ErrorKind",
    "Event",
    "EventStream",
    "Fail",
    "FailoverClient",
    "GaveUp",
    "GiveUpReason",
    "HeartbeatFailed",
    "NameserverResolver",
    "Outcome",
    "QueueFull",
    "ReconnectScheduled",
    "RegionChanged",
    "ResolutionError",
    "ResolutionFailure",
    "Resolved",
    "Resolver",
    "RetryBudgetExhausted",
    "RetryPolicy",
    "RetryRateAlarm",
    "RetryRateAlert",
    "RetryState",
    "Send",
    "Sleep",
    "StateRestored",
    "SystemResolver",
    "TokenProvider",
    "UnknownGeoError",
    "Updated",
    "classify",
    "is_retryable",
    "parse_retry_after",
]


def __getattr__(name: str) -> Any:
    module = _MODULES.get(name)
    if module is None:
        raise AttributeError(f"module 'rideout.client' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"rideout.client.{module}"), name)
    globals()[name] = value  # once: later lookups do not come here
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
