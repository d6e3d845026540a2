"""The engine's concurrency guarantees as properties (tests/evacuate/machine.py): on an
in-memory provider whose writes are conditional (as Lambda's are) and on the local
provider (its zones switched in memory as the control plane switches them). The same
machine runs against moto in tests/evacuate/aws/test_engine_properties_aws.py."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis.stateful import run_state_machine_as_test

from rideout.evacuate.engine import Engine, Progress
from rideout.evacuate.errors import ProviderError
from rideout.evacuate.ledger import SqliteLedger
from rideout.evacuate.local import KIND, LocalProvider, ZoneInfo
from rideout.evacuate.model import Placement, Subnets
from tests.conftest import examples
from tests.evacuate.fakes import MemoryProvider
from tests.evacuate.machine import Key, make_machine

ZONES = {"az1": ["a1", "a2"], "az2": ["b1", "b2"], "az3": ["c1", "c2"]}
RESOURCES = [
    Placement("asg", "web", ("a1", "b1", "c1")),
    Placement("asg", "pinned", ("a2",)),
    Placement("ecs", "api", ("a1", "b2")),
    Placement("lambda", "resize", ("b1", "c2")),
]
SETTINGS = settings(
    max_examples=examples(40),
    stateful_step_count=10,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


class LockedMemoryProvider(MemoryProvider):
    """Reads, checks and writes a resource atomically (a conditional write); an
    operator's write takes the same lock."""

    def __init__(self) -> None:
        super().__init__(ZONES, RESOURCES)
        self.lock = threading.RLock()
        self.window: list[Callable[[], None]] = []

    def update(
        self, kind: str, resource: str, subnets: Subnets, *, expected: Subnets | None = None
    ) -> Placement | None:
        with self.lock:
            return super().update(kind, resource, subnets, expected=expected)

    def before_write(self, kind: str, resource: str) -> None:
        while self.window:
            self.window.pop()()


class MemoryBackend:
    atomic_writes = True

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.zones = list(ZONES)
        self.files = itertools.count()

    def reset(self) -> None:
        self.provider = LockedMemoryProvider()
        self._ledger = SqliteLedger(self.tmp / f"ledger-{next(self.files)}.sqlite3")

    def ledger(self) -> SqliteLedger:
        return self._ledger

    def engine(self, hooks: list[Callable[[Progress], None]], slot: int = 0) -> Engine:
        return Engine(self.provider, self._ledger, hooks=hooks, owner=f"engine-{slot}")

    def subnets(self) -> dict[Key, frozenset[str]]:
        return {k: frozenset(p.subnets) for k, p in list(self.provider.resources.items())}

    def candidates(self, key: Key) -> list[tuple[str, str]]:
        return [(s, z) for z, subnets in ZONES.items() for s in subnets]

    def operator_set(self, key: Key, subnets: tuple[str, ...]) -> None:
        with self.provider.lock:
            self.provider.resources[key] = Placement(key[0], key[1], subnets)

    def groups(self) -> dict[Key, frozenset[str]]:
        return {}

    def operator_groups(self, key: Key, index: int) -> frozenset[str] | None:
        return None

    def in_window(self, change: Callable[[], None]) -> bool:
        self.provider.window.append(change)
        return True


class Switch:
    """The control plane's zones, in memory: it refuses a region's last serving zone."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.state = {
            "use1-az1": ("us-east-1", False),
            "use1-az2": ("us-east-1", False),
            "use1-az3": ("us-east-1", False),
            "usw2-az1": ("us-west-2", False),
            "usw2-az2": ("us-west-2", False),
        }

    def zones(self) -> list[ZoneInfo]:
        with self.lock:
            return [ZoneInfo(z, r, e) for z, (r, e) in self.state.items()]

    def set_evacuated(self, zone: str, evacuated: bool) -> None:
        with self.lock:
            region = self.state[zone][0]
            serving = [z for z, (r, e) in self.state.items() if r == region and not e]
            if evacuated and serving == [zone]:
                raise ProviderError(f"the control plane refused: {zone} is {region}'s last zone")
            self.state[zone] = (region, evacuated)


class LocalBackend(MemoryBackend):
    """The local provider: each region is a resource, its serving zones its subnets."""

    def __init__(self, tmp: Path) -> None:
        super().__init__(tmp)
        self.zones = list(Switch().state)

    def reset(self) -> None:
        self.switch = Switch()
        self.local = LocalProvider(self.switch)
        self._ledger = SqliteLedger(self.tmp / f"ledger-{next(self.files)}.sqlite3")

    def engine(self, hooks: list[Callable[[Progress], None]], slot: int = 0) -> Engine:
        return Engine(self.local, self._ledger, hooks=hooks, owner=f"engine-{slot}")

    def subnets(self) -> dict[Key, frozenset[str]]:
        return {(KIND, p.resource): frozenset(p.subnets) for p in self.local.placements(KIND)}

    def candidates(self, key: Key) -> list[tuple[str, str]]:
        return [(z, z) for z, (region, _) in self.switch.state.items() if region == key[1]]

    def operator_set(self, key: Key, subnets: tuple[str, ...]) -> None:
        with self.switch.lock:  # an operator's own POST /v1/zones/.../evacuate|recover
            for zone, (region, _) in self.switch.state.items():
                if region == key[1]:
                    self.switch.state[zone] = (region, zone not in subnets)

    def in_window(self, change: Callable[[], None]) -> bool:
        return False


def test_no_update_is_lost_in_memory(tmp_path: Path) -> None:
    run_state_machine_as_test(make_machine(MemoryBackend(tmp_path)), settings=SETTINGS)


def test_no_update_is_lost_on_the_local_provider(tmp_path: Path) -> None:
    run_state_machine_as_test(make_machine(LocalBackend(tmp_path)), settings=SETTINGS)
