"""Desired against actual: the pure diff that `rideout aws plan` prints and `apply` runs.

A :class:`Resource` is one AWS object as rideout compares it: its kind, a name unique
within the kind, the AWS region it lives in (``global`` for Route 53) and a flat *spec*
of the fields rideout sets. :func:`diff` compares the desired resources with the ones
found in the account and returns a :class:`Plan`: ``create`` (missing), ``update``
(present, some field differs: ``field: old -> new``) and ``delete`` (found, created by
rideout for this deployment, no longer desired). Only resources rideout owns (found by
its ``rideout:deployment`` tag) are ever deleted; an existing resource rideout did not
create but is asked to manage is adopted (compared and updated, never deleted).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

__all__ = [
    "APPLY_ORDER",
    "Action",
    "Change",
    "FieldChange",
    "Kind",
    "Plan",
    "Resource",
    "diff",
]

Kind = Literal[
    "cloudwatch-alarm",
    "route53-health-check",
    "route53-records",
    "elasticache-global-datastore",
    "elasticache-replication-group",
]
Action = Literal["create", "update", "delete"]

APPLY_ORDER: Final[tuple[Kind, ...]] = (
    "cloudwatch-alarm",  # a health check names its alarm
    "route53-health-check",  # a record names its health check
    "route53-records",  # the app domain's failover pair
    "elasticache-global-datastore",
    "elasticache-replication-group",  # the secondary joins the global datastore
)
"""Creates and updates run in this order, deletes in the reverse one."""


@dataclass(frozen=True, slots=True)
class Resource:
    """One AWS object as rideout compares it (see the module docstring)."""

    kind: Kind
    name: str
    region: str
    spec: Mapping[str, Any]
    ident: str = ""  # the provider's own id, when found (health check id, ARN, ...)
    owned: bool = True  # tagged as rideout's, for this deployment
    extra: Mapping[str, Any] = field(default_factory=dict)  # provider data (not compared)

    @property
    def key(self) -> tuple[str, str, str]:
        """Identity: a resource in another region is another resource (moving an alarm
        to another region deletes it there and creates it here)."""
        return (self.kind, self.name, self.region)


@dataclass(frozen=True, slots=True)
class FieldChange:
    """One field that apply will set: `old` is None for a create, `new` for a delete."""

    field: str
    old: Any
    new: Any


@dataclass(frozen=True, slots=True)
class Change:
    """What apply does to one resource."""

    action: Action
    kind: Kind
    name: str
    region: str
    fields: tuple[FieldChange, ...]
    desired: Resource | None = None
    actual: Resource | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "action": self.action,
            "kind": self.kind,
            "name": self.name,
            "region": self.region,
            "fields": [{"field": f.field, "old": f.old, "new": f.new} for f in self.fields],
        }


@dataclass(frozen=True, slots=True)
class Plan:
    """The changes, in the order apply makes them."""

    changes: tuple[Change, ...]

    @property
    def empty(self) -> bool:
        return not self.changes

    def counts(self) -> dict[str, int]:
        """How many of each action (``create``, ``update``, ``delete``)."""
        counts = {"create": 0, "update": 0, "delete": 0}
        for change in self.changes:
            counts[change.action] += 1
        return counts

    def to_dict(self) -> dict[str, Any]:
        return {"changes": [c.to_dict() for c in self.changes], "summary": self.counts()}


def _order(change: Change) -> tuple[int, int]:
    rank = APPLY_ORDER.index(change.kind)
    if change.action == "delete":
        return (1, len(APPLY_ORDER) - rank)
    return (0, rank)


def diff(desired: Iterable[Resource], actual: Iterable[Resource]) -> Plan:
    """The plan that turns `actual` into `desired` (pure; see the module docstring)."""
    found = {r.key: r for r in actual}
    wanted = {r.key: r for r in desired}
    changes: list[Change] = []
    for key, want in wanted.items():
        have = found.get(key)
        if have is None:
            fields = tuple(FieldChange(k, None, v) for k, v in want.spec.items())
            changes.append(Change("create", want.kind, want.name, want.region, fields, want))
            continue
        fields = tuple(
            FieldChange(k, have.spec.get(k), v)
            for k, v in want.spec.items()
            if have.spec.get(k) != v
        )
        if fields:
            changes.append(Change("update", want.kind, want.name, want.region, fields, want, have))
    for key, have in found.items():
        if key not in wanted and have.owned:
            fields = tuple(FieldChange(k, v, None) for k, v in have.spec.items())
            changes.append(Change("delete", have.kind, have.name, have.region, fields, actual=have))
    changes.sort(key=_order)
    return Plan(tuple(changes))
