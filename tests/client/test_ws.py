"""The resilient WebSocket client: its sans-I/O core driven directly, then the client
against real app servers, real Redis and rideout's real DNS server."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from rideout.backoff import FixedSchedule, FullJitter, NoJitter
from rideout.client.ws import (
    Acked,
    AuctionClient,
    BidBook,
    Cause,
    ClientClosed,
    ClientCore,
    ClientSettings,
    Connected,
    Disconnected,
    Event,
    GaveUp,
    GaveUpError,
    GiveUp,
    HeartbeatFailed,
    QueueFull,
    Reconnect,
    ReconnectPlanner,
    ReconnectScheduled,
    RegionChanged,
    StateRestored,
    Updated,
    is_newer,
    order_addresses,
)
from rideout.config import Config, parse_config
from rideout.protocol import (
    PONG,
    Position,
    Update,
    encode_ack,
    encode_error,
    encode_state,
    encode_update,
)
from tests.client.ws_support import (
    DEAD,
    SPARE,
    Sleeps,
    closing_server,
    fast_settings,
    of_type,
    running_dns,
    silent_server,
    until,
)
from tests.conftest import ZONE_ADDRESSES, free_port
from tests.realtime.conftest import Deployment, recv_type, running_deployment, send

# ============================================================ the sans-I/O core


def pos(offset: int, epoch: int = 1) -> Position:
    return Position(epoch, f"{offset}-0")


def state_msg(room: str, bid: int, at: Position, *, recovered: bool = False,
              missed: tuple[Update, ...] = (), region: str = "us-east-1") -> str:  # fmt: skip
    return encode_state(
        region=region, room=room, state={"bid": bid}, user=None, position=at,
        recovered=recovered, missed=missed,
    )  # fmt: skip


def update_msg(room: str, bid: int, at: Position, region: str = "us-east-1") -> str:
    return encode_update(room=room, state={"bid": bid}, position=at, region=region)


def core_settings(**overrides: Any) -> ClientSettings:
    values: dict[str, Any] = {
        "heartbeat_interval": 1.0,
        "heartbeat_timeout": 3.0,
        "backoff": NoJitter(1.0, 60.0),
        "bid_retry": NoJitter(0.5, 4.0),
        "bid_retries": 2,
    }
    return ClientSettings(**(values | overrides))


def sent(frames: list[str]) -> list[str]:
    """The frames as compact text, for readable assertions."""
    return [f.replace('"', "") for f in frames]


def test_heartbeats_failures_and_the_timeout() -> None:
    core = ClientCore(core_settings(), rooms=["lot"])
    opened = core.connection_opened(0.0)
    assert sent(opened.send) == ["{action:getState,room:lot}"]
    assert core.next_wakeup() == 1.0
    assert sent(core.tick(1.0).send) == ["{action:heartbeat}"]
    # The getState failing (degraded zone) is not a heartbeat failure; it is asked again.
    unavailable = encode_error("unavailable", "degraded")
    feedback = core.receive(unavailable, 1.01)
    assert feedback.events == []
    assert feedback.ready
    assert feedback.close is None
    # The heartbeat's reply is not pong: the first failure.
    feedback = core.receive(unavailable, 1.02)
    assert feedback.events == [HeartbeatFailed(1, "unavailable")]
    assert feedback.close is None
    assert sent(core.tick(2.0).send) == ["{action:heartbeat}", "{action:getState,room:lot}"]
    assert core.receive(PONG, 2.01).close is None  # a pong resets the count
    core.receive(state_msg("lot", 1, pos(1)), 2.02)
    assert core.tick(3.0).send
    assert core.receive(unavailable, 3.01).close is None
    assert core.tick(4.0).send
    feedback = core.receive(unavailable, 4.01)
    assert feedback.events == [HeartbeatFailed(2, "unavailable")]
    assert feedback.close is Cause.DEGRADED
    # Nothing at all for heartbeat_timeout: close.
    core.connection_lost()
    core.connection_opened(10.0)
    core.tick(11.0)
    core.tick(12.0)
    assert core.tick(12.99).close is None
    assert core.tick(13.0).close is Cause.HEARTBEAT_TIMEOUT
    # Updates keep arriving but the heartbeats go unanswered: dead all the same.
    core.connection_lost()
    core.connection_opened(30.0)
    core.tick(31.0)
    for at in (31.5, 32.5, 33.5):
        assert core.receive(update_msg("lot", 2, pos(2)), at).close is None
        assert core.tick(at).close is None
    assert core.next_wakeup() == 34.0
    assert core.tick(34.0).close is Cause.HEARTBEAT_TIMEOUT
    # A bad message is ignored but still proves the connection alive.
    core.connection_opened(20.0)
    assert core.receive("{not json", 22.5).events == []
    assert core.tick(25.0).close is None


def test_restore_replays_missed_updates_and_ignores_duplicates() -> None:
    core = ClientCore(core_settings(), rooms=["lot"])
    core.connection_opened(0.0)
    first = core.receive(state_msg("lot", 5, pos(5)), 0.1)
    assert first.events == [
        RegionChanged(None, "us-east-1"),
        StateRestored("lot", {"bid": 5}, pos(5), False, 0, "us-east-1"),
    ]
    assert core.receive(update_msg("lot", 6, pos(6)), 0.2).events == [
        Updated("lot", {"bid": 6}, pos(6), "us-east-1")
    ]
    assert core.receive(update_msg("lot", 6, pos(6)), 0.3).events == []  # a duplicate
    assert core.receive(update_msg("lot", 4, pos(4)), 0.3).events == []  # an old one
    assert core.receive(update_msg("other", 1, pos(9)), 0.3).events == []  # not followed
    core.connection_lost()
    # Reconnect elsewhere: getState since the last position; the replay overlaps.
    opened = core.connection_opened(1.0)
    assert sent(opened.send) == ["{action:getState,room:lot,since:{epoch:1,offset:6-0}}"]
    missed = tuple(Update("lot", {"bid": n}, pos(n), "us-west-2") for n in (6, 7, 8))
    restored = core.receive(
        state_msg("lot", 8, pos(8), recovered=True, missed=missed, region="us-west-2"), 1.1
    )
    assert restored.events == [
        RegionChanged("us-east-1", "us-west-2"),
        Updated("lot", {"bid": 7}, pos(7), "us-west-2", replayed=True),
        Updated("lot", {"bid": 8}, pos(8), "us-west-2", replayed=True),
        StateRestored("lot", {"bid": 8}, pos(8), True, 2, "us-west-2"),
    ]
    assert core.rooms["lot"].replayed == 2
    assert core.region == "us-west-2"
    # Not recovered (another writer's history): the state is replaced, whatever it was.
    core.connection_lost()
    core.connection_opened(2.0)
    replaced = core.receive(state_msg("lot", 3, pos(3, epoch=2), region="us-west-2"), 2.1)
    assert replaced.events == [StateRestored("lot", {"bid": 3}, pos(3, 2), False, 0, "us-west-2")]
    assert core.receive(update_msg("lot", 4, pos(4, 2), "us-west-2"), 2.2).events
    assert core.stats.duplicates_ignored == 3  # two live, one in the replay


def test_bids_wait_for_the_restore_and_are_resent_with_their_ids() -> None:
    core = ClientCore(core_settings(max_queued_bids=3), rooms=["lot"])
    # Disconnected: queued.
    assert core.submit_bid("lot", 10, "a", 0.0).send == []
    assert core.submit_bid("lot", 11, "b", 0.0).send == []
    with pytest.raises(ValueError, match="already"):
        core.submit_bid("lot", 12, "b", 0.0)
    with pytest.raises(ValueError, match="amount"):
        core.submit_bid("lot", 0, "c", 0.0)
    with pytest.raises(ValueError, match="room"):
        core.submit_bid("no spaces", 1, "c", 0.0)
    core.submit_bid("lot", 12, "c", 0.0)
    with pytest.raises(QueueFull):
        core.submit_bid("lot", 13, "d", 0.0)
    # Connected: the getState first, the bids only once the state is back.
    assert sent(core.connection_opened(1.0).send) == ["{action:getState,room:lot}"]
    restored = core.receive(state_msg("lot", 1, pos(1)), 1.1)
    assert restored.ready
    assert sent(restored.send) == [
        "{action:bid,room:lot,amount:10,id:a}",
        "{action:bid,room:lot,amount:11,id:b}",
        "{action:bid,room:lot,amount:12,id:c}",
    ]
    acked = core.receive(
        encode_ack(request_id="a", accepted=True, position=pos(2), region="us-east-1"), 1.2
    )
    assert acked.events == [Acked("a", True, None, pos(2), "lot", 10, "us-east-1")]
    # "b" is fenced during a failover: retried with the same id after a delay.
    fenced = core.receive(encode_error("unavailable", "the writer changed; retry", "b"), 1.3)
    assert fenced.events == []
    assert fenced.send == []
    assert core.next_wakeup() == pytest.approx(1.8)
    assert sent(core.tick(1.8).send) == ["{action:bid,room:lot,amount:11,id:b}"]
    # "c" is refused outright.
    refused = core.receive(encode_error("bad_request", "nope", "c"), 1.9)
    assert refused.events == [Acked("c", False, "bad_request", None, "lot", 12, "us-east-1")]
    # The connection drops with "b" in flight: sent again, same id, after the next restore.
    core.connection_lost()
    assert sent(core.connection_opened(5.0).send) == [
        "{action:getState,room:lot,since:{epoch:1,offset:1-0}}"
    ]
    again = core.receive(state_msg("lot", 2, pos(2), recovered=True), 5.1)
    assert sent(again.send) == ["{action:bid,room:lot,amount:11,id:b}"]
    # Unavailable beyond bid_retries (2): rejected with the error's code.
    core.receive(encode_error("unavailable", "x", "b"), 5.2)
    core.tick(6.2)
    last = core.receive(encode_error("unavailable", "x", "b"), 6.3)
    assert last.events == [Acked("b", False, "unavailable", None, "lot", 11, "us-east-1")]
    assert len(core.bids) == 0
    assert (core.stats.bids_sent, core.stats.bids_resent, core.stats.bids_retried) == (6, 3, 2)


def test_bid_book_without_rooms_sends_at_once_when_connected() -> None:
    book = BidBook(2, NoJitter(1.0, 1.0), 0)
    book.add("lot", 1, "x")
    assert [b.id for b in book.take_sendable(0.0)] == ["x"]
    assert book.take_sendable(0.0) == []
    book.connection_lost()
    assert [(b.id, b.sends) for b in book.take_sendable(0.0)] == [("x", 2)]
    core = ClientCore(core_settings())
    core.connection_opened(0.0)
    assert sent(core.submit_bid("lot", 5, "y", 0.1).send) == ["{action:bid,room:lot,amount:5,id:y}"]


def test_attempt_counter_resets_only_after_a_healthy_period() -> None:
    settings = core_settings(healthy_after_pongs=2)
    core, planner = ClientCore(settings), ReconnectPlanner(settings)
    planner.start(0.0)
    assert planner.lost(0.0, Cause.CONNECT_FAILED) == Reconnect(1, 1.0)
    # Open, one heartbeat answered, then lost: merely opening does not count.
    planner.connected(1.0)
    core.connection_opened(1.0)
    core.tick(2.0)
    assert core.receive(PONG, 2.1).healthy is False
    core.connection_lost()
    assert planner.lost(3.0, Cause.CLOSED, 1011) == Reconnect(2, 2.0)
    assert planner.lost(5.0, Cause.CONNECT_FAILED) == Reconnect(3, 4.0)
    # Two heartbeats answered: healthy, and the next outage starts from the beginning.
    planner.connected(9.0)
    core.connection_opened(9.0)
    core.tick(10.0)
    assert core.receive(PONG, 10.1).healthy is False
    core.tick(11.0)
    feedback = core.receive(PONG, 11.1)
    assert feedback.healthy is True
    planner.healthy(11.1)
    assert planner.attempt == 0
    assert planner.disconnected_for(20.0) == 0.0
    core.connection_lost()
    assert planner.lost(20.0, Cause.HEARTBEAT_TIMEOUT) == Reconnect(1, 1.0)
    assert planner.stats.time_disconnected == pytest.approx(1.0 + 6.0)
    # Or by time: healthy_after seconds open with a pong and no failure.
    timed = ClientCore(core_settings(healthy_after_pongs=5, healthy_after=2.5))
    timed.connection_opened(0.0)
    timed.tick(1.0)
    timed.receive(PONG, 1.1)
    assert timed.next_wakeup() == 2.0
    timed.tick(2.0)
    assert timed.next_wakeup() == 2.5
    assert timed.tick(2.5).healthy is True


def test_close_codes_decide_the_delay() -> None:
    settings = core_settings(backoff=NoJitter(1.0, 60.0), max_retry_hint=10.0)
    planner = ReconnectPlanner(settings)
    planner.start(0.0)
    # 1012 draining: at once, but only once per outage (a server closing every
    # connection straight away must not cause a hot loop).
    assert planner.lost(0.0, Cause.CLOSED, 1012) == Reconnect(1, 0.0)
    assert planner.lost(0.0, Cause.CLOSED, 1012) == Reconnect(2, 2.0)
    planner.healthy(1.0)
    assert planner.lost(1.0, Cause.CLOSED, 1008, "token expired") == Reconnect(1, 0.0)
    # 1013: the hint, capped; without a readable hint, the backoff.
    assert planner.lost(1.0, Cause.CLOSED, 1013, "overloaded; retry-after=2.5") == Reconnect(2, 2.5)
    assert planner.lost(1.0, Cause.CLOSED, 1013, "overloaded; retry-after=500") == Reconnect(
        3, 10.0
    )
    assert planner.lost(1.0, Cause.CLOSED, 1013, "overloaded") == Reconnect(4, 8.0)
    assert planner.lost(1.0, Cause.CLOSED, 1011) == Reconnect(5, 16.0)


def test_full_jitter_and_the_give_up_bounds() -> None:
    policy = FullJitter(2.0, 20.0)
    planner = ReconnectPlanner(core_settings(backoff=policy, max_attempts=6), rng=random.Random(3))
    planner.start(0.0)
    expected_rng = random.Random(3)
    for attempt in range(1, 7):
        decision = planner.lost(0.0, Cause.CONNECT_FAILED)
        assert decision == Reconnect(attempt, policy.delay(attempt - 1, expected_rng))
        assert 0 <= decision.delay <= min(20.0, 2.0 * 2 ** (attempt - 1))
    assert planner.lost(0.0, Cause.CONNECT_FAILED) == GiveUp("max_attempts", 6, 0.0)
    # max_disconnected: stop before a sleep would pass it.
    timed = ReconnectPlanner(core_settings(backoff=NoJitter(4.0, 4.0), max_disconnected=10.0))
    timed.start(0.0)
    assert timed.lost(0.0, Cause.CONNECT_FAILED) == Reconnect(1, 4.0)
    assert timed.lost(4.0, Cause.CONNECT_FAILED) == Reconnect(2, 4.0)
    assert timed.lost(8.0, Cause.CONNECT_FAILED) == GiveUp("max_disconnected", 2, 8.0)
    # A bounded schedule bounds the attempts itself.
    fixed = ReconnectPlanner(core_settings(backoff=FixedSchedule((0, 1))))
    fixed.start(0.0)
    assert [fixed.lost(0.0, Cause.CONNECT_FAILED) for _ in range(3)] == [
        Reconnect(1, 0.0), Reconnect(2, 1.0), GiveUp("max_attempts", 2, 0.0)
    ]  # fmt: skip


def test_pure_helpers_and_settings() -> None:
    assert order_addresses(["a", "b", "c", "a"], {"a"}) == ("b", "c", "a")
    assert order_addresses(["a", "b"]) == ("a", "b")
    assert is_newer(pos(2), pos(1))
    assert not is_newer(pos(1), pos(1))
    assert is_newer(Position(1, "10-1"), Position(1, "10-0"))
    assert is_newer(Position(1, "9-0"), Position(1, "10-0")) is False
    assert is_newer(pos(1, epoch=3), pos(9, epoch=2))
    assert is_newer(pos(1), None)
    config = parse_config({"profile": "seed"})
    seed = ClientSettings.from_config(config)
    assert (seed.heartbeat_interval, seed.heartbeat_timeout, seed.heartbeat_failures) == (30, 35, 2)
    assert seed.backoff == FullJitter(2.0, 20.0)
    assert seed.compression is None
    fast = ClientSettings.from_config(parse_config({}), max_attempts=5)
    assert (fast.heartbeat_interval, fast.heartbeat_timeout, fast.backoff) == (
        1.0, 2.0, FullJitter(0.25, 2.0)
    )  # fmt: skip
    assert fast.max_attempts == 5
    with pytest.raises(ValueError, match="longer than heartbeat_interval"):
        ClientSettings(heartbeat_interval=5, heartbeat_timeout=5)
    with pytest.raises(ValueError, match="heartbeat_failures"):
        ClientSettings(heartbeat_failures=0)
    with pytest.raises(TypeError, match="delay policy"):
        ClientSettings(backoff=2.0)  # type: ignore[arg-type]
    client = AuctionClient.from_config(config, token="t")
    assert (client.name, client.port) == (config.app_domain, config.app_port)
    assert client.settings == seed


# ================================================ against real servers and DNS


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
            await until(lambda: client.rooms["lot-1"].position == ack.position, what="update")
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
        settings = fast_settings(heartbeat_timeout=1.0)
        client = make_client(
            config, dns, events, d.token("alice"), rooms=["lot-2"], settings=settings
        )
        async with client:
            await until(lambda: silent.connections, what="the silent server")
            dns.answer()  # the failover answer: the primary's zones
            await until(lambda: of_type(events, Disconnected), what="the timeout")
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
            await until(lambda: of_type(events, Disconnected), what="the forced close")
            # While the client is away, bob bids three times through the other zone.
            async with d.connect("a2", "bob") as bob:
                for amount in (11, 12, 13):
                    await send(bob, action="bid", room="lot-3", amount=amount, id=f"bob-{amount}")
                    assert (await recv_type(bob, "ack"))["accepted"]
            # It keeps trying the address DNS gives it, in vain, until DNS fails over.
            await until(lambda: refused(events), what="a refused reconnect")
            dns.answer("127.0.1.2")
            await until(lambda: len(of_type(events, StateRestored)) == 2, what="the restore")
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
            await until(lambda: len(of_type(events, Connected)) == 2, what="the reconnect")
            await client.wait_ready(5)
            assert client.address == "127.0.1.2"  # the primary's other zone, from the cache
            assert dns.answers.asked == 1
            # Healthy again, then the TTL runs out: the next reconnect follows the failover.
            await until(lambda: client.planner.attempt == 0, what="a healthy connection")
            dns.expire()
            d.servers["a2"].set_mode("draining")
            await until(lambda: len(of_type(events, Connected)) == 3, what="the failover")
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
        with pytest.raises(GaveUpError) as info:
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
            registry=registry,
        )  # fmt: skip

        async def bid_and_let_it_give_up() -> None:
            async with client:
                await client.bid("lot-5", 10)  # queued: it never gets anywhere
                await until(lambda: not client.running, what="giving up")

        with pytest.raises(GaveUpError, match=r"gave up reconnecting to 'auction\.rideout\.test'"):
            await bid_and_let_it_give_up()
        # Resolution failures count as attempts too.
        dns.answers.fixed = ()  # NXDOMAIN
        dns.expire()
        nxdomain: list[Event] = []
        other = make_client(config, dns, nxdomain, "token", settings=fast_settings(max_attempts=0))
        with pytest.raises(GaveUpError):
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
    with pytest.raises(GaveUpError):
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
            await until(lambda: len(of_type(events, ReconnectScheduled)) >= 2, what="retries")
            dns.answer("127.0.1.1")
            await until(lambda: len(of_type(events, Acked)) == 3, what="the acks")
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
            await until(lambda: len(silent.actions("bid")) == 2, what="both bids sent")
            # The first did reach the auction earlier (its ack was lost): it is applied.
            async with d.connect("a1", "alice") as ws:
                await send(ws, action="bid", room="lot-7", amount=10, id="first-bid")
                original = await recv_type(ws, "ack")
            dns.answer("127.0.1.1")
            await until(lambda: len(of_type(events, Acked)) == 2, what="the acks")
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
            await until(lambda: len(of_type(events, Connected)) == 2, what="the reconnect")
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
        with pytest.raises(GaveUpError, match="auth_rejected"):
            await stubborn.run()
        assert [s.cause for s in of_type(refused, ReconnectScheduled)] == [Cause.AUTH_REJECTED]


async def test_stop_leaves_nothing_running(
    make_config: Callable[..., Config], events: list[Event]
) -> None:
    config = config_with_spare(make_config)
    async with running_dns(config) as dns, silent_server(SPARE, config.app_port) as silent:
        dns.answer(SPARE)
        client = make_client(config, dns, events, "token")
        runner = asyncio.create_task(client.run())
        await until(lambda: client.connected, what="connected")
        waiter = asyncio.create_task(client.bid_and_wait("lot-9", 5))
        await until(lambda: silent.actions("bid"), what="the bid")
        await client.stop()
        await runner  # run() returns normally after stop()
        with pytest.raises(ClientClosed):
            await waiter
        assert not client.running
        assert not client.connected
        own = [t for t in asyncio.all_tasks() if t.get_name().startswith("rideout.client.ws")]
        assert own == []


def test_the_opening_handshake_gets_at_most_the_heartbeat_timeout() -> None:
    """A frozen server's kernel still completes the TCP handshake; the WebSocket one
    then never finishes. Waiting for it longer than the heartbeat timeout helps nobody."""
    from rideout.client.ws import DEFAULT_OPEN_TIMEOUT, ClientSettings
    from rideout.config import PROFILES, Config

    assert ClientSettings.from_config(Config(timing=PROFILES["fast"])).open_timeout == 2.0
    assert (
        ClientSettings.from_config(Config(timing=PROFILES["seed"])).open_timeout
        == DEFAULT_OPEN_TIMEOUT
    )
