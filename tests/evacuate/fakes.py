"""An in-memory provider for the engine's tests: the engine's behaviour (ledger order,
batches, locks, partial failures) does not depend on any real resource API, and the
real providers have tests of their own (local: a real deployment; aws: moto)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from rideout.evacuate.errors import ProviderError
from rideout.evacuate.model import Placement, Subnets, require_unchanged


class MemoryProvider:
    name = "memory"

    def __init__(self, zones: Mapping[str, Iterable[str]], resources: Iterable[Placement]) -> None:
        self.zones = {zone: frozenset(subnets) for zone, subnets in zones.items()}
        self.resources = {(p.kind, p.resource): p for p in resources}
        self.fail_update: set[str] = set()  # resources whose update raises
        self.fail_after_update: set[str] = set()  # ... raises after it took effect
        self.fail_describe: set[str] = set()
        self.updates: list[tuple[str, tuple[str, ...]]] = []

    def kinds(self) -> tuple[str, ...]:
        return tuple(sorted({k for k, _ in self.resources}))

    def zone_ids(self) -> frozenset[str]:
        return frozenset(self.zones)

    def subnets_in_zone(self, zone_id: str) -> frozenset[str]:
        return self.zones.get(zone_id, frozenset())

    def zones_of(self, subnets: Iterable[str]) -> dict[str, str]:
        return {s: z for z, members in self.zones.items() for s in members if s in set(subnets)}

    def placements(self, kind: str) -> list[Placement]:
        return [p for (k, _), p in sorted(self.resources.items()) if k == kind]

    def describe(self, kind: str, resource: str) -> Placement | None:
        if resource in self.fail_describe:
            raise ProviderError(f"cannot describe {resource}")
        return self.resources.get((kind, resource))

    def update(
        self, kind: str, resource: str, subnets: Subnets, *, expected: Subnets | None = None
    ) -> Placement | None:
        if resource in self.fail_update:
            raise ProviderError(f"update of {resource} refused")
        self.before_write(kind, resource)
        now = self.resources.get((kind, resource))
        if now is None:
            raise ProviderError(f"no {kind} {resource}")
        require_unchanged(kind, resource, now.subnets, expected)
        self.updates.append((resource, subnets))
        self.resources[(kind, resource)] = Placement(kind, resource, subnets)
        if resource in self.fail_after_update:
            raise ProviderError(f"update of {resource} timed out")
        self.after_write(kind, resource)
        return self.resources.get((kind, resource))

    def before_write(self, kind: str, resource: str) -> None:
        """Called between the update's read and its check (tests change it to race)."""

    def after_write(self, kind: str, resource: str) -> None:
        """Called between the write and the read that confirms it (tests change it to race)."""

    def subnets(self, kind: str, resource: str) -> tuple[str, ...]:
        return self.resources[(kind, resource)].subnets
