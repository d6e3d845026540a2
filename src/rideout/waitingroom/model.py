"""The waiting room's pure core: event settings, positions, counters, and every rule of
the room (numbering, the serving counter's floor, capacity held, inlets, expiry,
abandonment, estimated wait). No I/O; every time is passed in.

With :mod:`.reference`, which builds one event's whole state from these rules, this is
the room's specification; the Lua scripts (:mod:`.scripts`) implement it where it must
be atomic, and tests/waitingroom/test_differential.py runs both side by side.

Counters of one event (all integers, never negative):

``queue``
    positions handed out (one per accepted arrival; a refused request counts nothing)
``serving``
    the serving counter: positions up to it may take a token
``tokens``
    positions that took their first token ("served")
``expired``
    positions that expired before taking a token
``abandoned``
    positions whose client stopped polling for ``abandon_after`` before taking a token
``completed`` / ``sessions_abandoned``
    sessions ended through ``update_session`` (1 / -1); they stay among ``tokens``

so that ``queue = tokens + waiting + expired + abandoned`` always holds, with
``waiting`` computed by :func:`waiting_count`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Final

from rideout import _validate
from rideout.errors import InvalidArgument, InvalidArgumentType

__all__ = [
    "ABANDON_SLACK_CAP_MS",
    "ALARM",
    "DEFAULT_EXPIRY",
    "DEFAULT_VALIDITY",
    "EVENT_ID_RE",
    "LATE_DRAW",
    "MAX_EPOCH",
    "MAX_VALIDITY",
    "POW_WINDOW",
    "REQUEST_ID_RE",
    "Counters",
    "EventSettings",
    "ExpiredPage",
    "Expiry",
    "ExpiryState",
    "InletKind",
    "InletSettings",
    "Position",
    "PositionState",
    "Record",
    "Renewal",
    "TokenGrant",
    "abandon_slack",
    "admits_at_once",
    "alarm_state_in",
    "capacity_held",
    "check_event_id",
    "check_request_id",
    "clamp_serving",
    "estimated_wait",
    "expires_in",
    "has_expired",
    "is_abandoned",
    "keyed_request_id",
    "max_size_increment",
    "periodic_increment",
    "position_expiry",
    "pow_digest",
    "pow_valid",
    "queue_cap",
    "queue_time",
    "resumes_clocks",
    "serving_rate",
    "solve_pow",
    "tick_of",
    "to_ms",
    "waiting_count",
]

DEFAULT_VALIDITY: Final = 3600.0
"""Seconds a token is valid (AWS's ``ValidityPeriod`` default)."""
DEFAULT_EXPIRY: Final = 900.0
"""Seconds a servable position stays claimable (AWS's ``QueuePositionExpiryPeriod``)."""
MAX_VALIDITY: Final = 86400.0
"""The longest token validity (the room's verifiers accept none longer)."""
ALARM: Final = "ALARM"
"""The alarm state that holds a periodic inlet back."""

EVENT_ID_RE: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
# AWS checks request ids with re.match(r'\w{8}-\w{4}-\w{4}-\w{4}-\w{12}'): a prefix
# match that lets trailing garbage (and '_') through. rideout matches the whole id.
REQUEST_ID_RE: Final = re.compile(
    r"[0-9A-Za-z]{8}-[0-9A-Za-z]{4}-[0-9A-Za-z]{4}-[0-9A-Za-z]{4}-[0-9A-Za-z]{12}"
)
LATE_DRAW: Final = 2**52
"""Pre-queue draws are below it; an arrival after the pre-queue closed, while it is
still being numbered, draws ``LATE_DRAW + its entry ms``: behind every pre-queued one,
in arrival order."""
POW_WINDOW: Final = 300.0
"""Seconds a proof-of-work stamp's timestamp may be off from the server's clock."""
_POW_RE: Final = re.compile(r"([0-9]{1,12}):([A-Za-z0-9]{1,64})")
_ALARM_NAME_RE: Final = re.compile(r"[A-Za-z0-9_.:/-]{1,255}")
_MAX_COUNT: Final = 10**12
_MAX_SECONDS: Final = 10.0**9
MAX_EPOCH: Final = 253_402_300_799.0
"""The latest time a setting may name (9999-12-31T23:59:59Z): its milliseconds stay
exact in a double, as the scripts read them (a larger one overflowed to a 500)."""


def check_event_id(value: object) -> str:
    """`value` if it is an event id: 1 to 64 letters, digits, ``_``, ``.``, ``-``."""
    text = _validate.text("event_id", value)
    if not EVENT_ID_RE.fullmatch(text):
        raise InvalidArgument(
            "event_id must be 1 to 64 letters, digits, '_', '.' or '-' (starting with a "
            f"letter or digit), not {text[:80]!r}"
        )
    return text


def check_request_id(value: object) -> str:
    """`value` if it is a request id (a UUID's shape, matched in full)."""
    text = _validate.text("request_id", value)
    if not REQUEST_ID_RE.fullmatch(text):
        raise InvalidArgument(f"request_id must look like a UUID, not {text[:80]!r}")
    return text


def keyed_request_id(secret: bytes, event_id: str, record: str) -> str:
    """The request id of an arrival in `event_id` whose ``Idempotency-Key`` record is
    `record`: the same wherever and however often it is asked, so a retry whose first
    answer was lost (a region killed between drawing the number and storing the answer)
    finds the position the first run made instead of drawing a second. An HMAC under the
    deployment's `secret`, shaped as a UUID: as unguessable as a random one to whoever
    does not hold the secret, whatever key the client chose."""
    digest = hmac.new(secret, f"{event_id}\0{record}".encode(), hashlib.sha256).hexdigest()
    return f"{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"


# ---------------------------------------------------------------------------- settings


class InletKind(StrEnum):
    """How the serving counter moves on its own (or not)."""

    NONE = "none"
    """Only ``increment_serving_counter`` moves it."""
    MAX_SIZE = "max_size"
    """Each period: admit ``max(0, max_size - capacity held)``, never past the queue."""
    PERIODIC = "periodic"
    """Each period between ``start`` and ``end``: admit ``increment_by``, unless the
    named alarm is in ALARM."""


@dataclass(frozen=True, slots=True)
class InletSettings:
    """An event's inlet strategy. Times are epoch seconds; ``end`` 0 is "no end"."""

    kind: InletKind = InletKind.NONE
    period: float = 60.0
    max_size: int = 0
    increment_by: int = 10
    start: float = 0.0
    end: float = 0.0
    alarm: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(
            self,
            "kind",
            InletKind(_validate.choice("inlet.kind", self.kind, [k.value for k in InletKind])),
        )
        object.__setattr__(
            self, "period", _validate.seconds("inlet.period", self.period, minimum=0.05)
        )
        if self.period > _MAX_SECONDS:
            raise InvalidArgument(f"inlet.period must be at most {_MAX_SECONDS:g} seconds")
        _validate.count("inlet.max_size", self.max_size, high=_MAX_COUNT)
        _validate.count("inlet.increment_by", self.increment_by, high=_MAX_COUNT)
        for name in ("start", "end"):
            value = _validate.seconds(f"inlet.{name}", getattr(self, name), zero_ok=True)
            if value > MAX_EPOCH:
                raise InvalidArgument(f"inlet.{name} must be at most {MAX_EPOCH:.0f} (9999)")
            object.__setattr__(self, name, value)
        if self.end and self.end <= self.start:
            raise InvalidArgument("inlet.end must be after inlet.start (or 0: no end)")
        if not isinstance(self.alarm, str) or (
            self.alarm and not _ALARM_NAME_RE.fullmatch(self.alarm)
        ):
            raise InvalidArgument(f"inlet.alarm must be an alarm name or '', not {self.alarm!r}")
        if self.kind is InletKind.MAX_SIZE and self.max_size < 1:
            raise InvalidArgument("inlet.max_size must be >= 1 for a max_size inlet")
        if self.kind is InletKind.PERIODIC and self.increment_by < 1:
            raise InvalidArgument("inlet.increment_by must be >= 1 for a periodic inlet")

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind.value, "period": self.period, "max_size": self.max_size,
            "increment_by": self.increment_by, "start": self.start, "end": self.end,
            "alarm": self.alarm,
        }  # fmt: skip

    @classmethod
    def from_dict(cls, data: object) -> InletSettings:
        return cls(**_known_fields(cls, data, "inlet"))


def _known_fields(cls: type, data: object, what: str) -> dict[str, Any]:
    if not isinstance(data, Mapping):
        raise _validate_type(what, "an object", data)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(str(k) for k in data if k not in names)
    if unknown:
        raise InvalidArgument(f"{what}: unknown field(s) {', '.join(unknown)}")
    return dict(data)


def _validate_type(name: str, what: str, value: object) -> Exception:
    return InvalidArgumentType(f"{name} must be {what}, not {type(value).__name__}")


@dataclass(frozen=True, slots=True)
class EventSettings:
    """One event's room: immutable and validated.

    ``validity``: seconds a token lives. ``expiry``: seconds a servable position stays
    claimable (0: never expires). ``incr_on_expiry``: move the serving counter on past
    positions that expired or were abandoned unserved (AWS's
    ``IncrSvcOnQueuePositionExpiry``). ``abandon_after``: seconds without a poll after
    which a waiting position is abandoned (0: off, as AWS, whose sample client polls
    ``serving_num`` only, without its request id). ``open``: whether arrivals are taken.
    ``auto_open_threshold``: while fewer sessions are active, arrivals are served at
    once; from it on they queue (0: always queue). ``prequeue_until``: arrivals before
    this epoch second are numbered in a random order at that time (0: off).
    ``pow_bits``: leading zero bits of proof of work ``assign_queue_num`` asks for
    (:func:`pow_valid`; 0: none). ``max_session``: the longest a session may last,
    renewals included, in seconds from its first token (0: no cap; a renewal gives
    ``validity`` more seconds each time).
    """

    event_id: str
    validity: float = DEFAULT_VALIDITY
    expiry: float = DEFAULT_EXPIRY
    incr_on_expiry: bool = False
    abandon_after: float = 0.0
    open: bool = True
    auto_open_threshold: int = 0
    prequeue_until: float = 0.0
    pow_bits: int = 0
    max_session: float = 0.0
    inlet: InletSettings = field(default_factory=InletSettings)

    def __post_init__(self) -> None:
        check_event_id(self.event_id)
        validity = _validate.seconds("validity", self.validity, minimum=1.0)
        if validity > MAX_VALIDITY:
            raise InvalidArgument(f"validity must be at most {MAX_VALIDITY:g} seconds")
        object.__setattr__(self, "validity", validity)
        for name in ("expiry", "abandon_after", "prequeue_until", "max_session"):
            value = _validate.seconds(name, getattr(self, name), zero_ok=True)
            if name != "prequeue_until" and value > _MAX_SECONDS:
                raise InvalidArgument(f"{name} must be at most {_MAX_SECONDS:g} seconds")
            if name == "prequeue_until" and value > MAX_EPOCH:
                raise InvalidArgument(f"prequeue_until must be at most {MAX_EPOCH:.0f} (9999)")
            object.__setattr__(self, name, value)
        for name in ("incr_on_expiry", "open"):
            if not isinstance(getattr(self, name), bool):
                raise _validate_type(name, "true or false", getattr(self, name))
        _validate.count("auto_open_threshold", self.auto_open_threshold, high=_MAX_COUNT)
        _validate.count("pow_bits", self.pow_bits, high=32)
        if not isinstance(self.inlet, InletSettings):
            raise _validate_type("inlet", "InletSettings", self.inlet)

    # The settings in the scripts' whole units (the event hash's fields).

    @property
    def validity_s(self) -> int:
        return math.ceil(self.validity)

    @property
    def expiry_ms(self) -> int:
        return round(self.expiry * 1000)

    @property
    def abandon_ms(self) -> int:
        return round(self.abandon_after * 1000)

    @property
    def prequeue_ms(self) -> int:
        return round(self.prequeue_until * 1000)

    @property
    def max_session_s(self) -> int:
        return math.floor(self.max_session)

    def to_dict(self) -> dict[str, Any]:
        """As JSON-ready data; :meth:`from_dict` of it gives the same settings."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["inlet"] = self.inlet.to_dict()
        return out

    @classmethod
    def from_dict(cls, data: object) -> EventSettings:
        """Settings from JSON-shaped data; raises InvalidArgument naming the field."""
        values = _known_fields(cls, data, "event")
        if "event_id" not in values:
            raise InvalidArgument("event: event_id is required")
        if "inlet" in values:
            values["inlet"] = InletSettings.from_dict(values["inlet"])
        return cls(**values)

    def changed(self, **changes: object) -> EventSettings:
        """A copy with `changes` (``inlet`` may be a mapping of inlet fields to change)."""
        values = self.to_dict()
        if "event_id" in changes and changes["event_id"] != self.event_id:
            raise InvalidArgument("event_id cannot be changed")
        inlet = changes.pop("inlet", None)
        if isinstance(inlet, InletSettings):
            inlet = inlet.to_dict()
        if inlet is not None:
            if not isinstance(inlet, Mapping):
                raise _validate_type("inlet", "an object", inlet)
            values["inlet"] = {**values["inlet"], **inlet}
        values.update(changes)
        return EventSettings.from_dict(values)


# ----------------------------------------------------------------------------- values


class PositionState(StrEnum):
    """Where a position stands."""

    PREQUEUED = "prequeued"
    """Arrived before the pre-queue closed; numbered (in random order) at that time."""
    WAITING = "waiting"
    SERVED = "served"
    """Took its token."""
    EXPIRED = "expired"
    ABANDONED = "abandoned"


@dataclass(frozen=True, slots=True)
class Position:
    """A request's place in an event's queue (``queue_number`` 0 while pre-queued)."""

    event_id: str
    request_id: str
    queue_number: int
    entry_time: float
    status: PositionState


@dataclass(slots=True)
class Record:
    """A request's record as the scripts keep it (``q,entry_ms,state,iat,exp,status``):
    its queue number (0 while pre-queued), entry time in milliseconds, state, and once
    served its token's ``iat``/``exp`` (seconds) and session status (0 active, 1
    completed, -1 abandoned)."""

    q: int
    entry_ms: int
    state: PositionState
    iat: int | None = None
    exp: int | None = None
    status: int | None = None


class ExpiryState(StrEnum):
    DISABLED = "disabled"
    NOT_SERVED = "not_served"
    ACTIVE = "active"
    EXPIRED = "expired"
    SERVED = "served"
    """The position took its token: it no longer expires; ``expires_in`` is the token's."""


@dataclass(frozen=True, slots=True)
class Expiry:
    """What ``queue_pos_expiry`` answers: ``expires_in`` seconds when ACTIVE or SERVED."""

    state: ExpiryState
    expires_in: int | None = None


@dataclass(frozen=True, slots=True)
class TokenGrant:
    """The claims of a position's token, the same on every call; ``first`` on the call
    that recorded them."""

    event_id: str
    request_id: str
    queue_position: int
    issued_at: int
    expires_at: int
    first: bool

    def expires_in(self, now: float) -> int:
        """Seconds left (0 once expired: AWS still answers 200 then)."""
        return max(0, math.floor(self.expires_at - now))


@dataclass(frozen=True, slots=True)
class Renewal(TokenGrant):
    """A session's renewed claims (``issued_at`` the renewal, ``expires_at`` its new
    end), the ``jti`` its new refresh token must carry (the only one the next renewal
    takes), and when the session began (its first token's ``iat``)."""

    refresh_jti: str
    started_at: int


@dataclass(frozen=True, slots=True)
class Counters:
    """An event's counters at one moment (see the module docstring)."""

    queue: int = 0
    serving: int = 0
    tokens: int = 0
    expired: int = 0
    abandoned: int = 0
    completed: int = 0
    sessions_abandoned: int = 0
    max_expired: int = 0
    prequeued: int = 0

    @property
    def waiting(self) -> int:
        return waiting_count(self.queue, self.tokens, self.expired, self.abandoned)

    def to_dict(self) -> dict[str, int]:
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["waiting"] = self.waiting
        return out


@dataclass(frozen=True, slots=True)
class ExpiredPage:
    """One page of request ids whose tokens expired; ``cursor`` None on the last page."""

    request_ids: tuple[str, ...]
    cursor: str | None


# -------------------------------------------------------------------------- decisions


def waiting_count(queue: int, tokens: int, expired: int, abandoned: int) -> int:
    """Positions still waiting: ``queue - tokens - expired - abandoned``, never negative."""
    return max(0, queue - tokens - expired - abandoned)


def to_ms(now: float) -> int:
    """A clock reading in the scripts' unit: whole milliseconds (floored)."""
    return math.floor(now * 1000)


def clamp_serving(value: int, floor: int) -> int:
    """The serving counter moved to `value`: never below `floor` (the highest position
    that took a token: a lowered counter must not un-serve a session), nor below 0."""
    return max(value, floor, 0)


def capacity_held(active: int, serving: int, queue: int, tokens: int, dead_reached: int) -> int:
    """Sessions holding capacity: `active` sessions (token unexpired, status 0) plus
    the admitted positions (up to the counter and the queue) that have neither taken
    their token nor died (`dead_reached`: expired or abandoned up to the counter).
    What a MaxSize inlet subtracts and ``auto_open_threshold`` compares."""
    return active + max(0, min(serving, queue) - tokens - dead_reached)


def admits_at_once(threshold: int, held: int) -> bool:
    """Whether an arrival is served at once (``auto_open_threshold``, 0: never)."""
    return threshold > 0 and held < threshold


def queue_cap(by: int, queue: int, serving: int) -> int:
    """An inlet's admission of `by`, never negative and never past the queue: an idle
    room's counter must not run ahead of its arrivals, or the next crowd would find
    itself admitted at once, unpaced."""
    return max(0, min(by, queue - serving))


def max_size_increment(max_size: int, held: int, queue: int, serving: int) -> int:
    """A MaxSize inlet's admission: ``max_size - held``, never negative (AWS's can go
    negative and decrement the counter), never past the queue (:func:`queue_cap`)."""
    return queue_cap(max_size - held, queue, serving)


def alarm_state_in(alarms: Mapping[str, object], name: str) -> str | None:
    """The state of alarm `name` among a control plane's ``alarms`` (its summary's:
    keyed by region, each with its ``name`` and ``state``), looked up by either; None
    when none is named so (an inlet then counts it as OK, as AWS's a missing alarm)."""
    for key, alarm in alarms.items():
        if isinstance(alarm, Mapping) and name in (key, alarm.get("name")):
            state = alarm.get("state")
            return state if isinstance(state, str) else None
    return None


def periodic_increment(inlet: InletSettings, now: float, alarm_state: str | None) -> int:
    """A periodic inlet's step at `now`: ``increment_by`` inside [start, end) unless the
    alarm is in ALARM (an unknown or INSUFFICIENT_DATA alarm counts as OK, as AWS's);
    else 0. The script caps it at the queue (:func:`queue_cap`), as MaxSize's."""
    if now < inlet.start or (inlet.end and now >= inlet.end):
        return 0
    if inlet.alarm and alarm_state == ALARM:
        return 0
    return inlet.increment_by


def queue_time(entry_time: float, servable_at: float | None) -> float | None:
    """When a position's expiry clock started: the later of entry and becoming
    servable (None while not servable)."""
    if servable_at is None:
        return None
    return max(entry_time, servable_at)


def expires_in(
    now: float, entry_time: float, servable_at: float | None, period: float
) -> float | None:
    """Time until a servable position expires (< 0: expired), in the unit of the
    arguments; None while not servable or when expiry is off (``period`` 0)."""
    started = queue_time(entry_time, servable_at)
    if started is None or period <= 0:
        return None
    return started + period - now


def has_expired(
    record: Record, servable_ms: int | None, max_expired: int, expiry_ms: int, now_ms: int
) -> bool:
    """Whether a waiting position up to the counter expired without its token: past
    the expiry sweep's cursor `max_expired`, or more than ``expiry`` since the later
    of its entry and becoming servable (one rule, ``>``: AWS's sweep said ``>=``)."""
    if expiry_ms <= 0:
        return False
    since = record.entry_ms if servable_ms is None else servable_ms
    left = expires_in(now_ms, record.entry_ms, since, expiry_ms)
    return record.q <= max_expired or (left is not None and left < 0)


def position_expiry(
    record: Record,
    serving: int,
    servable_ms: int | None,
    max_expired: int,
    expiry_ms: int,
    now_ms: int,
) -> Expiry:
    """What ``queue_pos_expiry`` answers for `record` (see :class:`ExpiryState`)."""
    if record.state is PositionState.SERVED:
        return Expiry(ExpiryState.SERVED, max(0, ((record.exp or 0) * 1000 - now_ms) // 1000))
    if expiry_ms <= 0:
        return Expiry(ExpiryState.DISABLED)
    if record.state in (PositionState.EXPIRED, PositionState.ABANDONED):
        return Expiry(ExpiryState.EXPIRED)
    if record.state is PositionState.PREQUEUED or record.q > serving:
        return Expiry(ExpiryState.NOT_SERVED)
    if has_expired(record, servable_ms, max_expired, expiry_ms, now_ms):
        return Expiry(ExpiryState.EXPIRED)
    since = record.entry_ms if servable_ms is None else max(record.entry_ms, servable_ms)
    return Expiry(ExpiryState.ACTIVE, (since + expiry_ms - now_ms) // 1000)


ABANDON_SLACK_CAP_MS: Final = 30_000
"""The longest abandonment slack, milliseconds (``abandon_after`` of 300 s or more)."""


def abandon_slack(hold_ms: int) -> int:
    """Milliseconds past the hold (``abandon_after``) the sweep waits before it
    abandons a silent position: a tenth of the hold, at most 30 s. Polls restart the
    clock at most once per touch interval per process (``poll_cache.touch_interval``,
    this slack less the touches' way out), so a client polling at least every hold is
    never abandoned."""
    return min(-(-hold_ms // 10), ABANDON_SLACK_CAP_MS) if hold_ms > 0 else 0


def is_abandoned(now_ms: int, last_seen_ms: int, hold_ms: int) -> bool:
    """Whether a waiting position silent since `last_seen_ms` (its last poll, or the
    room's last resumption, whichever is later) is abandoned: longer than the hold
    plus :func:`abandon_slack` (``hold_ms`` 0: off)."""
    return hold_ms > 0 and now_ms - last_seen_ms > hold_ms + abandon_slack(hold_ms)


def resumes_clocks(
    now_ms: int, swept_at_ms: int, swept_by: str | None, region: str, outage_ms: int
) -> bool:
    """Whether a sweep restarts every waiting position's abandonment clock: it finds
    the previous sweep more than `outage_ms` ago (a store outage: no writer took a
    sweep or a poll meanwhile), or made by another region (a failover: visitors find
    the new region only through DNS and their backoff). Nobody is abandoned for the
    time the room could not be reached."""
    outage = swept_at_ms > 0 and now_ms - swept_at_ms > outage_ms
    return outage or (swept_by is not None and swept_by != region)


def tick_of(now: float, period: float) -> int:
    """The number of the period `now` falls in: one claim per tick across processes."""
    return math.floor(now / period)


def serving_rate(history: list[tuple[float, int]], now: float, window: float) -> float:
    """Positions admitted per second over the last `window` seconds, from the serving
    counter's history ``[(time, counter), ...]`` (oldest first)."""
    if window <= 0 or not history:
        return 0.0
    since = now - window
    before = [c for t, c in history if t <= since]
    inside = [(t, c) for t, c in history if t > since]
    if not inside:
        return 0.0
    # From the counter at the window's start; or, when the history starts inside the
    # window, from its first move (what came before it is not known to be admissions).
    start, first_t = (before[-1], since) if before else (inside[0][1], inside[0][0])
    span = max(now - first_t, 1e-9)
    return max(0, inside[-1][1] - start) / span


def estimated_wait(ahead: int, rate: float) -> float | None:
    """Seconds until `ahead` more positions are admitted at `rate` per second; 0 when
    none are ahead, None when nothing is being admitted (unknown)."""
    if ahead <= 0:
        return 0.0
    if rate <= 0:
        return None
    return ahead / rate


# ------------------------------------------------------------------- proof of work


def pow_digest(event_id: str, stamp: str) -> bytes:
    """SHA-256 of ``event_id ":" stamp`` (a stamp is ``TIMESTAMP:NONCE``)."""
    return hashlib.sha256(f"{event_id}:{stamp}".encode()).digest()


def _leading_zero_bits(digest: bytes) -> int:
    value = int.from_bytes(digest, "big")
    return len(digest) * 8 - value.bit_length()


def pow_valid(
    event_id: str, stamp: object, bits: int, now: float, window: float = POW_WINDOW
) -> bool:
    """Whether `stamp` (``TIMESTAMP:NONCE``: epoch seconds, 1 to 64 letters or digits)
    is a proof of `bits` leading zero bits for `event_id`, made within `window` of
    `now`. (Each stamp is good once: the store remembers those it took.)"""
    if bits <= 0:
        return True
    if not isinstance(stamp, str):
        return False
    match = _POW_RE.fullmatch(stamp)
    if match is None or abs(int(match[1]) - now) > window:
        return False
    return _leading_zero_bits(pow_digest(event_id, stamp)) >= bits


def solve_pow(event_id: str, bits: int, now: float) -> str:
    """A stamp :func:`pow_valid` accepts (about ``2**bits`` hashes: for clients, tests)."""
    ts = math.floor(now)
    nonce = 0
    while True:
        stamp = f"{ts}:{nonce:x}"
        if pow_valid(event_id, stamp, bits, now):
            return stamp
        nonce += 1
