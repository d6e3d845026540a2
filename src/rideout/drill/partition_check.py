"""The partition drill's checker, in the manner of Jepsen (pure: no I/O, no clock).

It judges what the clients themselves recorded against what the Redis servers hold
afterwards, not what the service says about itself:

- every **acknowledged** bid must be in the final writer's history (the missing ones
  are listed, each of them);
- no **split-brain window**: once a newer epoch exists (the control plane promoted a
  writer, or a bid was acknowledged in it), no bid may be acknowledged in an older epoch
  that was *sent* after that moment. A bid's write happened somewhere between its send
  and its ack, so an old-epoch ack of a bid sent after the fence was certainly decided by
  a writer that was no longer the writer: the old writer went on acknowledging bids the
  new one never sees. Each window is reported with its bounds (the fence, the last such
  ack) and its bids;
- the **other servers caught up**: after the heal every other Redis holds what the
  writer holds, for the drill's rooms (entries it lacks or holds in excess, per server);
- in async replication the ``lost_writes`` the control plane reported over the drill
  must count every acknowledged bid lost (fewer: a loss is silent), and may exceed that
  only by the writes the old writer may have applied without acknowledging them: bids
  whose outcome the client never learnt and the final writer does not hold, and bids
  retried across a fence (sent while the old writer was the writer, acknowledged in the
  new epoch: the old writer may have applied its copy first). The count is exact when
  there are none.

Bids whose outcome the client never learnt (a timeout, a dropped connection) are
*indeterminate*: they may or may not have been applied, so they are neither required in
the history nor counted as lost; the verdict says how many there were, and how many of
them are in the history.

A bid is known in a history by ``(room, bidder, amount)``, as
:func:`rideout.drill.analysis.account_bids` knows it: the drill's clients never bid the
same amount twice in a room.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal

__all__ = [
    "BidAttempt",
    "HistoryEntry",
    "ServerDivergence",
    "SplitBrainWindow",
    "Verdict",
    "check",
    "fence_times",
]

Outcome = Literal["acknowledged", "refused", "indeterminate"]
BidKey = tuple[str, str, int]  # (room, bidder, amount)


@dataclass(frozen=True, slots=True)
class BidAttempt:
    """One bid as its client saw it (times on the clients' wall clock, seconds).

    ``accepted`` True: acknowledged (``region``, ``epoch`` and ``offset`` from the ack);
    False: refused by a decision of the server (``reason``: ``too_low``...); None: the
    outcome was never learnt (``reason``: the error, ``acked`` None)."""

    client: str
    room: str
    bidder: str
    amount: int
    sent: float
    acked: float | None
    accepted: bool | None
    reason: str | None = None
    region: str | None = None
    epoch: int | None = None
    offset: str | None = None

    @property
    def outcome(self) -> Outcome:
        if self.accepted is True:
            return "acknowledged"
        if self.accepted is False:
            return "refused"
        return "indeterminate"

    @property
    def key(self) -> BidKey:
        return (self.room, self.bidder, self.amount)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> BidAttempt:
        """From one line of a client's record file (as :meth:`as_dict` wrote it)."""
        known: dict[str, Any] = {f.name: data.get(f.name) for f in fields(cls)}
        return cls(**known)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class HistoryEntry:
    """One entry of a room's stream on one Redis: the bid it applied and the epoch of the
    writer that applied it."""

    room: str
    id: str
    bidder: str | None
    amount: int
    epoch: int | None

    @property
    def key(self) -> tuple[str, str | None, int]:
        return (self.room, self.bidder, self.amount)


@dataclass(frozen=True, slots=True)
class SplitBrainWindow:
    """Acks in `old_epoch` of bids sent after `new_epoch` was fenced in at `start`."""

    old_epoch: int
    new_epoch: int
    start: float  # the fence: the new epoch's promotion or its first ack, the earlier
    end: float  # the last such old-epoch ack
    regions: list[str]
    bids: list[BidAttempt]

    def as_dict(self) -> dict[str, Any]:
        return {
            "old_epoch": self.old_epoch,
            "new_epoch": self.new_epoch,
            "start": self.start,
            "end": self.end,
            "seconds": self.end - self.start,
            "regions": self.regions,
            "acks": len(self.bids),
            "examples": [b.as_dict() for b in self.bids[:10]],
        }


@dataclass(frozen=True, slots=True)
class ServerDivergence:
    """What one Redis holds against the final writer, for the drill's rooms."""

    lacks: int  # entries the writer holds and it does not
    extra: int  # entries it holds and the writer does not


@dataclass(frozen=True, slots=True)
class Verdict:
    """The checker's answer; :attr:`ok` only if every check passed."""

    attempts: int
    acknowledged: int
    refused: int
    indeterminate: int
    indeterminate_applied: int
    """Indeterminate bids found in the writer's history (applied after all)."""
    missing: list[BidAttempt]
    """Acknowledged bids the final writer does not hold: every one."""
    windows: list[SplitBrainWindow]
    writer: str
    servers: dict[str, ServerDivergence]
    replication: str
    reported_lost: int | None
    unacked_discards: int
    """Writes the old writer may have applied without acknowledging them (see
    :func:`check`): the most ``reported_lost`` may exceed the acknowledged bids lost by."""
    max_lost: int
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "problems": self.problems,
            "attempts": self.attempts,
            "acknowledged": self.acknowledged,
            "refused": self.refused,
            "indeterminate": self.indeterminate,
            "indeterminate_applied": self.indeterminate_applied,
            "lost": len(self.missing),
            "max_lost": self.max_lost,
            "missing": [b.as_dict() for b in self.missing],
            "split_brain_windows": [w.as_dict() for w in self.windows],
            "writer": self.writer,
            "servers": {k: asdict(v) for k, v in sorted(self.servers.items())},
            "replication": self.replication,
            "reported_lost": self.reported_lost,
            "unacked_discards": self.unacked_discards,
        }


def fence_times(epochs: Iterable[tuple[float, int]]) -> dict[int, float]:
    """From ``(time, epoch)`` observations of the writer's epoch (the control plane's
    timeline): the first time each epoch was seen."""
    first: dict[int, float] = {}
    for t, epoch in epochs:
        if epoch not in first or t < first[epoch]:
            first[epoch] = t
    return first


def _fences(acked: Sequence[BidAttempt], promoted: Mapping[int, float]) -> dict[int, float]:
    """When each epoch was fenced in: first seen as the writer's, or its first ack."""
    fences = dict(promoted)
    for a in acked:
        assert a.epoch is not None
        assert a.acked is not None
        if a.epoch not in fences or a.acked < fences[a.epoch]:
            fences[a.epoch] = a.acked
    return fences


def _crossed(acked: Sequence[BidAttempt], fences: Mapping[int, float]) -> list[BidAttempt]:
    """Acknowledged bids sent before their ack's epoch was fenced in: sent while an older
    writer was the writer, so that one may have applied the bid (its ack lost with the
    connection) before the client's retry was applied by the new one. The old writer's
    copy is then a write discarded at the heal that loses no acknowledged bid."""
    first = min(fences, default=None)
    return [a for a in acked
            if a.epoch is not None and a.epoch != first and a.sent < fences[a.epoch]]  # fmt: skip


def _windows(
    attempts: Sequence[BidAttempt], promoted: Mapping[int, float]
) -> list[SplitBrainWindow]:
    acked = [a for a in attempts if a.outcome == "acknowledged" and a.epoch is not None]
    fences = _fences(acked, promoted)
    windows: list[SplitBrainWindow] = []
    for old in sorted({a.epoch for a in acked if a.epoch is not None}):
        newer = [(t, e) for e, t in fences.items() if e > old]
        if not newer:
            continue
        # The earliest newer epoch fences `old` in first: anything sent after it counts.
        start, new = min(newer)
        late = sorted((a for a in acked if a.epoch == old and a.sent > start), key=lambda a: a.sent)
        if late:
            end = max(a.acked for a in late if a.acked is not None)
            regions = sorted({a.region or "?" for a in late})
            windows.append(SplitBrainWindow(old, new, start, end, regions, late))
    return windows


def check(
    attempts: Iterable[BidAttempt],
    histories: Mapping[str, Iterable[HistoryEntry]],
    *,
    writer: str,
    replication: str,
    reported_lost: int | None,
    promoted: Mapping[int, float] | None = None,
    max_lost: int = 0,
) -> Verdict:
    """Judge the clients' `attempts` against the `histories` read from every Redis
    (server name: its entries for the drill's rooms) after the heal; `writer` names the
    final writer among them. `reported_lost`: the control plane's ``lost_writes`` over the
    drill (None: not known, a problem in async mode). `promoted`: when each epoch was
    first seen as the writer's (:func:`fence_times`). `max_lost`: acknowledged bids that
    may be missing (the drill's ``--max-lost``; the count must still be reported)."""
    if writer not in histories:
        raise ValueError(f"the writer {writer!r} is not among the histories read")
    if replication not in ("async", "sync"):
        raise ValueError(f"replication must be 'async' or 'sync', not {replication!r}")
    attempts = list(attempts)
    held = {name: list(entries) for name, entries in histories.items()}
    in_writer = {e.key for e in held[writer]}
    by_outcome: dict[str, list[BidAttempt]] = {
        "acknowledged": [],
        "refused": [],
        "indeterminate": [],
    }
    for a in attempts:
        by_outcome[a.outcome].append(a)
    seen: set[BidKey] = set()
    missing = []
    for a in sorted(by_outcome["acknowledged"], key=lambda a: (a.sent, a.client)):
        if a.key in seen:  # the same bid acknowledged twice (a resend): one bid
            continue
        seen.add(a.key)
        if a.key not in in_writer:
            missing.append(a)
    applied_unknown = sum(1 for a in by_outcome["indeterminate"] if a.key in in_writer)
    writer_ids = {(e.room, e.id) for e in held[writer]}
    servers = {}
    for name, entries in held.items():
        if name == writer:
            continue
        ids = {(e.room, e.id) for e in entries}
        servers[name] = ServerDivergence(len(writer_ids - ids), len(ids - writer_ids))
    windows = _windows(attempts, promoted or {})

    problems = []
    if len(missing) > max_lost:
        problems.append(
            f"{len(missing)} acknowledged bids are not in the writer's ({writer}) history "
            f"(allowed {max_lost})"
        )
    for w in windows:
        problems.append(
            f"split brain: {len(w.bids)} bids acknowledged in epoch {w.old_epoch} "
            f"({', '.join(w.regions)}) were sent after epoch {w.new_epoch} was fenced in, "
            f"over {w.end - w.start:.2f} s"
        )
    for name, d in sorted(servers.items()):
        if d.lacks or d.extra:
            problems.append(
                f"{name} did not catch up with the writer {writer}: it lacks {d.lacks} "
                f"entries and holds {d.extra} the writer does not"
            )
    # Writes the old writer may have applied that the heal discarded without losing an
    # acknowledged bid: a bid whose outcome the client never learnt and the writer does
    # not hold, and one retried across a fence (:func:`_crossed`).
    acked = [a for a in by_outcome["acknowledged"] if a.epoch is not None]
    unacked_discards = sum(1 for a in by_outcome["indeterminate"] if a.key not in in_writer) + len(
        _crossed(acked, _fences(acked, promoted or {}))
    )
    if replication == "async":
        if reported_lost is None:
            problems.append("the control plane's lost_writes is unknown: a loss may be silent")
        elif not len(missing) <= reported_lost <= len(missing) + unacked_discards:
            problems.append(
                f"{len(missing)} acknowledged bids lost, the control plane reported "
                f"{reported_lost} writes lost"
                + (f" (of which up to {unacked_discards} may be writes never acknowledged)"
                   if unacked_discards else "")
            )  # fmt: skip
    return Verdict(
        attempts=len(attempts),
        acknowledged=len(seen),
        refused=len(by_outcome["refused"]),
        indeterminate=len(by_outcome["indeterminate"]),
        indeterminate_applied=applied_unknown,
        missing=missing,
        windows=windows,
        writer=writer,
        servers=servers,
        replication=replication,
        reported_lost=reported_lost,
        unacked_discards=unacked_discards,
        max_lost=max_lost,
        problems=problems,
    )
