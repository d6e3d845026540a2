"""A Hypothesis state machine over the evacuation engine, for any provider (a
:class:`Backend`): random interleavings of evacuations and recoveries of several zones,
operator changes between and during operations (add or remove a subnet; change security
groups where the provider has them), and two operations at once (two engines, two
owners, one ledger, in two threads).

Invariants, after every rule: each resource has exactly the subnets the test expects
(its original ones, plus what operators added, minus what operators removed) less those
the ledger's rows say were removed; security groups are what operators last set. At
the end, after recovering everything: exactly the expected subnets, and an empty ledger.

Operators change only zones the ledger holds no row for (an operator does not put a
subnet back into a zone under evacuation; when one does, the ledger cannot tell it from
the evacuation's own removal).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Protocol

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from rideout.evacuate.engine import EXIT_OK, EXIT_REFUSED, Engine, Options, Outcome, Progress
from rideout.evacuate.model import Ledger

Key = tuple[str, str]


class Backend(Protocol):
    """A provider's world the machine drives (reset before every example)."""

    zones: list[str]

    def reset(self) -> None: ...

    def ledger(self) -> Ledger: ...

    def engine(self, hooks: list[Callable[[Progress], None]], slot: int = 0) -> Engine:
        """Engine ``slot`` (0 or 1: two owners) over the shared ledger, with ``hooks``."""
        ...

    def subnets(self) -> dict[Key, frozenset[str]]: ...

    def candidates(self, key: Key) -> list[tuple[str, str]]:
        """(subnet, zone id) an operator may give ``key``."""
        ...

    def operator_set(self, key: Key, subnets: tuple[str, ...]) -> None: ...

    def groups(self) -> dict[Key, frozenset[str]]:
        """Security groups of the resources that have them."""
        ...

    def operator_groups(self, key: Key, index: int) -> frozenset[str] | None:
        """Give ``key`` the ``index``-th security group set; what it now has (None:
        the resource has no security groups)."""
        ...

    def in_window(self, change: Callable[[], None]) -> bool:
        """Run ``change`` once, between the provider's next read and its write, if it can
        (only ever asked while one operation runs)."""
        ...

    #: True if an operator's write and the provider's cannot interleave (a fake): then
    #: operators also change resources while two operations run.
    atomic_writes: bool


# A change an operator makes: which resource, which candidate subnet, or which groups.
Change = tuple[int, int, int]
changes = st.tuples(st.integers(0, 50), st.integers(0, 50), st.integers(-1, 1))


class EvacuationMachine(RuleBasedStateMachine):
    backend: Backend  # set by make_machine

    def __init__(self) -> None:
        super().__init__()
        self.backend.reset()
        self.expected = dict(self.backend.subnets())
        self.groups = dict(self.backend.groups())
        self.keys = sorted(self.expected)
        self.lock = threading.Lock()

    # ---------------------------------------------------------------- helpers

    def _busy_zones(self) -> set[str]:
        return {r.zone_id for r in self.backend.ledger().records()}

    def _operator(self, change: Change, also_busy: set[str] = frozenset()) -> None:  # type: ignore[assignment]
        """Apply one operator change, if it is one an operator would make now."""
        which, pick, groups = change
        key = self.keys[which % len(self.keys)]
        with self.lock:
            if groups >= 0:
                now = self.backend.operator_groups(key, groups)
                if now is not None:
                    self.groups[key] = now
                return
            busy = self._busy_zones() | also_busy
            options = [(s, z) for s, z in self.backend.candidates(key) if z not in busy]
            if not options:
                return
            subnet, _ = options[pick % len(options)]
            current = self.backend.subnets()[key]
            if subnet in current:
                if len(current) == 1:
                    return  # never none: services refuse it
                after = tuple(s for s in sorted(current) if s != subnet)
                self.expected[key] = self.expected[key] - {subnet}
            else:
                after = (*sorted(current), subnet)
                self.expected[key] = self.expected[key] | {subnet}
            self.backend.operator_set(key, after)

    def _interfere(
        self, change: Change | None, at: int, busy: set[str], window: bool
    ) -> Callable[[Progress], None]:
        """A hook making ``change`` when the ``at``-th step starts (``window``: inside
        the provider's read-write window instead, when it has one)."""
        seen = [0]

        def hook(p: Progress) -> None:
            if change is None or p.event != "start":
                return
            seen[0] += 1
            if seen[0] != at:
                return
            if not (window and self.backend.in_window(lambda: self._operator(change, busy))):
                self._operator(change, busy)

        return hook

    def _run(
        self,
        operation: str,
        zone: str | None,
        change: Change | None,
        at: int,
        *,
        slot: int = 0,
        busy: set[str] = frozenset(),  # type: ignore[assignment]
    ) -> Outcome:
        window = slot == 0 and not busy  # one operation at a time: the window is safe
        hook = self._interfere(change, at, {*busy, *([zone] if zone else [])}, window)
        engine = self.backend.engine([hook], slot)
        options = Options(batch_size=1, operator="prop", lease_wait=30)
        if operation == "evacuate":
            assert zone is not None
            return engine.evacuate(zone, options)
        return engine.recover(zone, options)

    @staticmethod
    def _check(outcome: Outcome) -> None:
        assert outcome.exit_code in (EXIT_OK, EXIT_REFUSED), (outcome.failed, outcome.aborted)

    # ---------------------------------------------------------------- rules

    @rule(zone=st.integers(0, 5), change=st.none() | changes, at=st.integers(1, 4))
    def evacuate(self, zone: int, change: Change | None, at: int) -> None:
        zone_id = self.backend.zones[zone % len(self.backend.zones)]
        self._check(self._run("evacuate", zone_id, change, at))

    @rule(zone=st.none() | st.integers(0, 5), change=st.none() | changes, at=st.integers(1, 4))
    def recover(self, zone: int | None, change: Change | None, at: int) -> None:
        zone_id = None if zone is None else self.backend.zones[zone % len(self.backend.zones)]
        self._check(self._run("recover", zone_id, change, at))

    @rule(change=changes)
    def operator(self, change: Change) -> None:
        self._operator(change)

    @rule(
        first=st.integers(0, 5),
        second=st.integers(0, 5),
        recover_second=st.booleans(),
        change=st.none() | changes,
    )
    def two_at_once(
        self, first: int, second: int, recover_second: bool, change: Change | None
    ) -> None:
        zones = self.backend.zones
        a, b = zones[first % len(zones)], zones[second % len(zones)]
        if a == b:
            b = zones[(first + 1) % len(zones)]
        outcomes: list[Any] = []
        started = threading.Barrier(2, timeout=60)

        if not self.backend.atomic_writes:
            change = None  # a real service's write is not conditional: see the module doc

        def run(operation: str, zone: str, change: Change | None, slot: int) -> None:
            started.wait()
            try:
                outcomes.append(self._run(operation, zone, change, 2, slot=slot, busy={a, b}))
            except BaseException as exc:  # reported below, in the test's thread
                outcomes.append(exc)

        threads = [
            threading.Thread(target=run, args=("evacuate", a, change, 0)),
            threading.Thread(
                target=run, args=("recover" if recover_second else "evacuate", b, None, 1)
            ),
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert len(outcomes) == 2
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome
            self._check(outcome)

    # ---------------------------------------------------------------- invariants

    @invariant()
    def each_resource_is_what_the_ledger_says(self) -> None:
        removed: dict[Key, set[str]] = {}
        for row in self.backend.ledger().records():
            removed.setdefault((row.kind, row.resource), set()).update(row.removed)
        now = self.backend.subnets()
        for key in self.keys:
            assert now[key] == self.expected[key] - removed.get(key, set()), (key, removed)
        assert self.backend.groups() == self.groups

    def teardown(self) -> None:
        outcome = self.backend.engine([]).recover(None, Options(operator="prop"))
        assert outcome.exit_code == EXIT_OK, outcome
        assert self.backend.subnets() == self.expected
        assert self.backend.groups() == self.groups
        assert self.backend.ledger().records() == []


def make_machine(backend: Backend) -> type[EvacuationMachine]:
    return type("Machine", (EvacuationMachine,), {"backend": backend})
