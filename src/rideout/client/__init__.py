"""Clients that ride out failures: the reconnecting WebSocket client, the failover HTTP
client and name resolution.

:mod:`rideout.client.ws` is the auction's WebSocket client (heartbeat, full-jitter
reconnects, state restore, exactly-once bids);

:mod:`rideout.client.http` is seed 001's REST client (domain plan, backoff schedule,
retry triggers, idempotency keys); :mod:`rideout.client.resolve` resolves names
through a chosen nameserver or DNS-over-HTTPS, honouring TTLs.
"""

from __future__ import annotations

from rideout.client.http import (
    DEFAULT_SCHEDULE,
    IDEMPOTENCY_KEY_HEADER,
    AllAttemptsFailed,
    AsyncFailoverClient,
    Attempt,
    ClientMetrics,
    DomainPlan,
    ErrorKind,
    FailoverClient,
    GiveUpReason,
    RetryBudgetExhausted,
    RetryPolicy,
    RetryRateAlarm,
    RetryRateAlert,
    RetryState,
    UnknownGeoError,
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
    AllReconnectsFailed,
    AuctionClient,
    ClientSettings,
    QueueFull,
)

__all__ = [
    "DEFAULT_SCHEDULE",
    "IDEMPOTENCY_KEY_HEADER",
    "AllAttemptsFailed",
    "AllReconnectsFailed",
    "AsyncFailoverClient",
    "Attempt",
    "AuctionClient",
    "CachingResolver",
    "ClientMetrics",
    "ClientSettings",
    "DohResolver",
    "DomainPlan",
    "ErrorKind",
    "FailoverClient",
    "GiveUpReason",
    "NameserverResolver",
    "QueueFull",
    "ResolutionError",
    "ResolutionFailure",
    "Resolved",
    "Resolver",
    "RetryBudgetExhausted",
    "RetryPolicy",
    "RetryRateAlarm",
    "RetryRateAlert",
    "RetryState",
    "SystemResolver",
    "UnknownGeoError",
    "is_retryable",
    "parse_retry_after",
]
