from __future__ import annotations

from collections.abc import Callable

import pytest
import redis.asyncio as aioredis
from redis.exceptions import BusyLoadingError

from rideout.config import Config
from rideout.failover import repeats_note
from rideout.failover.controller import ControllerState, FailoverController, decide
from rideout.store import keys
from rideout.store.client import probe_client
from rideout.store.embedded import EmbeddedRedis
from rideout.store.replication import replication_status
from tests.conftest import (
    TEST_ADMIN,
    FakeClock,
    fill_for_a_slow_load,
    loading_redis,
    replicated,
    until,
)
from tests.failover.conftest import Pair

# Replication, failover and restarts: on every server of the supported matrix (issue #27).
pytestmark = pytest.mark.usefixtures("matrix_server")

P, S = "us-east-1", "us-west-2"


@pytest.mark.parametrize(
    ("writer", "healthy", "auto", "move", "target"),
    [
        (P, {P: True, S: True}, True, "none", None),
        (P, {P: False, S: True}, True, "fail-over", S),
        (P, {P: False, S: False}, True, "none", None),  # both down: stay
        (P, {P: True, S: False}, True, "none", None),
        (S, {P: True, S: True}, True, "fail-back", P),
        (S, {P: True, S: True}, False, "none", None),  # failback is manual
        (S, {P: True, S: False}, False, "fail-back", P),  # the writer's region failed
        (S, {P: False, S: True}, True, "none", None),
        (S, {P: False, S: False}, True, "none", None),
        (P, {}, True, "none", None),  # no health check: healthy
    ],
)
def test_decide(
    writer: str, healthy: dict[str, bool], auto: bool, move: str, target: str | None
) -> None:
    decision = decide(writer=writer, primary=P, secondary=S, healthy=healthy, auto_failback=auto)
    assert (decision.move, decision.target) == (move, target)
    assert decision.reason


def test_state_round_trip() -> None:
    state = ControllerState(writer=S, epoch=3, lost_writes=2, failovers=1)
    from rideout.failover.controller import FailoverEvent

    state.events.append(FailoverEvent(1.0, "fail-over", "m", S, 3))
    state.events.append(FailoverEvent(2.0, "wait", "loading", S, 3, repeats=4, last_at=3.0))
    assert ControllerState.from_dict(state.to_dict()).to_dict() == state.to_dict()


async def test_writer_gone_promote_then_demote_it_when_it_returns_and_fail_back(pair: Pair) -> None:
    config, p, s, primary = pair.config, pair.p, pair.s, pair.primary
    events: list[str] = []
    controller = FailoverController(config, on_change=lambda st: events.append(st.events[-1].kind))
    try:
        await p.xadd(keys.room_stream("lot"), {"state": "{}", "epoch": "1"})
        await replicated(p)
        assert (await controller.tick({P: True, S: True})).move == "none"
        assert (controller.writer, controller.epoch) == (P, 1)
        assert controller.dns_health({P: True, S: True}) == {P: True, S: False}

        # The primary takes one write the secondary never sees, then dies.
        await s.replicaof("NO", "ONE")
        await p.xadd(keys.room_stream("lot"), {"state": "{}", "epoch": "1"})
        await primary.stop()
        decision = await controller.tick({P: False, S: True})
        assert (decision.move, decision.urgent) == ("fail-over", True)
        assert (controller.writer, controller.epoch) == (S, 2)
        assert await s.get(keys.EPOCH) == "2"
        assert controller.dns_health({P: False, S: True}) == {P: False, S: True}
        assert (
            "REPLICAOF NO ONE (us-east-1 unreachable)"
            in controller.status()["events"][-1]["message"]
        )

        # It comes back from its AOF as a writer: demoted at once, its write counted.
        await primary.start()
        await controller.tick({P: False, S: True})
        assert (await replication_status(p)).role == "replica"
        assert controller.status()["lost_writes"] == 1
        assert [e["kind"] for e in controller.status()["events"]] == [
            "start",
            "fail-over",
            "demote",
        ]

        # Healthy again: a coordinated switchover, then a new epoch.
        await until(lambda: _in_sync(p, s), message="the replica caught up")
        await s.set("after-failover", "kept")  # acknowledged by the interim writer
        decision = await controller.tick({P: True, S: True})
        assert (decision.move, decision.urgent) == ("fail-back", False)
        assert (controller.writer, controller.epoch) == (P, 3)
        assert (await replication_status(p)).role == "master"
        assert (await replication_status(s)).role == "replica"
        assert await p.get("after-failover") == "kept"  # nothing acknowledged was lost
        assert await p.get(keys.EPOCH) == "3"
        assert "coordinated FAILOVER" in controller.status()["events"][-1]["message"]
        assert events[-1] == "fail-back"
    finally:
        await controller.close()


async def test_a_reachable_writer_hands_over_without_losing_writes(pair: Pair) -> None:
    """Its region fails (say its app servers are throttled) but its Redis answers: the
    target is made to follow it, then a coordinated FAILOVER moves the writer."""
    config, p, s = pair.config, pair.p, pair.s
    controller = FailoverController(config)
    try:
        await controller.tick({P: True, S: True})
        await s.replicaof("NO", "ONE")  # detached, so a handover is not possible at once
        await p.set("written-while-detached", "yes")
        await controller.tick({P: False, S: True})
        assert controller.writer == P  # waiting, and the target now follows the writer
        assert "once its Redis has caught up" in controller.status()["events"][-2]["message"]
        await until(lambda: _in_sync(s, p), message="the target caught up")
        await controller.tick({P: False, S: True})
        assert (controller.writer, controller.epoch) == (S, 2), controller.status()["events"]
        assert await s.get("written-while-detached") == "yes"
        assert controller.status()["lost_writes"] == 0
        assert "coordinated FAILOVER" in controller.status()["events"][-1]["message"]
    finally:
        await controller.close()


async def test_an_urgent_move_does_not_wait_forever(pair: Pair) -> None:
    now = [1000.0]
    config, s = pair.config, pair.s
    controller = FailoverController(config, clock=lambda: now[0])
    try:
        await controller.tick({P: True, S: True})
        # The target follows the writer but can never link (it fails to authenticate).
        await s.config_set("masterauth", "wrong")
        await s.replicaof("NO", "ONE")
        await s.replicaof(config.primary.redis.address, config.primary.redis.port)
        await controller.tick({P: False, S: True})
        assert controller.writer == P
        now[0] += 4  # within the patience: still waiting
        await controller.tick({P: False, S: True})
        assert controller.writer == P
        now[0] += 60
        await controller.tick({P: False, S: True})
        assert controller.writer == S
        kinds = {e["kind"]: e["message"] for e in controller.status()["events"]}
        assert "no handover within 5 s" in kinds["fail-over"]
        assert "now a replica of us-west-2" in kinds["demote"]  # the old writer, reachable
    finally:
        await controller.close()


async def _linked(client: aioredis.Redis) -> bool:
    return (await replication_status(client)).link == "up"


async def _in_sync(replica: aioredis.Redis, writer: aioredis.Redis) -> bool:
    """The replica's link is up *and* the writer counts it online: FAILOVER TO refuses a
    replica the writer does not see online yet, which can lag the replica's own view."""
    if not await _linked(replica):
        return False
    info = await writer.info("replication")
    return any(
        key.startswith("slave") and isinstance(value, dict) and value.get("state") == "online"
        for key, value in info.items()
    )


async def test_a_writer_that_restarts_as_a_replica_is_promoted_again(pair: Pair) -> None:
    config, p, s = pair.config, pair.p, pair.s
    controller = FailoverController(config, state=ControllerState(writer=S, epoch=5))
    try:
        # The secondary is the writer (state remembered across a restart), but its
        # Redis came back with its configured role, a replica of the primary.
        assert (await replication_status(s)).role == "replica"
        await controller.tick({P: False, S: True})
        assert (await replication_status(s)).role == "master"
        assert await s.get(keys.EPOCH) == "5"
        assert (await replication_status(p)).role == "replica"
        kinds = [e["kind"] for e in controller.status()["events"]]
        assert "promote" in kinds
        assert "epoch" in kinds
    finally:
        await controller.close()


async def test_an_unreachable_target_is_an_error_event_not_a_crash(
    make_config: Callable[..., Config],
) -> None:
    config = make_config()  # no Redis running at all
    controller = FailoverController(config, state=ControllerState(writer=P, epoch=1))
    try:
        decision = await controller.tick({P: False, S: True})
        assert decision.move == "fail-over"
        assert controller.writer == P  # nothing moved
        assert controller.status()["events"][-1]["kind"] == "error"
        assert "unreachable" in controller.status()["events"][-1]["message"]
        # The same step failing the same way next round: the same event, counted, so
        # that an outage of hours cannot push the moves out of the bounded history.
        before = len(controller.status()["events"])
        await controller.tick({P: False, S: True})
        await controller.tick({P: False, S: True})
        events = controller.status()["events"]
        assert len(events) == before
        assert events[-1]["repeats"] == 2
        assert events[-1]["last_at"] >= events[-1]["at"]
        assert repeats_note(events[-1]).startswith(" (again 2 times over ")
        assert repeats_note({"at": 1.0, "repeats": 0}) == ""
        assert (
            repeats_note({"at": 1.0, "repeats": 1, "last_at": 1.5}) == " (again 1 time over 0.5 s)"
        )
    finally:
        await controller.close()


async def test_a_returning_writer_still_loading_its_data_is_waited_for_then_demoted(
    pair: Pair,
) -> None:
    """The old primary's Redis restarts from a large AOF: while it loads it answers INFO
    as a master and refuses the rest with LOADING. The controller waits (one event,
    counted), then demotes it and counts what it held, as for any stale writer; before
    2026-12-06 each round recorded an error ("cannot compare ...: Redis is loading")."""
    config, p, s, primary = pair.config, pair.p, pair.s, pair.primary
    controller = FailoverController(config)
    try:
        await fill_for_a_slow_load(p, 20_000)
        await controller.tick({P: True, S: True})
        await s.replicaof("NO", "ONE")
        await p.xadd(keys.room_stream("lot"), {"state": "{}", "epoch": "1"})  # never replicated
        await primary.stop()
        await controller.tick({P: False, S: True})
        assert controller.writer == S
        async with loading_redis(primary.spec, 250):  # ~5 s
            await until(lambda: _loading(primary), message="the old primary answers, loading")

            async def refused_twice() -> bool:
                # A loading Redis answers between batches of keys it loads: a round
                # whose probe it answers too late sees it unreachable and skips it, so
                # the rounds go on until two of them have seen it refuse.
                await controller.tick({P: False, S: True})
                kinds = [e["kind"] for e in controller.status()["events"]]
                assert kinds in (["start", "fail-over"], ["start", "fail-over", "wait"]), (
                    controller.status()["events"]
                )
                return kinds[-1] == "wait" and controller.status()["events"][-1]["repeats"] >= 1

            await until(refused_twice, 30, interval=0.05, message="a second refusal, counted")
            assert "loading" in controller.status()["events"][-1]["message"]

            async def demoted() -> bool:
                await controller.tick({P: False, S: True})
                return controller.status()["events"][-1]["kind"] == "demote"

            await until(demoted, 30, interval=0.2, message="demoted once it had loaded")
        assert controller.status()["lost_writes"] == 1
        assert "error" not in [e["kind"] for e in controller.status()["events"]]
    finally:
        await controller.close()


async def _loading(primary: EmbeddedRedis) -> bool:
    """Whether `primary`'s Redis answers INFO but refuses a read with LOADING."""
    client = probe_client(
        primary.spec.address, primary.spec.port, credentials=TEST_ADMIN, timeout=3.0
    )
    try:
        if not (await replication_status(client)).reachable:
            return False
        try:
            await client.get(keys.EPOCH)
        except BusyLoadingError:
            return True
        raise AssertionError("the old primary loaded before the test could see it loading")
    finally:
        await client.aclose()


async def _moves_to(controller: FailoverController, healthy: dict[str, bool], writer: str) -> None:
    """Tick until the writer is `writer` (a coordinated move waits for the link first)."""

    async def moved() -> bool:
        await controller.tick(healthy)
        return controller.writer == writer

    await until(moved, 20, interval=0.1, message=f"the writer moved to {writer}")


async def test_repeated_moves_hold_the_next_failback_longer_until_the_penalty_decays(
    pair: Pair,
) -> None:
    """Flap damping: a failover and a failback pass at once; a primary that loses the
    writer again soon after gets it back only after a hold, longer the more it moved;
    the hold never keeps the writer in a failing region (only the grace after a move and
    a region that just failed under the same clients do, each for a while); once the
    penalty has decayed, failback happens as usual."""
    config = pair.config
    policy = config.failover
    assert (policy.damping_half_life, policy.damping_max_hold) == (15.0, 60.0)  # fast
    clock = FakeClock(1_800_000_000.0)
    controller = FailoverController(config, clock=clock)
    both = {P: True, S: True}
    try:
        await controller.tick(both)
        await _moves_to(controller, {P: False, S: True}, S)  # move 1: failover
        clock.advance(2)
        await _moves_to(controller, both, P)  # move 2: failback, not held
        assert not controller.status()["damping"]["holding"]
        clock.advance(_move_grace(config) + 1)  # past the grace its clients get
        await _moves_to(controller, {P: False, S: True}, S)  # move 3: failover again
        clock.advance(3)
        decision = await controller.tick(both)
        assert decision.move == "none"
        assert controller.writer == S
        assert "failback held" in decision.reason
        first_hold = controller.failback_hold()
        assert 10 < first_hold <= 60
        damping = controller.status()["damping"]
        assert damping["suppressed"]
        assert damping["moves"] == 3
        assert damping["penalty"] > config.failover.damping_suppress

        # Damping's hold never keeps the writer in a failing region: not from an urgent
        # failback to the primary (once the grace after move 3 and the half-life after
        # the primary's own failure are over)...
        clock.advance(max(_move_grace(config), policy.damping_half_life) + 0.5)
        await _moves_to(controller, {P: True, S: False}, P)  # move 4
        # ...nor a failover (once the failback's grace and the secondary's half-life are
        # over).
        clock.advance(max(_move_grace(config), policy.damping_half_life) + 0.5)
        await _moves_to(controller, {P: False, S: True}, S)  # move 5
        clock.advance(3)
        assert (await controller.tick(both)).move == "none"
        second_hold = controller.failback_hold()
        # Held again; not necessarily longer, since a half-life passed between these
        # moves (tests/failover/test_damping.py has the arithmetic's properties).
        assert 10 < second_hold <= config.failover.damping_max_hold
        assert controller.status()["damping"]["moves"] == 5
        assert first_hold > 0

        # Time forgives: just before the hold ends, still held; after it, failback.
        clock.advance(second_hold - 0.5)
        assert (await controller.tick(both)).move == "none"
        assert controller.writer == S
        clock.advance(1.0)
        assert controller.failback_hold() == 0.0
        await _moves_to(controller, both, P)
        kinds = [e["kind"] for e in controller.status()["events"]]
        assert kinds.count("fail-over") == 3
        assert kinds.count("fail-back") == 3
        assert controller.status()["failbacks"] == 3
    finally:
        await controller.close()


def _move_grace(config: Config) -> float:
    t = config.timing
    periods = t.failback_datapoints + t.failover_datapoints + 4
    return config.failover.failback_drain_seconds + periods * t.canary_interval


@pytest.mark.parametrize(
    ("held", "reachable", "move"),
    [
        (True, True, "none"),  # held: its clients are still coming back, or it passes again
        (True, False, "fail-over"),  # its Redis is lost: at once, held or not
        (False, True, "fail-over"),  # the grace is over, or it still fails
    ],
)
@pytest.mark.parametrize(
    ("why", "reason", "rule"),
    [
        ("move_grace", "the grace after a move", "move-grace"),
        ("writer_recovering", "passes its canary again", "recovering"),
    ],
    ids=["just-after-a-move", "recovering"],
)
@pytest.mark.parametrize(("writer", "other"), [(P, S), (S, P)], ids=["failback", "failover"])
def test_a_failing_writer_region_is_held_only_while_its_redis_answers(
    held: bool,
    reachable: bool,
    move: str,
    why: str,
    reason: str,
    rule: str,
    writer: str,
    other: str,
) -> None:
    """Just after a move (its clients arriving), or while its alarm clears (it passes
    its canary again), a writer region stays; never with its Redis lost."""
    decision = decide(
        writer=writer, primary=P, secondary=S, healthy={writer: False, other: True},
        auto_failback=True, writer_reachable=reachable, **{why: held},
    )  # fmt: skip
    if move != "none" and writer == S:
        move = "fail-back"  # leaving the secondary for the primary
    assert decision.move == move
    if move == "none":
        assert reason in decision.reason
    assert decision.held == (rule if move == "none" else None)
    # Both failing: the writer stays anyway, whatever holds it.
    both_failing = {writer: False, other: False}
    stays = decide(writer=writer, primary=P, secondary=S, healthy=both_failing,
                   auto_failback=True, **{why: held})  # fmt: skip
    assert (stays.move, stays.held) == ("none", "both-unhealthy")


async def test_a_primary_that_lost_the_clients_a_failback_gave_it_waits_a_half_life(
    pair: Pair,
) -> None:
    """A drill's flap (f6, 2026-12-02): the primary strained under the clients a failback
    gave it, kept the writer through a grace stretched by the drain's pauses, was left
    when it ended, 17 s after the failback (more than a half-life: the figure of merit,
    1.45, no longer suppressed), and got the writer back 3 s later. Now the failback
    waits a damping half-life from the primary's last failure; a first failover of a
    primary whose Redis answered is followed by its failback as before."""
    config = pair.config
    half_life = config.failover.damping_half_life
    clock = FakeClock(1_800_000_000.0)
    controller = FailoverController(config, clock=clock)
    both = {P: True, S: True}
    try:
        await controller.tick(both)
        await _moves_to(controller, {P: False, S: True}, S)  # a soft failure, Redis up
        assert controller.strain_hold() == 0.0  # no failback gave it these clients
        clock.advance(25)  # the outage (the drill's: 23.5 s)
        await _moves_to(controller, both, P)  # the failback, not held
        clock.advance(max(_move_grace(config), half_life) + 2)  # a long grace, then:
        await _moves_to(controller, {P: False, S: True}, S)  # failed under them
        assert controller.state is not None
        assert controller.damping is not None
        # The figure of merit alone would let it straight back.
        assert controller.state.damping.hold(controller.damping, clock.now) == 0.0
        clock.advance(3)
        decision = await controller.tick(both)
        assert (decision.move, controller.writer) == ("none", S)
        assert "failback held" in decision.reason
        damping = controller.status()["damping"]
        assert damping["holding"]
        assert damping["strain_hold_seconds"] == pytest.approx(half_life - 3, abs=0.01)
        assert damping["hold_seconds"] == damping["strain_hold_seconds"]
        clock.advance(half_life - 3 - 0.5)
        assert (await controller.tick(both)).move == "none"
        clock.advance(1.0)
        await _moves_to(controller, both, P)
    finally:
        await controller.close()


@pytest.mark.parametrize(
    ("reachable", "move"),
    [(True, "none"), (False, "fail-over")],  # a lost Redis is left at once, as ever
)
def test_the_clients_stay_when_the_other_region_just_failed_under_them(
    reachable: bool, move: str
) -> None:
    decision = decide(
        writer=P, primary=P, secondary=S, healthy={P: False, S: True}, auto_failback=True,
        writer_reachable=reachable, other_strained=True,
    )  # fmt: skip
    assert decision.move == move
    if move == "none":
        assert "both are strained by the same clients" in decision.reason


async def test_a_region_that_failed_while_it_held_the_writer_is_not_sent_it_back_at_once(
    pair: Pair,
) -> None:
    """The herd passed to and fro: a failover from a strained primary, the secondary
    strained in turn, an urgent failback to the primary that had failed under the same
    clients seconds before. Now the clients stay for a damping half-life after the
    other region's failure; past it, the urgent failback goes as before."""
    config = pair.config
    clock = FakeClock(1_800_000_000.0)
    controller = FailoverController(config, clock=clock)
    both = {P: True, S: True}
    half_life = config.failover.damping_half_life
    try:
        await controller.tick(both)
        assert not controller.strained_recently(P)
        await _moves_to(controller, {P: False, S: True}, S)  # P failed, its Redis up
        assert controller.strained_recently(P)
        clock.advance(_move_grace(config) + 0.5)  # past S's grace, within P's half-life
        assert _move_grace(config) + 0.5 < half_life
        decision = await controller.tick({P: True, S: False})
        assert (decision.move, controller.writer) == ("none", S)
        assert "both are strained by the same clients" in decision.reason
        assert controller.strained_recently(S)
        clock.advance(half_life)  # P's failure is old news now
        assert not controller.strained_recently(P)
        await _moves_to(controller, {P: True, S: False}, P)  # the urgent failback
    finally:
        await controller.close()


async def test_every_move_grants_the_clients_it_sends_a_grace(pair: Pair) -> None:
    """A soft failure of the region that just took the writer, either way, is held (the
    clients sent to it are arriving); after the grace it is left as usual. Without it,
    a failover whose herd strained the secondary went straight back to the primary, and
    the two regions passed the herd to and fro (4 failovers and 4 failbacks in one
    N = 1,000 drill). The grace survives a restart, and a state saved before it covered
    failovers too loads."""
    config = pair.config
    clock = FakeClock(1_800_000_000.0)
    controller = FailoverController(config, clock=clock)
    both = {P: True, S: True}
    try:
        await controller.tick(both)
        assert not controller.move_grace()
        await _moves_to(controller, {P: False, S: True}, S)  # a coordinated failover
        assert controller.move_grace_left() == pytest.approx(_move_grace(config))
        clock.advance(1)
        decision = await controller.tick({P: True, S: False})  # its herd strains S
        assert (decision.move, controller.writer) == ("none", S)
        assert "the grace after a move" in decision.reason
        clock.advance(_move_grace(config))
        assert not controller.move_grace()
        await _moves_to(controller, both, P)  # the failback, once S is well again
        assert controller.move_grace()
        assert controller.state is not None
        saved = ControllerState.from_dict(controller.state.to_dict())
        assert saved.moved_at == clock.now
        legacy = {k: v for k, v in controller.state.to_dict().items() if k != "moved_at"}
        assert ControllerState.from_dict({**legacy, "failed_back_at": 5.0}).moved_at == 5.0
        clock.advance(1)
        decision = await controller.tick({P: False, S: True})  # the herd strains P
        assert (decision.move, controller.writer) == ("none", P)
        clock.advance(_move_grace(config))
        assert not controller.move_grace()
        await _moves_to(controller, {P: False, S: True}, S)  # still failing: it moves
        assert controller.state.moved_at == clock.now  # and S gets the grace in turn
    finally:
        await controller.close()


async def test_the_grace_runs_from_the_end_of_a_drain_that_paused(pair: Pair) -> None:
    """A drain that pauses (its destination strained) sends its last clients later than
    its spread: the grace covers them from then, and still ends."""
    config = pair.config
    clock = FakeClock(1_800_000_000.0)
    drain_ends: list[float | None] = [None]
    controller = FailoverController(config, clock=clock, drain_ends=lambda: drain_ends[0])
    both = {P: True, S: True}
    periods = _move_grace(config) - config.failover.failback_drain_seconds
    try:
        await controller.tick(both)
        await _moves_to(controller, {P: False, S: True}, S)
        clock.advance(2)
        await _moves_to(controller, both, P)
        assert controller.move_grace_left() == pytest.approx(_move_grace(config))
        drain_ends[0] = clock.now - 1.0  # an earlier drain's end: the spread still counts
        assert controller.move_grace_left() == pytest.approx(_move_grace(config))
        drain_ends[0] = clock.now + 20.0  # paused: its last clients go 20 s from now
        assert controller.move_grace_left() == pytest.approx(20.0 + periods)
        clock.advance(_move_grace(config) + 1)  # past the grace from the failback
        decision = await controller.tick({P: False, S: True})
        assert (decision.move, controller.writer) == ("none", P)
        assert "the grace after a move" in decision.reason
        clock.advance(20.0 + periods - _move_grace(config))  # past the drain's end too
        assert controller.move_grace_left() == 0
        await _moves_to(controller, {P: False, S: True}, S)
    finally:
        await controller.close()


async def test_damping_off_fails_back_at_once(make_config: Callable[..., Config]) -> None:
    config = make_config(failover={"flap_damping": False})
    controller = FailoverController(config, state=ControllerState(writer=S, epoch=3))
    assert controller.damping is None
    assert controller.failback_hold() == 0.0
    assert controller.status()["damping"] is None
    decision = decide(
        writer=S, primary=P, secondary=S, healthy={P: True, S: True}, auto_failback=True,
        failback_hold=0.0,
    )  # fmt: skip
    assert decision.move == "fail-back"
    await controller.close()


def test_decide_holds_only_a_healthy_writers_failback() -> None:
    args = {"primary": P, "secondary": S, "auto_failback": True, "failback_hold": 12.0}
    held = decide(writer=S, healthy={P: True, S: True}, **args)  # type: ignore[arg-type]
    assert (held.move, held.target) == ("none", None)
    assert "failback held 12.0 s more" in held.reason
    urgent = decide(writer=S, healthy={P: True, S: False}, **args)  # type: ignore[arg-type]
    assert (urgent.move, urgent.urgent) == ("fail-back", True)
    failover = decide(writer=P, healthy={P: False, S: True}, **args)  # type: ignore[arg-type]
    assert failover.move == "fail-over"


def test_the_damping_state_is_part_of_the_controller_state() -> None:
    from rideout.failover.damping import DampingPolicy

    policy = DampingPolicy(half_life=15.0, max_hold=60.0)
    state = ControllerState(writer=S, epoch=4, failovers=2, failbacks=1)
    for t in (1000.0, 1002.0, 1004.0):
        state.damping = state.damping.record_move(policy, t)
    restored = ControllerState.from_dict(state.to_dict())
    assert restored.damping == state.damping
    assert restored.damping.hold(policy, 1005.0) == state.damping.hold(policy, 1005.0) > 0
    # A state saved before damping existed loads with none.
    legacy = state.to_dict()
    del legacy["damping"]
    assert ControllerState.from_dict(legacy).damping.merit == 0.0


async def test_a_promotion_retried_after_a_lost_reply_raises_the_epoch_once(pair: Pair) -> None:
    """The controller's epoch write went through but its reply timed out (a loaded
    machine): the retry on the next tick must find the epoch in place, not raise it
    again. Before the fix the epoch went 1 -> 2 -> 3 for one promotion."""
    from redis.exceptions import TimeoutError as RedisTimeout

    config, s, primary = pair.config, pair.s, pair.primary
    controller = FailoverController(config)
    try:
        await controller.tick({P: True, S: True})
        client = controller._clients[S]
        real_evalsha = client.evalsha
        lost: list[object] = []

        async def evalsha_then_time_out(*args: object) -> object:
            reply = await real_evalsha(*args)  # type: ignore[arg-type]
            if not lost:
                lost.append(reply)
                raise RedisTimeout("Timeout reading from socket (injected after the write)")
            return reply

        client.evalsha = evalsha_then_time_out  # type: ignore[method-assign]
        await primary.stop()
        await controller.tick({P: False, S: True})
        assert lost == [2]  # written, reply lost
        assert await s.get(keys.EPOCH) == "2"
        assert (controller.writer, controller.epoch) == (P, 1)  # the move did not count
        assert controller.status()["events"][-1]["kind"] == "error"
        await controller.tick({P: False, S: True})  # the retry
        assert (controller.writer, controller.epoch) == (S, 2)
        assert await s.get(keys.EPOCH) == "2"
        status = controller.status()
        assert status["failovers"] == 1
        assert [e["kind"] for e in status["events"]].count("fail-over") == 1
        await controller.tick({P: False, S: True})
        assert controller.epoch == 2
    finally:
        await controller.close()


async def test_bump_epoch_is_idempotent_and_never_lowers(pair: Pair) -> None:
    from rideout.store.replication import bump_epoch

    p = pair.p
    assert await p.get(keys.EPOCH) == "1"
    assert await bump_epoch(p, 1) == 2
    assert await bump_epoch(p, 1) == 2  # again: already there
    assert await bump_epoch(p, 5) == 6
    assert await bump_epoch(p, 2) == 6  # a server past the target keeps its epoch
    assert await p.get(keys.EPOCH) == "6"
    # With every copy of it, which the scripts fence on (one per hash slot).
    assert set(await p.mget(keys.epoch_copies())) == {"6"}


@pytest.mark.parametrize(
    ("writer", "healthy", "local", "move", "target"),
    [
        # The writer's region fails: its in-region replica first, else the other region.
        (P, {P: False, S: True}, {P: True}, "promote-in-region", P),
        (P, {P: False, S: True}, {P: False}, "fail-over", S),
        (P, {P: False, S: True}, {}, "fail-over", S),
        (P, {P: False, S: False}, {P: True}, "promote-in-region", P),  # even with both down
        (S, {P: True, S: False}, {S: True}, "promote-in-region", S),
        (S, {P: True, S: False}, {P: True}, "fail-back", P),  # the other's replica: no matter
        (P, {P: True, S: True}, {P: True}, "none", None),  # healthy: nothing to promote
    ],
)
def test_decide_prefers_the_in_region_replica_when_there_is_one(
    writer: str,
    healthy: dict[str, bool],
    local: dict[str, bool],
    move: str,
    target: str | None,
) -> None:
    decision = decide(
        writer=writer, primary=P, secondary=S, healthy=healthy, auto_failback=True,
        in_region_replica=local,
    )  # fmt: skip
    assert (decision.move, decision.target) == (move, target)
    if move == "promote-in-region":
        assert decision.urgent
