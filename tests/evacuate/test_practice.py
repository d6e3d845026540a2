"""Practice shifts over the engine (in-memory provider, fake clock): the outcome alarm
blocks, interrupts, or lets the practice succeed; the zone always comes back."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rideout.evacuate.engine import Engine, Options
from rideout.evacuate.ledger import SqliteLedger
from rideout.evacuate.model import Placement
from rideout.evacuate.practice import PracticeRun
from tests.conftest import FakeClock
from tests.evacuate.fakes import MemoryProvider


def practice(
    tmp_path: Path, states: list[str | None]
) -> tuple[PracticeRun, MemoryProvider, SqliteLedger]:
    provider = MemoryProvider({"az1": ["a"], "az2": ["b"]}, [Placement("asg", "web", ("a", "b"))])
    ledger = SqliteLedger(tmp_path / "l.sqlite3")
    clock = FakeClock()
    script = iter(states)
    run = PracticeRun(
        Engine(provider, ledger), "az1", 10.0, Options(operator="practice"),
        alarm_state=lambda: next(script, "OK"), interval=1.0, clock=clock, sleep=clock.sleep,
    )  # fmt: skip
    return run, provider, ledger


def test_a_practice_that_runs_its_course(tmp_path: Path) -> None:
    run, provider, ledger = practice(tmp_path, [])
    result = run.run()
    assert (result.outcome, result.exit_code) == ("succeeded", 0)
    assert [u[1] for u in provider.updates] == [("b",), ("b", "a")]
    assert ledger.records() == []


def test_the_outcome_alarm_interrupts_it(tmp_path: Path) -> None:
    run, provider, ledger = practice(tmp_path, ["OK", "OK", None, "ALARM"])
    result = run.run()
    assert (result.outcome, result.exit_code) == ("interrupted", 1)
    assert provider.subnets("asg", "web") == ("b", "a")
    assert ledger.records() == []


def test_an_alarm_already_firing_blocks_it(tmp_path: Path) -> None:
    run, provider, _ = practice(tmp_path, ["ALARM"])
    result = run.run()
    assert (result.outcome, result.exit_code) == ("refused", 2)
    assert provider.updates == []


def test_a_failed_recovery_says_what_to_run(tmp_path: Path) -> None:
    run, provider, ledger = practice(tmp_path, ["OK", "ALARM"])
    provider.fail_update = set()
    original = provider.update

    def update(
        kind: str, resource: str, subnets: tuple[str, ...], *, expected: Any = None
    ) -> Placement | None:
        if "a" in subnets:
            provider.fail_update = {"web"}
        return original(kind, resource, subnets, expected=expected)

    provider.update = update  # type: ignore[method-assign]
    result = run.run()
    assert result.outcome == "failed"
    assert "rideout recover --zone-id az1" in result.message
    assert [r.resource for r in ledger.records()] == ["web"]


def test_cancel_before_and_after_the_shift(tmp_path: Path) -> None:
    run, provider, _ = practice(tmp_path, [])
    assert run.cancel("stopped").outcome == "interrupted"
    assert provider.updates == []
