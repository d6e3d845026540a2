"""The async client only: resolving names itself through a resolver."""

from __future__ import annotations

from rideout.client import (
    AsyncFailoverClient,
    Attempt,
    CachingResolver,
    DomainPlan,
    ErrorKind,
    NameserverResolver,
    RetryPolicy,
)
from tests.client.conftest import DnsServer, Domains
from tests.conftest import FakeClock


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
