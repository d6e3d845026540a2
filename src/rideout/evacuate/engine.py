"""The engine: carries evacuation and recovery plans out through a provider and a ledger.

Evacuating a zone id: take the zone's lock in the ledger (a conditional write: one
evacuation or recovery of a zone at a time), plan (:func:`~rideout.evacuate.model.plan_evacuation`),
then for each resource, in batches of ``batch_size`` with ``pause`` seconds between them:
record the intent (``Ledger.merge``: the subnets about to be removed) **before** the
update, then update. A crash between the two leaves a record of a removal that did not
happen, which a re-run completes and a recovery finds nothing to merge back for: the
ledger is never short of what was removed. An update that fails is checked with
``describe``: if the subnets are all still there and the row was new, the intent is
deleted again.

Recovering (one zone, or every zone in the ledger): lock the zones, describe each
recorded resource, merge the recorded subnets back, update, and delete the record only
**after** the update succeeded. A crash in between leaves a record whose subnets are all
back, which a re-run deletes.

Either way the :class:`Outcome` says what changed, what was skipped and why, what failed,
and how to resume (the same command again: both operations are idempotent). Hooks (plain
callables taking a :class:`Progress`, as stamina's and urllib3's instrumentation are)
see every step as it happens. Synchronous, as boto3 is; the control plane runs it in a
thread.
"""

from __future__ import annotations

import contextlib
import getpass
import os
import socket
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from rideout import _validate
from rideout.errors import InvalidArgument
from rideout.evacuate.errors import LedgerError, ProviderError
from rideout.evacuate.model import (
    SKIP_NO_SUBNET_LEFT,
    Ledger,
    Placement,
    Plan,
    Provider,
    Record,
    Step,
    plan_evacuation,
    plan_recovery,
)

__all__ = [
    "EXIT_OK",
    "EXIT_PARTIAL",
    "EXIT_REFUSED",
    "Engine",
    "Failure",
    "Hook",
    "Options",
    "Outcome",
    "Progress",
]

EXIT_OK = 0  # everything planned was done (skips with a reason included)
EXIT_PARTIAL = 1  # some resources failed: the ledger matches what happened; run it again
EXIT_REFUSED = 2  # nothing done: the zone is locked, unknown, or every change was unsafe

Event = Literal["planned", "start", "done", "failed", "skipped", "pause"]


def _operator() -> str:
    try:
        return getpass.getuser()
    except (OSError, KeyError):
        return f"uid-{os.getuid()}"


@dataclass(frozen=True, slots=True)
class Options:
    """How an evacuation or recovery runs (the CLI's flags)."""

    kinds: tuple[str, ...] | None = None  # None: every kind the provider has
    dry_run: bool = False
    batch_size: int = 10
    pause: float = 0.0  # seconds between batches
    min_healthy_zones: int = 1
    operator: str = field(default_factory=_operator)
    lock_ttl: float = 300.0  # seconds; renewed before every batch

    def __post_init__(self) -> None:
        if self.kinds is not None:
            object.__setattr__(self, "kinds", tuple(_validate.text("kinds", k) for k in self.kinds))
        _validate.count("batch_size", self.batch_size, low=1)
        _validate.seconds("pause", self.pause, zero_ok=True)
        _validate.count("min_healthy_zones", self.min_healthy_zones, low=1)
        _validate.text("operator", self.operator)
        _validate.seconds("lock_ttl", self.lock_ttl)


@dataclass(frozen=True, slots=True)
class Progress:
    """What a hook sees: the event, the step it is about (None for a pause), a message,
    and how many of the plan's actions have been carried out of how many."""

    event: Event
    step: Step | None
    message: str
    done: int
    total: int


Hook = Callable[[Progress], None]


@dataclass(frozen=True, slots=True)
class Failure:
    step: Step
    error: str


@dataclass(frozen=True, slots=True)
class Outcome:
    """The summary of one run."""

    plan: Plan
    dry_run: bool = False
    changed: tuple[Step, ...] = ()
    skipped: tuple[Step, ...] = ()
    failed: tuple[Failure, ...] = ()
    refused: str | None = None  # why nothing was done
    aborted: str | None = None  # why the run stopped before its end (the ledger failed)

    @property
    def exit_code(self) -> int:
        if self.refused is not None:
            return EXIT_REFUSED
        if self.failed or self.aborted is not None:
            return EXIT_PARTIAL
        return EXIT_OK

    @property
    def resume(self) -> str | None:
        """How to finish after a partial failure (None when nothing is left to do)."""
        if self.exit_code != EXIT_PARTIAL:
            return None
        verb = "evacuation" if self.plan.operation == "evacuate" else "recovery"
        return (
            f"fix the cause and run the same command again: the {verb} is idempotent, the "
            "ledger records exactly what was changed, and resources already done are skipped"
        )


class Engine:
    """Evacuates and recovers zones of one provider, recording in one ledger."""

    def __init__(
        self,
        provider: Provider,
        ledger: Ledger,
        *,
        hooks: Sequence[Hook] = (),
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
        owner: str | None = None,
    ) -> None:
        self.provider = provider
        self.ledger = ledger
        self.hooks = list(hooks)
        self._clock = clock
        self._sleep = sleep
        self.owner = owner or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"

    # ------------------------------------------------------------------ helpers

    def _emit(self, event: Event, step: Step | None, message: str, done: int, total: int) -> None:
        for hook in self.hooks:
            hook(Progress(event, step, message, done, total))

    def _kinds(self, options: Options) -> tuple[str, ...]:
        known = self.provider.kinds()
        if options.kinds is None:
            return known
        unknown = [k for k in options.kinds if k not in known]
        if unknown:
            raise InvalidArgument(
                f"the {self.provider.name} provider has no resource type {', '.join(unknown)} "
                f"(it has {', '.join(known)})"
            )
        return options.kinds

    def _lock(self, zones: Iterable[str], options: Options) -> str | None:
        """Take every zone's lock (all or none); why not, or None."""
        taken: list[str] = []
        for zone in sorted(set(zones)):
            if not self.ledger.lock(zone, self.owner, options.lock_ttl):
                for held in taken:
                    self.ledger.unlock(held, self.owner)
                return (
                    f"zone {zone} is being evacuated or recovered by another run (its lock "
                    f"in the ledger expires within {options.lock_ttl:g} s of that run's "
                    "last batch)"
                )
            taken.append(zone)
        return None

    def _unlock(self, zones: Iterable[str]) -> None:
        for zone in sorted(set(zones)):
            with contextlib.suppress(LedgerError):  # it expires on its own
                self.ledger.unlock(zone, self.owner)

    def _batches(
        self, steps: Sequence[Step], zones: Iterable[str], options: Options
    ) -> Iterable[Sequence[Step]]:
        """The steps in batches, pausing between them and renewing the locks."""
        size = options.batch_size
        for start in range(0, len(steps), size):
            if start:
                if options.pause:
                    self._emit("pause", None, f"pausing {options.pause:g} s", start, len(steps))
                    self._sleep(options.pause)
                for zone in sorted(set(zones)):
                    self.ledger.lock(zone, self.owner, options.lock_ttl)
            yield steps[start : start + size]

    # ------------------------------------------------------------------ evacuation

    def plan_evacuation(
        self, zone_id: str, options: Options | None = None, recorded: Sequence[Record] | None = None
    ) -> Plan:
        """What evacuating ``zone_id`` would do, without doing it (``recorded``: the
        ledger's rows for the zone, if the caller has read them)."""
        options = options or Options()
        zone_id = _validate.text("zone_id", zone_id)
        if recorded is None:
            recorded = self.ledger.records(zone_id=zone_id)
        subnets = self.provider.subnets_in_zone(zone_id)
        placements: list[Placement] = []
        for kind in self._kinds(options):
            placements.extend(self.provider.placements(kind))
        used = {s for p in placements for s in p.subnets}
        return plan_evacuation(
            placements,
            subnets,
            zone_id=zone_id,
            zone_of=self.provider.zones_of(used),
            min_healthy_zones=options.min_healthy_zones,
            recorded=recorded,
            kind_order=self.provider.kinds(),
        )

    def evacuate(self, zone_id: str, options: Options | None = None) -> Outcome:
        """Evacuate ``zone_id`` (see the module docstring)."""
        options = options or Options()
        zone_id = _validate.text("zone_id", zone_id)
        if not self.provider.subnets_in_zone(zone_id):
            return Outcome(
                Plan("evacuate", zone_id),
                options.dry_run,
                refused=f"the {self.provider.name} provider has nothing in zone {zone_id} "
                "(is it a zone id such as use1-az2, not a zone name?)",
            )
        if options.dry_run:
            plan = self.plan_evacuation(zone_id, options)
            return Outcome(plan, True, skipped=plan.skipped, refused=_unsafe(plan))
        refusal = self._lock([zone_id], options)
        if refusal is not None:
            return Outcome(Plan("evacuate", zone_id), refused=refusal)
        try:
            plan = self.plan_evacuation(zone_id, options)
            refused = _unsafe(plan)
            if refused is not None:
                return Outcome(plan, skipped=plan.skipped, refused=refused)
            return self._carry_out(plan, options, self._remove, [zone_id])
        finally:
            self._unlock([zone_id])

    def _remove(self, step: Step, options: Options) -> None:
        prior = [
            r for r in self.ledger.records(zone_id=step.zone_id) if r.resource == step.resource
        ]
        self.ledger.merge(
            Record(
                step.zone_id,
                step.resource,
                step.kind,
                step.changed,
                self._clock(),
                options.operator,
            )
        )
        try:
            self.provider.update(step.kind, step.resource, step.after)
        except ProviderError:
            self._forget_intent(step, had_row=bool(prior))
            raise

    def _forget_intent(self, step: Step, *, had_row: bool) -> None:
        """After a failed update: delete the new intent row if nothing was removed."""
        if had_row:
            return  # the union is still true of what earlier runs removed
        try:
            now = self.provider.describe(step.kind, step.resource)
        except ProviderError:
            return  # unknown: keep the row (a recovery merging back what is there is a no-op)
        if now is not None and set(step.changed) <= set(now.subnets):
            self.ledger.delete(step.zone_id, step.resource)

    # ------------------------------------------------------------------ recovery

    def _recorded(self, zone_id: str | None, options: Options) -> list[Record]:
        kinds = self._kinds(options) if options.kinds is not None else (None,)
        rows: list[Record] = []
        for kind in kinds:
            rows.extend(self.ledger.records(kind=kind, zone_id=zone_id))
        return rows

    def plan_recovery(
        self, zone_id: str | None = None, options: Options | None = None
    ) -> tuple[Plan, tuple[Failure, ...]]:
        """What recovering would do, and the records whose resource could not be described."""
        options = options or Options()
        records = self._recorded(zone_id, options)
        current: dict[tuple[str, str], Placement | None] = {}
        failures: list[Failure] = []
        described = []
        for r in records:
            key = (r.kind, r.resource)
            try:
                if key not in current:
                    current[key] = self.provider.describe(r.kind, r.resource)
                described.append(r)
            except ProviderError as exc:
                step = Step(r.zone_id, r.kind, r.resource, "skip", (), (), r.removed, "")
                failures.append(Failure(step, str(exc)))
        plan = plan_recovery(described, current, zone_id=zone_id, kind_order=self.provider.kinds())
        return plan, tuple(failures)

    def recover(self, zone_id: str | None = None, options: Options | None = None) -> Outcome:
        """Merge back what the ledger records for ``zone_id`` (None: every zone)."""
        options = options or Options()
        if zone_id is not None:
            zone_id = _validate.text("zone_id", zone_id)
        if options.dry_run:
            plan, failures = self.plan_recovery(zone_id, options)
            return Outcome(plan, True, skipped=plan.skipped, failed=failures)
        zones = (
            [zone_id] if zone_id is not None else [r.zone_id for r in self._recorded(None, options)]
        )
        refusal = self._lock(zones, options)
        if refusal is not None:
            return Outcome(Plan("recover", zone_id), refused=refusal)
        try:
            plan, failures = self.plan_recovery(zone_id, options)
            return self._carry_out(plan, options, self._restore, zones, failures)
        finally:
            self._unlock(zones)

    def _restore(self, step: Step, options: Options) -> None:
        if step.updates:
            self.provider.update(step.kind, step.resource, step.after)
        self.ledger.delete(step.zone_id, step.resource)

    # ------------------------------------------------------------------ both

    def _carry_out(
        self,
        plan: Plan,
        options: Options,
        action: Callable[[Step, Options], None],
        zones: Sequence[str],
        failures: Sequence[Failure] = (),
    ) -> Outcome:
        steps = plan.actions
        total = len(steps)
        self._emit("planned", None, f"{total} to change, {len(plan.skipped)} skipped", 0, total)
        for step in plan.skipped:
            self._emit("skipped", step, step.reason, 0, total)
        changed: list[Step] = []
        failed = list(failures)
        done = 0
        try:
            for batch in self._batches(steps, zones, options):
                for step in batch:
                    self._emit("start", step, f"{step.kind} {step.resource}", done, total)
                    try:
                        action(step, options)
                    except ProviderError as exc:
                        failed.append(Failure(step, str(exc)))
                        done += 1
                        self._emit("failed", step, str(exc), done, total)
                        continue
                    changed.append(step)
                    done += 1
                    self._emit("done", step, step.reason or "done", done, total)
        except LedgerError as exc:
            return Outcome(plan, False, tuple(changed), plan.skipped, tuple(failed),
                           aborted=f"stopped: {exc}")  # fmt: skip
        return Outcome(plan, False, tuple(changed), plan.skipped, tuple(failed))


def _unsafe(plan: Plan) -> str | None:
    """Why an evacuation plan is refused as a whole: every resource in the zone would be
    left unsafe (a re-run over resources already evacuated is not refused)."""
    unsafe = [s for s in plan.skipped if s.changed]
    if plan.actions or not unsafe or len(unsafe) < len(plan.skipped):
        return None
    reasons = sorted({s.reason for s in unsafe})
    if reasons == [SKIP_NO_SUBNET_LEFT]:
        return (
            f"evacuating {plan.zone_id} would leave {len(unsafe)} resource(s) no subnet or "
            "zone: nothing was changed"
        )
    return f"evacuating {plan.zone_id} is unsafe for every resource ({'; '.join(reasons)})"
