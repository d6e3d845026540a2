"""Zone evacuation's contract: placements, ledger records, plans, and the two protocols
every provider and ledger implements. Pure: no I/O, no clock.

The shape (seed 003, the whitepaper's control-plane-controlled evacuation):

- A :class:`Provider` lists the resources of each kind it knows (``placements``), each
  as a :class:`Placement`: the subnets it uses now (for kinds placed by zone rather than
  by subnet, such as the local deployment or EKS node groups, the zone ids themselves).
  ``subnets_in_zone(zone_id)`` maps an AZ *id* (``use1-az2``, stable across accounts) to
  the provider's subnets in that zone; ``zones_of(subnets)`` maps subnets back to zone
  ids (for the min-healthy-zones check); ``zone_ids()`` lists the zones it knows.
  ``update(kind, resource, subnets, expected=...)`` reads the resource right before
  writing, raises :class:`~rideout.evacuate.errors.ResourceChanged` (writing nothing) if
  its subnets are not ``expected`` (conditionally, where the service allows it),
  replaces the subnets keeping everything else of its network configuration (security
  groups, public IP), and returns the resource as read after the write. Providers raise
  :class:`~rideout.evacuate.errors.ProviderError` for anything their dependency refuses;
  the engine counts that resource as failed and goes on.
- A :class:`Ledger` stores one :class:`Record` per (zone id, resource): partition key
  zone id, sort key resource ARN or name, the removed subnets as a list, the kind (a
  secondary index), the subnets and the rest of the network configuration (``seen``:
  security groups, public IP) seen before the first change, time, operator and outcome.
  ``merge`` unions the removed subnets with an existing row's (never overwrites them,
  never empties a row); ``put`` writes a row as given (the engine restores a row with it
  when an intent did not happen); ``lock`` is a conditional write (true if ``owner`` now
  holds the zone's lock, which expires after ``ttl`` seconds; the same owner may renew
  it); ``lease`` is the same for one resource: one writer per resource at a time.
- :func:`plan_evacuation` and :func:`plan_recovery` decide, per resource, what to remove
  or merge back, or why to skip it. The engine (:mod:`rideout.evacuate.engine`) carries a
  plan out, each resource under its lease and re-planned from a fresh read: intent
  recorded in the ledger *before* an evacuation's update, the records deleted only
  *after* a recovery's update was confirmed, so a crash anywhere leaves a ledger that a
  re-run of the same command reconciles (both operations are idempotent).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

from rideout import _validate
from rideout.errors import InvalidArgument, InvalidArgumentType
from rideout.evacuate.errors import ResourceChanged

__all__ = [
    "OUTCOME_PENDING",
    "OUTCOME_REMOVED",
    "SKIP_ALREADY_EVACUATED",
    "SKIP_ALREADY_RECOVERED",
    "SKIP_GONE",
    "SKIP_NO_SUBNET_LEFT",
    "Action",
    "Ledger",
    "Network",
    "Placement",
    "Plan",
    "Provider",
    "Record",
    "Step",
    "Subnets",
    "merge_records",
    "network",
    "plan_evacuation",
    "plan_recovery",
    "recovery_step",
    "recovery_target",
    "require_unchanged",
    "same_subnets",
    "too_few_zones",
]

Action = Literal["remove", "restore", "skip"]
Subnets = tuple[str, ...]  # a resource's subnets (or zone ids, for kinds placed by zone)
# The rest of a resource's network configuration as read, besides its subnets (security
# groups, public IP), by field name in the service's own spelling: every update keeps it,
# and the ledger records what it was right before the first change (for audit).
Network = tuple[tuple[str, tuple[str, ...]], ...]

SKIP_NO_SUBNET_LEFT = "would leave no subnet"
SKIP_ALREADY_EVACUATED = "already evacuated"
SKIP_ALREADY_RECOVERED = "already recovered"
SKIP_GONE = "resource not found (record kept)"

OUTCOME_PENDING = "pending"  # intent recorded; the update not (yet) confirmed
OUTCOME_REMOVED = "removed"  # the update was confirmed by reading the resource again


def too_few_zones(minimum: int, left: int) -> str:
    """The skip reason when removing a zone would leave fewer healthy zones than asked."""
    return f"fewer than {minimum} healthy zones left ({left})"


def _names(name: str, value: object) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, tuple | list | frozenset | set):
        raise InvalidArgumentType(f"{name} must be a tuple of strings, not {value!r}")
    return tuple(_validate.text(name, v) for v in value)


def network(fields: Mapping[str, object]) -> Network:
    """``fields`` (a service's names: a list of strings, or one string) as a
    :data:`Network`: sorted by name, each value a tuple; empty values left out."""
    if not isinstance(fields, Mapping):
        raise InvalidArgumentType(f"a network configuration must be a mapping, not {fields!r}")
    out: list[tuple[str, tuple[str, ...]]] = []
    for name in sorted(fields):
        value = fields[name]
        values = (value,) if isinstance(value, str) else value
        found = _names(_validate.text("network field", name), values)
        if found:
            out.append((name, found))
    return tuple(out)


def _network(name: str, value: object) -> Network:
    if not isinstance(value, tuple) or not all(
        isinstance(pair, tuple) and len(pair) == 2 for pair in value
    ):
        raise InvalidArgumentType(f"{name} must be a tuple of (field, values) pairs, not {value!r}")
    return network(dict(value))


def _union(*groups: Iterable[str]) -> tuple[str, ...]:
    """All of them, in order, each once: the first group's order, then the next's new ones."""
    return tuple(dict.fromkeys(s for group in groups for s in group))


def same_subnets(first: Iterable[str], second: Iterable[str]) -> bool:
    """True if both name the same subnets (services may report them in any order)."""
    return frozenset(first) == frozenset(second)


def require_unchanged(
    kind: str, resource: str, now: tuple[str, ...], expected: tuple[str, ...] | None
) -> None:
    """What a provider calls with the subnets it read right before writing: raises
    :class:`ResourceChanged` unless they are ``expected`` (None: no condition)."""
    if expected is not None and not same_subnets(now, expected):
        raise ResourceChanged(
            f"{kind} {resource} changed since it was read: it has {', '.join(now) or 'none'},"
            f" not {', '.join(expected) or 'none'}",
            now=now,
        )


@dataclass(frozen=True, slots=True)
class Placement:
    """One resource as its provider describes it now."""

    kind: str  # "asg" | "ecs" | "lambda" | "eks" | "local" ...
    resource: str  # ARN or name: the ledger's sort key
    subnets: tuple[str, ...]  # subnets (or zone ids, for kinds placed by zone) in use now
    network: Network = ()  # the rest of its network configuration (security groups ...)

    def __post_init__(self) -> None:
        _validate.text("kind", self.kind)
        _validate.text("resource", self.resource)
        object.__setattr__(self, "subnets", _names("subnets", self.subnets))
        object.__setattr__(self, "network", _network("network", self.network))


@dataclass(frozen=True, slots=True)
class Record:
    """One ledger row (the seed's schema): what was removed from a resource for a zone."""

    zone_id: str  # partition key: an AZ id such as use1-az2
    resource: str  # sort key: ARN or name
    kind: str  # secondary index
    removed: tuple[str, ...]  # the subnets removed, to merge back on recovery
    at: float  # when (seconds since the epoch) the row was last written
    operator: str  # who: a user name, or "autoshift"
    before: tuple[str, ...] = ()  # the subnets seen right before the first change
    outcome: str = ""  # OUTCOME_PENDING until the update is confirmed, then OUTCOME_REMOVED
    seen: Network = ()  # the rest of the network configuration seen with ``before``

    def __post_init__(self) -> None:
        _validate.text("zone_id", self.zone_id)
        _validate.text("resource", self.resource)
        _validate.text("kind", self.kind)
        object.__setattr__(self, "removed", _names("removed", self.removed))
        if not self.removed:
            raise InvalidArgument("removed must name at least one subnet")
        object.__setattr__(self, "at", _validate.number("at", self.at))
        _validate.text("operator", self.operator)
        object.__setattr__(self, "before", _names("before", self.before))
        if not isinstance(self.outcome, str):
            raise InvalidArgumentType(f"outcome must be a string, not {self.outcome!r}")
        object.__setattr__(self, "seen", _network("seen", self.seen))


def merge_records(existing: Record | None, new: Record) -> Record:
    """The row ``Ledger.merge`` stores: ``new``'s time, operator and outcome, the union
    of both rows' removed subnets (existing first), the configuration seen before the
    *first* change (``before`` and ``seen``). A re-run never loses what an earlier run removed or saw."""
    if existing is None:
        return new
    if (existing.zone_id, existing.resource) != (new.zone_id, new.resource):
        raise InvalidArgument("merge_records needs two rows of the same zone and resource")
    return Record(
        zone_id=new.zone_id,
        resource=new.resource,
        kind=existing.kind,
        removed=_union(existing.removed, new.removed),
        at=max(existing.at, new.at),
        operator=new.operator,
        before=existing.before or new.before,
        outcome=new.outcome,
        seen=existing.seen if existing.before else new.seen,
    )


class Provider(Protocol):
    """Lists, describes and updates the resources of some kinds (see the module doc)."""

    name: str

    def kinds(self) -> tuple[str, ...]: ...

    def zone_ids(self) -> frozenset[str]:
        """Every zone id the provider knows (to name them when refusing an unknown one)."""
        ...

    def subnets_in_zone(self, zone_id: str) -> frozenset[str]: ...

    def zones_of(self, subnets: Iterable[str]) -> Mapping[str, str]:
        """subnet -> zone id, for the subnets the provider knows (others are left out)."""
        ...

    def placements(self, kind: str) -> Iterable[Placement]: ...

    def describe(self, kind: str, resource: str) -> Placement | None:
        """The resource now, or None if it no longer exists."""
        ...

    def update(
        self, kind: str, resource: str, subnets: Subnets, *, expected: Subnets | None = None
    ) -> Placement | None:
        """Give ``resource`` exactly ``subnets``, if it has ``expected`` right before the
        write (else :class:`~rideout.evacuate.errors.ResourceChanged`, nothing written;
        None: unconditionally); the resource as read after the write."""
        ...


class Ledger(Protocol):
    """Where evacuations are recorded (see the module doc)."""

    def merge(self, record: Record) -> Record: ...

    def get(self, zone_id: str, resource: str) -> Record | None:
        """One row, read consistently."""
        ...

    def put(self, record: Record) -> None:
        """Write ``record`` as it is (replacing the row of its zone and resource)."""
        ...

    def records(self, *, kind: str | None = None, zone_id: str | None = None) -> list[Record]: ...

    def delete(self, zone_id: str, resource: str) -> None: ...

    def lock(self, zone_id: str, owner: str, ttl: float) -> bool: ...

    def unlock(self, zone_id: str, owner: str) -> None: ...

    def lease(self, resource: str, owner: str, ttl: float) -> bool:
        """Take (or renew) ``resource``'s lease: false if another owner holds it."""
        ...

    def release(self, resource: str, owner: str) -> None: ...


@dataclass(frozen=True, slots=True)
class Step:
    """What a plan does to one resource: ``before`` -> ``after``, ``changed`` being the
    subnets removed (evacuation) or merged back (recovery); ``reason`` says why a step
    is skipped (and, for a recovery whose subnets are already back, that only the record
    goes)."""

    zone_id: str
    kind: str
    resource: str
    action: Action
    before: tuple[str, ...]
    after: tuple[str, ...]
    changed: tuple[str, ...] = ()
    reason: str = ""

    @property
    def zone_ids(self) -> tuple[str, ...]:
        """The zones the step is about (a recovery merges every zone's rows of a
        resource into one step: their ids joined by commas in ``zone_id``)."""
        return tuple(self.zone_id.split(","))

    @property
    def updates(self) -> bool:
        """True if the resource's configuration changes."""
        return self.action != "skip" and not same_subnets(self.before, self.after)


@dataclass(frozen=True, slots=True)
class Plan:
    """An evacuation or recovery, resource by resource, in a stable order."""

    operation: Literal["evacuate", "recover"]
    zone_id: str | None  # None: a recovery of every zone in the ledger
    steps: tuple[Step, ...] = field(default=())

    @property
    def actions(self) -> tuple[Step, ...]:
        """The steps that are carried out (not skipped)."""
        return tuple(s for s in self.steps if s.action != "skip")

    @property
    def skipped(self) -> tuple[Step, ...]:
        return tuple(s for s in self.steps if s.action == "skip")


def _skip(zone_id: str, p: Placement, changed: tuple[str, ...], reason: str) -> Step:
    return Step(zone_id, p.kind, p.resource, "skip", p.subnets, p.subnets, changed, reason)


def _ranks(order: Sequence[str]) -> Callable[[str], int]:
    """A sort key: a kind's place in ``order``, kinds it does not name after them."""
    places = {kind: i for i, kind in enumerate(order)}
    return lambda kind: places.get(kind, len(places))


def plan_evacuation(
    placements: Iterable[Placement],
    zone_subnets: Iterable[str],
    *,
    zone_id: str,
    zone_of: Mapping[str, str] | None = None,
    min_healthy_zones: int = 1,
    recorded: Iterable[Record] = (),
    kind_order: Sequence[str] = (),
) -> Plan:
    """Which subnets to remove from each resource to evacuate ``zone_id``.

    ``zone_subnets`` are the zone's subnets (``Provider.subnets_in_zone``); ``zone_of``
    maps subnets to zone ids (``Provider.zones_of``; a subnet it does not map counts as
    a zone of its own); ``recorded`` are the ledger's rows for this zone. A resource is
    skipped, with the reason, when removing the zone would leave it no subnet, or fewer
    than ``min_healthy_zones`` zones; a resource with none of the zone's subnets but a
    row in the ledger is "already evacuated"; one with neither is left out. Steps come in
    ``kind_order`` (``Provider.kinds()``: traffic shifted before capacity is removed),
    kinds it does not name after, by name.
    """
    zone_id = _validate.text("zone_id", zone_id)
    minimum = _validate.count("min_healthy_zones", min_healthy_zones, low=1)
    in_zone = frozenset(zone_subnets)
    zones = dict(zone_of or {})
    done = {(r.kind, r.resource) for r in recorded if r.zone_id == zone_id}
    steps = []
    rank = _ranks(kind_order)
    for p in sorted(placements, key=lambda p: (rank(p.kind), p.kind, p.resource)):
        removed = tuple(s for s in p.subnets if s in in_zone)
        kept = tuple(s for s in p.subnets if s not in in_zone)
        if not removed:
            if (p.kind, p.resource) in done:
                steps.append(_skip(zone_id, p, (), SKIP_ALREADY_EVACUATED))
            continue
        left = len({zones.get(s, s) for s in kept})
        if not kept:
            steps.append(_skip(zone_id, p, removed, SKIP_NO_SUBNET_LEFT))
        elif left < minimum:
            steps.append(_skip(zone_id, p, removed, too_few_zones(minimum, left)))
        else:
            steps.append(Step(zone_id, p.kind, p.resource, "remove", p.subnets, kept, removed))
    return Plan("evacuate", zone_id, tuple(steps))


def recovery_target(
    now: tuple[str, ...],
    rows: Sequence[Record],
    remaining: Iterable[Record] = (),
    *,
    to_recorded: bool = False,
) -> tuple[tuple[str, ...], str]:
    """The subnets a recovery gives a resource that has ``now``, and a note.

    By default: ``now`` merged with every row's removed subnets (an operator's change
    made since the evacuation is kept). ``to_recorded``: exactly what the earliest of
    ``rows`` saw before its change, less what the resource's ``remaining`` rows (zones
    not being recovered) removed; a row that saw nothing (written before rows recorded
    it) falls back to the merge, and the note says so."""
    if to_recorded:
        first = min(rows, key=lambda r: (r.at, r.zone_id))
        if first.before:
            out = {s for r in remaining for s in r.removed}
            return tuple(s for s in first.before if s not in out), ""
        return _union(now, *(r.removed for r in rows)), "no configuration recorded: merged back"
    return _union(now, *(r.removed for r in rows)), ""


def recovery_step(
    kind: str,
    resource: str,
    rows: Sequence[Record],
    now: Placement | None,
    remaining: Iterable[Record] = (),
    *,
    to_recorded: bool = False,
) -> Step:
    """The one step that recovers ``resource`` (currently ``now``; None: gone) from all
    of ``rows`` (its rows being recovered; ``remaining``: its other rows)."""
    zones = ",".join(sorted({r.zone_id for r in rows}))
    if now is None:
        removed = _union(*(r.removed for r in rows))
        return Step(zones, kind, resource, "skip", (), (), removed, SKIP_GONE)
    after, note = recovery_target(now.subnets, rows, remaining, to_recorded=to_recorded)
    back = tuple(s for s in after if s not in now.subnets)
    if same_subnets(after, now.subnets):
        note = SKIP_ALREADY_RECOVERED + " (record deleted)"
    return Step(zones, kind, resource, "restore", now.subnets, after, back, note)


def plan_recovery(
    records: Iterable[Record],
    current: Mapping[tuple[str, str], Placement | None],
    *,
    zone_id: str | None = None,
    kind_order: Sequence[str] = (),
    to_recorded: bool = False,
) -> Plan:
    """What to give back to each recorded resource, **one step per resource**: every row
    of it (for ``zone_id``, or every zone) merged into one update
    (:func:`recovery_target`), from its subnets now (``current``, keyed by (kind,
    resource); None or missing = the resource is gone). The step's ``zone_id`` names the
    zones of the rows it merges, joined by commas (``Step.zone_ids``). Idempotent: a
    resource whose subnets are all back is a "restore" step that changes nothing (the
    engine then only deletes the records). Kinds come in the reverse of ``kind_order``:
    capacity back before traffic returns."""
    mine: dict[tuple[str, str], list[Record]] = {}
    others: dict[tuple[str, str], list[Record]] = {}
    for r in records:
        (mine if zone_id is None or r.zone_id == zone_id else others).setdefault(
            (r.kind, r.resource), []
        ).append(r)
    rank = _ranks(tuple(reversed(kind_order)))
    steps = [
        recovery_step(kind, resource, rows, current.get((kind, resource)),
                      others.get((kind, resource), ()), to_recorded=to_recorded)
        for (kind, resource), rows in sorted(mine.items(), key=lambda i: (rank(i[0][0]), *i[0]))
    ]  # fmt: skip
    return Plan("recover", zone_id, tuple(steps))
