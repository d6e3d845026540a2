"""Zonal autoshift: the pure decisions, then the control plane's round with a fake clock
over real Redis (one zone failing: shifted, recorded, recovered, no regional failover)."""

from __future__ import annotations

from collections.abc import Callable

from rideout.config import Config
from rideout.evacuate.autoshift import HealthTracker, ZoneView, decide
from rideout.evacuate.ledger import SqliteLedger
from rideout.health.canary import ProbeResult, metric_data
from tests.conftest import FakeClock
from tests.controlplane.test_runtime import P, S, healthy_for, plane_on_redis, report


def views(**zones: tuple[bool | None, int, str | None]) -> list[ZoneView]:
    return [
        ZoneView(name, name[0], healthy, 0.0 if healthy else None, failing, shift, None)
        for name, (healthy, failing, shift) in zones.items()
    ]


def test_a_failing_zone_is_shifted_only_while_another_passes() -> None:
    [d] = decide(views(a1=(False, 2, None), a2=(True, 0, None)), 10, recover_after=5, min_failing=2)
    assert (d.action, d.zone) == ("evacuate", "a1")
    assert not decide(
        views(a1=(False, 1, None), a2=(True, 0, None)), 10, recover_after=5, min_failing=2
    )
    # The whole region failing is regional failover's business; no data is no evidence.
    assert not decide(views(a1=(False, 3, None), a2=(False, 3, None)), 10, recover_after=5)
    assert not decide(views(a1=(False, 3, None), a2=(None, 0, None)), 10, recover_after=5)
    # The other zone evacuated already: nothing left to shift to.
    assert not decide(views(a1=(False, 3, None), a2=(True, 0, "manual")), 10, recover_after=5)
    # One zone per region per round.
    both = decide(views(a1=(False, 3, None), a2=(False, 3, None), a3=(True, 0, None)), 10,
                  recover_after=5)  # fmt: skip
    assert [d.zone for d in both] == ["a1"]


def test_only_the_periods_failed_while_another_zone_passed_count() -> None:
    """A region back from an outage: a2 passes from t=20, a1 (still starting) has failed
    every period since t=0. Its failures during the outage were the region's, not its
    own: it is shifted only once it has failed `min_failing` periods beside a2."""
    t = HealthTracker()
    for start in range(20):
        t.observe("a1", float(start), False)
        t.observe("a2", float(start), False)
    t.observe("a1", 20.0, False)
    t.observe("a2", 20.0, True)
    zones = t.views([("a1", "a"), ("a2", "a")], {})
    assert zones[0].failing == 21
    assert zones[0].failed_since(20.0) == 1
    assert decide(zones, 21, recover_after=5, min_failing=2) == []
    t.observe("a1", 21.0, False)
    t.observe("a2", 21.0, True)
    [d] = decide(t.views([("a1", "a"), ("a2", "a")], {}), 22, recover_after=5, min_failing=2)
    assert (d.action, d.zone) == ("evacuate", "a1")
    assert d.why == "canary failed 2 periods in a row while a2 passes"
    # A view made without its periods counts every failed one (as before them).
    assert ZoneView("a1", "a", False, None, 5).failed_since(100.0) == 5


def test_the_tracker_keeps_the_last_failed_periods_and_forgets_them_on_a_pass() -> None:
    t = HealthTracker()
    for start in range(100):
        t.observe("a1", float(start), False)
    [v] = t.views([("a1", "a")], {})
    assert v.failing == 100
    assert v.failing_periods == tuple(float(p) for p in range(36, 100))  # the last 64
    t.observe("a1", 100.0, True)
    [v] = t.views([("a1", "a")], {})
    assert (v.failing, v.failing_periods) == (0, ())


def test_recovery_extension_and_practice_expiry() -> None:
    healed = ZoneView("a1", "a", True, 2.0, 0, "autoshift", 100.0)
    assert [d.action for d in decide([healed], 7.5, recover_after=5)] == ["recover"]
    assert decide([healed], 6.0, recover_after=5) == []
    expired = ZoneView("a1", "a", False, None, 9, "autoshift", 5.0)
    assert [d.action for d in decide([expired], 6.0, recover_after=5)] == ["extend"]
    practice = ZoneView("a1", "a", True, 0.0, 0, "practice", 5.0)
    assert [d.action for d in decide([practice], 6.0, recover_after=5)] == ["recover"]
    manual = ZoneView("a1", "a", True, 0.0, 0, "manual", None)
    assert decide([manual], 600.0, recover_after=5) == []


def test_a_held_region_shifts_nothing_but_still_recovers() -> None:
    zones = views(a1=(False, 2, None), a2=(True, 0, None))
    [d] = decide(zones, 10, recover_after=5, min_failing=2, held={"a": "the writer moved"})
    assert (d.action, d.zone) == ("hold", "a1")
    assert "held: the writer moved" in d.why
    assert [d.action for d in decide(zones, 10, recover_after=5, min_failing=2,
                                      held={"b": "elsewhere"})] == ["evacuate"]  # fmt: skip
    healed = ZoneView("a1", "a", True, 2.0, 0, "autoshift", 100.0)
    assert [d.action for d in decide([healed], 7.5, recover_after=5, held={"a": "x"})] == [
        "recover"
    ]


def test_the_tracker_counts_each_period_once_in_order() -> None:
    t = HealthTracker()
    t.observe("a1", 0.0, False)
    t.observe("a1", 0.0, False)  # the same period again: counted once
    t.observe("a1", 1.0, None)  # no data yet
    t.observe("a1", 1.0, False)  # ... then it arrives
    [v] = t.views([("a1", "a")], {})
    assert (v.healthy, v.failing, v.healthy_since) == (False, 2, None)
    t.observe("a1", 2.0, True)
    t.observe("a1", 1.5, False)  # older: ignored
    t.observe("a1", 3.0, True)
    [v] = t.views([("a1", "a")], {"a1": ("autoshift", 9.0)})
    assert (v.healthy, v.failing, v.healthy_since, v.shift, v.expires_at) == (
        True,
        0,
        2.0,
        "autoshift",
        9.0,
    )


def zone_report(plane, clock: FakeClock, bad: str, region: str = P) -> None:  # type: ignore[no-untyped-def]
    zones = [z.name for z in plane.config.region(region).zones]
    plane.put_metric_data(
        metric_data([ProbeResult(region, z, z != bad, 0.01, None, clock.now) for z in zones])
    )


async def test_a_zone_slowed_by_a_failovers_herd_is_held_then_shifted_if_it_still_fails(
    make_config: Callable[..., Config],
) -> None:
    config = make_config(evacuate={"autoshift_holddown": 5.0})
    clock = FakeClock()
    async with plane_on_redis(config, clock) as plane:
        await healthy_for(plane, clock)
        for _ in range(20):  # the primary goes silent: the writer moves to S
            clock.now += plane.period
            report(plane, clock, S)
            await plane.evaluate()
            if plane.controller.writer == S:
                break
        assert plane.controller.writer == S
        moved = clock.now
        bad = config.region(S).zones[1].name
        while clock.now - moved < 4.0:  # the herd slows one of S's zones: held
            clock.now += plane.period
            zone_report(plane, clock, bad, S)
            await plane.evaluate()
        assert plane.zones.evacuated == frozenset()
        events = plane.summary()["autoshift"]["events"]
        assert [(e["action"], e["zone"], e["result"]) for e in events] == [("hold", bad, "held")]
        assert "the writer moved" in events[0]["why"]
        for _ in range(12):  # still failing after the hold-down: a zone failure after all
            clock.now += plane.period
            zone_report(plane, clock, bad, S)
            await plane.evaluate()
        assert plane.zones.evacuated == {bad}
        assert plane.summary()["autoshift"]["events"][-1]["result"] == "done"


async def test_one_failing_zone_is_shifted_without_failing_the_region_over(
    make_config: Callable[..., Config],
) -> None:
    config = make_config()
    clock = FakeClock()
    ledger = SqliteLedger.in_data_dir(config.data_dir)
    async with plane_on_redis(config, clock) as plane:
        await healthy_for(plane, clock)
        assert plane.alarms[P].state == "OK"
        writer = plane.controller.writer
        for _ in range(6):  # use1-az2 fails its canary, use1-az1 passes
            clock.now += plane.period
            zone_report(plane, clock, "use1-az2")
            report(plane, clock, S)
            await plane.evaluate()
        assert plane.zones.evacuated == {"use1-az2"}
        assert plane.zones.evacuations["use1-az2"].reason == "autoshift"
        [row] = ledger.records()
        assert (row.zone_id, row.resource, row.operator) == ("use1-az2", P, "autoshift")
        assert plane.alarms[P].state == "OK"  # the region did not fail over
        assert plane.controller.writer == writer
        assert [r.value for r in plane.resolve(config.app_domain, "A").answers] == ["127.0.1.1"]
        assert plane.summary()["autoshift"]["events"][-1]["result"] == "done"

        # Still failing past the expiry: the shift is renewed, not dropped.
        expiry = plane.zones.evacuations["use1-az2"].expires_at
        assert expiry is not None
        while clock.now <= expiry + plane.period:
            clock.now += plane.period
            zone_report(plane, clock, "use1-az2")
            report(plane, clock, S)
            await plane.evaluate()
        assert plane.zones.evacuated == {"use1-az2"}
        assert (plane.zones.evacuations["use1-az2"].expires_at or 0) > expiry

        # Healthy for `autoshift_recover_after`: recovered, the ledger emptied.
        for _ in range(int(config.evacuate.autoshift_recover_after / plane.period) + 3):
            clock.now += plane.period
            report(plane, clock, P)
            report(plane, clock, S)
            await plane.evaluate()
        assert plane.zones.evacuated == frozenset()
        assert ledger.records() == []
        assert plane.alarms[P].state == "OK"
        assert plane.controller.writer == writer


async def test_a_full_zone_is_healthy_never_shifted_and_dns_prefers_the_zone_with_room(
    make_config: Callable[..., Config],
) -> None:
    """Issue #29: a zone at its connection cap refuses new users (503 zone_full) while its
    canary, with its reserve, passes. Full is not unhealthy: no shift, no failover; the
    region's answer names its other zone until that one is full too."""
    config = make_config()
    clock = FakeClock()
    async with plane_on_redis(config, clock) as plane:
        await healthy_for(plane, clock)
        writer = plane.controller.writer
        zones = [z.name for z in config.region(P).zones]

        def round_with_full(full: set[str]) -> None:
            plane.put_metric_data(
                metric_data(
                    [ProbeResult(P, z, True, 0.01, None, clock.now, full=z in full) for z in zones]
                )
            )

        for _ in range(20):  # far past autoshift's min_failing and the alarm's N
            clock.now += plane.period
            round_with_full({"use1-az1"})
            report(plane, clock, S)
            await plane.evaluate()
        assert plane.zones.evacuated == frozenset()
        assert plane.summary()["autoshift"]["events"] == []
        assert plane.alarms[P].state == "OK"
        assert plane.controller.writer == writer
        assert plane.zones.full() == {"use1-az1"}
        assert [r.value for r in plane.resolve(config.app_domain, "A").answers] == ["127.0.1.2"]
        assert [z["full"] for z in plane.summary()["zones"]][:2] == [True, False]

        clock.now += plane.period  # both full: both answered, as before
        round_with_full(set(zones))
        assert [r.value for r in plane.resolve(config.app_domain, "A").answers] == [
            "127.0.1.1",
            "127.0.1.2",
        ]
        clock.now += plane.period  # room again
        round_with_full(set())
        assert plane.zones.full() == frozenset()
        assert len(plane.resolve(config.app_domain, "A").answers) == 2


async def test_autoshift_can_be_switched_off(make_config: Callable[..., Config]) -> None:
    config = make_config(evacuate={"autoshift": False})
    clock = FakeClock()
    async with plane_on_redis(config, clock) as plane:
        assert plane.autoshift is None
        await healthy_for(plane, clock)
        for _ in range(6):
            clock.now += plane.period
            zone_report(plane, clock, "use1-az2")
            report(plane, clock, S)
            await plane.evaluate()
        assert plane.zones.evacuated == frozenset()
        assert plane.alarms[P].state == "ALARM"  # one zone failing fails the region
