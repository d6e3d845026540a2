"""The waiting room's state in the region's Redis: one atomic script per change.

Every event's keys share its hash tag (:func:`rideout.store.keys.waitingroom_event_keys`)
and replicate with the rest of the region's state, so positions, counters, sessions
and tokens survive a promotion of the other region's replica. Nothing here holds state
between calls but the event-settings cache is none: a :class:`RoomStore` is a client
and a clock.

Guarantees (each a test in tests/waitingroom/test_store.py):

- one position per request: :meth:`RoomStore.assign` with a known ``request_id``
  returns its position again; a refused request (unknown event, closed room) counts
  nothing (AWS burns a queue number on an unknown event);
- the first token is recorded exactly once under concurrent calls, and every later call
  gets the same claims (:class:`~rideout.waitingroom.model.TokenGrant` with ``first``
  False);
- the serving counter never goes below the highest position that took a token, nor
  below 0.
- a refresh token renews its session at most once (:meth:`RoomStore.renew`: of
  concurrent renewals with one token exactly one wins; tests/waitingroom/test_store_renew.py).

Errors: :class:`~rideout.waitingroom.errors.UnknownEvent`,
:class:`~rideout.waitingroom.errors.UnknownRequest`, ... for the room's refusals;
:class:`~rideout.waitingroom.errors.RoomUnavailable` when Redis cannot be reached or is
a read-only replica (:class:`~rideout.waitingroom.errors.RoomNotWriter`); the store's
own :class:`~rideout.store.StoreCorrupt` and auth errors pass through.
"""

from __future__ import annotations

import contextlib
import json
import math
import secrets
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Final, Literal

import redis.asyncio as aioredis

from rideout import _validate
from rideout.store import functions, keys
from rideout.store.auction import describe_server, store_errors
from rideout.store.errors import NotWriter, StoreCorrupt, StoreUnavailable
from rideout.store.functions import StoreFunction
from rideout.waitingroom.errors import (
    EventExists,
    InvalidRequest,
    NotServedYet,
    PositionExpired,
    RefreshTokenReused,
    RoomClosed,
    RoomNotWriter,
    RoomUnavailable,
    SessionEnded,
    UnknownEvent,
    UnknownRequest,
)
from rideout.waitingroom.model import (
    LATE_DRAW,
    MAX_VALIDITY,
    Counters,
    EventSettings,
    ExpiredPage,
    Expiry,
    Position,
    PositionState,
    Record,
    Renewal,
    TokenGrant,
    check_event_id,
    check_request_id,
    position_expiry,
    pow_digest,
    to_ms,
)

__all__ = ["DEFAULT_STREAM_LENGTH", "OUTAGE_AFTER", "RoomStore", "SweepResult", "new_request_id"]

DEFAULT_STREAM_LENGTH: Final = 10_000
"""About how many events each event's stream keeps (``XADD MAXLEN ~``)."""

OUTAGE_AFTER: Final = 5.0
"""Seconds between two sweeps of an event past which the room was unreachable."""


def new_request_id() -> str:
    """A fresh request id (a random UUID, as API Gateway's request ids are)."""
    raw = secrets.token_hex(16)
    return f"{raw[:8]}-{raw[8:12]}-4{raw[13:16]}-{raw[16:20]}-{raw[20:]}"


def _generation() -> str:
    """A new value for an event's generation (it changes on create and reset)."""
    return secrets.token_hex(8)


def _text(value: object) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def _int(value: object, what: str) -> int:
    try:
        return int(_text(value))
    except ValueError:
        raise StoreCorrupt(f"{what}: {_text(value)[:40]!r} is not an integer") from None


def _opt_int(value: object, what: str) -> int | None:
    text = _text(value)
    return None if text == "" else _int(text, what)


def _state(request_id: str, raw: object) -> PositionState:
    try:
        return PositionState(_text(raw))
    except ValueError:
        raise StoreCorrupt(f"request {request_id}: unknown state {_text(raw)[:20]!r}") from None


def _position(event_id: str, request_id: str, reply: Sequence[Any]) -> Position:
    """A Position from a script's ``{kind, q, entry_ms, state, ...}`` reply."""
    entry = _int(reply[2], "entry") / 1000
    state = _state(request_id, reply[3])
    return Position(event_id, request_id, _int(reply[1], "queue number"), entry, state)


def _parse(request_id: str, fields: Sequence[object]) -> Record:
    """A record from its fields ``q, entry_ms, state, iat, exp, status``."""
    if len(fields) != 6:
        raise StoreCorrupt(f"request {request_id}: malformed record {fields!r:.60}")
    q, entry, state, iat, exp, status = fields
    return Record(
        _int(q, "q"), _int(entry, "entry"), _state(request_id, state),
        _opt_int(iat, "iat"), _opt_int(exp, "exp"), _opt_int(status, "status"),
    )  # fmt: skip


def _record(event_id: str, request_id: str, raw: object) -> Position:
    """A Position from its ``requests`` record, ``q,entry_ms,state,iat,exp,status``."""
    rec = _parse(request_id, _text(raw).split(","))
    return Position(event_id, request_id, rec.q, rec.entry_ms / 1000, rec.state)


def _settings_fields(event: EventSettings) -> list[str]:
    """The event hash: the settings as JSON, and the few fields the scripts read."""
    return [
        "id", event.event_id,
        "json", json.dumps(event.to_dict(), separators=(",", ":")),
        "open", "1" if event.open else "0",
        "validity", str(event.validity_s),
        "expiry_ms", str(event.expiry_ms),
        "abandon_ms", str(event.abandon_ms),
        "threshold", str(event.auto_open_threshold),
        "prequeue_ms", str(event.prequeue_ms),
        "incr_on_expiry", "1" if event.incr_on_expiry else "0",
        "max_session", str(event.max_session_s),
    ]  # fmt: skip


_RENEW_REFUSALS: Final = {
    "ended": "The session has ended (completed or abandoned)",
    "expired": "Token corresponding to request id has expired",
    "capped": "The session has reached its longest (the event's max_session)",
    "gone": "The room has no session for this token (the event was reset)",
}


class SweepResult(tuple[int, int, int]):
    """What one :meth:`RoomStore.sweep` did: (expired, abandoned, incremented)."""

    @property
    def expired(self) -> int:
        return self[0]

    @property
    def abandoned(self) -> int:
        return self[1]

    @property
    def incremented(self) -> int:
        return self[2]


class RoomStore:
    """Every waiting-room event of a deployment, in one region's Redis.

    ``redis`` should be the app user's client (:func:`rideout.store.client.state_client`).
    ``clock`` gives epoch seconds; every time the store records comes from it.
    ``randbelow`` draws the pre-queue's random order (``secrets.randbelow``).
    """

    def __init__(
        self,
        redis: aioredis.Redis,
        *,
        clock: Callable[[], float] = time.time,
        region: str = "?",
        stream_length: int = DEFAULT_STREAM_LENGTH,
        randbelow: Callable[[int], int] = secrets.randbelow,
    ) -> None:
        self.redis = redis
        self.clock = clock
        self.randbelow = randbelow
        self.region = region
        self.stream_length = _validate.count("stream_length", stream_length, low=1)
        self._server = describe_server(redis, region)
        self._scripts = {
            name: StoreFunction(redis, routine) for name, routine in functions.ROOM.items()
        }

    # ---------------------------------------------------------------- plumbing

    @contextlib.contextmanager
    def errors(self, what: str) -> Iterator[None]:
        """redis-py's and the store's errors as the room's, naming `what`."""
        try:
            with store_errors(self._server, what):
                yield
        except NotWriter as exc:
            raise RoomNotWriter(str(exc)) from exc
        except StoreUnavailable as exc:
            raise RoomUnavailable(str(exc)) from exc

    def _raise(self, reply: object, what: str) -> None:
        """A pipelined command's error (``raise_on_error=False``) raised as the room's."""
        if isinstance(reply, Exception):
            with self.errors(what):
                raise reply

    def _now_ms(self) -> int:
        return to_ms(self.clock())

    async def _run(
        self, name: str, event_id: str, *args: str | int, extra: Sequence[str] = ()
    ) -> Any:
        # `extra`: more keys of the event's own slot (a tick's claim, a refresh record).
        event_keys = list(keys.waitingroom_event_keys(event_id).values())
        with self.errors(f"{name.lower()} {event_id}"):
            return await self._scripts[name](
                keys=[*event_keys, *extra],
                args=[self._now_ms(), self.stream_length, *args],
            )

    async def _index(self, command: Literal["SADD", "SREM"], event_id: str) -> None:
        with self.errors(f"{command.lower()} {event_id} (the index of events)"):
            if command == "SADD":
                await self.redis.sadd(keys.WAITINGROOM_INDEX, event_id)
            else:
                await self.redis.srem(keys.WAITINGROOM_INDEX, event_id)

    # ------------------------------------------------------------------ events

    async def create_event(self, event: EventSettings) -> None:
        """Add an event; :class:`EventExists` when its id is taken.

        The index of events (:meth:`list_events`, which the inlets and sweeps go by) is
        a key of its own slot, so no script touches it with the event's keys (Redis
        Cluster, docs/capacity.md): the id goes into it before the event is made, so a
        crash between leaves an id without an event (skipped), never an event nobody
        serves, and again after, so a delete of the same id meanwhile cannot drop it.
        """
        if not isinstance(event, EventSettings):
            raise InvalidRequest(f"event must be EventSettings, not {type(event).__name__}")
        await self._index("SADD", event.event_id)
        result = await self._run(
            "CREATE", event.event_id, event.event_id, *_settings_fields(event),
            "generation", _generation(),
        )  # fmt: skip
        await self._index("SADD", event.event_id)
        if _text(result) == "exists":
            raise EventExists(f"event {event.event_id!r} exists already")

    async def update_event(self, event_id: str, /, **changes: object) -> EventSettings:
        """Change an event's settings (any field of EventSettings but its id)."""
        current = await self.get_event(event_id)
        updated = current.changed(**changes)
        result = await self._run("UPDATE", event_id, event_id, *_settings_fields(updated))
        if _text(result) == "unknown":
            raise UnknownEvent(f"Invalid event ID: no event {event_id!r}")
        return updated

    async def delete_event(self, event_id: str) -> None:
        """Remove an event and every position, token and event it holds."""
        check_event_id(event_id)
        # Out of the index first: a crash between leaves an event the operator deletes
        # again, never an indexed id a create of the same id then loses.
        await self._index("SREM", event_id)
        result = await self._run("DELETE", event_id, event_id)
        if _text(result) == "unknown":
            raise UnknownEvent(f"Invalid event ID: no event {event_id!r}")

    async def get_event(self, event_id: str) -> EventSettings:
        """An event's settings; :class:`UnknownEvent` when there is none."""
        self._check_event(event_id)
        with self.errors(f"get_event {event_id}"):
            raw = await self.redis.hget(keys.waitingroom_event_keys(event_id)["event"], "json")
        if raw is None:
            raise UnknownEvent(f"Invalid event ID: no event {event_id!r}")
        return self._decode_event(raw, event_id)

    async def list_events(self) -> list[EventSettings]:
        """Every event, by id."""
        with self.errors("list_events"):
            ids = sorted(_text(i) for i in await self.redis.smembers(keys.WAITINGROOM_INDEX))
            async with self.redis.pipeline(transaction=False) as pipe:
                for event_id in ids:
                    pipe.hget(keys.waitingroom_event_keys(event_id)["event"], "json")
                raws = await pipe.execute()
        return [
            self._decode_event(raw, event_id)
            for event_id, raw in zip(ids, raws, strict=True)
            if raw is not None
        ]

    @staticmethod
    def _decode_event(raw: object, event_id: str) -> EventSettings:
        try:
            return EventSettings.from_dict(json.loads(_text(raw)))
        except ValueError as exc:
            raise StoreCorrupt(f"event {event_id!r}: stored settings unreadable: {exc}") from None

    @staticmethod
    def _check_event(event_id: object) -> str:
        try:
            return check_event_id(event_id)
        except ValueError:
            raise UnknownEvent(f"Invalid event ID: {str(event_id)[:80]!r}") from None

    @staticmethod
    def _check_request(request_id: object) -> str:
        try:
            return check_request_id(request_id)
        except ValueError as exc:
            raise InvalidRequest(f"Invalid request ID: {exc}") from None

    def _unknown(self, kind: str, event_id: str, request_id: str) -> None:
        if kind == "unknown":
            raise UnknownEvent(f"Invalid event ID: no event {event_id!r}")
        if kind == "noreq":
            raise UnknownRequest(f"Request ID not found: {request_id}")

    # --------------------------------------------------------------- positions

    async def assign(self, event_id: str, request_id: str | None = None) -> Position:
        """The request's position: a new one, or the one it has (idempotent).

        :class:`UnknownEvent`, :class:`RoomClosed` when the room takes no arrivals.
        """
        self._check_event(event_id)
        rid = new_request_id() if request_id is None else self._check_request(request_id)
        reply = await self._run("ASSIGN", event_id, rid, self.randbelow(LATE_DRAW))
        kind = _text(reply[0])
        self._unknown(kind, event_id, rid)
        if kind == "closed":
            raise RoomClosed(f"The waiting room of event {event_id!r} is closed")
        return _position(event_id, rid, reply)

    async def _position(self, event_id: str, request_id: str, *, touch: bool) -> list[Any]:
        self._check_event(event_id)
        rid = self._check_request(request_id)
        reply: list[Any] = await self._run("POSITION", event_id, rid, "1" if touch else "0")
        self._unknown(_text(reply[0]), event_id, rid)
        return reply

    async def position(self, event_id: str, request_id: str) -> Position:
        """The request's position; :class:`UnknownRequest` when it has none."""
        reply = await self._position(event_id, request_id, touch=False)
        return _position(event_id, request_id, reply)

    async def touch(self, event_id: str, request_id: str) -> None:
        """Count a poll of the position (it is not abandoned while its client polls)."""
        await self._position(event_id, request_id, touch=True)

    async def _polled(self, event_id: str, request_id: str) -> list[Any]:
        try:
            return await self._position(event_id, request_id, touch=True)
        except RoomNotWriter:
            return await self._position(event_id, request_id, touch=False)

    async def poll(self, event_id: str, request_id: str) -> Position:
        """:meth:`position` and :meth:`touch` in one round trip (the read alone on a
        read-only replica)."""
        return _position(event_id, request_id, await self._polled(event_id, request_id))

    async def poll_context(self, event_id: str) -> tuple[EventSettings, str]:
        """An event's settings and its generation (a value that changes when the event
        is reset, deleted and created again), in one read; :class:`UnknownEvent`."""
        self._check_event(event_id)
        with self.errors(f"poll_context {event_id}"):
            raw, generation = await self.redis.hmget(
                keys.waitingroom_event_keys(event_id)["event"], ["json", "generation"]
            )
        if raw is None:
            raise UnknownEvent(f"Invalid event ID: no event {event_id!r}")
        return self._decode_event(raw, event_id), "" if generation is None else _text(generation)

    async def lookup(self, event_id: str, request_id: str, *, touch: bool) -> tuple[Position, bool]:
        """The position as its record stands, without a script (the event is the
        caller's to check: :meth:`poll_context`), and whether its abandonment clock was
        restarted (``touch``; not on a read-only replica). :class:`UnknownRequest`."""
        self._check_event(event_id)
        rid = self._check_request(request_id)
        event_keys = keys.waitingroom_event_keys(event_id)
        with self.errors(f"lookup {event_id}"):
            async with self.redis.pipeline(transaction=False) as pipe:
                pipe.hget(event_keys["requests"], rid)
                if touch:  # only waiting positions are in `seen`: XX touches nothing else
                    pipe.zadd(event_keys["seen"], {rid: self._now_ms()}, xx=True)
                replies = await pipe.execute(raise_on_error=False)
        touched = False
        with contextlib.suppress(RoomNotWriter):
            for reply in replies:
                self._raise(reply, f"lookup {event_id}")
            touched = touch
        self._raise(replies[0], f"lookup {event_id}")
        if replies[0] is None:
            raise UnknownRequest(f"Request ID not found: {rid}")
        return _record(event_id, rid, replies[0]), touched

    async def touch_many(self, touches: Mapping[str, Mapping[str, float]]) -> bool:
        """Restart waiting positions' abandonment clocks, ``{event_id: {request_id:
        poll time}}``, in one round trip (nothing for a position that no longer waits);
        False on a read-only replica, where nothing is written."""
        with self.errors("touch"):
            async with self.redis.pipeline(transaction=False) as pipe:
                for event_id, polls in touches.items():
                    seen = keys.waitingroom_event_keys(self._check_event(event_id))["seen"]
                    scores = {
                        self._check_request(r): math.floor(t * 1000) for r, t in polls.items()
                    }
                    pipe.zadd(seen, scores, xx=True)
                replies = await pipe.execute(raise_on_error=False)
        try:
            for reply in replies:
                self._raise(reply, "touch")
        except RoomNotWriter:
            return False
        return True

    async def expiry(self, event_id: str, request_id: str) -> Expiry:
        """How long the position can still take its token (see :class:`ExpiryState`);
        counts as a poll, as :meth:`poll` does."""
        settings = await self.get_event(event_id)
        reply = await self._polled(event_id, request_id)
        record = _parse(request_id, [*reply[1:4], *reply[6:9]])
        return position_expiry(
            record, _int(reply[4], "serving"), _opt_int(reply[5], "servable"),
            _int(reply[9], "max_expired"), settings.expiry_ms, self._now_ms(),
        )  # fmt: skip

    # ------------------------------------------------------------------ tokens

    async def claim_token(
        self, event_id: str, request_id: str, *, validity: float | None = None
    ) -> TokenGrant:
        """The claims of the position's token, recorded on the first call.

        :class:`NotServedYet`, :class:`PositionExpired`, :class:`SessionEnded`,
        :class:`UnknownRequest`. ``validity`` (seconds) overrides the event's for this
        call only (the first call's decides; later calls return the recorded claims).
        """
        self._check_event(event_id)
        rid = self._check_request(request_id)
        override = ""
        if validity is not None:
            seconds = _validate.seconds("validity", validity, minimum=1.0)
            if seconds > MAX_VALIDITY:
                raise InvalidRequest(f"validity must be at most {MAX_VALIDITY:g} seconds")
            override = str(math.ceil(seconds))
        reply = await self._run("CLAIM", event_id, rid, override)
        kind = _text(reply[0])
        self._unknown(kind, event_id, rid)
        if kind == "notyet":
            raise NotServedYet("Request ID not being served yet")
        if kind == "expired":
            raise PositionExpired("Queue position has expired")
        if kind == "ended":
            raise SessionEnded.for_status(_int(reply[1], "status"))
        return TokenGrant(
            event_id, rid, _int(reply[1], "q"), _int(reply[2], "iat"), _int(reply[3], "exp"),
            first=kind == "new",
        )  # fmt: skip

    async def renew(
        self,
        event_id: str,
        request_id: str,
        *,
        jti: str | None,
        issued_at: int,
        queue_position: int,
    ) -> Renewal:
        """Renew an active session for the refresh token whose (verified) claims are
        ``jti`` (None for the first set's, which has none), ``issued_at`` and
        ``queue_position``: a new ``exp`` (now + the event's ``validity``, within
        ``max_session``), and a new refresh-token ``jti`` the next renewal must present.

        Atomic: of concurrent renewals with one refresh token, exactly one wins; the
        others, and any later use of that token, get :class:`RefreshTokenReused`.
        :class:`SessionEnded` when the session was completed, abandoned, has expired,
        reached ``max_session``, or is gone (the event was reset).
        """
        self._check_event(event_id)
        rid = self._check_request(request_id)
        new_jti = secrets.token_urlsafe(16)
        iat = _validate.count("issued_at", issued_at)
        q = _validate.count("queue_position", queue_position, low=1)
        reply = await self._run(
            "RENEW", event_id, rid, "" if jti is None else jti, iat, q, new_jti,
            extra=[keys.waitingroom_refresh(event_id, rid)],
        )  # fmt: skip
        kind = _text(reply[0])
        self._unknown(kind, event_id, rid)
        if kind == "reused":
            raise RefreshTokenReused(
                "Refresh token already used: each renewal issues a new one, use the latest"
            )
        if kind != "ok":
            raise SessionEnded(_RENEW_REFUSALS.get(kind, "The session has ended"))
        return Renewal(
            event_id, rid, _int(reply[1], "q"), _int(reply[2], "iat"), _int(reply[3], "exp"),
            first=False, refresh_jti=new_jti, started_at=_int(reply[4], "start"),
        )  # fmt: skip

    async def update_session(self, event_id: str, request_id: str, status: int) -> None:
        """End a session: 1 completed, -1 abandoned; only a session still at 0 (else
        :class:`UnknownRequest`, as AWS's 404)."""
        self._check_event(event_id)
        rid = self._check_request(request_id)
        if isinstance(status, bool) or status not in (1, -1):
            raise InvalidRequest(f"status must be 1 (completed) or -1 (abandoned), not {status!r}")
        result = _text(await self._run("SESSION", event_id, rid, status))
        self._unknown(result, event_id, rid)
        if result == "conflict":
            raise UnknownRequest("Request ID doesn't exist or status already set.")

    async def session_status(self, event_id: str, request_id: str) -> int | None:
        """0 active, 1 completed, -1 abandoned; None when the request has no token."""
        self._check_event(event_id)
        rid = self._check_request(request_id)
        with self.errors(f"session_status {event_id}"):
            raw = await self.redis.hget(keys.waitingroom_event_keys(event_id)["requests"], rid)
        if raw is None:
            return None
        status = _text(raw).rsplit(",", 1)[-1]
        return None if status == "" else _int(status, "session status")

    async def num_active_tokens(self, event_id: str) -> int:
        """Tokens not expired whose session is still active (status 0)."""
        self._check_event(event_id)
        return (await self.status(event_id))[1]

    async def expired_tokens(
        self, event_id: str, *, cursor: str | None = None, limit: int = 1000
    ) -> ExpiredPage:
        """Request ids whose tokens expired (whatever their session status), oldest
        first, ``limit`` per page; pass the page's ``cursor`` for the next one."""
        await self.get_event(event_id)
        limit = _validate.count("limit", limit, low=1, high=10_000)
        offset = 0
        if cursor is not None:
            if not isinstance(cursor, str) or not cursor.isdigit() or len(cursor) > 12:
                raise InvalidRequest(f"cursor must be one a page returned, not {cursor!r}")
            offset = int(cursor)
        key = keys.waitingroom_event_keys(event_id)["tokens"]
        now = math.floor(self.clock())
        with self.errors(f"expired_tokens {event_id}"):
            found = await self.redis.zrangebyscore(
                key, "-inf", f"({now}", start=offset, num=limit + 1
            )
        ids = tuple(_text(i) for i in found[:limit])
        more = len(found) > limit
        return ExpiredPage(ids, str(offset + limit) if more else None)

    # ---------------------------------------------------------------- counters

    async def status(self, event_id: str) -> tuple[Counters, int, int]:
        """The event's counters, active sessions (:meth:`num_active_tokens`) and
        capacity held (:meth:`holding`), read at one moment."""
        reply = await self._run("STATUS", event_id)
        if _text(reply[0]) == "unknown":
            raise UnknownEvent(f"Invalid event ID: no event {event_id!r}")
        flat = [_text(x) for x in reply[0]]
        raw = dict(zip(flat[::2], flat[1::2], strict=True))
        names = Counters.__dataclass_fields__
        values = {name: _int(raw.get(name, "0"), f"counter {name}") for name in names}
        return Counters(**values), _int(reply[1], "active"), _int(reply[2], "holding")

    async def counters(self, event_id: str) -> Counters:
        """Every counter of the event, read at one moment."""
        self._check_event(event_id)
        return (await self.status(event_id))[0]

    async def holding(self, event_id: str) -> int:
        """Sessions holding capacity: active tokens plus admitted positions that have
        not taken theirs yet (what a MaxSize inlet subtracts)."""
        self._check_event(event_id)
        return (await self.status(event_id))[2]

    async def serving(self, event_id: str) -> int:
        """The serving counter."""
        return (await self.counters(event_id)).serving

    async def waiting(self, event_id: str) -> int:
        """Positions still waiting: ``queue - tokens - expired - abandoned`` (expired and
        abandoned positions never count, unlike AWS's #208)."""
        return (await self.counters(event_id)).waiting

    async def increment_serving(
        self, event_id: str, by: int, *, claim: tuple[str, int, float] | None = None
    ) -> int:
        """Move the serving counter by `by` (never below the highest position that
        took a token, nor below 0); the new value.

        ``claim`` ``(task, tick, ttl)``: do it only if no other process did it for
        this tick (an inlet's run; the ``-1`` answer means another one did).
        """
        self._check_event(event_id)
        by = _validate.count("increment_by", by, low=-(10**12), high=10**12)
        return await self._move(event_id, "by", by, claim)

    async def admit_up_to(
        self, event_id: str, max_size: int, *, claim: tuple[str, int, float] | None = None
    ) -> int:
        """A MaxSize inlet's step: admit ``max_size - holding``, never negative nor past
        the queue (:func:`~rideout.waitingroom.model.max_size_increment`), at once."""
        self._check_event(event_id)
        max_size = _validate.count("max_size", max_size, low=0, high=10**12)
        return await self._move(event_id, "max_size", max_size, claim)

    async def admit(
        self, event_id: str, by: int, *, claim: tuple[str, int, float] | None = None
    ) -> int:
        """A periodic inlet's step: admit `by`, never past the queue
        (:func:`~rideout.waitingroom.model.queue_cap`), at once."""
        self._check_event(event_id)
        by = _validate.count("by", by, low=0, high=10**12)
        return await self._move(event_id, "admit", by, claim)

    async def _move(
        self, event_id: str, how: str, n: int, claim: tuple[str, int, float] | None
    ) -> int:
        extra: list[str] = []
        ttl = ""
        if claim is not None:
            task, tick, seconds = claim
            extra = [keys.waitingroom_tick(event_id, task, tick)]
            ttl = str(max(1, round(seconds * 1000)))
        reply = await self._run("INCREMENT", event_id, how, n, ttl, extra=extra)
        kind = _text(reply[0])
        if kind == "unknown":
            raise UnknownEvent(f"Invalid event ID: no event {event_id!r}")
        if kind == "claimed":
            return -1
        return _int(reply[1], "serving")

    async def use_stamp(self, event_id: str, stamp: str, ttl: float) -> bool:
        """Whether a proof-of-work stamp is new for the event (then it is kept `ttl`
        seconds, so it cannot be used twice)."""
        self._check_event(event_id)
        key = keys.waitingroom_stamp(event_id, pow_digest(event_id, stamp).hex())
        with self.errors(f"use_stamp {event_id}"):
            return bool(await self.redis.set(key, "1", nx=True, px=max(1, round(ttl * 1000))))

    async def claim_tick(self, event_id: str, task: str, tick: int, ttl: float) -> bool:
        """Whether this process is the one to run `task` for `tick` (``SET NX``, kept
        `ttl` seconds): once per tick across every process of the region."""
        self._check_event(event_id)
        key = keys.waitingroom_tick(event_id, task, tick)
        with self.errors(f"claim_tick {event_id}"):
            return bool(await self.redis.set(key, "1", nx=True, px=max(1, round(ttl * 1000))))

    async def sweep(
        self, event_id: str, *, batch: int = 500, outage_after: float = OUTAGE_AFTER
    ) -> SweepResult:
        """Expire and abandon due positions (one batch of each), and, with
        ``incr_on_expiry``, move the serving counter past the dead ones it reached.

        A sweep more than `outage_after` seconds after the previous one follows an
        outage (no writer could sweep, nor count a poll), and a sweep by another region
        than the previous one follows a failover: either restarts every waiting
        position's abandonment clock, so that nobody is abandoned for not polling while
        the room could not be reached (a store outage; a region failover, whose
        visitors find the new region only as fast as DNS and their backoff let them).
        """
        self._check_event(event_id)
        reply = await self._run(
            "SWEEP", event_id, _validate.count("batch", batch, low=1),
            round(_validate.seconds("outage_after", outage_after) * 1000), self.region,
        )  # fmt: skip
        if _int(reply[0], "sweep") < 0:
            raise UnknownEvent(f"Invalid event ID: no event {event_id!r}")
        return SweepResult(_int(x, "sweep") for x in reply)

    async def release_prequeue(self, event_id: str, *, batch: int = 1000) -> int:
        """Number pre-queued arrivals in random order once the pre-queue closed (one
        batch); how many are still pre-queued."""
        self._check_event(event_id)
        left = _int(await self._run("RELEASE_PREQUEUE", event_id, batch), "prequeue")
        if left < 0:
            raise UnknownEvent(f"Invalid event ID: no event {event_id!r}")
        return left

    async def serving_history(self, event_id: str, limit: int = 64) -> list[tuple[float, int]]:
        """The serving counter's latest moves, ``[(time, counter), ...]`` oldest first."""
        self._check_event(event_id)
        key = keys.waitingroom_event_keys(event_id)["servable"]
        with self.errors(f"serving_history {event_id}"):
            members = await self.redis.zrange(key, -limit, -1)
        out = []
        for member in members:
            counter, _, ms = _text(member).partition(":")
            out.append((_int(ms, "servable time") / 1000, _int(counter, "servable counter")))
        out.sort()
        return out

    async def reset(self, event_id: str) -> None:
        """Zero the event's counters and forget its positions and tokens (its settings
        and events stream stay)."""
        self._check_event(event_id)
        if _text(await self._run("RESET", event_id, _generation())) == "unknown":
            raise UnknownEvent(f"Invalid event ID: no event {event_id!r}")
