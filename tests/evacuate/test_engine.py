"""The engine over the SQLite ledger and an in-memory provider (tests/evacuate/fakes.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rideout.errors import InvalidArgument
from rideout.evacuate.engine import EXIT_OK, EXIT_PARTIAL, EXIT_REFUSED, Engine, Options, Progress
from rideout.evacuate.ledger import SqliteLedger
from rideout.evacuate.model import SKIP_ALREADY_EVACUATED, SKIP_NO_SUBNET_LEFT, Placement
from tests.conftest import FakeClock
from tests.evacuate.fakes import MemoryProvider

ZONES = {"az1": ["a1", "a1b"], "az2": ["b1"], "az3": ["c1"]}


def world() -> MemoryProvider:
    return MemoryProvider(
        ZONES,
        [
            Placement("asg", f"web-{i}", ("a1", "b1", "c1")) for i in range(5)
        ] + [
            Placement("ecs", "api", ("a1b", "b1")),
            Placement("lambda", "single", ("a1",)),  # only in az1: never emptied
            Placement("lambda", "west", ("b1", "c1")),  # not in az1
        ],
    )  # fmt: skip


@pytest.fixture
def ledger(tmp_path: Path) -> SqliteLedger:
    return SqliteLedger(tmp_path / "ledger.sqlite3")


def snapshot(provider: MemoryProvider) -> dict[tuple[str, str], tuple[str, ...]]:
    return {k: p.subnets for k, p in provider.resources.items()}


def test_evacuate_then_recover_restores_everything_and_empties_the_ledger(
    ledger: SqliteLedger,
) -> None:
    provider = world()
    before = snapshot(provider)
    events: list[Progress] = []
    clock = FakeClock()
    engine = Engine(provider, ledger, hooks=[events.append], clock=clock, sleep=clock.sleep)
    outcome = engine.evacuate("az1", Options(batch_size=2, pause=1.5, operator="alice"))
    assert outcome.exit_code == EXIT_OK
    assert len(outcome.changed) == 6
    assert [(s.resource, s.reason) for s in outcome.skipped] == [("single", SKIP_NO_SUBNET_LEFT)]
    assert provider.subnets("asg", "web-0") == ("b1", "c1")
    assert provider.subnets("ecs", "api") == ("b1",)
    assert provider.subnets("lambda", "single") == ("a1",)
    assert clock.sleeps == [1.5, 1.5]  # 6 changes in batches of 2: two pauses
    rows = ledger.records(zone_id="az1")
    assert {r.resource for r in rows} == {"api", *(f"web-{i}" for i in range(5))}
    assert {r.operator for r in rows} == {"alice"}
    assert [r.resource for r in ledger.records(kind="ecs")] == ["api"]
    assert [e.event for e in events].count("done") == 6
    assert events[-1].done == events[-1].total == 6

    again = engine.evacuate("az1", Options())
    assert again.exit_code == EXIT_OK
    assert not again.changed
    assert {s.reason for s in again.skipped} == {SKIP_ALREADY_EVACUATED, SKIP_NO_SUBNET_LEFT}

    recovered = engine.recover("az1", Options())
    assert recovered.exit_code == EXIT_OK
    assert len(recovered.changed) == 6
    assert ledger.records() == []
    assert {k: set(v) for k, v in snapshot(provider).items()} == {
        k: set(v) for k, v in before.items()
    }


def test_a_dry_run_changes_nothing(ledger: SqliteLedger) -> None:
    provider = world()
    before = snapshot(provider)
    outcome = Engine(provider, ledger).evacuate("az1", Options(dry_run=True))
    assert outcome.dry_run
    assert len(outcome.plan.actions) == 6
    assert snapshot(provider) == before
    assert ledger.records() == []
    assert ledger.lock("az1", "someone", 10)  # the dry run took no lock


def test_the_last_subnet_is_refused_as_a_whole(ledger: SqliteLedger) -> None:
    provider = MemoryProvider(ZONES, [Placement("asg", "only", ("a1",))])
    outcome = Engine(provider, ledger).evacuate("az1")
    assert outcome.exit_code == EXIT_REFUSED
    assert "no subnet" in (outcome.refused or "")
    assert provider.updates == []


def test_an_unknown_zone_or_kind_is_refused(ledger: SqliteLedger) -> None:
    engine = Engine(world(), ledger)
    assert engine.evacuate("us-east-1a").exit_code == EXIT_REFUSED
    with pytest.raises(InvalidArgument, match="no resource type eks"):
        engine.evacuate("az1", Options(kinds=("eks",)))


def test_only_the_asked_kinds_are_touched(ledger: SqliteLedger) -> None:
    provider = world()
    engine = Engine(provider, ledger)
    assert len(engine.evacuate("az1", Options(kinds=("ecs",))).changed) == 1
    assert provider.subnets("asg", "web-0") == ("a1", "b1", "c1")
    engine.evacuate("az1", Options(kinds=("asg",)))
    assert len(engine.recover("az1", Options(kinds=("asg",))).changed) == 5
    assert [r.kind for r in ledger.records()] == ["ecs"]


def test_a_locked_zone_is_refused(ledger: SqliteLedger) -> None:
    assert ledger.lock("az1", "another-run", 60)
    provider = world()
    outcome = Engine(provider, ledger).evacuate("az1")
    assert outcome.exit_code == EXIT_REFUSED
    assert "another run" in (outcome.refused or "")
    assert provider.updates == []
    assert Engine(provider, ledger).recover("az1").exit_code == EXIT_REFUSED


def test_a_failed_update_leaves_the_ledger_true_and_a_rerun_finishes(
    ledger: SqliteLedger,
) -> None:
    provider = world()
    provider.fail_update = {"web-1"}
    provider.fail_after_update = {"web-2"}  # took effect, then reported an error
    engine = Engine(provider, ledger)
    outcome = engine.evacuate("az1")
    assert outcome.exit_code == EXIT_PARTIAL
    assert {f.step.resource for f in outcome.failed} == {"web-1", "web-2"}
    assert outcome.resume is not None
    assert "same command again" in outcome.resume
    recorded = {r.resource for r in ledger.records()}
    assert "web-1" not in recorded  # nothing was removed: its intent row is gone
    assert "web-2" in recorded  # removed: the row stays
    provider.fail_update = provider.fail_after_update = set()
    rerun = engine.evacuate("az1")
    assert rerun.exit_code == EXIT_OK
    assert [s.resource for s in rerun.changed] == ["web-1"]
    assert engine.recover().exit_code == EXIT_OK
    assert ledger.records() == []


def test_a_change_between_the_write_and_its_read_back_is_reported_not_hidden(
    ledger: SqliteLedger,
) -> None:
    """Where no conditional write exists, the engine reads the resource back: an
    operator's change landing right after rideout's write fails that resource, says
    what was written and what is there, and keeps its ledger row (the removal happened)."""
    provider = world()

    def operator_adds_a_subnet(kind: str, resource: str) -> None:
        if resource == "web-2":
            now = provider.resources[(kind, resource)]
            provider.resources[(kind, resource)] = Placement(kind, resource, (*now.subnets, "d1"))

    provider.after_write = operator_adds_a_subnet  # type: ignore[method-assign]
    outcome = Engine(provider, ledger).evacuate("az1")
    assert outcome.exit_code == EXIT_PARTIAL
    [failed] = outcome.failed
    assert failed.step.resource == "web-2"
    assert failed.error == (
        "asg web-2 changed during the update: rideout wrote b1, c1, and read back it has "
        "b1, c1, d1 (someone changed it meanwhile): check it, then run the same command again"
    )
    assert "web-2" in {r.resource for r in ledger.records()}  # a1 was removed: recorded
    assert provider.subnets("asg", "web-2") == ("b1", "c1", "d1")  # the operator's kept


def test_a_resource_another_run_holds_is_left_alone_after_the_lease_wait(
    ledger: SqliteLedger,
) -> None:
    """Another run's lease on one resource: this run waits ``lease_wait``, writes nothing
    to that resource, says why, and carries on with the others."""
    provider = world()
    assert ledger.lease("web-3", "someone-else", 600)
    clock = FakeClock()
    engine = Engine(provider, ledger, clock=clock, sleep=clock.advance)
    outcome = engine.evacuate("az1", Options(lease_wait=5.0))
    assert outcome.exit_code == EXIT_PARTIAL
    [failed] = outcome.failed
    assert failed.step.resource == "web-3"
    assert failed.error == (
        "web-3 is being changed by another run (it holds the resource's lease in the "
        "ledger; waited 5 s): nothing was written to it; run the same command again once "
        "that run is done"
    )
    assert provider.subnets("asg", "web-3") == ("a1", "b1", "c1")
    assert "web-3" not in {r.resource for r in ledger.records()}
    assert {s.resource for s in outcome.changed} >= {"web-0", "web-1", "web-2", "web-4"}
    ledger.release("web-3", "someone-else")
    assert engine.evacuate("az1").exit_code == EXIT_OK


def test_a_crash_between_intent_and_update_is_reconciled(ledger: SqliteLedger) -> None:
    """The intent row exists, the update never ran: recovery merges nothing back (the
    subnets are there) and deletes the row; an evacuation re-run completes it."""
    provider = world()
    engine = Engine(provider, ledger)
    plan = engine.plan_evacuation("az1")
    step = plan.actions[0]
    from rideout.evacuate.model import Record

    ledger.merge(Record("az1", step.resource, step.kind, step.changed, 1.0, "crashed"))
    again = engine.plan_evacuation("az1")
    assert step.resource in {s.resource for s in again.actions}  # still to do
    outcome = engine.recover("az1")
    assert outcome.exit_code == EXIT_OK
    assert provider.updates == []  # nothing needed merging back
    assert ledger.records() == []


def test_recovery_failures_keep_their_records(ledger: SqliteLedger) -> None:
    provider = world()
    engine = Engine(provider, ledger)
    engine.evacuate("az1")
    provider.fail_update = {"web-0"}
    provider.fail_describe = {"web-3"}
    outcome = engine.recover()
    assert outcome.exit_code == EXIT_PARTIAL
    assert {f.step.resource for f in outcome.failed} == {"web-0", "web-3"}
    assert {r.resource for r in ledger.records()} == {"web-0", "web-3"}
    provider.fail_update = provider.fail_describe = set()
    assert engine.recover().exit_code == EXIT_OK
    assert ledger.records() == []


def test_a_deleted_resource_keeps_its_record_and_is_reported(ledger: SqliteLedger) -> None:
    provider = world()
    engine = Engine(provider, ledger)
    engine.evacuate("az1")
    del provider.resources[("ecs", "api")]
    outcome = engine.recover()
    assert outcome.exit_code == EXIT_OK
    assert [s.resource for s in outcome.skipped] == ["api"]
    assert [r.resource for r in ledger.records()] == ["api"]


def test_min_healthy_zones(ledger: SqliteLedger) -> None:
    provider = world()
    outcome = Engine(provider, ledger).evacuate("az1", Options(min_healthy_zones=2))
    assert {s.resource for s in outcome.changed} == {f"web-{i}" for i in range(5)}
    assert "fewer than 2 healthy zones" in next(
        s.reason for s in outcome.skipped if s.resource == "api"
    )


def test_options_are_checked() -> None:
    with pytest.raises(InvalidArgument):
        Options(batch_size=0)
    with pytest.raises(InvalidArgument):
        Options(pause=-1)
