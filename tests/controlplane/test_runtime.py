"""The control loop with an injected clock: datapoints → alarm → health → writer → DNS."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import signal
import stat
from collections.abc import AsyncIterator, Callable

import pytest

from rideout.config import Config
from rideout.controlplane.runtime import ControlPlane, IngestError
from rideout.health.canary import ProbeResult, metric_data
from rideout.store.acl import RedisRole
from rideout.store.client import probe_client
from rideout.store.replication import ensure_epoch
from tests.conftest import FakeClock, credentials, running_redis_pair, serving

P, S = "us-east-1", "us-west-2"


def report(plane: ControlPlane, clock: FakeClock, region: str, healthy: bool = True) -> None:
    zones = [z.name for z in plane.config.region(region).zones]
    plane.put_metric_data(
        metric_data([ProbeResult(region, z, healthy, 0.01, None, clock.now) for z in zones])
    )


async def healthy_for(plane: ControlPlane, clock: FakeClock, periods: int = 12) -> None:
    """Both regions report healthy for `periods` periods (enough for the alarms to be OK)."""
    for _ in range(periods):
        clock.now += plane.period
        report(plane, clock, P)
        report(plane, clock, S)
        await plane.evaluate()


async def started_writer(config: Config) -> None:
    controller = credentials(config, RedisRole.CONTROLLER)  # as the supervisor does it
    writer = probe_client(
        config.primary.redis.address, config.primary.redis.port, credentials=controller
    )
    try:
        await ensure_epoch(writer)
    finally:
        await writer.aclose()


@contextlib.asynccontextmanager
async def plane_on_redis(config: Config, clock: FakeClock) -> AsyncIterator[ControlPlane]:
    """A control plane on `clock` over the config's real Redis pair, the writer started."""
    async with running_redis_pair(config):
        await started_writer(config)
        plane = ControlPlane(config, clock=clock)
        try:
            yield plane
        finally:
            await plane.stop()


def a_records(plane: ControlPlane) -> list[str]:
    return [r.value for r in plane.resolve(plane.config.app_domain, "A").answers]


@pytest.mark.parametrize("busy", [True, False], ids=["busy", "not-busy"])
async def test_a_region_answering_late_keeps_the_writer_only_while_it_says_it_is_busy(
    make_config: Callable[..., Config], busy: bool
) -> None:
    """Busy is not down, end to end: the primary's zones (real sockets) answer the real
    canary's store probe past its timeout but within its busy grace. Saying they shed
    load, the region stays OK and the writer; not saying so, it fails over."""
    from rideout.health.canary import Canary
    from tests.health.test_canary import late_zone

    # The fake clock runs the periods; the probes' lateness is real (0.3 s against a
    # timeout of 0.1 s and a grace of 1.5 s: generous both ways).
    config = make_config(
        timing={"canary_interval": 2.0, "canary_timeout": 0.1, "canary_busy_grace": 1.5}
    )
    clock = FakeClock(1_800_000_000.0)
    async with plane_on_redis(config, clock) as plane, contextlib.AsyncExitStack() as zones:
        for zone in config.primary.zones:
            app = late_zone(0.3, busy=busy)
            await zones.enter_async_context(serving(app, zone.address, config.app_port))
        await healthy_for(plane, clock)
        assert plane.alarms[P].state == "OK"
        canary = Canary(config, P, clock=clock)
        for _ in range(config.timing.failover_datapoints + 2):
            clock.now += plane.period
            results = await canary.probe_all(at=clock.now)
            plane.put_metric_data(metric_data(results))
            report(plane, clock, S)
            await plane.evaluate()
        assert [(r.healthy, r.busy) for r in results] == [(busy, busy)] * 2, results
        summary = plane.summary()
        if busy:
            assert plane.alarms[P].state == "OK"
            assert summary["failover"]["writer"] == P
            assert {z["zone"] for z in plane.zones_status() if z["busy"]} == {
                z.name for z in config.primary.zones
            }
        else:
            assert plane.alarms[P].state == "ALARM"
            assert summary["failover"]["writer"] == S
            assert "past the 0.1 s timeout" in (results[0].error or "")


def test_ingest_refuses_bad_requests_clearly(make_config: Callable[..., Config]) -> None:
    plane = ControlPlane(make_config())
    for body, message in [
        ([], "expected a JSON object"),
        ({"Namespace": "App"}, "MetricData a non-empty list"),
        (
            {"Namespace": "App", "MetricData": [{"Value": 1}]},
            "MetricData[0]: missing or malformed 'MetricName'",
        ),
        (
            {"Namespace": "App", "MetricData": [{"MetricName": "x", "Value": "one"}]},
            "MetricData[0]",
        ),
        (
            {"Namespace": "App", "MetricData": [{"MetricName": "x", "Value": float("nan")}]},
            "MetricData[0]",
        ),
        (
            {"Namespace": "App", "MetricData": [{"MetricName": "x", "Value": 1}] * 1001},
            "at most 1000",
        ),
    ]:
        with pytest.raises(IngestError, match=message.replace("[", r"\[").replace("]", r"\]")):
            plane.put_metric_data(body)
    assert (
        plane.put_metric_data({"Namespace": "App", "MetricData": [{"MetricName": "x", "Value": 1}]})
        == 1
    )


async def test_silence_fails_over_and_dns_follows_the_writer(
    make_config: Callable[..., Config],
) -> None:
    config = make_config()
    clock = FakeClock(1_800_000_000.0)
    period = config.timing.canary_interval
    async with plane_on_redis(config, clock) as plane:
        # Start-up: no data yet, nothing is evaluated, DNS answers the primary.
        await plane.evaluate()
        assert {a.state for a in plane.alarms.values()} == {"INSUFFICIENT_DATA"}
        assert a_records(plane) == ["127.0.1.1", "127.0.1.2"]
        await healthy_for(plane, clock)
        assert {a.state for a in plane.alarms.values()} == {"OK"}
        # The primary region goes silent: its canary died with it.
        moved_after = None
        for i in range(1, 20):
            clock.now += period
            report(plane, clock, S)
            await plane.evaluate()
            if a_records(plane) == ["127.0.2.1", "127.0.2.2"]:
                moved_after = i
                break
        assert moved_after is not None
        assert plane.alarms[P].state == "ALARM"
        assert plane.checks[P].healthy is False
        summary = plane.summary()
        assert (summary["failover"]["writer"], summary["failover"]["epoch"]) == (S, 2)
        assert summary["dns"]["region"] == S
        txt = plane.resolve(config.app_domain, "TXT").answers[0].value
        assert txt == "region=us-west-2 reason=primary-unhealthy"
        # CloudWatch keeps using the last real datapoints while N of them are in the
        # evaluation range (N + 2 periods): a silent region alarms after ~N + 2 periods.
        n = config.timing.failover_datapoints
        assert moved_after <= n + 4


async def test_one_round_at_a_time_whoever_asks(make_config: Callable[..., Config]) -> None:
    """Rounds asked for at once run one after the other: two at once would both act on
    the same view (a test calling rounds beside the started loop got two FAILOVER
    commands for one move, the second refused "already in progress")."""
    plane = ControlPlane(make_config(), clock=FakeClock(1_800_000_000.0))
    inside, most, calls = 0, 0, 0

    async def tick(*_: object) -> None:
        nonlocal inside, most, calls
        inside, calls = inside + 1, calls + 1
        most = max(most, inside)
        await asyncio.sleep(0.05)  # a move under way: its Redis commands take time
        inside -= 1

    plane.controller.tick = tick  # type: ignore[assignment,method-assign]
    try:
        await asyncio.gather(*(plane.evaluate() for _ in range(3)))
    finally:
        await plane.stop()
    assert (calls, most) == (3, 1)


async def test_dns_follows_the_writer_as_it_moves_not_at_the_rounds_end(
    make_config: Callable[..., Config],
) -> None:
    """The writer's Redis is frozen (SIGSTOP): the round that moves the writer then reads
    every Redis again, the frozen one costing its 1 s timeout. DNS answers the new
    writer's region from the move on, never the old one while the summary already names
    the new writer (before 2026-12-06 it did, for that second: a freeze drill's DNS
    moved 1 s after its writer)."""
    config = make_config()
    clock = FakeClock(1_800_000_000.0)
    async with running_redis_pair(config) as (primary, _):
        await started_writer(config)
        plane = ControlPlane(config, clock=clock)
        try:
            await healthy_for(plane, clock)
            assert plane.summary()["failover"]["writer"] == P
            assert primary.pid is not None
            os.kill(primary.pid, signal.SIGSTOP)
            try:
                behind: list[tuple[str, str]] = []
                for _ in range(20):
                    clock.now += plane.period
                    report(plane, clock, P, healthy=False)
                    report(plane, clock, S)
                    round_ = asyncio.create_task(plane.evaluate())
                    while not round_.done():
                        summary = plane.summary()
                        writer, dns = summary["failover"]["writer"], summary["dns"]["region"]
                        if writer != dns:
                            behind.append((writer, dns))
                        await asyncio.sleep(0.01)
                    await round_
                    if plane.summary()["failover"]["writer"] == S:
                        break
                assert plane.summary()["failover"]["writer"] == S
                assert plane.summary()["dns"]["region"] == S
                assert behind == []
            finally:
                os.kill(primary.pid, signal.SIGCONT)
        finally:
            await plane.stop()


async def test_a_restarted_control_plane_does_not_flip_dns_for_lack_of_data(
    make_config: Callable[..., Config],
) -> None:
    config = make_config()
    clock = FakeClock(1_800_000_000.0)
    period = config.timing.canary_interval
    async with running_redis_pair(config):
        await started_writer(config)
        first = ControlPlane(config, clock=clock)
        await healthy_for(first, clock)
        await first.stop()  # saves its state
        assert first.state_file.exists()
        # Written by rideout._files.replace_atomically: private, no temp file left behind.
        assert stat.S_IMODE(first.state_file.stat().st_mode) == 0o600
        assert [p.name for p in first.state_file.parent.glob("*.tmp")] == []

        clock.now += 30  # down for a while: no datapoints were received meanwhile
        second = ControlPlane(config, clock=clock)
        try:
            assert {a.state for a in second.alarms.values()} == {"OK"}  # restored
            assert second.controller.writer == P
            for _ in range(3):  # the first periods after the restart are not evaluated
                clock.now += period
                await second.evaluate()
            assert {a.state for a in second.alarms.values()} == {"OK"}
            assert a_records(second) == ["127.0.1.1", "127.0.1.2"]
        finally:
            await second.stop()


def test_a_damaged_state_file_is_ignored_with_a_warning(
    make_config: Callable[..., Config], caplog: pytest.LogCaptureFixture
) -> None:
    config = make_config()
    plane = ControlPlane(config)
    plane.state_file.parent.mkdir(parents=True, exist_ok=True)
    plane.state_file.write_text("{not json")
    again = ControlPlane(config)
    assert again.controller.state is None
    assert "starting without remembered state" in caplog.text


def test_canary_datapoints_are_exposed_for_prometheus(make_config: Callable[..., Config]) -> None:
    from prometheus_client import generate_latest

    clock = FakeClock(1_800_000_000.0)
    plane = ControlPlane(make_config(), clock=clock)
    report(plane, clock, S, healthy=False)
    text = generate_latest(plane.registry).decode()
    assert 'rideout_canary_health{region="us-west-2",zone="usw2-az1"} 0.0' in text
    assert 'rideout_canary_timestamp_seconds{region="us-west-2",zone="usw2-az2"} 1.8e+09' in text


async def test_nothing_fails_before_the_canaries_start_and_a_silent_region_fails_after(
    make_config: Callable[..., Config],
) -> None:
    """Canaries start after every server is up, which a loaded machine can take longer
    than the grace period to do: the grace runs from the first datapoint of any region."""
    clock = FakeClock(1_800_000_000.0)
    async with plane_on_redis(make_config(), clock) as plane:
        for _ in range(40):  # 20 s: four grace periods without a single datapoint
            clock.now += plane.period
            await plane.evaluate()
        assert {a.state for a in plane.alarms.values()} == {"INSUFFICIENT_DATA"}
        assert a_records(plane) == ["127.0.1.1", "127.0.1.2"]
        # The secondary's canary starts; the primary's never does.
        for _ in range(8):  # within the grace period: the primary is not judged yet
            clock.now += plane.period
            report(plane, clock, S)
            await plane.evaluate()
        assert plane.alarms[P].state == "INSUFFICIENT_DATA"
        for _ in range(12):
            clock.now += plane.period
            report(plane, clock, S)
            await plane.evaluate()
        assert plane.alarms[P].state == "ALARM"
        assert plane.alarms[S].state == "OK"


def test_the_evaluation_offset_waits_for_the_periods_datapoints() -> None:
    from rideout.config import PROFILES
    from rideout.controlplane.runtime import evaluation_offset

    # fast: a canary round 0.125 s into the period, probes within 0.4 s and a busy
    # zone's late answer 0.05 s more: in by 0.075 s into the next period, plus a tenth of
    # a period for the post.
    assert evaluation_offset(PROFILES["fast"]) == pytest.approx(0.125)
    assert evaluation_offset(PROFILES["seed"]) == pytest.approx(6.0)
    assert evaluation_offset(
        dataclasses.replace(PROFILES["fast"], canary_busy_grace=0.0)
    ) == pytest.approx(0.075)


async def test_rounds_run_just_after_each_period_boundary(
    make_config: Callable[..., Config],
) -> None:
    """Before, rounds ran every period from whenever the control plane started, so a
    period was judged up to a whole period after it ended (0.25 s late on average)."""
    import asyncio
    import statistics
    import time

    from rideout.controlplane.runtime import evaluation_offset

    config = make_config()
    plane = ControlPlane(config)  # no Redis: the controller reports it unreachable
    phases: list[float] = []
    evaluate = plane.evaluate

    async def timed() -> None:
        phases.append(time.time() % plane.period)
        await evaluate()

    plane.evaluate = timed  # type: ignore[method-assign]
    await plane.start()
    try:
        while len(phases) < 6:
            await asyncio.sleep(plane.period / 4)
    finally:
        await plane.stop()
    offset = evaluation_offset(config.timing)
    later = phases[1:]  # the first round runs at start
    assert offset <= statistics.median(later) < offset + 0.1, phases


async def test_a_primary_straining_under_its_returning_clients_keeps_the_writer_for_the_grace(
    make_config: Callable[..., Config],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from rideout.cli._status import _print_control_plane

    config = make_config()
    clock = FakeClock(1_800_000_000.0)
    async with plane_on_redis(config, clock) as plane:
        await healthy_for(plane, clock)

        async def until_writer(region: str, primary_healthy: bool) -> None:
            for _ in range(60):
                clock.now += plane.period
                report(plane, clock, P, healthy=primary_healthy)
                report(plane, clock, S)
                await plane.evaluate()
                if plane.controller.writer == region:
                    return
            raise AssertionError(f"the writer never moved to {region}")

        await until_writer(S, primary_healthy=False)  # a coordinated failover
        await until_writer(P, primary_healthy=True)  # and the failback
        grace = plane.summary()["failover"]["move_grace_seconds"]
        assert grace > 0
        assert plane.registry.get_sample_value("rideout_move_grace_seconds") == grace
        # It runs from the end of the plane's own drain (here skipped: no app servers),
        # later when that drain paused.
        drain_ends = plane.drain.ends_at()
        assert drain_ends is not None
        with monkeypatch.context() as patch:
            patch.setattr(plane.drain, "ends_at", lambda: clock.now + 30.0)
            assert plane.controller.move_grace_left() > 30.0
        for _ in range(config.timing.failover_datapoints + 4):  # the herd strains it
            clock.now += plane.period
            report(plane, clock, P, healthy=False)
            report(plane, clock, S)
            await plane.evaluate()
        assert plane.alarms[P].state == "ALARM"
        assert plane.controller.writer == P  # held: its Redis answers
        assert "the grace after a move" in plane.summary()["failover"]["decision"]["reason"]
        capsys.readouterr()
        _print_control_plane(plane.summary(), config.app_domain)
        assert "grace after the move:" in capsys.readouterr().out
        await until_writer(S, primary_healthy=False)  # still failing after it: moved
        assert plane.summary()["failover"]["move_grace_seconds"] > 0  # S's turn now


async def test_a_primary_that_passes_again_as_its_grace_ends_keeps_the_writer(
    make_config: Callable[..., Config],
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The flaps of the N = 1,000 drills (2026-12-02): the primary strained under its
    returning clients through most of the grace, passed its canary again, and was failed
    over at the grace's end anyway, its alarm still in ALARM for want of six good
    periods. Now it keeps the writer while it passes, and its alarm clears."""
    from rideout.cli._status import _print_control_plane

    caplog.set_level(logging.INFO, logger="rideout.failover")
    config = make_config()
    clock = FakeClock(1_800_000_000.0)
    async with plane_on_redis(config, clock) as plane:
        await healthy_for(plane, clock)

        async def period(primary_healthy: bool) -> None:
            clock.now += plane.period
            report(plane, clock, P, healthy=primary_healthy)
            report(plane, clock, S)
            await plane.evaluate()

        for _ in range(60):  # a coordinated failover
            await period(primary_healthy=False)
            if plane.controller.writer == S:
                break
        await healthy_for(plane, clock)
        assert plane.controller.writer == P  # the failback (one failover is never held)
        # The herd strains it until the grace has two periods left (a datapoint counts
        # once its period is over, one period after the report).
        while plane.controller.move_grace_left() > 2 * plane.period:
            await period(primary_healthy=False)
        assert plane.alarms[P].state == "ALARM"
        reasons = []
        for _ in range(config.timing.failback_datapoints - 1):  # passes again; not yet OK
            await period(primary_healthy=True)
            reasons.append(plane.summary()["failover"]["decision"]["reason"])
            assert plane.controller.writer == P
        assert not plane.controller.move_grace()
        assert (plane.alarms[P].state, plane.alarms[P].recovering) == ("ALARM", True)
        assert "recovering" in reasons[-1]
        shown = plane.summary()["alarms"][P]
        assert shown["recovering"] is True
        assert shown["evaluation"].startswith("Recovering: ")
        name = plane.alarms[P].config.name
        assert plane.registry.get_sample_value("rideout_alarm_recovering", {"alarm": name}) == 1
        capsys.readouterr()
        _print_control_plane(plane.summary(), config.app_domain)
        assert f"{P} ALARM (recovering)" in capsys.readouterr().out
        for _ in range(2):  # the sixth good period, once it is complete
            await period(primary_healthy=True)
            assert plane.controller.writer == P
        assert (plane.alarms[P].state, plane.alarms[P].recovering) == ("OK", False)
        assert plane.registry.get_sample_value("rideout_alarm_recovering", {"alarm": name}) == 0
        # The log says what held the writer, once per rule, and when nothing did.
        holds = [
            m.split(":")[0]
            for m in (r.getMessage() for r in caplog.records if r.name == "rideout.failover")
            if m.startswith("holding the writer") or "is no longer held" in m
        ]
        assert holds == [
            f"holding the writer in {P} (move-grace)",
            f"holding the writer in {P} (recovering)",
            f"the writer in {P} is no longer held (recovering)",
        ]
        assert plane.summary()["failover"]["failovers"] == 1
