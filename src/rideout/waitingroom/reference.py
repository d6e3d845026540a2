"""The reference room: one event's whole state, and every change the scripts make as a
method over it, built from :mod:`.model`'s rules. Pure: no I/O, every time passed in.

This is the specification of :mod:`.scripts` (the Lua the store runs on Redis):
tests/waitingroom/test_differential.py drives a :class:`ReferenceRoom` and a
:class:`~rideout.waitingroom.store.RoomStore` on a real Redis with the same random
operations and clock, and compares every answer, counter and position after each
step. A rule changes here first; the Lua follows.

Each method answers what the store's method of the same name answers and raises the
same errors. Times are epoch seconds, taken to whole milliseconds as the store sends
them (:func:`~rideout.waitingroom.model.to_ms`); token times are whole seconds.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

from rideout.waitingroom.errors import (
    InvalidRequest,
    NotServedYet,
    PositionExpired,
    RoomClosed,
    SessionEnded,
    UnknownRequest,
)
from rideout.waitingroom.model import (
    LATE_DRAW,
    Counters,
    EventSettings,
    Expiry,
    Position,
    PositionState,
    Record,
    TokenGrant,
    admits_at_once,
    capacity_held,
    clamp_serving,
    has_expired,
    is_abandoned,
    max_size_increment,
    position_expiry,
    queue_cap,
    resumes_clocks,
    to_ms,
)

__all__ = ["INCREMENT_ROUNDS", "ReferenceRoom"]

INCREMENT_ROUNDS = 64
"""How many times one sweep moves the counter past the dead positions it reached."""


@dataclass
class _Marks:
    """The bookkeeping the scripts keep beside the counters."""

    floor: int = 0  # the highest position that took a token
    recycled: int = 0  # dead positions the counter has moved past (incr_on_expiry)
    resumed_at: int = 0  # ms: abandonment clocks restart here (an outage, a failover)
    swept_at: int = 0  # ms of the last sweep
    swept_by: str | None = None  # the region that made it


@dataclass
class ReferenceRoom:
    """One event's room (see the module docstring)."""

    settings: EventSettings
    counters: Counters = field(default_factory=Counters)
    marks: _Marks = field(default_factory=_Marks)
    records: dict[str, Record] = field(default_factory=dict)
    numbers: dict[int, str] = field(default_factory=dict)  # queue number -> request id
    seen: dict[str, int] = field(default_factory=dict)  # waiting id -> last poll (ms)
    expiries: dict[str, int] = field(default_factory=dict)  # served id -> token exp (s)
    active: dict[str, int] = field(default_factory=dict)  # as expiries, status 0 only
    moves: list[tuple[int, int]] = field(default_factory=list)  # (counter, ms), rising
    dead: dict[str, int] = field(default_factory=dict)  # expired/abandoned id -> number
    prequeue: dict[str, int] = field(default_factory=dict)  # id -> draw
    claims: set[tuple[str, int]] = field(default_factory=set)  # (task, tick) taken

    # ----------------------------------------------------------------- settings

    def update(self, settings: EventSettings, now: float) -> None:
        """New settings; turning abandonment on restarts every waiting position's
        clock (polls do not touch it while it is off)."""
        if self.settings.abandon_ms == 0 and settings.abandon_ms > 0:
            self.marks.resumed_at = to_ms(now)
        self.settings = settings

    def reset(self) -> None:
        """Forget every position, token and counter (the settings stay, and so do the
        ticks' claims, which expire on their own)."""
        fresh = ReferenceRoom(self.settings, claims=self.claims)
        self.__dict__.update(fresh.__dict__)

    # ----------------------------------------------------------------- reading

    def num_active_tokens(self, now: float) -> int:
        """Sessions whose token has not expired (``exp`` >= now's second), status 0."""
        now_s = to_ms(now) // 1000
        return sum(1 for exp in self.active.values() if exp >= now_s)

    def holding(self, now: float) -> int:
        c = self.counters
        dead_reached = sum(1 for q in self.dead.values() if q <= c.serving)
        return capacity_held(
            self.num_active_tokens(now), c.serving, c.queue, c.tokens, dead_reached
        )

    def servable_at(self, q: int) -> int | None:
        """When position `q` became servable (ms): the counter's move that reached it."""
        return next((ms for counter, ms in self.moves if counter >= q), None)

    def position(self, request_id: str) -> Position:
        rec = self._record(request_id)
        return Position(self.settings.event_id, request_id, rec.q, rec.entry_ms / 1000, rec.state)

    def expiry(self, request_id: str, now: float) -> Expiry:
        """What ``queue_pos_expiry`` answers; counts as a poll."""
        self.touch(request_id, now)
        rec, c = self._record(request_id), self.counters
        servable = self.servable_at(rec.q) if rec.q > 0 else None
        return position_expiry(
            rec, c.serving, servable, c.max_expired, self.settings.expiry_ms, to_ms(now)
        )

    # --------------------------------------------------------------- positions

    def assign(self, request_id: str, now: float, draw: int) -> Position:
        """The request's position (the same one again for a known request); pre-queued
        in a random place (`draw` < :data:`LATE_DRAW`) before ``prequeue_until``."""
        if request_id in self.records:
            return self.position(request_id)
        if not self.settings.open:
            raise RoomClosed(f"The waiting room of event {self.settings.event_id!r} is closed")
        now_ms = to_ms(now)
        late = now_ms >= self.settings.prequeue_ms and bool(self.prequeue)
        if now_ms < self.settings.prequeue_ms or late:
            self.records[request_id] = Record(0, now_ms, PositionState.PREQUEUED)
            self.prequeue[request_id] = LATE_DRAW + now_ms if late else draw
            self._bump(prequeued=1)
            return self.position(request_id)
        admit = admits_at_once(self.settings.auto_open_threshold, self.holding(now))
        self._number(request_id, Record(0, now_ms, PositionState.WAITING), now_ms)
        if admit and self.counters.serving < self.counters.queue:
            self._set_serving(self.counters.queue, now_ms)
        return self.position(request_id)

    def _number(self, request_id: str, rec: Record, now_ms: int) -> None:
        self._bump(queue=1)
        rec.q, rec.state = self.counters.queue, PositionState.WAITING
        self.records[request_id] = rec
        self.numbers[rec.q] = request_id
        self.seen[request_id] = now_ms

    def release_prequeue(self, now: float, batch: int) -> int:
        """Number up to `batch` pre-queued arrivals in their draws' order once the
        pre-queue closed; how many are still pre-queued."""
        now_ms = to_ms(now)
        if now_ms >= self.settings.prequeue_ms:
            order = sorted(self.prequeue, key=lambda rid: (self.prequeue[rid], rid))
            for rid in order[:batch]:
                rec = self.records[rid]
                if rec.state is PositionState.PREQUEUED:
                    self._number(rid, rec, now_ms)
                del self.prequeue[rid]
                self._bump(prequeued=-1)
        return len(self.prequeue)

    def poll(self, request_id: str, now: float) -> Position:
        """:meth:`position`, counted as a poll (:meth:`touch`)."""
        self.touch(request_id, now)
        return self.position(request_id)

    def touch(self, request_id: str, at: float) -> None:
        """A poll at `at`: restarts a waiting position's abandonment clock."""
        if self._record(request_id).state is PositionState.WAITING:
            self.seen[request_id] = to_ms(at)

    # ------------------------------------------------------------------ tokens

    def claim_token(self, request_id: str, now: float, validity: float | None = None) -> TokenGrant:
        """The position's token claims, recorded on the first call (``validity``
        seconds then, else the event's)."""
        rec, c, now_ms = self._record(request_id), self.counters, to_ms(now)
        if rec.state is PositionState.SERVED:
            if rec.status:
                raise SessionEnded.for_status(rec.status)
            return self._grant(request_id, rec, first=False)
        if rec.state in (PositionState.EXPIRED, PositionState.ABANDONED):
            raise PositionExpired("Queue position has expired")
        if rec.state is PositionState.PREQUEUED or rec.q > c.serving:
            raise NotServedYet("Request ID not being served yet")
        expiry_ms = self.settings.expiry_ms
        if has_expired(rec, self.servable_at(rec.q), c.max_expired, expiry_ms, now_ms):
            self._mark_dead(request_id, rec, PositionState.EXPIRED)
            raise PositionExpired("Queue position has expired")
        seconds = self.settings.validity_s if validity is None else math.ceil(validity)
        rec.state, rec.iat, rec.status = PositionState.SERVED, now_ms // 1000, 0
        rec.exp = rec.iat + seconds
        self._bump(tokens=1)
        self.marks.floor = max(self.marks.floor, rec.q)
        self.expiries[request_id] = self.active[request_id] = rec.exp
        self.seen.pop(request_id, None)
        return self._grant(request_id, rec, first=True)

    def _grant(self, request_id: str, rec: Record, *, first: bool) -> TokenGrant:
        iat, exp = rec.iat or 0, rec.exp or 0  # a served record has both
        return TokenGrant(self.settings.event_id, request_id, rec.q, iat, exp, first)

    def update_session(self, request_id: str, status: int) -> None:
        """End a session: 1 completed, -1 abandoned; only from 0."""
        if isinstance(status, bool) or status not in (1, -1):
            raise InvalidRequest(f"status must be 1 (completed) or -1 (abandoned), not {status!r}")
        rec = self._record(request_id)
        if rec.state is not PositionState.SERVED or rec.status != 0:
            raise UnknownRequest("Request ID doesn't exist or status already set.")
        rec.status = status
        if status == 1:
            self._bump(completed=1)
        else:
            self._bump(sessions_abandoned=1)
        self.active.pop(request_id, None)

    # ---------------------------------------------------------- serving counter

    def increment_serving(
        self, by: int, now: float, *, claim: tuple[str, int] | None = None
    ) -> int:
        """Move the counter by `by` (clamped at its floor); the new value, or -1 when
        another process took this tick's `claim` ``(task, tick)``."""
        if not self._claim(claim):
            return -1
        return self._increment(by, to_ms(now))[1]

    def admit_up_to(
        self, max_size: int, now: float, *, claim: tuple[str, int] | None = None
    ) -> int:
        """A MaxSize inlet's step (:func:`~rideout.waitingroom.model.max_size_increment`)."""
        if not self._claim(claim):
            return -1
        c = self.counters
        by = max_size_increment(max_size, self.holding(now), c.queue, c.serving)
        return self._increment(by, to_ms(now))[1]

    def admit(self, by: int, now: float, *, claim: tuple[str, int] | None = None) -> int:
        """A periodic inlet's step: `by`, never past the queue."""
        if not self._claim(claim):
            return -1
        c = self.counters
        return self._increment(queue_cap(by, c.queue, c.serving), to_ms(now))[1]

    def _claim(self, claim: tuple[str, int] | None) -> bool:
        if claim is None:
            return True
        if claim in self.claims:
            return False
        self.claims.add(claim)
        return True

    def _increment(self, by: int, now_ms: int) -> tuple[int, int]:
        old = self.counters.serving
        self._set_serving(clamp_serving(old + by, self.marks.floor), now_ms)
        return old, self.counters.serving

    def _set_serving(self, new: int, now_ms: int) -> None:
        """Record the move: positions a raise reaches become servable now; a lowered
        counter keeps when the positions still under it became servable."""
        old = self.counters.serving
        if new > old:
            self.moves.append((new, now_ms))
        elif new < old:
            kept = [m for m in self.moves if m[0] <= new]
            above = [m for m in self.moves if m[0] > new]
            if above and new > 0 and (not kept or kept[-1][0] < new):
                kept.append((new, above[0][1]))
            self.moves = kept
        self.counters = dataclasses.replace(self.counters, serving=new)

    # ------------------------------------------------------------------- sweep

    def sweep(
        self, now: float, *, batch: int, outage_after: float, region: str
    ) -> tuple[int, int, int]:
        """Expire and abandon due positions (at most `batch` of each), then with
        ``incr_on_expiry`` move the counter past the dead ones it reached:
        ``(expired, abandoned, incremented)``."""
        now_ms, m, s = to_ms(now), self.marks, self.settings
        if resumes_clocks(now_ms, m.swept_at, m.swept_by, region, round(outage_after * 1000)):
            m.resumed_at = now_ms
        m.swept_at, m.swept_by = now_ms, region
        expired = abandoned = incremented = 0
        if s.expiry_ms > 0:
            c = self.counters
            due = sorted(q for q in self.numbers if c.max_expired < q <= c.serving)[:batch]
            for q in due:
                rid = self.numbers[q]
                rec = self.records[rid]
                if rec.state is PositionState.WAITING:
                    if not has_expired(
                        rec, self.servable_at(q), self.counters.max_expired, s.expiry_ms, now_ms
                    ):
                        break
                    self._mark_dead(rid, rec, PositionState.EXPIRED)
                    expired += 1
                self.counters = dataclasses.replace(self.counters, max_expired=q)
        hold = s.abandon_ms
        silent = sorted(
            (ms, rid)
            for rid, ms in self.seen.items()
            if is_abandoned(now_ms, max(ms, m.resumed_at), hold)
        )
        for _, rid in silent[:batch]:
            self._mark_dead(rid, self.records[rid], PositionState.ABANDONED)
            abandoned += 1
        if s.incr_on_expiry:
            for _ in range(INCREMENT_ROUNDS):
                serving = self.counters.serving
                owed = sum(1 for q in self.dead.values() if q <= serving) - m.recycled
                if owed <= 0:
                    break
                old, new = self._increment(owed, now_ms)
                m.recycled += owed
                incremented += new - old
        return expired, abandoned, incremented

    # ---------------------------------------------------------------- plumbing

    def _record(self, request_id: str) -> Record:
        rec = self.records.get(request_id)
        if rec is None:
            raise UnknownRequest(f"Request ID not found: {request_id}")
        return rec

    def _bump(self, **by: int) -> None:
        c = self.counters
        self.counters = dataclasses.replace(c, **{k: getattr(c, k) + n for k, n in by.items()})

    def _mark_dead(self, request_id: str, rec: Record, state: PositionState) -> None:
        rec.state = state
        if state is PositionState.EXPIRED:
            self._bump(expired=1)
        else:
            self._bump(abandoned=1)
        self.dead[request_id] = rec.q
        self.seen.pop(request_id, None)
