"""Resolvers against real servers: a dnslib DNS server over UDP/TCP and a DoH JSON app.

The cache tests inject a :class:`FakeClock` (the TTL is measured on it); every answer
still comes from a real DNS packet or a real HTTP response.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pickle
import time
from collections.abc import AsyncIterator

import pytest

from rideout.client import (
    CachingResolver,
    DohResolver,
    NameserverResolver,
    ResolutionError,
    ResolutionFailure,
    Resolved,
    SystemResolver,
)
from tests.client.conftest import DnsServer, doh_app, running_dns
from tests.conftest import FakeClock, free_port, serving, until

NAME = "auction.rideout.test"


def nameserver(dns: DnsServer, timeout: float = 1.0) -> NameserverResolver:
    return NameserverResolver(dns.host, dns.port, timeout=timeout)


# ------------------------------------------------------------------------ nameserver


async def test_nameserver_answers_with_the_ttl(dns_server: DnsServer) -> None:
    dns_server.records[NAME] = (["127.0.1.1", "127.0.1.2"], 42)
    resolved = await nameserver(dns_server).resolve(NAME)
    assert resolved == Resolved(
        ("127.0.1.1", "127.0.1.2"), 42.0, f"dns://127.0.0.1:{dns_server.port}"
    )
    assert dns_server.queries == [(NAME, "udp")]
    # A trailing dot and upper case are the same name.
    assert (await nameserver(dns_server).resolve(NAME.upper() + ".")).addresses[0] == "127.0.1.1"


async def test_nameserver_falls_back_to_tcp_on_truncation(dns_server: DnsServer) -> None:
    dns_server.records[NAME] = (["127.0.2.1"], 5)
    dns_server.modes[NAME] = "truncate"
    resolved = await nameserver(dns_server).resolve(NAME)
    assert resolved.addresses == ("127.0.2.1",)
    assert [proto for _, proto in dns_server.queries] == ["udp", "tcp"]


@pytest.mark.parametrize(
    ("mode", "reason"),
    [
        ("nxdomain", ResolutionFailure.NXDOMAIN),
        ("servfail", ResolutionFailure.SERVFAIL),
        ("refused", ResolutionFailure.REFUSED),
    ],
)
async def test_nameserver_failures_are_mapped(
    dns_server: DnsServer, mode: str, reason: ResolutionFailure
) -> None:
    dns_server.records[NAME] = (["127.0.1.1"], 5)
    dns_server.modes[NAME] = mode
    with pytest.raises(ResolutionError) as info:
        await nameserver(dns_server).resolve(NAME)
    assert info.value.reason is reason
    assert info.value.name == NAME
    assert not isinstance(info.value.__cause__, Exception)  # no dnspython exception chained


async def test_nameserver_no_answer(dns_server: DnsServer) -> None:
    dns_server.records[NAME] = ([], 5)
    with pytest.raises(ResolutionError) as info:
        await nameserver(dns_server).resolve(NAME)
    assert info.value.reason is ResolutionFailure.NO_ANSWER


async def test_nameserver_timeout_is_bounded(dns_server: DnsServer) -> None:
    dns_server.modes[NAME] = "silent"
    started = time.monotonic()
    with pytest.raises(ResolutionError) as info:
        await nameserver(dns_server, timeout=0.3).resolve(NAME)
    assert info.value.reason is ResolutionFailure.TIMEOUT
    assert time.monotonic() - started < 1.5
    assert "after 0.3 s" in str(info.value)


async def test_nameserver_unreachable() -> None:
    port = free_port("127.0.0.1", udp=True)  # nothing listens there
    with pytest.raises(ResolutionError) as info:
        await NameserverResolver("127.0.0.1", port, timeout=0.5).resolve(NAME)
    assert info.value.reason in (ResolutionFailure.UNREACHABLE, ResolutionFailure.TIMEOUT)


def test_nameserver_arguments_are_checked() -> None:
    with pytest.raises(ValueError, match="IP address"):
        NameserverResolver("dns.example")
    with pytest.raises(ValueError, match="port"):
        NameserverResolver("127.0.0.1", 0)
    with pytest.raises(ValueError, match="timeout"):
        NameserverResolver("127.0.0.1", timeout=0)


async def test_nameserver_ignores_datagrams_that_answer_another_query(
    dns_server: DnsServer,
) -> None:
    # Before the answer come a reply with another id and one for another name (127.6.6.6).
    dns_server.records[NAME] = (["127.0.1.1"], 30)
    dns_server.modes[NAME] = "stray"
    resolved = await nameserver(dns_server).resolve(NAME)
    assert resolved.addresses == ("127.0.1.1",)
    assert dns_server.queries == [(NAME, "udp")]  # no retransmission was needed


async def test_nameserver_retransmits_a_lost_query(dns_server: DnsServer) -> None:
    dns_server.records[NAME] = (["127.0.1.1"], 30)
    dns_server.modes[NAME] = "drop_first"
    started = time.monotonic()
    resolved = await nameserver(dns_server, timeout=2.0).resolve(NAME)
    assert resolved.addresses == ("127.0.1.1",)
    assert dns_server.queries == [(NAME, "udp"), (NAME, "udp")]
    assert 0.4 < time.monotonic() - started < 1.5  # resent after 0.5 s
    # A silent server gets the query again at 0.5 s (then 1.5 s): within 0.8 s, twice.
    dns_server.queries.clear()
    dns_server.modes[NAME] = "silent"
    with pytest.raises(ResolutionError) as info:
        await nameserver(dns_server, timeout=0.8).resolve(NAME)
    assert info.value.reason is ResolutionFailure.TIMEOUT
    assert dns_server.queries == [(NAME, "udp"), (NAME, "udp")]


@pytest.mark.parametrize(
    ("mode", "reason", "detail"),
    [
        ("malformed", ResolutionFailure.MALFORMED, "past the end"),
        ("notimp", ResolutionFailure.ERROR, "rcode 4"),
        ("nxdomain", ResolutionFailure.NXDOMAIN, "rcode 3"),
        ("tc_always", ResolutionFailure.MALFORMED, "truncated"),
        ("hangup", ResolutionFailure.ERROR, "TCP closed"),
    ],
)
async def test_nameserver_malformed_and_other_rcodes(
    dns_server: DnsServer, mode: str, reason: ResolutionFailure, detail: str
) -> None:
    dns_server.records[NAME] = (["127.0.1.1", "127.0.1.2"], 30)
    dns_server.modes[NAME] = mode
    with pytest.raises(ResolutionError) as info:
        await nameserver(dns_server).resolve(NAME)
    assert info.value.reason is reason
    assert detail in info.value.detail
    assert f"dns://127.0.0.1:{dns_server.port}" in info.value.detail
    assert info.value.__cause__ is None


@pytest.mark.parametrize("name", ["a..rideout.test", "é.rideout.test", "x" * 64 + ".test", ""])
async def test_nameserver_bad_names(dns_server: DnsServer, name: str) -> None:
    with pytest.raises(ResolutionError) as info:
        await nameserver(dns_server).resolve(name)
    assert info.value.reason is ResolutionFailure.ERROR
    assert info.value.__cause__ is None
    assert dns_server.queries == []  # refused before anything was sent


async def test_nameserver_over_ipv6() -> None:
    async with contextlib.AsyncExitStack() as stack:
        try:
            server = await stack.enter_async_context(running_dns("::1"))
        except OSError:
            # Only where the kernel has no ::1; every other test covers the same code
            # over IPv4, all but the socket's family.
            pytest.skip("this machine has no IPv6 loopback (::1) to bind a test server to")
        server.records[NAME] = (["127.0.1.1"], 30)
        resolver = NameserverResolver("::1", server.port, timeout=1.0)
        resolved = await resolver.resolve(NAME)
        assert resolved == Resolved(("127.0.1.1",), 30.0, f"dns://[::1]:{server.port}")
        server.modes[NAME] = "truncate"
        assert (await resolver.resolve(NAME)).addresses == ("127.0.1.1",)
        assert [proto for _, proto in server.queries] == ["udp", "udp", "tcp"]
        assert repr(resolver) == f"NameserverResolver('::1', {server.port}, timeout=1.0)"


def open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


async def test_nameserver_leaves_no_socket_open(dns_server: DnsServer) -> None:
    for mode in ("ok", "truncate", "silent", "stray", "malformed", "servfail"):
        dns_server.records[f"{mode}.test"] = (["127.0.1.1"], 30)
        dns_server.modes[f"{mode}.test"] = mode
    unreachable = NameserverResolver("127.0.0.1", free_port("127.0.0.1", udp=True), timeout=0.2)
    resolver = nameserver(dns_server, timeout=0.2)
    await resolver.resolve("ok.test")  # anything opened once (the loop's own) is open now
    await asyncio.sleep(0.05)
    before = open_fds()
    for _ in range(5):  # any one left open fails the final check
        for mode in ("ok", "truncate", "stray"):
            await resolver.resolve(f"{mode}.test")
        for failing in ("silent.test", "malformed.test", "servfail.test", "a..b", "nx.test"):
            with pytest.raises(ResolutionError):
                await resolver.resolve(failing)
        with pytest.raises(ResolutionError):
            await unreachable.resolve(NAME)
        # Cancelled while waiting for the answer, and while the TCP retry is under way.
        for name in ("silent.test", "truncate.test"):
            task = asyncio.create_task(resolver.resolve(name))
            await asyncio.sleep(0.001)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, ResolutionError):
                await task
        if len(open_fds()) > len(before) + 20:
            break  # a leak: no need to go on
    await until(lambda: open_fds() <= before, timeout=5, message="sockets left open")


def test_resolution_error_is_readable_and_picklable() -> None:
    error = ResolutionError("x.test", "servfail", "dns://127.0.0.1:53")
    assert error.reason is ResolutionFailure.SERVFAIL
    assert str(error) == "cannot resolve 'x.test': servfail (dns://127.0.0.1:53)"
    again = pickle.loads(pickle.dumps(error))
    assert (again.name, again.reason, again.detail) == ("x.test", "servfail", "dns://127.0.0.1:53")
    with pytest.raises(ValueError, match="bogus"):
        ResolutionError("x.test", "bogus")


# ------------------------------------------------------------------------- caching


async def test_cache_honours_the_ttl_and_sees_the_change(
    dns_server: DnsServer, clock: FakeClock
) -> None:
    dns_server.records[NAME] = (["127.0.1.1"], 10)
    resolver = CachingResolver(nameserver(dns_server), clock=clock)
    first = await resolver.resolve(NAME)
    assert first.addresses == ("127.0.1.1",)
    # The failover controller switches the answer to the other region.
    dns_server.records[NAME] = (["127.0.2.1"], 10)
    clock.advance(9.5)
    cached = await resolver.resolve(NAME)
    assert cached.addresses == ("127.0.1.1",)  # still within the TTL
    assert cached.ttl == pytest.approx(0.5)
    assert len(dns_server.queries) == 1
    clock.advance(0.5)
    fresh = await resolver.resolve(NAME)
    assert fresh.addresses == ("127.0.2.1",)  # the TTL has passed: asked again
    assert len(dns_server.queries) == 2


async def test_cache_invalidate_and_failures(dns_server: DnsServer, clock: FakeClock) -> None:
    dns_server.records[NAME] = (["127.0.1.1"], 300)
    resolver = CachingResolver(nameserver(dns_server), clock=clock)
    await resolver.resolve(NAME)
    dns_server.records[NAME] = (["127.0.2.1"], 300)
    resolver.invalidate(NAME + ".")
    assert (await resolver.resolve(NAME)).addresses == ("127.0.2.1",)
    resolver.invalidate()
    dns_server.modes[NAME] = "servfail"
    for _ in range(2):  # failures are not cached: asked each time
        with pytest.raises(ResolutionError):
            await resolver.resolve(NAME)
    assert len(dns_server.queries) == 4


async def test_cache_zero_ttl_max_ttl_and_bound(dns_server: DnsServer, clock: FakeClock) -> None:
    dns_server.records["zero.test"] = (["127.0.1.1"], 0)
    dns_server.records["long.test"] = (["127.0.1.2"], 86400)
    for i in range(3):
        dns_server.records[f"n{i}.test"] = ([f"127.0.3.{i + 1}"], 60)
    resolver = CachingResolver(nameserver(dns_server), clock=clock, max_ttl=60, max_entries=2)
    await resolver.resolve("zero.test")
    await resolver.resolve("zero.test")
    assert dns_server.queries.count(("zero.test", "udp")) == 2  # TTL 0: never cached
    assert (await resolver.resolve("long.test")).ttl == 86400  # the answer as given...
    clock.advance(61)
    await resolver.resolve("long.test")
    assert dns_server.queries.count(("long.test", "udp")) == 2  # ...kept at most max_ttl
    for i in range(3):
        await resolver.resolve(f"n{i}.test")
    await resolver.resolve("n0.test")  # evicted (oldest) when n2 arrived
    assert dns_server.queries.count(("n0.test", "udp")) == 2


# ------------------------------------------------------------------------- system


async def test_system_resolver() -> None:
    resolved = await SystemResolver(default_ttl=7).resolve("127.0.0.1")
    assert resolved == Resolved(("127.0.0.1",), 7.0, "system")
    with pytest.raises(ResolutionError) as info:
        await SystemResolver(timeout=5).resolve("nothing.rideout.invalid")
    assert info.value.reason in (ResolutionFailure.NXDOMAIN, ResolutionFailure.SERVFAIL)


# -------------------------------------------------------------------------- DoH


@pytest.fixture
async def doh(dns_server: DnsServer) -> AsyncIterator[tuple[str, dict[str, str]]]:
    modes: dict[str, str] = {}
    port = free_port("127.0.0.1")
    async with serving(doh_app(dns_server, modes), "127.0.0.1", port):
        yield f"http://127.0.0.1:{port}/dns-query", modes


async def test_doh_answers_with_the_smallest_ttl(
    doh: tuple[str, dict[str, str]], dns_server: DnsServer
) -> None:
    url, _ = doh
    dns_server.records[NAME] = (["127.0.1.1", "127.0.1.2", "127.0.1.1"], 30)
    async with DohResolver(url, timeout=2.0) as resolver:
        resolved = await resolver.resolve(NAME)
    # The app answers a CNAME (TTL 130) then the A records (TTL 30), duplicates dropped.
    assert resolved == Resolved(("127.0.1.1", "127.0.1.2"), 30.0, f"doh:{url}")


@pytest.mark.parametrize(
    ("setup", "reason"),
    [
        ("missing", ResolutionFailure.NXDOMAIN),
        ("servfail", ResolutionFailure.SERVFAIL),
        ("http500", ResolutionFailure.SERVFAIL),
        ("not_json", ResolutionFailure.MALFORMED),
        ("no_status", ResolutionFailure.MALFORMED),
        ("bad_data", ResolutionFailure.MALFORMED),
        ("empty", ResolutionFailure.NO_ANSWER),
        ("slow", ResolutionFailure.TIMEOUT),
    ],
)
async def test_doh_failures_are_mapped(
    doh: tuple[str, dict[str, str]], dns_server: DnsServer, setup: str, reason: ResolutionFailure
) -> None:
    url, modes = doh
    if setup == "empty":
        dns_server.records[NAME] = ([], 30)
    elif setup != "missing":
        dns_server.records[NAME] = (["127.0.1.1"], 30)
        modes[NAME] = setup
    started = time.monotonic()
    async with DohResolver(url, timeout=0.5) as resolver:
        with pytest.raises(ResolutionError) as info:
            await resolver.resolve(NAME)
    assert info.value.reason is reason
    assert time.monotonic() - started < 2


async def test_doh_unreachable() -> None:
    url = f"http://127.0.0.1:{free_port('127.0.0.1')}/dns-query"
    async with DohResolver(url, timeout=1.0) as resolver:
        with pytest.raises(ResolutionError) as info:
            await resolver.resolve(NAME)
    assert info.value.reason is ResolutionFailure.UNREACHABLE


def test_doh_url_is_checked() -> None:
    with pytest.raises(ValueError, match="absolute"):
        DohResolver("/dns-query")
