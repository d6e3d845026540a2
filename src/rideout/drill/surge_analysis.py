"""The surge drill's numbers, from the visitors' records and the room's samples: pure
functions, no I/O, tested without a deployment."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

from rideout.drill.visitors import (
    ArrivedRecord,
    ClosedRecord,
    LeftRecord,
    LoadRecord,
    LostRecord,
    OpenedRecord,
    RefusedRecord,
    ServedRecord,
    VisitorRecord,
)

__all__ = [
    "COUNTERS",
    "admitted_per_period",
    "check_samples",
    "concurrency",
    "load_summary",
    "outcomes",
    "surge_series",
]

COUNTERS = ("queue", "tokens", "expired", "abandoned")
"""The counters that only ever grow (a reset aside): one that moves back lost something."""


def _of(records: Iterable[VisitorRecord], kind: type[Any]) -> list[Any]:
    return [r for r in records if isinstance(r, kind)]


def concurrency(records: Sequence[VisitorRecord]) -> tuple[int, float | None]:
    """The most ``/ws`` sessions open at once, and when (from opens and closes)."""
    edges = sorted(
        [(r.t, 1) for r in _of(records, OpenedRecord)]
        + [(r.t, -1) for r in _of(records, ClosedRecord)],
        key=lambda e: (e[0], e[1]),  # a close at the same instant counts first
    )
    best, at, now = 0, None, 0
    for t, step in edges:
        now += step
        if now > best:
            best, at = now, t
    return best, at


def outcomes(records: Sequence[VisitorRecord], visitors: int) -> dict[str, Any]:
    """Per-visitor tallies: arrivals, served, sessions, refusals, how each visit ended."""
    arrived = {r.visitor: r for r in _of(records, ArrivedRecord)}
    served = {r.visitor for r in _of(records, ServedRecord)}
    opened = {r.visitor for r in _of(records, OpenedRecord)}
    refused = _of(records, RefusedRecord)
    left = {r.visitor: r.how for r in _of(records, LeftRecord)}
    numbers = Counter(r.queue_number for r in arrived.values())
    return {
        "visitors": visitors,
        "arrived": len(arrived),
        "distinct_positions": len(numbers),
        "shared_positions": sum(1 for n in numbers.values() if n > 1),
        "served": len(served),
        "sessions_opened": len(opened),
        "served_without_session": len(served - opened),
        "refused": len({r.visitor for r in refused}),
        "refused_statuses": dict(Counter(str(r.status) for r in refused)),
        "reconnected": sum(1 for r in _of(records, ClosedRecord) if r.dropped),
        "left": dict(Counter(left.values())),
        "unfinished": visitors - len(left),
        "lost": [
            {"visitor": r.visitor, "request_id": r.request_id, "detail": r.detail}
            for r in _of(records, LostRecord)
        ],
    }


def admitted_per_period(
    history: Sequence[tuple[float, int]], period: float, since: float = 0.0
) -> list[int]:
    """The serving counter's increase in each ``period`` (aligned on the epoch, as the
    inlets' ticks are) from the first move after ``since``: ``history`` is
    ``[(time, counter)]`` as the room records each move."""
    moves = sorted((t, c) for t, c in history if t >= since)
    if not moves or period <= 0:
        return []
    first = math.floor(moves[0][0] / period)
    previous = max([c for t, c in history if t < since] or [0])
    buckets: dict[int, int] = {}
    for t, counter in moves:
        tick = math.floor(t / period) - first
        buckets[tick] = buckets.get(tick, 0) + max(0, counter - previous)
        previous = max(previous, counter)
    return [buckets.get(i, 0) for i in range(max(buckets) + 1)]


def check_samples(samples: Sequence[dict[str, Any]], capacity: int | None) -> dict[str, Any]:
    """Every sample of the room's counters: ``queue = served + waiting + expired +
    abandoned`` (with ``waiting`` never clamped at 0), no counter ever moving back (a
    failover that lost writes would), capacity held never above ``capacity``."""
    broken: list[dict[str, Any]] = []
    backwards: list[dict[str, Any]] = []
    held_max = 0
    last: dict[str, int] = {}
    for s in samples:
        c = s["counters"]
        total = c["tokens"] + c["waiting"] + c["expired"] + c["abandoned"]
        if c["queue"] != total:
            broken.append({"t": s["t"], "queue": c["queue"], "sum": total})
        for name in COUNTERS:
            if c[name] < last.get(name, 0):
                backwards.append({"t": s["t"], "counter": name, "was": last[name], "is": c[name]})
            last[name] = max(last.get(name, 0), c[name])
        held_max = max(held_max, int(s.get("holding", 0)))
    return {
        "samples": len(samples),
        "identity_broken": broken[:20],
        "identity_holds": not broken,
        "moved_back": backwards[:20],
        "held_max": held_max,
        "held_within_capacity": capacity is None or held_max <= capacity,
    }


def load_summary(
    records: Sequence[VisitorRecord], polls: float | None, loads: float | None
) -> dict[str, Any]:
    """The polling load: requests the visitors sent by path, the counter reads the
    origin served and those that reached Redis (without the micro-cache, every poll
    would have: ``loads == polls``)."""
    sent: Counter[str] = Counter()
    answers: Counter[str] = Counter()
    for r in _of(records, LoadRecord):
        sent.update(r.requests)
        answers.update(r.answers)
    ratio = None if not polls or loads is None else loads / polls
    return {
        "requests_sent": dict(sent),
        "requests_total": sum(sent.values()),
        "answers": dict(sorted(answers.items())),
        "counter_polls_served": polls,
        "counter_reads_reaching_redis": loads,
        "reads_per_poll": ratio,
        "without_micro_cache_reads": polls,
        "reduction": None if not ratio else 1 / ratio,
    }


def surge_series(
    records: Sequence[VisitorRecord],
    samples: Sequence[dict[str, Any]],
    start: float,
    step: float = 0.5,
) -> dict[str, Any]:
    """The report's time series: arrivals and sessions opened per second, sessions open,
    and the room's counters per sample; times in seconds from ``start``."""
    end = max([r.t for r in records] + [s["t"] for s in samples] + [start])
    n = max(1, math.ceil((end - start) / step) + 1)
    arrivals = [0] * n
    served = [0] * n
    delta = [0] * n
    for r in records:
        i = min(n - 1, max(0, int((r.t - start) / step)))
        if isinstance(r, ArrivedRecord):
            arrivals[i] += 1
        elif isinstance(r, ServedRecord):
            served[i] += 1
        elif isinstance(r, OpenedRecord):
            delta[i] += 1
        elif isinstance(r, ClosedRecord):
            delta[i] -= 1
    open_now, sessions = 0, []
    for d in delta:
        open_now += d
        sessions.append(open_now)
    return {
        "start": start,
        "step": step,
        "t": [i * step for i in range(n)],
        "arrivals_per_second": [a / step for a in arrivals],
        "served_per_second": [s / step for s in served],
        "sessions": sessions,
        "samples": [
            {
                "t": s["t"] - start,
                "region": s.get("region"),
                "holding": s.get("holding"),
                **s["counters"],
            }
            for s in samples
        ],
    }
