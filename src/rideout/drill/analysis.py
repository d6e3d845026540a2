"""Pure accounting for a drill: percentiles, time buckets, recovery, lost and duplicate
bids, a phase's headline numbers and the timeline's series.

No I/O and no clock: every function takes the records a drill collected (see
:mod:`rideout.drill.records`) or the control plane's timeline and returns plain data,
so the numbers a game day reports are tested directly.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from operator import attrgetter
from typing import Any

from rideout.drill.records import (
    OUTBID,
    AckRecord,
    AttemptRecord,
    ConnectedRecord,
    DisconnectedRecord,
    DrillRecord,
    RejectedRecord,
    RestoredRecord,
    of_kind,
)
from rideout.protocol import offset_key

__all__ = [
    "HERDS",
    "BidAccounting",
    "HerdStats",
    "HoldSpan",
    "RecoveryStats",
    "StreamEntry",
    "account_bids",
    "bucket_counts",
    "compare_herds",
    "first_time",
    "herd_stats",
    "hold_spans",
    "outbid_before_write",
    "parse_stream_entry",
    "peak_in_window",
    "percentile",
    "phase_summary",
    "recovery_stats",
    "summarize",
    "timeline_series",
    "write_stats",
]

Row = Mapping[str, Any]
"""One control-plane poll of a drill's timeline: ``t``, ``alarms``, ``dns``, ``writer``."""


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q``-th percentile (0-100) by linear interpolation; None for no values."""
    if not 0 <= q <= 100:
        raise ValueError(f"q must be within [0, 100], not {q!r}")
    if not values:
        return None
    ordered = sorted(values)
    if len(ordered) == 1:
        return float(ordered[0])
    rank = (len(ordered) - 1) * q / 100
    low = math.floor(rank)
    high = math.ceil(rank)
    fraction = rank - low
    return float(ordered[low] + (ordered[high] - ordered[low]) * fraction)


def summarize(values: Sequence[float]) -> dict[str, float | int | None]:
    """count, p50, p90, p99, max (seconds), for a report."""
    return {
        "count": len(values),
        "p50": percentile(values, 50),
        "p90": percentile(values, 90),
        "p99": percentile(values, 99),
        "max": float(max(values)) if values else None,
    }


def bucket_counts(
    times: Iterable[float], start: float, end: float, width: float = 0.1
) -> list[int]:
    """How many of ``times`` fall in each ``width``-second bucket of ``[start, end)``."""
    if width <= 0:
        raise ValueError(f"width must be > 0, not {width!r}")
    if end < start:
        raise ValueError("end must not be before start")
    n = max(1, math.ceil((end - start) / width - 1e-9))
    counts = [0] * n
    for t in times:
        if start <= t < end:
            index = min(n - 1, int((t - start) / width + 1e-9))
            counts[index] += 1
    return counts


def peak_in_window(times: Iterable[float], width: float = 0.1) -> int:
    """The most of ``times`` that fall within any ``width``-second span.

    Unlike the fullest fixed bucket, this does not depend on where a burst falls
    relative to bucket edges (a burst split across two buckets counts whole).
    """
    if width <= 0:
        raise ValueError(f"width must be > 0, not {width!r}")
    ordered = sorted(times)
    peak = start = 0
    for end, t in enumerate(ordered):
        while t - ordered[start] >= width:
            start += 1
        peak = max(peak, end - start + 1)
    return peak


@dataclass(frozen=True, slots=True)
class HerdStats:
    """Reconnect attempts reaching one region after a moment (the thundering herd)."""

    total: int
    peak_per_bucket: int
    peak_per_second: float
    """``peak_per_bucket`` scaled to a rate (bucket / width)."""
    bucket: float
    series: list[int] = field(default_factory=list)
    peak_in_window: int = 0
    """The most within any ``bucket``-wide span (:func:`peak_in_window`)."""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def herd_stats(times: Iterable[float], start: float, end: float, width: float = 0.1) -> HerdStats:
    """Bucket the attempt ``times`` of ``[start, end)``: the peaks and the series."""
    inside = [t for t in times if start <= t < end]
    series = bucket_counts(inside, start, end, width)
    peak = max(series, default=0)
    return HerdStats(sum(series), peak, peak / width, width, series, peak_in_window(inside, width))


HERDS: tuple[tuple[str, str, str], ...] = (
    ("scheduled", "scheduled_", "scheduled (due)"),
    ("reconnects", "", "started"),
    ("accepted", "accepted_", "accepted by the secondary"),
)
"""The three views of a reconnect herd in a drill phase: its key in the phase, its key
prefix in a jitter comparison, and its label."""


def compare_herds(full: Mapping[str, Any], none: Mapping[str, Any]) -> dict[str, Any]:
    """Full jitter's and no jitter's failover phases, side by side: each herd's peak
    within 100 ms and no jitter's over full jitter's (None when full jitter had none)."""
    comparison: dict[str, Any] = {}
    for key, prefix, _ in HERDS:
        a, b = int(full[key]["peak_in_window"]), int(none[key]["peak_in_window"])
        comparison[f"{prefix}peak_full_jitter_per_100ms"] = a
        comparison[f"{prefix}peak_no_jitter_per_100ms"] = b
        comparison[f"{prefix}ratio"] = b / a if a else None
    return comparison


@dataclass(frozen=True, slots=True)
class RecoveryStats:
    """Per-client time from a moment (the fault) to its first state restored in the target region."""

    clients: int
    recovered: int
    seconds: list[float]

    @property
    def share(self) -> float:
        return self.recovered / self.clients if self.clients else 1.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "clients": self.clients,
            "recovered": self.recovered,
            "recovered_share": self.share,
            "time_to_restored": summarize(self.seconds),
        }

    def as_write_dict(self) -> dict[str, Any]:
        """As write RTO (:func:`write_stats`): ``time_to_write`` per client."""
        return {
            "clients": self.clients,
            "written": self.recovered,
            "written_share": self.share,
            "time_to_write": summarize(self.seconds),
        }


def _first_in(
    events: Iterable[tuple[int, float, str]], since: float, region: str, timeout: float
) -> dict[int, float]:
    """Each client's first ``(client, time, region)`` event in ``region`` after ``since``
    and within ``timeout`` seconds of it."""
    first: dict[int, float] = {}
    for client, t, where in events:
        if where != region or t < since or t - since > timeout:
            continue
        if client not in first or t < first[client]:
            first[client] = t
    return first


def recovery_stats(
    restores: Iterable[tuple[int, float, str]],
    clients: Iterable[int],
    since: float,
    region: str,
    timeout: float,
) -> RecoveryStats:
    """From ``(client, time, region)`` restores: each client's first restore in ``region``
    after ``since`` and within ``timeout`` seconds of it."""
    first = _first_in(restores, since, region, timeout)
    population = set(clients)
    seconds = sorted(first[c] - since for c in first if c in population)
    return RecoveryStats(len(population), len(seconds), seconds)


def write_stats(
    records: Iterable[DrillRecord],
    clients: Iterable[int],
    since: float,
    region: str,
    timeout: float,
) -> RecoveryStats:
    """Write RTO: each client's first *accepted* bid acknowledged from ``region`` after
    ``since`` (the fault), within ``timeout`` seconds of it. A drill client bids as
    soon as its state is restored and, each time that bid is outbid, again once it has
    seen the price that beat it (``drill.clients``), so this is when the service takes
    its writes again, plus the room races it loses on the way; not the client's own
    pacing."""
    acks = ((a.client, a.t, a.region) for a in of_kind(records, AckRecord))
    return recovery_stats(acks, clients, since, region, timeout)


def outbid_before_write(
    records: Iterable[DrillRecord],
    clients: Iterable[int],
    since: float,
    region: str,
    timeout: float,
) -> list[int]:
    """For each client with an accepted bid from ``region`` after ``since`` (within
    ``timeout`` s, as :func:`write_stats`), how many of its bids ``region`` refused as
    ``too_low`` before that first accepted one: the room races in its write RTO."""
    population = set(clients)
    records = list(records)
    acks = ((a.client, a.t, a.region) for a in of_kind(records, AckRecord))
    first = {c: t for c, t in _first_in(acks, since, region, timeout).items() if c in population}
    outbid = dict.fromkeys(first, 0)
    for r in of_kind(records, RejectedRecord):
        end = first.get(r.client)
        if end is not None and r.reason == OUTBID and r.region == region and since <= r.t < end:
            outbid[r.client] += 1
    return sorted(outbid.values())


@dataclass(frozen=True, slots=True)
class HoldSpan:
    """A stretch of the timeline in which the control plane held the writer where the
    health checks alone would have moved it (``Decision.held``), as the drill's polls
    saw it: from the first poll that showed the rule to the first that did not."""

    start: float
    end: float | None  # None: still held at the last poll
    writer: str | None
    rule: str


def hold_spans(timeline: Sequence[Row]) -> list[HoldSpan]:
    """The holds in a drill's timeline (rows with ``held``; older rows have none)."""
    spans: list[HoldSpan] = []
    current: tuple[float, str | None, str] | None = None
    for row in timeline:
        held = row.get("held")
        if current is not None and held != current[2]:
            spans.append(HoldSpan(current[0], row["t"], current[1], current[2]))
            current = None
        if held and current is None:
            current = (row["t"], row.get("writer"), str(held))
    if current is not None:
        spans.append(HoldSpan(current[0], None, current[1], current[2]))
    return spans


# ------------------------------------------------------------------------- bids


@dataclass(frozen=True, slots=True)
class StreamEntry:
    """One entry of a room's stream: who bid what."""

    id: str
    room: str
    bidder: str | None
    amount: int


def parse_stream_entry(room: str, entry_id: str, fields: Mapping[str, str]) -> StreamEntry | None:
    """A ``XRANGE`` entry (``state`` JSON with ``bid`` and ``bidder``); None if unreadable."""
    try:
        state = json.loads(fields["state"])
        amount = state["bid"]
        bidder = state.get("bidder")
    except (KeyError, ValueError, TypeError, AttributeError):
        return None
    if isinstance(amount, bool) or not isinstance(amount, int):
        return None
    return StreamEntry(entry_id, room, bidder if isinstance(bidder, str) else None, amount)


@dataclass(frozen=True, slots=True)
class BidAccounting:
    """Acknowledged bids against what the final writer holds."""

    acked: int
    found: int
    lost: list[AckRecord]
    unverifiable: int
    """Acked bids older than the first entry kept of their room (history trimmed)."""
    duplicates: list[tuple[str, str | None, int, int]]
    """``(room, bidder, amount, times)`` applied more than once."""
    entries: int

    def as_dict(self, examples: int = 20) -> dict[str, Any]:
        return {
            "acked": self.acked,
            "found": self.found,
            "lost": len(self.lost),
            "unverifiable": self.unverifiable,
            "duplicates": sum(times - 1 for *_, times in self.duplicates),
            "stream_entries": self.entries,
            "lost_examples": [
                {"room": a.room, "bidder": a.bidder, "amount": a.amount, "offset": a.offset}
                for a in self.lost[:examples]
            ],
            "duplicate_examples": [list(d) for d in self.duplicates[:examples]],
        }


def account_bids(acks: Iterable[AckRecord], entries: Iterable[StreamEntry]) -> BidAccounting:
    """Every accepted ack must be in its room's stream, once.

    An ack whose offset is older than the first entry still kept for its room cannot be
    checked (the room's history was trimmed to ``history_size``): counted apart, not lost.
    """
    applied: Counter[tuple[str, str | None, int]] = Counter()
    first: dict[str, tuple[int, int]] = {}
    count = 0
    for entry in entries:
        count += 1
        applied[(entry.room, entry.bidder, entry.amount)] += 1
        key = offset_key(entry.id)
        if entry.room not in first or key < first[entry.room]:
            first[entry.room] = key
    acked = found = unverifiable = 0
    lost: list[AckRecord] = []
    seen: set[tuple[str, str, int]] = set()
    for ack in acks:
        ident = (ack.room, ack.bidder, ack.amount)
        if ident in seen:  # the same bid acked twice (a resend answered again): one bid
            continue
        seen.add(ident)
        acked += 1
        if applied[ident] > 0:
            found += 1
            continue
        oldest = first.get(ack.room)
        if ack.offset is not None and oldest is not None and offset_key(ack.offset) < oldest:
            unverifiable += 1
            continue
        lost.append(ack)
    duplicates = sorted(
        (
            (room, bidder, amount, times)
            for (room, bidder, amount), times in applied.items()
            if times > 1
        ),
        key=lambda d: (d[0], d[1] or "", d[2]),
    )
    return BidAccounting(acked, found, lost, unverifiable, duplicates, count)


# ------------------------------------------------------------------------- a phase


def first_time(timeline: Iterable[Row], since: float, check: Callable[[Row], bool]) -> float | None:
    """When ``check`` first held in ``timeline`` at or after ``since``; None if never."""
    for row in timeline:
        if row["t"] >= since and check(row):
            return float(row["t"])
    return None


def phase_summary(
    timeline: Sequence[Row],
    records: Sequence[DrillRecord],
    clients: Iterable[int],
    since: float,
    end: float,
    lost_region: str,
    target: str,
    timeout: float,
    *,
    failback: bool = False,
) -> dict[str, Any]:
    """A failover (or failback) from ``lost_region`` to ``target`` that began at
    ``since``: when the alarm, DNS and writer moved, each client's recovery, the herds."""

    def alarm(row: Row) -> bool:
        if failback:  # detection on the way back: the restored region's alarm clears
            return bool(row["alarms"].get(target) == "OK")
        return bool(row["alarms"].get(lost_region) == "ALARM")

    detected = first_time(timeline, since, alarm)
    moved = first_time(timeline, since, lambda row: bool(row["dns"] == target))
    promoted = first_time(timeline, since, lambda row: bool(row["writer"] == target))
    population = list(clients)
    recovery = recovery_stats(of_kind(records, RestoredRecord), population, since, target, timeout)
    writes = write_stats(records, population, since, target, timeout)
    outbid = outbid_before_write(records, population, since, target, timeout)
    window = (since, max(end, since + 0.1))
    attempts = [r for r in of_kind(records, AttemptRecord) if r.region == target and r.t >= since]
    accepted = [
        r.t for r in of_kind(records, ConnectedRecord) if r.region == target and r.t >= since
    ]
    # The herd three ways: as the backoff policy scheduled it (when each attempt toward
    # the target was due), as the clients started it (later by their own process's lag),
    # and as the target absorbed it (connections it accepted). On one shared machine the
    # last two are smeared by CPU: clients and servers take turns on the same cores.
    return {
        "from": lost_region,
        "to": target,
        "at": since,
        "time_to_detect": None if detected is None else detected - since,
        "time_to_writer": None if promoted is None else promoted - since,
        "time_to_dns": None if moved is None else moved - since,
        **recovery.as_dict(),
        "write": {**writes.as_write_dict(), "outbid_before_write": summarize(outbid)},
        "scheduled": herd_stats([r.due for r in attempts], *window).as_dict(),
        "reconnects": herd_stats([r.t for r in attempts], *window).as_dict(),
        "accepted": herd_stats(accepted, *window).as_dict(),
    }


# ------------------------------------------------------------------------- the timeline


def timeline_series(
    records: Sequence[DrillRecord], regions: Sequence[str], start: float, step: float = 0.5
) -> dict[str, Any]:
    """Series every ``step`` seconds from ``start`` (or the first record, if earlier):
    clients connected to each region, acknowledged bids per second."""
    if not records:
        return {"start": start, "t": [], "connected": {}, "acks": []}
    end = max(r.t for r in records)
    start = min(start, min(r.t for r in records))
    seconds = max(1, math.ceil(end - start) + 1)
    buckets = int(seconds / step) + 1
    connected = {name: [0] * buckets for name in regions}
    acks = [0] * buckets
    where: dict[int, str | None] = {}
    kinds = (ConnectedRecord, DisconnectedRecord, AckRecord)
    events = sorted((r for r in records if isinstance(r, kinds)), key=attrgetter("t"))
    counts = dict.fromkeys(regions, 0)
    index = 0
    for b in range(buckets):
        edge = start + (b + 1) * step
        while index < len(events) and events[index].t < edge:
            r = events[index]
            index += 1
            if isinstance(r, AckRecord):
                acks[b] += 1
                continue
            old = where.get(r.client)
            if old in counts:
                counts[old] -= 1
            if isinstance(r, ConnectedRecord) and r.region in counts:
                counts[r.region] += 1
                where[r.client] = r.region
            else:
                where[r.client] = None
        for name in regions:
            connected[name][b] = counts[name]
    return {
        "start": start,
        "step": step,
        "t": [b * step for b in range(buckets)],
        "connected": connected,
        "acks_per_second": [a / step for a in acks],
    }
