"""The WebSocket client's asyncio driver against real app servers, real Redis and
rideout's real DNS server (and tiny WebSocket servers that misbehave on purpose)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from rideout.backoff import FullJitter
from rideout.client.ws import (
    Acked,
    AllReconnectsFailed,
    AuctionClient,
    AuctionClientMetrics,
    Cause,
    ClientClosed,
    Connected,
    Disconnected,
    Event,
    GaveUp,
    HeartbeatFailed,
    QueueFull,
    ReconnectScheduled,
    RegionChanged,
    StateRestored,
    Updated,
)
from rideout.config import Config
from rideout.protocol import Position
from tests.client.ws.support import (
    DEAD,
    HUNG,
    SPARE,
    Sleeps,
    closing_server,
    fast_settings,
    hung_server,
    of_type,
    running_dns,
    silent_server,
)
from tests.conftest import ZONE_ADDRESSES, free_port, until
from tests.realtime.conftest import (
    Deployment,
    hold_lag,
    recv_type,
    running_deployment,
    send,
)


@pytest.fixture
def events() -> list[Event]:
    return []


def make_client(
    config: Config, dns: Any, events: list[Event], token: Any, **kw: Any
) -> AuctionClient:
    kw.setdefault("settings", fast_settings())
    return AuctionClient(
        config.app_domain, port=kw.pop("port", config.app_port), token=token,
        resolver=dns.resolver(), on_event=events.append, **kw,
    )  # fmt: skip


def bid_count(state: dict[str, Any]) -> int:
    return int(state["state"]["bids"])


async def room_state(d: Deployment, room: str) -> dict[str, Any]:
    async with d.connect("a1", "auditor") as ws:
        await send(ws, action="getState", room=room)
        return await recv_type(ws, "state")


def refused(events: list[Event]) -> bool:
    return any(s.cause is Cause.CONNECT_FAILED for s in of_type(events, ReconnectScheduled))


@contextlib.asynccontextmanager
async def pointed_at_a_silent_server(config: Config) -> AsyncIterator[tuple[Deployment, Any, Any]]:
    """A real deployment, and a DNS answer pointing at a server that accepts WebSockets
    on the spare address and then never says a word."""
    async with (
        running_deployment(config) as d,
        running_dns(config) as dns,
        silent_server(SPARE, config.app_port) as silent,
    ):
        dns.answer(SPARE)
        yield d, dns, silent


def config_with_spare(make_config: Callable[..., Config]) -> Config:
    """Zones on a port that the tiny servers' (and the dead) address have free too."""
    return make_config(app_port=free_port(*ZONE_ADDRESSES, SPARE, DEAD))


async def test_clients_of_one_answer_spread_over_the_regions_zones(
    make_config: Callable[..., Config], events: list[Event]
) -> None:
    """The name server answers every client with the region's zones in one order; with
    the default settings the clients shuffle it, so they do not all land on the first."""
    config = make_config()
    async with running_deployment(config) as d, running_dns(config) as dns:
        settings = fast_settings(shuffle_addresses=True)
        clients = [
            make_client(config, dns, events, d.token(f"user-{i}"), settings=settings)
            for i in range(16)
        ]
        async with contextlib.AsyncExitStack() as stack:
            for client in clients:
                await stack.enter_async_context(client)
            for client in clients:
                await client.wait_ready(10)
            zones = Counter(client.address for client in clients)
        assert set(zones) == {"127.0.1.1", "127.0.1.2"}, zones  # 2 in 2**16 to fail by chance


async def test_connects_through_the_name_restores_state_and_bids(
    make_config: Callable[..., Config], events: list[Event], caplog: pytest.LogCaptureFixture
) -> None:
    config = make_config()
    caplog.set_level(logging.INFO, "rideout.client.ws")
    async with running_deployment(config) as d, running_dns(config) as dns:
        tokens: list[str] = []

        async def token() -> str:  # an async provider, asked on every connect
            tokens.append(d.token("alice"))
            return tokens[-1]

        client = make_client(config, dns, events, token, rooms=["lot-1"])
        stream = client.events()
        async with client:
            first = [await anext(stream) for _ in range(3)]
            assert first == [
                Connected("127.0.1.1", None),
                RegionChanged(None, "us-east-1"),
                StateRestored("lot-1", first[2].state, first[2].position, False, 0, "us-east-1"),
            ]
            await client.wait_ready(5)
            assert client.address == "127.0.1.1"
            assert client.region == "us-east-1"
            ack = await client.bid_and_wait("lot-1", 10, timeout=5)
            assert ack.accepted
            assert ack.room == "lot-1"
            assert ack.amount == 10
            assert uuid.UUID(ack.id).version == 4
            assert ack.region == "us-east-1"
            await until(lambda: client.rooms["lot-1"].position == ack.position, message="update")
            assert client.rooms["lot-1"].state["bid"] == 10
            low = await client.bid_and_wait("lot-1", 3, id="too-low", timeout=5)
            assert (low.id, low.accepted, low.reason) == ("too-low", False, "too_low")
        assert not client.running
        assert client.address is None
        assert [e async for e in stream][-1] == low  # the stream ends with the client
        updates = of_type(events, Updated)
        assert [u.state["bid"] for u in updates] == [10]
        assert updates[0].position == ack.position
        assert len(tokens) == 1
        assert dns.answers.asked == 1
        assert of_type(events, ReconnectScheduled) == []
        assert of_type(events, Disconnected) == []
        assert bid_count(await room_state(d, "lot-1")) == 1
        with pytest.raises(ClientClosed):
            await client.bid("lot-1", 20)
    assert "connected to 127.0.1.1" in caplog.text


async def test_heartbeat_timeout_reconnects_to_the_address_the_dns_now_answers(
    make_config: Callable[..., Config], events: list[Event]
) -> None:
    config = config_with_spare(make_config)
    async with pointed_at_a_silent_server(config) as (d, dns, silent):
        # Seven heartbeats are due before the timeout. The server counts those it read,
        # and the client's abort (an RST) discards any still unread: with a 1 s timeout
        # a worker stalled for half a second let only one through (a rehearsal).
        settings = fast_settings(heartbeat_timeout=2.0)
        client = make_client(
            config, dns, events, d.token("alice"), rooms=["lot-2"], settings=settings
        )
        async with client:
            await until(lambda: silent.connections, message="the silent server")
            dns.answer()  # the failover answer: the primary's zones
            await until(lambda: of_type(events, Disconnected), message="the timeout")
            await client.wait_ready(5)
            assert client.address == "127.0.1.1"
            assert client.region == "us-east-1"
    [lost] = of_type(events, Disconnected)
    assert lost == Disconnected(Cause.HEARTBEAT_TIMEOUT, None, "", SPARE)
    assert [c.address for c in of_type(events, Connected)] == [SPARE, "127.0.1.1"]
    [scheduled] = of_type(events, ReconnectScheduled)
    assert scheduled.attempt == 1
    assert 0 <= scheduled.delay <= 0.05
    assert scheduled.cause is Cause.HEARTBEAT_TIMEOUT
    # It asked for the room and kept sending heartbeats into the void.
    assert silent.actions("getState") == [{"action": "getState", "room": "lot-2"}]
    assert len(silent.actions("heartbeat")) >= 2
    assert client.stats.heartbeat_timeouts == 1
    assert dns.answers.asked == 2


async def test_an_answer_whose_every_address_refused_is_asked_again_before_its_ttl(
    make_config: Callable[..., Config], events: list[Event]
) -> None:
    """The cached answer names a dead address; DNS then moves. The client does not keep
    retrying the dead one for the rest of the TTL (the clock here never runs it out):
    the refusal makes it ask again, and it connects on the answer DNS gives now."""
    config = make_config(app_port=free_port(DEAD, *ZONE_ADDRESSES))
    async with running_deployment(config) as d, running_dns(config) as dns:
        dns.answer(DEAD)
        client = make_client(config, dns, events, d.token("alice"), rooms=["lot-7"])
        async with client:
            await until(lambda: refused(events), message="a refused connect")
            dns.answers.fixed = ("127.0.1.2",)  # DNS moved; the cached answer did not expire
            await client.wait_ready(10)
            assert client.address == "127.0.1.2"
        assert dns.answers.asked >= 2


async def test_an_answer_that_expired_while_an_address_hung_is_asked_again(
    make_config: Callable[..., Config], events: list[Event]
) -> None:
    """A frozen region completes TCP handshakes and never answers the upgrade, so each
    of its addresses costs an open timeout. Once the answer's TTL has run out the client
    asks again before trying the rest of it: DNS has moved meanwhile, and the region's
    other hung address is never tried (before 2026-12-06 it was: a frozen region's
    clients spent an open timeout on each of its zones, ~10 s in a fast-profile drill)."""
    config = make_config(app_port=free_port(*ZONE_ADDRESSES, SPARE, HUNG))
    async with (
        running_deployment(config) as d,
        running_dns(config) as dns,
        hung_server(SPARE, config.app_port) as first,
        hung_server(HUNG, config.app_port) as second,
    ):
        dns.answer(SPARE, HUNG)  # TTL: the zone's (1 s), on the client's own clock
        settings = fast_settings(open_timeout=1.5)
        client = make_client(
            config, dns, events, d.token("alice"), rooms=["lot-9"], settings=settings
        )
        async with client:
            await until(lambda: first.connections, message="the first hung address")
            dns.answers.fixed = ("127.0.1.2",)  # DNS moves; the cache's copy runs out
            dns.expire()
            await client.wait_ready(10)
            assert client.address == "127.0.1.2"
        assert second.connections == []  # the stale answer's other address: not tried
        assert of_type(events, ReconnectScheduled) == []  # all within the first attempt
        assert dns.answers.asked == 2


async def test_two_bad_heartbeats_force_a_reconnect_and_the_missed_updates_are_replayed(
    make_config: Callable[..., Config], events: list[Event]
) -> None:
    config = config_with_spare(make_config)
    async with running_deployment(config) as d, running_dns(config) as dns:
        dns.answer("127.0.1.1")
        client = make_client(config, dns, events, d.token("alice"), rooms=["lot-3"])
        async with client:
            await client.wait_ready(5)
            ack = await client.bid_and_wait("lot-3", 10, timeout=5)
            await until(lambda: client.rooms["lot-3"].position == ack.position)
            # The zone's backend fails behind open sockets; DNS has not failed over yet.
            dns.answer(DEAD)
            d.servers["a1"].set_mode("degraded")
            await until(lambda: of_type(events, Disconnected), message="the forced close")
            # While the client is away, bob bids three times through the other zone.
            async with d.connect("a2", "bob") as bob:
                for amount in (11, 12, 13):
                    await send(bob, action="bid", room="lot-3", amount=amount, id=f"bob-{amount}")
                    assert (await recv_type(bob, "ack"))["accepted"]
            # It keeps trying the address DNS gives it, in vain, until DNS fails over.
            await until(lambda: refused(events), message="a refused reconnect")
            dns.answer("127.0.1.2")
            await until(lambda: len(of_type(events, StateRestored)) == 2, message="the restore")
    assert [h.count for h in of_type(events, HeartbeatFailed)] == [1, 2]
    assert of_type(events, Disconnected) == [Disconnected(Cause.DEGRADED, None, "", "127.0.1.1")]
    assert [c.address for c in of_type(events, Connected)] == ["127.0.1.1", "127.0.1.2"]
    restored = of_type(events, StateRestored)[-1]
    assert (restored.recovered, restored.replayed, restored.state["bid"]) == (True, 3, 13)
    replayed = [u for u in of_type(events, Updated) if u.replayed]
    assert [u.state["bid"] for u in replayed] == [11, 12, 13]
    assert [u.state["bid"] for u in of_type(events, Updated)] == [10, 11, 12, 13]  # once each
    assert of_type(events, ReconnectScheduled)[0].cause is Cause.DEGRADED
    assert client.stats.heartbeat_failures == 2
    assert client.stats.degraded_closes == 1
    assert client.stats.recovered_restores == 1
    assert client.stats.updates_replayed == 3


async def test_draining_reconnects_at_once_and_the_ttl_decides_when_to_re_resolve(
    make_config: Callable[..., Config], events: list[Event]
) -> None:
    config = make_config()
    assert config.timing.dns_ttl == 1
    sleeps = Sleeps()
    async with running_deployment(config) as d, running_dns(config) as dns:
        client = make_client(config, dns, events, d.token("alice"), rooms=["lot-4"], sleep=sleeps)
        async with client:
            await client.wait_ready(5)
            assert (client.address, client.region) == ("127.0.1.1", "us-east-1")
            # The primary region fails: DNS answers with the secondary from now on, but
            # the answer the client holds is good for its TTL (the cache clock stands).
            dns.answers.healthy["us-east-1"] = False
            d.servers["a1"].set_mode("draining")
            await until(lambda: len(of_type(events, Connected)) == 2, message="the reconnect")
            await client.wait_ready(5)
            assert client.address == "127.0.1.2"  # the primary's other zone, from the cache
            assert dns.answers.asked == 1
            # Healthy again, then the TTL runs out: the next reconnect follows the failover.
            await until(lambda: client.planner.attempt == 0, message="a healthy connection")
            dns.expire()
            d.servers["a2"].set_mode("draining")
            await until(lambda: len(of_type(events, Connected)) == 3, message="the failover")
            await client.wait_ready(5)
            assert (client.address, client.region) == ("127.0.2.1", "us-west-2")
            assert dns.answers.asked == 2
    assert [(e.cause, e.code) for e in of_type(events, Disconnected)] == [(Cause.CLOSED, 1012)] * 2
    assert [(s.attempt, s.delay) for s in of_type(events, ReconnectScheduled)] == [(1, 0.0)] * 2
    assert sleeps.delays == [0.0, 0.0]
    assert RegionChanged("us-east-1", "us-west-2") in events
    assert client.rooms["lot-4"].region == "us-west-2"


async def test_overloaded_close_waits_for_the_retry_hint_capped(
    make_config: Callable[..., Config], events: list[Event]
) -> None:
    config = make_config()
    port = free_port(SPARE)
    sleeps = Sleeps()
    hints = ["overloaded; retry-after=0.3", "overloaded; retry-after=120"]
    async with running_dns(config) as dns, closing_server(SPARE, port, 1013, hints) as server:
        dns.answer(SPARE)
        settings = fast_settings(max_retry_hint=0.5, max_attempts=2)
        client = make_client(
            config, dns, events, "token", port=port, settings=settings, sleep=sleeps
        )
        with pytest.raises(AllReconnectsFailed) as info:
            await client.run()
    assert sleeps.delays == [0.3, 0.5]
    assert [(s.attempt, s.delay, s.code) for s in of_type(events, ReconnectScheduled)] == [
        (1, 0.3, 1013), (2, 0.5, 1013)
    ]  # fmt: skip
    assert [d.reason for d in of_type(events, Disconnected)] == [hints[0], hints[1], hints[1]]
    assert len(server.connections) == 3
    assert info.value.event.reason == "max_attempts"
    assert info.value.event.attempts == 2
    assert not client.running


async def test_gives_up_after_max_attempts(
    make_config: Callable[..., Config], events: list[Event], caplog: pytest.LogCaptureFixture
) -> None:
    config = make_config(app_port=free_port(DEAD))
    policy = FullJitter(0.05, 0.4)
    sleeps = Sleeps()
    caplog.set_level(logging.INFO, "rideout.client.ws")
    async with running_dns(config) as dns:
        dns.answer(DEAD)
        settings = fast_settings(backoff=policy, max_attempts=4)
        registry = CollectorRegistry()
        client = make_client(
            config, dns, events, "token", settings=settings, sleep=sleeps, rng=random.Random(7),
            metrics=AuctionClientMetrics(registry),
        )  # fmt: skip

        async def bid_and_let_it_give_up() -> None:
            async with client:
                await client.bid("lot-5", 10)  # queued: it never gets anywhere
                await until(lambda: not client.running, message="giving up")

        with pytest.raises(
            AllReconnectsFailed, match=r"gave up reconnecting to 'auction\.rideout\.test'"
        ):
            await bid_and_let_it_give_up()
        # Resolution failures count as attempts too.
        dns.answers.fixed = ()  # NXDOMAIN
        dns.expire()
        nxdomain: list[Event] = []
        other = make_client(config, dns, nxdomain, "token", settings=fast_settings(max_attempts=0))
        with pytest.raises(AllReconnectsFailed):
            await other.run()
    rng = random.Random(7)
    assert sleeps.delays == [policy.delay(n, rng) for n in range(4)]
    assert [s.attempt for s in of_type(events, ReconnectScheduled)] == [1, 2, 3, 4]
    assert {s.cause for s in of_type(events, ReconnectScheduled)} == {Cause.CONNECT_FAILED}
    assert of_type(events, Connected) == []
    gave_up = events[-1]
    assert isinstance(gave_up, GaveUp)
    assert gave_up.reason == "max_attempts"
    assert gave_up.detail.startswith("connect_failed: 127.0.1.9: [Errno 111]")
    with pytest.raises(AllReconnectsFailed):
        await client.bid("lot-5", 11)
    assert client.stats.reconnect_attempts == 4
    assert registry.get_sample_value("rideout_ws_client_reconnect_attempts_total") == 4
    [final] = nxdomain
    assert isinstance(final, GaveUp)
    assert "resolve_failed" in final.detail
    lines = [r.getMessage() for r in caplog.records if r.name == "rideout.client.ws"]
    assert sum(line.startswith("reconnect attempt") for line in lines) == 4
    assert "giving up" in caplog.text


async def test_bids_made_while_disconnected_are_queued_and_applied_once(
    make_config: Callable[..., Config], events: list[Event]
) -> None:
    config = config_with_spare(make_config)
    async with running_deployment(config) as d, running_dns(config) as dns:
        dns.answer(DEAD)
        settings = fast_settings(max_queued_bids=3)
        client = make_client(
            config, dns, events, d.token("alice"), rooms=["lot-6"], settings=settings
        )
        async with client:
            ids = [await client.bid("lot-6", amount) for amount in (10, 20, 30)]
            with pytest.raises(QueueFull):
                await client.bid("lot-6", 40)
            assert client.pending_bids == 3
            assert not client.connected
            await until(lambda: len(of_type(events, ReconnectScheduled)) >= 2, message="retries")
            dns.answer("127.0.1.1")
            await until(lambda: len(of_type(events, Acked)) == 3, message="the acks")
        acks = of_type(events, Acked)
        assert [(a.id, a.accepted, a.amount) for a in acks] == list(
            zip(ids, [True] * 3, [10, 20, 30], strict=True)
        )
        restored = events.index(of_type(events, StateRestored)[0])
        assert restored < events.index(acks[0])  # the state first, then the bids
        state = await room_state(d, "lot-6")
        assert (bid_count(state), state["state"]["bid"]) == (3, 30)
        assert client.stats.bids_sent == 3
        assert client.stats.bids_resent == 0


async def test_bids_in_flight_when_the_connection_dies_are_resent_with_their_ids(
    make_config: Callable[..., Config], events: list[Event]
) -> None:
    config = config_with_spare(make_config)
    async with pointed_at_a_silent_server(config) as (d, dns, silent):
        settings = fast_settings(heartbeat_timeout=1.0)
        client = make_client(config, dns, events, d.token("alice"), settings=settings)
        async with client:
            await client.wait_ready(5)  # no rooms: ready as soon as it is open
            await client.bid("lot-7", 10, id="first-bid")
            second = await client.bid("lot-7", 20)
            await until(lambda: len(silent.actions("bid")) == 2, message="both bids sent")
            # The first did reach the auction earlier (its ack was lost): it is applied.
            async with d.connect("a1", "alice") as ws:
                await send(ws, action="bid", room="lot-7", amount=10, id="first-bid")
                original = await recv_type(ws, "ack")
            dns.answer("127.0.1.1")
            await until(lambda: len(of_type(events, Acked)) == 2, message="the acks")
        first, again = of_type(events, Acked)
        assert (first.id, first.accepted, first.position) == (
            "first-bid", True, Position(**original["position"])
        )  # fmt: skip
        assert (again.id, again.accepted) == (second, True)
        assert bid_count(await room_state(d, "lot-7")) == 2  # not 3: exactly once
        assert client.stats.bids_resent == 2


async def test_tokens_are_refreshed_on_401_and_after_a_1008_close(
    make_config: Callable[..., Config], events: list[Event]
) -> None:
    config = make_config()
    sleeps = Sleeps()
    async with running_deployment(config) as d, running_dns(config) as dns:
        calls: list[str] = []

        def token() -> str:
            calls.append(
                "garbage" if not calls else d.issuer.issue("alice", ttl=1) if len(calls) == 1
                else d.token("alice")
            )  # fmt: skip
            return calls[-1]

        client = make_client(config, dns, events, token, rooms=["lot-8"], sleep=sleeps)
        async with client:
            await until(lambda: len(of_type(events, Connected)) == 2, message="the reconnect")
            await client.wait_ready(5)
        assert len(calls) == 3  # refused -> fresh token at once; 1008 -> a fresh one again
        assert of_type(events, Disconnected) == [
            Disconnected(Cause.CLOSED, 1008, "token expired", "127.0.1.1")
        ]
        assert [(s.attempt, s.delay) for s in of_type(events, ReconnectScheduled)] == [(1, 0.0)]
        assert sleeps.delays == [0.0]
        # A token refused even when fresh: no other address is tried, the client backs off.
        refused: list[Event] = []
        settings = fast_settings(max_attempts=1)
        stubborn = make_client(config, dns, refused, "garbage", settings=settings, sleep=sleeps)
        with pytest.raises(AllReconnectsFailed, match="auth_rejected"):
            await stubborn.run()
        assert [s.cause for s in of_type(refused, ReconnectScheduled)] == [Cause.AUTH_REJECTED]


async def test_a_shedding_region_is_retried_after_the_wait_it_asks_for(
    make_config: Callable[..., Config], events: list[Event]
) -> None:
    """Every zone of the region refuses the upgrade, 503 overloaded with retry_after:
    the client tries each address once, then waits between half that and all of it
    (not its 50-200 ms backoff), and gets in once the servers keep time again."""
    config = make_config()
    asked = config.timing.backoff_cap
    sleeps = Sleeps()
    async with running_deployment(config, shed=True) as d, running_dns(config) as dns:
        held = hold_lag(d, config.timing.canary_timeout)
        client = make_client(config, dns, events, d.token("alice"), rooms=["lot-3"], sleep=sleeps)
        async with client:
            await until(lambda: len(of_type(events, ReconnectScheduled)) >= 2, message="refused")
            for lag in held:
                lag.held = 0.0
            await client.wait_ready(10)
        scheduled = of_type(events, ReconnectScheduled)[:2]
        assert {s.cause for s in scheduled} == {Cause.CONNECT_FAILED}
        assert all(asked / 2 <= s.delay <= asked for s in scheduled)
        assert all(asked / 2 <= delay <= asked for delay in sleeps.delays[:2])


async def test_stop_leaves_nothing_running(
    make_config: Callable[..., Config], events: list[Event]
) -> None:
    config = config_with_spare(make_config)
    async with running_dns(config) as dns, silent_server(SPARE, config.app_port) as silent:
        dns.answer(SPARE)
        client = make_client(config, dns, events, "token")
        runner = asyncio.create_task(client.run())
        await until(lambda: client.connected, message="connected")
        waiter = asyncio.create_task(client.bid_and_wait("lot-9", 5))
        await until(lambda: silent.actions("bid"), message="the bid")
        await client.stop()
        await runner  # run() returns normally after stop()
        with pytest.raises(ClientClosed):
            await waiter
        assert not client.running
        assert not client.connected
        own = [t for t in asyncio.all_tasks() if t.get_name().startswith("rideout.client.ws")]
        assert own == []


async def test_clients_share_one_metrics_object(
    make_config: Callable[..., Config], events: list[Event]
) -> None:
    """One registry, one AuctionClientMetrics, any number of clients counted together
    (each client registering its own counters would collide: duplicated timeseries)."""
    config = make_config(app_port=free_port(DEAD))
    registry = CollectorRegistry()
    metrics = AuctionClientMetrics(registry)
    async with running_dns(config) as dns:
        dns.answer(DEAD)
        settings = fast_settings(max_attempts=2)
        clients = [
            make_client(config, dns, events, "token", settings=settings, sleep=Sleeps(),
                        metrics=metrics)
            for _ in range(2)
        ]  # fmt: skip
        for client in clients:
            with pytest.raises(AllReconnectsFailed):
                await client.run()
    assert registry.get_sample_value("rideout_ws_client_reconnect_attempts_total") == 4
    assert [c.stats.reconnect_attempts for c in clients] == [2, 2]
    assert len(of_type(events, GaveUp)) == 2


async def test_a_loop_that_dies_of_a_bug_says_so_at_once_and_keeps_the_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class Broken:
        async def resolve(self, name: str) -> Any:
            raise RuntimeError("a bug")

    client = AuctionClient("app.test", port=1, token="t", resolver=Broken())
    with caplog.at_level(logging.ERROR, "rideout.client.ws"):
        client.start()
        await until(lambda: not client.running)
    assert isinstance(client.error, RuntimeError)
    assert "the connection loop for app.test failed" in caplog.text  # not only at stop()
    assert "RuntimeError: a bug" in caplog.text  # with its traceback
    await client.stop()
    assert isinstance(client.error, RuntimeError)
