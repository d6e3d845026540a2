"""The WebSocket client's sans-I/O core driven directly: the core, its heartbeat and
bid book, the reconnect planner. No sockets, no event loop; ``now`` is passed in."""

from __future__ import annotations

import random
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import rideout
from rideout.backoff import EqualJitter, FixedSchedule, FullJitter, NoJitter
from rideout.client.ws import (
    Acked,
    BidBook,
    Cause,
    ClientCore,
    ClientSettings,
    Connected,
    Disconnected,
    HeartbeatFailed,
    QueueFull,
    Reconnect,
    ReconnectPlanner,
    RegionChanged,
    StateRestored,
    StopReconnecting,
    Updated,
    is_newer,
    order_addresses,
)
from rideout.protocol import (
    PONG,
    Position,
    Update,
    encode_ack,
    encode_error,
    encode_state,
    encode_ticket,
    encode_update,
)


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
        "resume_tickets": False,  # on by default; its own tests below turn it on
    }
    return ClientSettings(**(values | overrides))


def sent(frames: list[str]) -> list[str]:
    """The frames as compact text, for readable assertions."""
    return [f.replace('"', "") for f in frames]


class _Fixed(random.Random):
    """`uniform(a, b)` gives the point `share` of the way from a to b."""

    def __init__(self, share: float) -> None:
        super().__init__(0)
        self.share = share

    def uniform(self, a: float, b: float) -> float:
        return a + (b - a) * self.share


@pytest.mark.parametrize("share", [0.0, 0.5, 1.0])
def test_a_throttled_restore_is_asked_again_after_the_hint_spread_not_the_heartbeat(
    share: float,
) -> None:
    """A herd refused at once (``throttled; retry-after=4``) comes back spread over the
    hint's second half, each at its own time, not all at their next heartbeat."""
    core = ClientCore(core_settings(heartbeat_interval=10.0, heartbeat_timeout=30.0),
                      rooms=["lot"], rng=_Fixed(share))  # fmt: skip
    core.connection_opened(0.0)
    core.receive(
        encode_error("throttled", "this server's replays are all taken; retry-after=4"), 0.5
    )
    due = 0.5 + 2.0 + 2.0 * share
    assert core.next_wakeup() == due
    assert core.tick(due - 0.01).send == []
    assert sent(core.tick(due).send) == ["{action:getState,room:lot}"]
    assert core.next_wakeup() == 10.0  # the heartbeat's, again


def test_a_hint_over_the_cap_is_capped_and_other_refusals_wait_for_the_heartbeat() -> None:
    core = ClientCore(core_settings(heartbeat_interval=10.0, heartbeat_timeout=30.0,
                                    max_retry_hint=3.0), rooms=["a", "b"], rng=_Fixed(1.0))  # fmt: skip
    core.connection_opened(0.0)
    core.receive(encode_error("throttled", "budget spent; retry-after=600"), 0.0)  # a
    core.receive(encode_error("unavailable", "degraded; retry-after=1"), 0.0)  # b: no hint read
    assert core.next_wakeup() == 3.0
    assert sent(core.tick(3.0).send) == ["{action:getState,room:a}"]
    assert sent(core.tick(10.0).send) == ["{action:heartbeat}", "{action:getState,room:b}"]


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


def test_bids_refused_together_are_retried_spread_over_the_second_half_of_the_delay() -> None:
    """The default bid_retry (equal jitter): 40 bids answered unavailable at the same
    instant (a shedding zone, a failover's fence) are not retried at the same instant,
    nor at once, but between 0.125 and 0.25 s later."""
    settings = ClientSettings(max_queued_bids=64)
    assert isinstance(settings.bid_retry, EqualJitter)
    core = ClientCore(settings, rooms=["lot"], rng=random.Random(11))
    core.connection_opened(0.0)
    core.receive(state_msg("lot", 1, pos(1)), 0.1)
    ids = [f"b{i}" for i in range(40)]
    for i, request_id in enumerate(ids):
        core.submit_bid("lot", 10 + i, request_id, 0.2)
    for request_id in ids:
        core.receive(encode_error("unavailable", "overloaded; retry", request_id), 1.0)
    resent: dict[str, float] = {}
    for step in range(40):  # every 10 ms from 1.0 s
        now = 1.0 + step * 0.01
        for frame in sent(core.tick(now).send):
            resent[frame.rsplit("id:", 1)[1].rstrip("}")] = now
    assert set(resent) == set(ids)
    assert all(1.12 <= t <= 1.26 for t in resent.values()), resent
    assert len(set(resent.values())) >= 8  # spread over the window, not one instant


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


def test_a_refused_upgrades_retry_after_is_waited_for_spread_over_its_second_half() -> None:
    settings = core_settings(backoff=NoJitter(0.25, 1.0), max_retry_hint=10.0)
    planner = ReconnectPlanner(settings, rng=random.Random(5))
    planner.start(0.0)
    delays = [planner.lost(0.0, Cause.CONNECT_FAILED, retry_after=4.0).delay for _ in range(200)]
    assert all(2.0 <= d <= 4.0 for d in delays)  # never before half of it, never after
    assert max(delays) - min(delays) > 1.5  # spread, so a herd refused at once is too
    # Capped like a close's hint; a backoff longer than the ask wins; none: the backoff.
    capped = ReconnectPlanner(settings, rng=random.Random(5))
    assert 5.0 <= capped.lost(0.0, Cause.CONNECT_FAILED, retry_after=500.0).delay <= 10.0
    longer = ReconnectPlanner(core_settings(backoff=NoJitter(8.0, 8.0)), rng=random.Random(5))
    assert longer.lost(0.0, Cause.CONNECT_FAILED, retry_after=2.0) == Reconnect(1, 8.0)
    plain = ReconnectPlanner(settings)
    assert plain.lost(0.0, Cause.CONNECT_FAILED, retry_after=None) == Reconnect(1, 0.25)
    # Only a refused connect carries one: a close goes by its code.
    closed = ReconnectPlanner(settings)
    assert closed.lost(0.0, Cause.CLOSED, 1011, retry_after=4.0) == Reconnect(1, 0.25)


def test_full_jitter_and_the_give_up_bounds() -> None:
    policy = FullJitter(2.0, 20.0)
    planner = ReconnectPlanner(core_settings(backoff=policy, max_attempts=6), rng=random.Random(3))
    planner.start(0.0)
    expected_rng = random.Random(3)
    for attempt in range(1, 7):
        decision = planner.lost(0.0, Cause.CONNECT_FAILED)
        assert decision == Reconnect(attempt, policy.delay(attempt - 1, expected_rng))
        assert 0 <= decision.delay <= min(20.0, 2.0 * 2 ** (attempt - 1))
    assert planner.lost(0.0, Cause.CONNECT_FAILED) == StopReconnecting("max_attempts", 6, 0.0)
    # max_disconnected: stop before a sleep would pass it.
    timed = ReconnectPlanner(core_settings(backoff=NoJitter(4.0, 4.0), max_disconnected=10.0))
    timed.start(0.0)
    assert timed.lost(0.0, Cause.CONNECT_FAILED) == Reconnect(1, 4.0)
    assert timed.lost(4.0, Cause.CONNECT_FAILED) == Reconnect(2, 4.0)
    assert timed.lost(8.0, Cause.CONNECT_FAILED) == StopReconnecting("max_disconnected", 2, 8.0)
    # A bounded schedule bounds the attempts itself.
    fixed = ReconnectPlanner(core_settings(backoff=FixedSchedule((0, 1))))
    fixed.start(0.0)
    assert [fixed.lost(0.0, Cause.CONNECT_FAILED) for _ in range(3)] == [
        Reconnect(1, 0.0), Reconnect(2, 1.0), StopReconnecting("max_attempts", 2, 0.0)
    ]  # fmt: skip


def test_pure_helpers() -> None:
    assert order_addresses(["a", "b", "c", "a"], {"a"}) == ("b", "c", "a")
    assert order_addresses(["a", "b"]) == ("a", "b")


def test_order_addresses_shuffled_spreads_clients_over_zones() -> None:
    rng = random.Random(7)
    firsts = Counter(order_addresses(["a", "b", "c"], rng=rng)[0] for _ in range(3000))
    assert set(firsts) == {"a", "b", "c"}
    assert min(firsts.values()) > 800  # about 1,000 each
    for _ in range(50):  # the avoided address is still last, whatever the shuffle
        assert order_addresses(["a", "b", "c", "a"], {"a"}, rng)[-1] == "a"
    assert is_newer(pos(2), pos(1))
    assert not is_newer(pos(1), pos(1))
    assert is_newer(Position(1, "10-1"), Position(1, "10-0"))
    assert is_newer(Position(1, "9-0"), Position(1, "10-0")) is False
    assert is_newer(pos(1, epoch=3), pos(9, epoch=2))
    assert is_newer(pos(1), None)


def test_the_connection_itself_is_an_event_and_counted() -> None:
    core = ClientCore(core_settings())
    assert core.connection_lost(Cause.CLOSED).events == []  # not connected: nothing ended
    opened = core.connection_opened(0.0, "127.0.1.1")
    assert opened.events == [Connected("127.0.1.1", None)]
    assert (core.connected, core.address) == (True, "127.0.1.1")
    lost = core.connection_lost(Cause.CLOSED, 1012, "draining")
    assert lost.events == [Disconnected(Cause.CLOSED, 1012, "draining", "127.0.1.1")]
    assert (core.connected, core.address) == (False, None)
    core.connection_opened(1.0, "127.0.1.2")
    core.receive(state_msg("lot", 1, pos(1), region="us-west-2"), 1.1)
    core.connection_lost(Cause.HEARTBEAT_TIMEOUT)
    assert core.connection_opened(2.0, "127.0.1.2").events == [Connected("127.0.1.2", "us-west-2")]
    core.connection_lost(Cause.DEGRADED)
    core.connection_opened(3.0, "127.0.1.1")
    assert core.connection_lost().events == []  # the client closed it to stop: no event
    stats = core.stats
    assert (stats.disconnects, stats.heartbeat_timeouts, stats.degraded_closes) == (3, 1, 1)


CORE_MODULES = (
    "_bids", "_core", "_errors", "_events", "_heartbeat", "_metrics", "_planner", "_settings",
    "_stats",
)  # fmt: skip


def test_the_core_imports_neither_websockets_nor_asyncio() -> None:
    """As in python-websockets: the decisions run under any event loop, or none."""
    # Bare package objects stand in for the packages' __init__ modules (which import
    # the driver), so only the core modules and what they import are loaded.
    script = textwrap.dedent(
        """
        import importlib, sys, types
        src = sys.argv[1]
        for name in ("rideout", "rideout.client", "rideout.client.ws"):
            package = types.ModuleType(name)
            package.__path__ = [src + "/" + name.replace(".", "/")]
            sys.modules[name] = package
        for name in sys.argv[2:]:
            importlib.import_module("rideout.client.ws." + name)
        print(sorted(name for name in sys.modules if name.split(".")[0] == "rideout"))
        print(sorted({"asyncio", "websockets"} & {n.split(".")[0] for n in sys.modules}))
        """
    )
    src = str(Path(rideout.__file__).parents[1])
    result = subprocess.run(
        [sys.executable, "-c", script, src, *CORE_MODULES],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    loaded, forbidden = result.stdout.splitlines()
    assert all(f"'rideout.client.ws.{name}'" in loaded for name in CORE_MODULES)
    assert "rideout.client.ws._asyncio" not in loaded
    assert forbidden == "[]"


# ------------------------------------------------------------------ resumption tickets


def test_a_ticket_is_asked_for_kept_renewed_at_half_life_and_presented() -> None:
    core = ClientCore(core_settings(resume_tickets=True), rooms=["lot"])
    assert core.resume_ticket(0.0) is None
    opened = core.connection_opened(0.0, "a")
    assert sent(opened.send) == ["{action:getState,room:lot}", "{action:ticket}"]
    core.receive(state_msg("lot", 1, pos(1)), 0.1)
    core.receive(encode_ticket(ticket="rt1.one", ttl=4.0, expires=4), 0.2)
    assert core.stats.tickets_received == 1
    assert core.resume_ticket(2.0) == "rt1.one"
    assert sent(core.tick(1.0).send) == ["{action:heartbeat}"]  # not half spent yet
    core.receive(PONG, 1.1)
    assert sent(core.tick(2.3).send) == ["{action:heartbeat}", "{action:ticket}"]
    core.receive(PONG, 2.4)
    assert sent(core.tick(3.4).send) == ["{action:heartbeat}"]  # one request at a time
    core.receive(encode_ticket(ticket="rt1.two", ttl=4.0, expires=7), 3.5)
    core.receive(PONG, 3.5)
    core.connection_lost(Cause.CLOSED, 1012)
    assert core.resume_ticket(4.0) == "rt1.two"
    assert core.resume_ticket(6.6) is None  # within a second of its end: the token instead
    # A reconnect with a ticket more than half good asks for none.
    assert sent(core.connection_opened(4.5, "b").send) == [
        "{action:getState,room:lot,since:{epoch:1,offset:1-0}}"
    ]


def test_a_refused_ticket_is_forgotten_and_the_token_used() -> None:
    core = ClientCore(core_settings(resume_tickets=True))
    core.connection_opened(0.0, "a")
    core.receive(encode_ticket(ticket="rt1.one", ttl=60.0, expires=60), 0.1)
    core.connection_lost(Cause.CLOSED, 1012)
    assert core.resume_ticket(1.0) == "rt1.one"
    core.ticket_presented()
    core.ticket_refused()
    assert core.resume_ticket(1.0) is None
    assert (core.stats.tickets_presented, core.stats.tickets_refused) == (1, 1)


@pytest.mark.parametrize("code", ["bad_request", "forbidden"])
def test_a_server_without_tickets_is_not_asked_again_on_that_connection(code: str) -> None:
    core = ClientCore(core_settings(resume_tickets=True))
    assert sent(core.connection_opened(0.0, "old").send) == ["{action:ticket}"]
    core.receive(encode_error(code, "unknown action 'ticket'"), 0.1)  # an older server
    assert sent(core.tick(1.0).send) == ["{action:heartbeat}"]
    core.receive(PONG, 1.1)
    assert sent(core.tick(2.0).send) == ["{action:heartbeat}"]
    core.connection_lost(Cause.CLOSED, 1012)
    assert sent(core.connection_opened(3.0, "new").send) == ["{action:ticket}"]  # the next one is


def test_a_ticket_request_answered_unavailable_is_asked_again_with_a_heartbeat() -> None:
    core = ClientCore(core_settings(resume_tickets=True))
    core.connection_opened(0.0, "a")
    core.receive(encode_error("unavailable", "degraded"), 0.1)
    assert sent(core.tick(1.0).send) == ["{action:heartbeat}", "{action:ticket}"]
    assert core.stats.heartbeat_failures == 0  # the error was the ticket's, not a heartbeat's


def test_tickets_off_asks_for_none() -> None:
    core = ClientCore(core_settings(resume_tickets=False), rooms=["lot"])
    assert sent(core.connection_opened(0.0, "a").send) == ["{action:getState,room:lot}"]
