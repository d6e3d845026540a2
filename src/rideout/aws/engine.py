"""`rideout aws plan|apply|destroy`: observe the account, diff, and make the changes.

:func:`observe` reads what exists (the providers' ``observe_*``), :func:`make_plan`
diffs it against :func:`~rideout.aws.desired.desired_state`, :func:`apply_plan` makes
the plan's changes in order (stopping at the first failure: a plan run again shows what
is left), and :func:`destroy_plan` is the plan that deletes everything rideout owns for
the deployment and nothing else.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from rideout.aws import cloudwatch, elasticache, route53
from rideout.aws.desired import desired_state
from rideout.aws.errors import AwsError
from rideout.aws.plan import Change, Plan, Resource, diff
from rideout.aws.session import AwsSession
from rideout.config import Config

__all__ = ["ApplyResult", "apply_plan", "destroy_plan", "make_plan", "observe"]


def observe(session: AwsSession, config: Config) -> list[Resource]:
    """Every resource of the deployment that exists now (rideout's own, and the ones it
    would adopt)."""
    found = cloudwatch.observe_alarms(session, config)
    if config.aws.hosted_zone_id:
        checks = route53.observe_health_checks(session, config)
        found += checks
        found += route53.observe_records(session, config, checks)
    found += elasticache.observe_elasticache(session, config)
    return found


def make_plan(session: AwsSession, config: Config) -> Plan:
    """What apply would change."""
    return diff(desired_state(config), observe(session, config))


def destroy_plan(session: AwsSession, config: Config) -> Plan:
    """Deleting what rideout created for this deployment (by its tags), nothing else."""
    return diff([], observe(session, config))


@dataclass
class ApplyResult:
    """The changes made, in order; `error` is the one that stopped apply, if any."""

    done: list[Change] = field(default_factory=list)
    error: Exception | None = None


def apply_plan(
    session: AwsSession,
    config: Config,
    plan: Plan,
    *,
    on_change: Callable[[Change], None] | None = None,
    sleep: Callable[[float], None] = time.sleep,
    timeout: float = 3600.0,
) -> ApplyResult:
    """Make `plan`'s changes in order; stop at the first AwsError (in the result)."""
    result = ApplyResult()
    ids: dict[str, str] = {r.name: r.ident for r in _checks(session, config)}
    for change in plan.changes:
        try:
            if change.kind == "cloudwatch-alarm":
                cloudwatch.apply_alarm(session, config, change)
            elif change.kind == "route53-health-check":
                route53.apply_health_check(session, config, change, ids)
            elif change.kind == "route53-records":
                route53.apply_records(session, config, change, ids)
            elif change.kind == "elasticache-global-datastore":
                elasticache.apply_datastore(
                    session, config, change, ids, timeout=timeout, sleep=sleep
                )
            else:
                elasticache.apply_replication_group(
                    session, config, change, ids, timeout=timeout, sleep=sleep
                )
        except AwsError as exc:
            result.error = exc
            return result
        result.done.append(change)
        if on_change is not None:
            on_change(change)
    return result


def _checks(session: AwsSession, config: Config) -> list[Resource]:
    """The deployment's health checks (their ids, for the records that name them)."""
    if not config.aws.hosted_zone_id:
        return []
    return route53.observe_health_checks(session, config)
