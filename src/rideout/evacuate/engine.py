"""The engine: carries evacuation and recovery plans out through a provider and a ledger.

Evacuating a zone id: take the zone's lock in the ledger (a conditional write: one
evacuation or recovery of a zone at a time), plan (:func:`~rideout.evacuate.model.plan_evacuation`),
then for each resource, in batches of ``batch_size`` with ``pause`` seconds between them,
**read, check, write, at the moment of writing**, under the resource's **lease** (one
writer per resource, whichever zone or operation: two runs serialize on the resources
they share, and only on those):

1. read the resource again and re-plan it from that read (a change made since the plan,
   by an operator or another run, is planned with, never overwritten);
2. record the intent (``Ledger.merge``: the subnets about to be removed, the subnets seen,
   who, when, outcome ``pending``);
3. update, on condition that the resource still has the subnets read (the provider
   reads it right before writing; Lambda's write is conditional on its revision); if it
   changed in between, nothing was written: the intent is taken back and the resource
   re-planned (a few times at most);
4. read it after the write: the subnets written are confirmed (outcome ``removed``), or
   the difference is reported as a failure (exit 1).

An update that fails is checked with ``describe``: if the subnets are all still there the
row is put back as it was (deleted if it was new).

Recovering (one zone, or every zone in the ledger): lock the zones, plan **one step per
resource** merging all of its rows, then under the resource's lease read its rows and
the resource again, merge every row's subnets back in one conditional update, confirm it
by reading, and delete the rows only then. ``to_recorded`` gives back exactly the
configuration the earliest row saw instead of merging.

Either way the :class:`Outcome` says what changed, what was re-planned, what was skipped
and why, what failed, and how to resume (the same command again: both operations are
idempotent). Hooks (plain callables taking a :class:`Progress`, as stamina's and
urllib3's instrumentation are) see every step as it happens. Synchronous, as boto3 is;
the control plane runs it in a thread.
"""

from __future__ import annotations

import contextlib
import getpass
import os
import socket
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from rideout import _validate
from rideout.errors import InvalidArgument
from rideout.evacuate.errors import LedgerError, ProviderError, ResourceBusy, ResourceChanged
from rideout.evacuate.model import (
    OUTCOME_PENDING,
    OUTCOME_REMOVED,
    SKIP_NO_SUBNET_LEFT,
    Ledger,
    Network,
    Placement,
    Plan,
    Provider,
    Record,
    Step,
    plan_evacuation,
    plan_recovery,
    recovery_step,
    same_subnets,
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

Event = Literal["planned", "start", "done", "failed", "skipped", "replanned", "pause"]

# How often a resource is re-planned when it changes between its read and its write.
_REPLAN_ATTEMPTS = 3
# Seconds between two tries for a resource's lease held by another run.
_LEASE_POLL = 0.2
SKIP_VANISHED = "resource not found"
SKIP_LEFT_ZONE = "no longer in the zone (changed since the plan)"
SKIP_RECOVERED_ELSEWHERE = "already recovered (by another run)"


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
    lock_ttl: float = 300.0  # seconds; renewed before every batch; also each lease's
    lease_wait: float = 60.0  # seconds to wait for a resource another run is changing
    to_recorded: bool = False  # recovery: exactly the recorded configuration, not a merge

    def __post_init__(self) -> None:
        if self.kinds is not None:
            object.__setattr__(self, "kinds", tuple(_validate.text("kinds", k) for k in self.kinds))
        _validate.count("batch_size", self.batch_size, low=1)
        _validate.seconds("pause", self.pause, zero_ok=True)
        _validate.count("min_healthy_zones", self.min_healthy_zones, low=1)
        _validate.text("operator", self.operator)
        _validate.seconds("lock_ttl", self.lock_ttl)
        _validate.seconds("lease_wait", self.lease_wait, zero_ok=True)


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
    replanned: tuple[Step, ...] = ()  # steps re-planned from a fresh read, as carried out

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

    @contextlib.contextmanager
    def _lease(self, resource: str, options: Options) -> Iterator[None]:
        """Hold ``resource``'s lease (waiting up to ``lease_wait`` for another run's)."""
        deadline = self._clock() + options.lease_wait
        while not self.ledger.lease(resource, self.owner, options.lock_ttl):
            if self._clock() >= deadline:
                raise ResourceBusy(
                    f"{resource} is being changed by another run (it holds the resource's "
                    f"lease in the ledger; waited {options.lease_wait:g} s): nothing was "
                    "written to it; run the same command again once that run is done"
                )
            self._sleep(_LEASE_POLL)
        try:
            yield
        finally:
            with contextlib.suppress(LedgerError):  # it expires on its own
                self.ledger.release(resource, self.owner)

    def _refuse_zone(self, operation: Literal["evacuate", "recover"], zone_id: str) -> str:
        known = ", ".join(sorted(self.provider.zone_ids())) or "none"
        return (
            f"the {self.provider.name} provider has no zone {zone_id} (is it a zone id such "
            f"as use1-az2, not a zone name?); its zones are: {known}. Nothing to {operation}"
        )

    def _confirm(self, step: Step, after: Placement | None) -> None:
        """The resource as read after the write holds what was written, or the
        difference is reported (a ProviderError: the resource counts as failed)."""
        if after is not None and same_subnets(after.subnets, step.after):
            return
        seen = "no longer exists" if after is None else f"has {', '.join(after.subnets) or 'none'}"
        raise ProviderError(
            f"{step.kind} {step.resource} changed during the update: rideout wrote "
            f"{', '.join(step.after)}, and read back it {seen} (someone changed it "
            "meanwhile): check it, then run the same command again"
        )

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
        return self._plan_removal(placements, zone_id, subnets, options, recorded)

    def _plan_removal(
        self,
        placements: Sequence[Placement],
        zone_id: str,
        zone_subnets: frozenset[str],
        options: Options,
        recorded: Iterable[Record],
    ) -> Plan:
        used = {s for p in placements for s in p.subnets}
        return plan_evacuation(
            placements,
            zone_subnets,
            zone_id=zone_id,
            zone_of=self.provider.zones_of(used),
            min_healthy_zones=options.min_healthy_zones,
            recorded=recorded,
            kind_order=self.provider.kinds(),
        )

    def _refusal(self, plan: Plan) -> str | None:
        """Why an evacuation plan is refused as a whole (exit 2), if it is."""
        if not plan.steps:
            return (
                f"nothing uses zone {plan.zone_id}: no resource of the {self.provider.name} "
                "provider (of the types asked) has a subnet there, and the ledger has no row "
                "for it. Nothing was changed; check the zone id and --type"
            )
        return _unsafe(plan)

    def evacuate(self, zone_id: str, options: Options | None = None) -> Outcome:
        """Evacuate ``zone_id`` (see the module docstring)."""
        options = options or Options()
        zone_id = _validate.text("zone_id", zone_id)
        subnets = self.provider.subnets_in_zone(zone_id)
        if not subnets:
            unknown = self._refuse_zone("evacuate", zone_id)
            return Outcome(Plan("evacuate", zone_id), options.dry_run, refused=unknown)
        if options.dry_run:
            plan = self.plan_evacuation(zone_id, options)
            return Outcome(plan, True, skipped=plan.skipped, refused=self._refusal(plan))
        refusal = self._lock([zone_id], options)
        if refusal is not None:
            return Outcome(Plan("evacuate", zone_id), refused=refusal)
        try:
            plan = self.plan_evacuation(zone_id, options)
            refused = self._refusal(plan)
            if refused is not None:
                return Outcome(plan, skipped=plan.skipped, refused=refused)
            return self._carry_out(
                plan, options, lambda step: self._remove(step, options, subnets), [zone_id]
            )
        finally:
            self._unlock([zone_id])

    def _replan_removal(
        self, step: Step, now: Placement | None, zone_subnets: frozenset[str], options: Options,
        prior: Record | None,
    ) -> Step:  # fmt: skip
        """``step`` planned again from the resource as read now."""
        if now is None:
            return replace(step, action="skip", after=step.before, reason=SKIP_VANISHED)
        fresh = self._plan_removal(
            [now], step.zone_id, zone_subnets, options, [prior] if prior else []
        )
        if not fresh.steps:
            return replace(step, action="skip", before=now.subnets, after=now.subnets,
                           changed=(), reason=SKIP_LEFT_ZONE)  # fmt: skip
        return fresh.steps[0]

    def _intent(self, step: Step, options: Options, outcome: str, seen: Network) -> Record:
        return Record(step.zone_id, step.resource, step.kind, step.changed, self._clock(),
                      options.operator, step.before, outcome, seen)  # fmt: skip

    def _remove(self, step: Step, options: Options, zone_subnets: frozenset[str]) -> Step:
        """Read, re-plan, record, write conditionally, confirm: one resource, under its
        lease. Returns the step as carried out (a skip if the fresh read says so)."""
        with self._lease(step.resource, options):
            for _ in range(_REPLAN_ATTEMPTS):
                now = self.provider.describe(step.kind, step.resource)
                prior = self.ledger.get(step.zone_id, step.resource)
                fresh = self._replan_removal(step, now, zone_subnets, options, prior)
                if fresh.action == "skip" or now is None:
                    return fresh
                self.ledger.merge(self._intent(fresh, options, OUTCOME_PENDING, now.network))
                try:
                    after = self.provider.update(
                        fresh.kind, fresh.resource, fresh.after, expected=fresh.before
                    )
                except ResourceChanged:
                    self._put_back(fresh, prior)  # nothing was written: read it again
                    continue
                except ProviderError:
                    self._forget_intent(fresh, prior)
                    raise
                self._confirm(fresh, after)
                self.ledger.merge(self._intent(fresh, options, OUTCOME_REMOVED, now.network))
                return fresh
        raise ResourceChanged(
            f"{step.kind} {step.resource} changed between rideout's read and its write "
            f"{_REPLAN_ATTEMPTS} times in a row: nothing was written; run the same command again"
        )

    def _put_back(self, step: Step, prior: Record | None) -> None:
        """Make the resource's row what it was before ``step``'s intent."""
        if prior is None:
            self.ledger.delete(step.zone_id, step.resource)
        else:
            self.ledger.put(prior)

    def _forget_intent(self, step: Step, prior: Record | None) -> None:
        """After a failed update: put the row back if nothing was removed."""
        try:
            now = self.provider.describe(step.kind, step.resource)
        except ProviderError:
            return  # unknown: keep the row (a recovery merging back what is there is a no-op)
        if now is not None and set(step.changed) <= set(now.subnets):
            self._put_back(step, prior)

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
        """What recovering would do (one step per resource), and the resources that
        could not be described."""
        options = options or Options()
        # Recovering to the recorded configuration needs the resource's other zones' rows.
        records = self._recorded(None if options.to_recorded else zone_id, options)
        current: dict[tuple[str, str], Placement | None] = {}
        failures: list[Failure] = []
        for key in dict.fromkeys((r.kind, r.resource) for r in records):
            try:
                current[key] = self.provider.describe(*key)
            except ProviderError as exc:
                rows = [r for r in records if (r.kind, r.resource) == key]
                mine = [r for r in rows if zone_id is None or r.zone_id == zone_id]
                if mine:
                    step = recovery_step(*key, mine, None)
                    failures.append(Failure(replace(step, reason=""), str(exc)))
        described = [r for r in records if (r.kind, r.resource) in current]
        plan = plan_recovery(
            described, current, zone_id=zone_id, kind_order=self.provider.kinds(),
            to_recorded=options.to_recorded,
        )  # fmt: skip
        return plan, tuple(failures)

    def recover(self, zone_id: str | None = None, options: Options | None = None) -> Outcome:
        """Give back what the ledger records for ``zone_id`` (None: every zone)."""
        options = options or Options()
        if zone_id is not None:
            zone_id = _validate.text("zone_id", zone_id)
            if zone_id not in self.provider.zone_ids() and not self.ledger.records(zone_id=zone_id):
                unknown = self._refuse_zone("recover", zone_id)
                return Outcome(Plan("recover", zone_id), options.dry_run, refused=unknown)
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
            return self._carry_out(
                plan, options, lambda step: self._restore(step, options), zones, failures
            )
        finally:
            self._unlock(zones)

    def _restore(self, step: Step, options: Options) -> Step:
        """Read the rows and the resource, merge every row back in one conditional
        update, confirm it, then delete the rows: one resource, under its lease."""
        with self._lease(step.resource, options):
            for _ in range(_REPLAN_ATTEMPTS):
                rows = [
                    r for z in step.zone_ids if (r := self.ledger.get(z, step.resource)) is not None
                ]
                if not rows:
                    return replace(step, action="skip", reason=SKIP_RECOVERED_ELSEWHERE)
                remaining = (
                    [r for r in self.ledger.records(kind=step.kind)
                     if r.resource == step.resource and r.zone_id not in step.zone_ids]
                    if options.to_recorded else []
                )  # fmt: skip
                now = self.provider.describe(step.kind, step.resource)
                fresh = recovery_step(step.kind, step.resource, rows, now, remaining,
                                      to_recorded=options.to_recorded)  # fmt: skip
                if fresh.action == "skip":
                    return fresh
                if fresh.updates:
                    try:
                        after = self.provider.update(
                            fresh.kind, fresh.resource, fresh.after, expected=fresh.before
                        )
                    except ResourceChanged:
                        continue  # nothing was written: read it again
                    self._confirm(fresh, after)
                for r in rows:
                    self.ledger.delete(r.zone_id, r.resource)
                return fresh
        raise ResourceChanged(
            f"{step.kind} {step.resource} changed between rideout's read and its write "
            f"{_REPLAN_ATTEMPTS} times in a row: nothing was written; run the same command again"
        )

    # ------------------------------------------------------------------ both

    def _carry_out(
        self,
        plan: Plan,
        options: Options,
        action: Callable[[Step], Step],
        zones: Sequence[str],
        failures: Sequence[Failure] = (),
    ) -> Outcome:
        steps = plan.actions
        total = len(steps)
        self._emit("planned", None, f"{total} to change, {len(plan.skipped)} skipped", 0, total)
        for step in plan.skipped:
            self._emit("skipped", step, step.reason, 0, total)
        changed: list[Step] = []
        skipped = list(plan.skipped)
        replanned: list[Step] = []
        failed = list(failures)
        done = 0
        try:
            for batch in self._batches(steps, zones, options):
                for step in batch:
                    self._emit("start", step, f"{step.kind} {step.resource}", done, total)
                    try:
                        result = action(step)
                    except (ProviderError, ResourceBusy) as exc:
                        failed.append(Failure(step, str(exc)))
                        done += 1
                        self._emit("failed", step, str(exc), done, total)
                        continue
                    done += 1
                    if (result.action, result.before, result.after) != (
                        step.action, step.before, step.after,
                    ):  # fmt: skip
                        replanned.append(result)
                        self._emit("replanned", result, _replanned(step, result), done, total)
                    if result.action == "skip":
                        skipped.append(result)
                        self._emit("skipped", result, result.reason, done, total)
                        continue
                    changed.append(result)
                    self._emit("done", result, result.reason or "done", done, total)
        except LedgerError as exc:
            return Outcome(plan, False, tuple(changed), tuple(skipped), tuple(failed),
                           aborted=f"stopped: {exc}", replanned=tuple(replanned))  # fmt: skip
        return Outcome(plan, False, tuple(changed), tuple(skipped), tuple(failed),
                       replanned=tuple(replanned))  # fmt: skip


def _replanned(planned: Step, done: Step) -> str:
    def show(subnets: tuple[str, ...]) -> str:
        return ", ".join(subnets) or "none"

    return (
        f"changed since the plan (planned from {show(planned.before)}, read "
        f"{show(done.before)}): re-planned, {done.action} -> {show(done.after)}"
    )


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
