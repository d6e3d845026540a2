"""The auction's state in Redis, keyed by room and by user, never by connection.

Every change is one atomic Lua script (:mod:`rideout.store.scripts`), so a bid costs
one round trip and any app server of any zone, or of the other region after a
failover, sees the same state. Nothing here holds state between calls: an
:class:`AuctionStore` is a client plus settings.

Data layout (key names from :mod:`rideout.store.keys`):

``rideout:epoch`` (string)
    The writer's epoch, an integer the failover controller raises on every promotion.
    Unset reads as ``0``. A bid carries the epoch its server believes its writer has;
    the bid script refuses it (``stale_epoch``) when the stored epoch differs, which
    fences servers still attached to a demoted writer.
``epoch_copy(key)`` (string, one per hash slot)
    The same integer, in the slot of the keys a script touches: what the scripts read
    (``rideout:epoch`` is read by the controller, ``current_epoch`` and the status),
    so that no script names a key of another slot. The controller writes the epoch and
    every copy in one script (:mod:`rideout.store.replication`).
``room_state(room)`` (hash)
    ``bid`` (current highest amount), ``bidder`` (its ``sub``), ``bids`` (accepted
    bids), ``updated_at`` (ms, the writer's ``TIME``), ``offset`` (id of the room's
    newest stream entry) and ``trimmed`` (id of the newest entry ever trimmed from the
    stream, absent until something was). An empty room has no hash; its state reads
    as ``{"bid": 0, "bidder": None, "bids": 0, "updated_at": None}``.
``room_stream(room)`` (stream)
    One entry per accepted bid, in order; the entry id is the **offset**. Trimmed on
    every accepted bid to at most ``history_size`` entries (exactly) and to entries
    younger than ``history_ttl`` (``MINID``; ids are the writer's milliseconds). A
    quiet room is not trimmed until its next bid, which only makes more history
    replayable. Because trimming always removes a prefix and the script records the
    last id it removed, ``get_state`` knows exactly which positions it can replay.
``room_session(room, sub)`` (hash)
    ``last_bid``, ``last_bid_room`` (the room), ``last_bid_id`` and ``last_position``
    (``{"epoch":E,"offset":"ID"}``) of the user's latest accepted bid in the room.
``bid_ack(sub, room, request_id)`` (string, expires after ``ack_ttl``)
    The ack JSON of the first decision about that request:
    ``{"accepted","reason","epoch","offset","room","state"}``. Rejections
    (``too_low``, ``out_of_bounds``) are stored too: the first decision for a
    ``(sub, room, request id)`` is final, so a retry never turns a rejection into an
    accept or applies a bid twice; a new bid needs a new id. The same id in another
    room is another bid. ``stale_epoch`` refusals are not stored (nothing was decided;
    the retry belongs on the current writer).
``user_bid_ack(sub, room, request_id)``, ``legacy_bid_ack(sub, request_id)`` (strings, read only)
    Acks stored under the user's tag, before acks moved under the room's (the second
    from before ids were scoped per room). Where ``AuctionSettings.legacy_acks`` the bid
    script still honours them (the second only for the room it names), so a retry
    across an upgrade is not applied twice; nothing writes them any more.

Every key a bid touches is under the room's hash tag (one slot of a Redis Cluster),
but for those read-only acks, which a cluster's deployment has none of
(``legacy_acks=False``).

Stream entry format (the contract with the fan-out hub): every entry of
``room_stream(room)`` has exactly two fields,

- ``state``: the room's public state after the change, a JSON object
  ``{"bid": int, "bidder": str, "bids": int, "updated_at": int}``, and
- ``epoch``: the writer's epoch when the entry was written, a decimal integer.

The entry's position is ``Position(epoch, entry_id)``. A hub reads with
``XREAD`` (or :meth:`AuctionStore.read_updates`) from the last id it delivered and
turns each entry into ``(position, state)`` with :func:`decode_stream_entry`.

Redis must not evict these keys (``maxmemory-policy noeviction``, the default): an
evicted ack breaks exactly-once, and an evicted stream loses history that ``get_state``
can detect only while no bid followed.

Errors: redis-py never leaks out. :class:`StoreUnavailable` (with the server named)
for connection failures, timeouts and a server that refuses for now;
:class:`NotWriter` (a :class:`StoreUnavailable`) when the server is a read-only
replica; :class:`StoreCorrupt` when Redis holds data of another shape;
:class:`~rideout.store.acl.CredentialsRejected` and
:class:`~rideout.store.acl.PermissionDenied` when the client's ACL user is refused.
Bad arguments raise ``ValueError`` before anything is sent.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any, Final, NamedTuple

import redis.asyncio as aioredis
from redis.exceptions import (
    AuthenticationError,
    MaxConnectionsError,
    NoPermissionError,
    ReadOnlyError,
    RedisError,
    ResponseError,
)
from redis.typing import KeyT, StreamIdT

from rideout.protocol import MAX_AMOUNT, MAX_EPOCH, Position, is_valid_offset
from rideout.store import functions, keys
from rideout.store.acl import CredentialsRejected, PermissionDenied
from rideout.store.errors import NotWriter, StoreCorrupt, StoreError, StoreUnavailable
from rideout.store.functions import StoreFunction
from rideout.store.pipelining import ScriptPipeliner
from rideout.store.sync import SyncRule, SyncVerdict

__all__ = [
    "START",
    "AuctionSettings",
    "AuctionStore",
    "BidResult",
    "NotRecovered",
    "NotWriter",
    "ProbeOutcome",
    "Reason",
    "RoomEntry",
    "StateResult",
    "StoreCorrupt",
    "StoreError",
    "StoreUnavailable",
    "bid_call",
    "decode_stream_entry",
    "describe_server",
    "empty_state",
    "store_errors",
]

START: Final = "0-0"
"""The offset of a room with no history (before its first entry)."""

_EPOCH_RE: Final = re.compile(r"[0-9]{1,19}")
_UNAVAILABLE_RE: Final = re.compile(
    r"(?:^|-)(?:BUSY|LOADING|MASTERDOWN|OOM|NOREPLICAS|MISCONF|TRYAGAIN|CLUSTERDOWN)\b"
)


# ------------------------------------------------------------------------------ values


class Reason(StrEnum):
    """Why a bid was not accepted (:attr:`BidResult.reason`)."""

    TOO_LOW = "too_low"
    """Below the current bid plus ``min_increment``."""
    OUT_OF_BOUNDS = "out_of_bounds"
    """Outside ``[min_bid, max_bid]``."""
    STALE_EPOCH = "stale_epoch"
    """The server's epoch is not the writer's: it is fenced. Nothing was changed."""


class NotRecovered(StrEnum):
    """Why :meth:`AuctionStore.get_state` could not replay (:attr:`StateResult.reason`)."""

    EPOCH_CHANGED = "epoch_changed"
    """The position names another writer's history (a failover happened since)."""
    AHEAD = "ahead"
    """The position is newer than this writer's history (writes lost in a failover)."""
    TRIMMED = "trimmed"
    """Entries after the position were trimmed (history_size / history_ttl)."""
    TOO_MANY = "too_many"
    """More entries were missed than the replay limit."""


@dataclass(frozen=True, slots=True)
class AuctionSettings:
    """The auction's rules and how much history is kept. Immutable and validated.

    ``history_ttl`` and ``ack_ttl`` are seconds (fractions allowed, at least 1 ms).
    ``max_replay`` caps the entries one ``get_state`` replays (None: ``history_size``).
    ``legacy_acks``: the bid script also reads the acks stored under the user's tag by
    earlier versions (a retry across an upgrade is not applied twice); keys of another
    hash slot, so off on a cluster, which has none.
    """

    min_bid: int = 1
    max_bid: int = 10**9
    min_increment: int = 1
    history_size: int = 1000
    history_ttl: float = 3600.0
    ack_ttl: float = 86400.0
    max_replay: int | None = None
    legacy_acks: bool = True

    def __post_init__(self) -> None:
        _check_int("min_bid", self.min_bid, 1, MAX_AMOUNT)
        _check_int("max_bid", self.max_bid, 1, MAX_AMOUNT)
        if self.min_bid > self.max_bid:
            raise ValueError(f"min_bid ({self.min_bid}) must not exceed max_bid ({self.max_bid})")
        _check_int("min_increment", self.min_increment, 1, MAX_AMOUNT)
        _check_int("history_size", self.history_size, 1, 10**9)
        _check_seconds("history_ttl", self.history_ttl)
        _check_seconds("ack_ttl", self.ack_ttl)
        if self.max_replay is not None:
            _check_int("max_replay", self.max_replay, 1, 10**9)
        if not isinstance(self.legacy_acks, bool):
            raise ValueError(f"legacy_acks must be a bool, not {self.legacy_acks!r}")

    @property
    def replay_limit(self) -> int:
        """The most entries one ``get_state`` replays."""
        return self.history_size if self.max_replay is None else self.max_replay


class RoomEntry(NamedTuple):
    """One change of a room: where it is in the history and the state after it."""

    position: Position
    state: dict[str, Any]


@dataclass(frozen=True, slots=True)
class BidResult:
    """The decision about one bid.

    ``position`` is the new entry's position when accepted, else the room's current
    position (for ``stale_epoch``: with the writer's actual epoch, which the server
    should adopt or reconnect for). ``state`` is the room state after the bid (when
    accepted) or as it was when the bid was refused. ``duplicate`` is True when this is
    the stored decision of an earlier call with the same ``(sub, room, request_id)``:
    then every field is the original one, whatever amount the retry named.
    """

    accepted: bool
    reason: str | None
    position: Position
    state: dict[str, Any]
    duplicate: bool = False
    replicas: int | None = None  # replicas that had the write in time (with wait_replicas)
    sync: SyncVerdict | None = None  # sync replication's verdict (with a SyncRule)


@dataclass(frozen=True, slots=True)
class ProbeOutcome:
    """What one store probe saw (:meth:`AuctionStore.probe`).

    ``role`` is ``writer`` (the write and its read-back went through), ``replica``
    (a read-only replica answered) or ``stale`` (fenced: the store's ``epoch`` is not
    the caller's). ``replicas`` is how many replicas had the write in time when a
    ``WAIT`` was asked for, else None.
    """

    role: str
    epoch: int
    replicas: int | None = None


@dataclass(frozen=True, slots=True)
class StateResult:
    """A room's state for one user, and what the user missed since a position.

    ``session`` is the user's session in the room (``user`` on the wire; ``{}`` before
    the user's first accepted bid there). ``recovered`` is True when ``missed`` holds every change after the
    requested position, in order; otherwise ``missed`` is empty, ``reason`` says why
    (a :class:`NotRecovered` value) and the client relies on ``state`` alone.
    Without a ``since`` position, ``recovered`` is False and ``reason`` None.
    """

    room: str
    state: dict[str, Any]
    session: dict[str, Any]
    position: Position
    recovered: bool
    missed: tuple[RoomEntry, ...] = ()
    reason: str | None = None


def empty_state() -> dict[str, Any]:
    """The state of a room that has had no accepted bid."""
    return {"bid": 0, "bidder": None, "bids": 0, "updated_at": None}


# ------------------------------------------------------------------------- validation


def _check_int(name: str, value: object, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an integer, not {value!r}")
    if not low <= value <= high:
        raise ValueError(f"{name} must be from {low} to {high}, not {value}")


def _check_seconds(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{name} must be a number of seconds, not {value!r}")
    if not (math.isfinite(value) and value >= 0.001):
        raise ValueError(f"{name} must be a finite number of seconds >= 0.001, not {value!r}")


def _millis(seconds: float) -> int:
    return max(1, math.ceil(seconds * 1000))


def bid_call(
    room: str, sub: str, amount: int, request_id: str, epoch: int, settings: AuctionSettings
) -> tuple[list[str], list[str]]:
    """The bid script's ``KEYS`` and ``ARGV`` (:data:`rideout.store.scripts.BID`): the one
    place that lays them out, for :meth:`AuctionStore.bid` and the benchmarks that run
    the script on its own."""
    s = settings
    state = keys.room_state(room)
    legacy = (
        [keys.user_bid_ack(sub, room, request_id), keys.legacy_bid_ack(sub, request_id)]
        if s.legacy_acks
        else ["", ""]
    )
    return (
        [state, keys.room_stream(room), keys.room_session(room, sub),
         keys.bid_ack(sub, room, request_id)],
        [
            str(epoch), str(amount), room, sub, request_id,
            str(s.min_bid), str(s.max_bid), str(s.min_increment), str(s.history_size),
            str(_millis(s.history_ttl)), str(_millis(s.ack_ttl)), keys.epoch_copy(state),
            *legacy,
        ],
    )  # fmt: skip


def _check_text(name: str, value: object) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"{name} must be a non-empty string, not {value!r}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"{name} must be valid Unicode text (no lone surrogates)") from None
    return value


def _check_epoch(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_EPOCH:
        raise ValueError(f"epoch must be an integer from 0 to {MAX_EPOCH}, not {value!r}")
    return value


def _canonical_offset(value: object) -> str:
    """A stream entry id without leading zeros; ValueError when it is not one."""
    if not is_valid_offset(value):
        raise ValueError(
            f"offset must be a stream entry id such as '1700000000000-0', not {value!r}"
        )
    ms, seq = value.split("-")
    return f"{int(ms)}-{int(seq)}"


# ---------------------------------------------------------------------------- decoding


def _text(value: object, what: str) -> str:
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            raise StoreCorrupt(f"{what} is not UTF-8") from None
    if isinstance(value, str):
        return value
    raise StoreCorrupt(f"{what} is a {type(value).__name__}, not text")


def _epoch(value: object, what: str) -> int:
    if value is None:
        return 0
    text = _text(value, what)
    if _EPOCH_RE.fullmatch(text) is None or int(text) > MAX_EPOCH:
        raise StoreCorrupt(f"{what} holds {text[:40]!r}, not an integer epoch")
    return int(text)


def _json_object(text: str, what: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        raise StoreCorrupt(f"{what} is not valid JSON") from None
    if not isinstance(value, dict):
        raise StoreCorrupt(f"{what} is not a JSON object")
    return value


def decode_stream_entry(room: str, entry_id: str | bytes, fields: Mapping[Any, Any]) -> RoomEntry:
    """Turn one entry of ``room_stream(room)`` (as XREAD/XRANGE give it) into a RoomEntry.

    ``fields`` maps ``state`` (JSON object) and ``epoch`` (decimal integer); str or
    bytes are accepted. Raises :class:`StoreCorrupt` for anything else.
    """
    where = f"room {room!r} stream entry {entry_id!r}"
    offset = _text(entry_id, where)
    if not is_valid_offset(offset):
        raise StoreCorrupt(f"{where}: the id is not a stream entry id")
    values = {_text(k, where): v for k, v in fields.items()}
    if "state" not in values or "epoch" not in values:
        raise StoreCorrupt(f"{where} lacks the 'state' and 'epoch' fields")
    epoch = _epoch(values["epoch"], f"{where} field 'epoch'")
    state = _json_object(_text(values["state"], where), f"{where} field 'state'")
    return RoomEntry(Position(epoch, offset), state)


def _pairs(flat: object, what: str) -> dict[str, str]:
    if not isinstance(flat, list) or len(flat) % 2:
        raise StoreCorrupt(f"{what}: unexpected reply {flat!r:.80}")
    return {_text(k, what): _text(v, what) for k, v in zip(flat[::2], flat[1::2], strict=True)}


def _int_field(fields: Mapping[str, str], name: str, default: int | None, what: str) -> int | None:
    value = fields.get(name)
    if value is None:
        return default
    try:
        return int(value)
    except ValueError:
        raise StoreCorrupt(f"{what} field {name!r} holds {value[:40]!r}, not an integer") from None


def _room_state(fields: Mapping[str, str], what: str) -> dict[str, Any]:
    state = empty_state()
    state["bid"] = _int_field(fields, "bid", 0, what)
    state["bidder"] = fields.get("bidder")
    state["bids"] = _int_field(fields, "bids", 0, what)
    state["updated_at"] = _int_field(fields, "updated_at", None, what)
    return state


def _offset_field(fields: Mapping[str, str], what: str) -> str:
    offset = fields.get("offset", START)
    if not is_valid_offset(offset):
        raise StoreCorrupt(f"{what} field 'offset' holds {offset[:40]!r}, not a stream id")
    return offset


def _session(fields: Mapping[str, str], what: str) -> dict[str, Any]:
    session: dict[str, Any] = dict(fields)
    if "last_bid" in fields:
        session["last_bid"] = _int_field(fields, "last_bid", None, what)
    if "last_position" in fields:
        session["last_position"] = _json_object(fields["last_position"], f"{what} last_position")
    return session


def _state_result(
    room: str,
    epoch_reply: object,
    state_reply: object,
    status_reply: object,
    entries: object,
    what: str,
) -> StateResult:
    """A StateResult (with no session) from the parts of a GET_ROOM reply."""
    epoch = _epoch(epoch_reply, keys.EPOCH)
    fields = _pairs(state_reply, f"{what}: room state")
    status = _text(status_reply, what)
    missed: list[RoomEntry] = []
    if status == "recovered":
        if not isinstance(entries, list):
            raise StoreCorrupt(f"{what}: unexpected entries {entries!r:.80}")
        for entry in entries:
            if not isinstance(entry, list) or len(entry) != 2:
                raise StoreCorrupt(f"{what}: unexpected entry {entry!r:.80}")
            missed.append(decode_stream_entry(room, entry[0], _pairs(entry[1], f"{what}: entry")))
    return StateResult(
        room=room,
        state=_room_state(fields, f"{what}: room state"),
        session={},
        position=Position(epoch, _offset_field(fields, f"{what}: room state")),
        recovered=status == "recovered",
        missed=tuple(missed),
        reason=None if status in ("none", "recovered") else status,
    )


def _position_of(ack: Mapping[str, Any], what: str) -> Position:
    epoch, offset = ack.get("epoch"), ack.get("offset")
    if isinstance(epoch, bool) or not isinstance(epoch, int) or not is_valid_offset(offset):
        raise StoreCorrupt(f"{what} has no valid position")
    return Position(epoch, offset)


def _bid_result(reply: object, what: str) -> BidResult:
    if not isinstance(reply, list) or len(reply) != 2:
        raise StoreCorrupt(f"{what}: unexpected reply {reply!r:.80}")
    kind, text = _text(reply[0], what), _text(reply[1], what)
    ack = _json_object(text, f"{what} ack")
    accepted, reason, state = ack.get("accepted"), ack.get("reason"), ack.get("state")
    if not isinstance(accepted, bool) or not isinstance(state, dict):
        raise StoreCorrupt(f"{what} ack is malformed: {text[:80]!r}")
    if reason is not None and not isinstance(reason, str):
        raise StoreCorrupt(f"{what} ack has a malformed reason: {text[:80]!r}")
    return BidResult(
        accepted=accepted,
        reason=reason,
        position=_position_of(ack, f"{what} ack"),
        state=state,
        duplicate=kind == "dup",
    )


# -------------------------------------------------------------------------- the store


_WAIT_ON_REPLICA: Final = "WAIT cannot be used with replica"


def describe_server(client: aioredis.Redis, region: str) -> str:
    """How errors name `client`'s server: its region and address."""
    kwargs = client.connection_pool.connection_kwargs
    where = kwargs.get("path") or f"{kwargs.get('host', '?')}:{kwargs.get('port', '?')}"
    return f"the Redis of region {region} at {where}"


def _translate(exc: BaseException, server: str, what: str) -> StoreError:
    text = str(exc)
    if isinstance(exc, AuthenticationError):
        return CredentialsRejected(f"{what}: {text}")  # the text names server and file
    if isinstance(exc, NoPermissionError):
        return PermissionDenied(f"{what}: {server}: {text}")
    if isinstance(functions.as_replica_refusal(exc), ReadOnlyError) or (
        isinstance(exc, ResponseError) and _WAIT_ON_REPLICA in text
    ):
        # A write inside a script on a replica fails with "... -READONLY ..." (pipelined
        # scripts' errors come as the server wrote them), and a script that wrote
        # nothing (fenced, or a duplicate) then has its WAIT refused: either way the
        # region is not the writer (not a failing store).
        return NotWriter(f"{what}: {server} is a read-only replica, not the region's writer")
    if isinstance(exc, ResponseError):
        if text.startswith("rideout:") or "WRONGTYPE" in text:
            return StoreCorrupt(f"{what}: {server}: {text}")
        if _UNAVAILABLE_RE.search(text):
            return StoreUnavailable(f"{what}: {server} refused for now: {text}")
        return StoreError(f"{what}: {server} refused: {text}")
    if isinstance(exc, MaxConnectionsError):
        return StoreUnavailable(
            f"{what}: every connection of the pool to {server} is busy ({text}); "
            "use a larger or a blocking connection pool"
        )
    return StoreUnavailable(f"{what}: {server} is unavailable ({type(exc).__name__}: {text})")


@contextmanager
def store_errors(server: str, what: str) -> Iterator[None]:
    """redis-py's exceptions (and OSError) as the store's own, naming `server` and `what`
    (for other stores over the same Redis: the revocations', the waiting room's)."""
    try:
        yield
    except (RedisError, OSError) as exc:
        raise _translate(exc, server, what) from exc


_describe, _store_errors = describe_server, store_errors


class AuctionStore:
    """The auction's state in one region's Redis. Cheap: make one per client.

    ``client`` should come from :func:`rideout.store.client.state_client` (its retry
    of a dropped connection may run a bid twice; the idempotency record turns the
    second run into a ``duplicate`` of the first). ``region`` names the server in
    error messages.
    """

    def __init__(self, client: aioredis.Redis, settings: AuctionSettings, region: str) -> None:
        if not isinstance(settings, AuctionSettings):
            raise TypeError(f"settings must be AuctionSettings, not {type(settings).__name__}")
        self.client = client
        self.settings = settings
        self.region = _check_text("region", region)
        self._server = _describe(client, region)
        keys.epoch_copy(keys.EPOCH)  # the slots' tags (a file), read now, not on a first bid
        self._bids = ScriptPipeliner(client, StoreFunction(client, functions.BID))
        # Reads too: a herd of reconnecting clients restores its state in one pipeline
        # per loop iteration, not one pooled connection (opened on demand) per client.
        self._rooms = ScriptPipeliner(client, StoreFunction(client, functions.GET_ROOM))
        self._sessions = ScriptPipeliner(client, StoreFunction(client, functions.GET_SESSION))
        self._probes = ScriptPipeliner(client, StoreFunction(client, functions.PROBE))
        # A failover's herd subscribes to every room at once on the new region's servers.
        self._offsets = ScriptPipeliner(client, StoreFunction(client, functions.LAST_OFFSET))

    def _errors(self, what: str) -> AbstractContextManager[None]:
        return _store_errors(self._server, what)

    async def current_epoch(self) -> int:
        """The writer's epoch as this server holds it (0 when unset)."""
        with self._errors("current_epoch"):
            value = await self.client.get(keys.EPOCH)
        return _epoch(value, keys.EPOCH)

    async def last_offset(self, room: str) -> str:
        """The id of the room's newest stream entry (:data:`START` for an empty room).

        A fan-out reader starts here to deliver every change from now on. Pipelined
        with the other calls of the same event-loop iteration (:mod:`.pipelining`).
        """
        _check_text("room", room)
        with self._errors(f"last_offset of room {room!r}"):
            value, _ = await self._offsets.call([keys.room_state(room)], [])
        if value is None:
            return START
        return _offset_field({"offset": _text(value, "offset")}, f"room {room!r} state")

    async def bid(
        self,
        room: str,
        sub: str,
        amount: int,
        request_id: str,
        *,
        epoch: int,
        wait_replicas: int = 0,
        wait_timeout: float = 0.5,
        sync: SyncRule | None = None,
    ) -> BidResult:
        """Place ``sub``'s bid of ``amount`` in ``room``: one atomic script, pipelined with
        the other bids made in the same event-loop iteration (:mod:`.pipelining`).

        ``epoch`` is the epoch the calling server believes its writer has; when the
        server's epoch differs the bid is refused with ``stale_epoch`` and nothing
        changes. With ``wait_replicas``, ``WAIT wait_replicas timeout`` follows the
        script on the same connection (one per pipeline, after all its scripts) and
        :attr:`BidResult.replicas` says how many replicas had the write in time. With
        `sync` (and no `wait_replicas`), the WAIT is judged by that rule instead
        (:mod:`.sync`: the right replicas, not just how many) into
        :attr:`BidResult.sync`. Raises :class:`NotWriter` on a replica,
        :class:`StoreUnavailable` when the server cannot be reached.
        """
        _check_text("room", room)
        _check_text("sub", sub)
        _check_text("request_id", request_id)
        if isinstance(amount, bool) or not isinstance(amount, int):
            raise ValueError(f"amount must be an integer, not {amount!r}")
        _check_epoch(epoch)
        script_keys, script_args = bid_call(room, sub, amount, request_id, epoch, self.settings)
        wait: tuple[int, int] | tuple[int, int, bool] | None = None
        if wait_replicas:
            wait = (wait_replicas, _millis(wait_timeout))
        elif sync is not None:
            wait = (sync.expected, _millis(wait_timeout), True)
        with self._errors(f"bid in room {room!r}"):
            reply, waited = await self._bids.call(script_keys, script_args, wait=wait)
        result = _bid_result(reply, f"bid in room {room!r}")
        if waited is None:
            return result
        if sync is not None and not wait_replicas:
            assert waited.before is not None
            assert waited.after is not None
            verdict = sync.judge(waited.before, waited.after)
            return replace(result, replicas=verdict.acked, sync=verdict)
        return replace(result, replicas=waited.acked)

    async def probe(
        self,
        key: str,
        value: str,
        *,
        epoch: int,
        wait_replicas: int = 0,
        wait_timeout: float = 0.1,
        ttl: float = 60.0,
    ) -> ProbeOutcome:
        """Write `value` to the probe `key` and read it back, the way a bid goes: one
        script behind the epoch fence, pipelined, then ``WAIT`` when `wait_replicas`.

        On a replica the write is refused inside the script and the read still answers
        (role ``replica``). Raises :class:`StoreUnavailable` when the server cannot be
        reached, :class:`StoreCorrupt` when the value read back is not `value`.
        """
        _check_text("key", key)
        _check_text("value", value)
        _check_epoch(epoch)
        wait = (wait_replicas, _millis(wait_timeout)) if wait_replicas else None
        script_keys = [key]
        script_args = [str(epoch), value, str(_millis(ttl)), keys.epoch_copy(key)]
        with self._errors("store probe"):
            try:
                reply, waited = await self._probes.call(script_keys, script_args, wait=wait)
            except ResponseError as exc:
                if wait is None or _WAIT_ON_REPLICA not in str(exc):
                    raise
                # A replica refuses WAIT (the script ran, writing nothing): once more
                # without, for its answer.
                reply, waited = await self._probes.call(script_keys, script_args)
        if not isinstance(reply, list) or len(reply) != 3:
            raise StoreCorrupt(f"store probe: unexpected reply {reply!r:.80}")
        role = _text(reply[0], "store probe")
        stored = _epoch(reply[1], keys.EPOCH)
        if role == "written" and reply[2] != value:
            raise StoreCorrupt(
                f"store probe: {key} read back {reply[2]!r:.40}, not the value written"
            )
        replicas = waited.acked if waited is not None and role == "written" else None
        return ProbeOutcome("writer" if role == "written" else role, stored, replicas)

    async def close(self) -> None:
        """Send the calls still queued (bids, probes, state and offset reads) and wait for their
        replies; later calls fail with :class:`StoreUnavailable`. Call it before closing
        the client."""
        await self._bids.close()
        await self._probes.close()
        await self._rooms.close()
        await self._sessions.close()
        await self._offsets.close()

    async def get_state(self, room: str, sub: str, since: Position | None = None) -> StateResult:
        """The room's state, ``sub``'s session, the current position and, given
        ``since``, the entries after it: :meth:`read_room`, then :meth:`read_session`
        (each read-only, in one hash slot, and works on a replica). Two reads, not one:
        a bid that lands between them shows in the session and not yet in the state.

        Replay succeeds when ``since`` has the current epoch, is not newer than the
        room's newest entry, no entry after it was trimmed, and at most
        ``settings.replay_limit`` entries follow it.
        """
        _check_text("sub", sub)
        state = await self.read_room(room, since)
        return replace(state, session=await self.read_session(room, sub))

    async def read_room(self, room: str, since: Position | None = None) -> StateResult:
        """:meth:`get_state` without a user: the same for every caller (its ``session``
        is ``{}``), so that identical concurrent reads can share one
        (:mod:`rideout._singleflight`); :meth:`read_session` reads the user's part. One
        read-only script in the room's slot, pipelined with the other reads of the same
        event-loop iteration."""
        _check_text("room", room)
        what = f"read_room of room {room!r}"
        if since is not None:
            if not isinstance(since, Position):
                raise ValueError(f"since must be a Position or None, not {since!r}")
            since_epoch, since_offset = (
                str(_check_epoch(since.epoch)),
                _canonical_offset(since.offset),
            )
        else:
            since_epoch, since_offset = "", ""
        script_keys = [keys.room_state(room), keys.room_stream(room)]
        script_args = [since_epoch, since_offset, str(self.settings.replay_limit),
                       keys.epoch_copy(script_keys[0])]  # fmt: skip
        with self._errors(what):
            reply, _ = await self._rooms.call(script_keys, script_args)
        if not isinstance(reply, list) or len(reply) != 4:
            raise StoreCorrupt(f"{what}: unexpected reply {reply!r:.80}")
        return _state_result(room, reply[0], reply[1], reply[2], reply[3], what)

    async def read_session(self, room: str, sub: str) -> dict[str, Any]:
        """``sub``'s session in ``room`` (``{}`` before its first accepted bid there)."""
        what = f"read_session in room {room!r}"
        key = keys.room_session(_check_text("room", room), _check_text("sub", sub))
        with self._errors(what):
            reply, _ = await self._sessions.call([key], [])
        return _session(_pairs(reply, what), what)

    async def read_updates(
        self, offsets: Mapping[str, str], *, count: int = 100, block_ms: int | None = None
    ) -> list[tuple[str, RoomEntry]]:
        """The entries after ``offsets[room]`` of each room (``XREAD``), as (room, entry).

        An offset is a stream entry id or ``"$"`` (only entries added from now on, with
        ``block_ms``). ``block_ms`` waits for new entries; keep it well below the
        client's socket timeout. Entries come in order within a room. A reader that
        falls more than ``history_size`` entries behind misses trimmed entries: it
        should compare positions and fall back to ``get_state``.
        """
        _check_int("count", count, 1, 10**6)
        if block_ms is not None:
            _check_int("block_ms", block_ms, 0, 10**7)
        if not offsets:
            return []
        streams: dict[KeyT, StreamIdT] = {}
        rooms: dict[str, str] = {}
        for room, offset in offsets.items():
            key = keys.room_stream(_check_text("room", room))
            streams[key] = "$" if offset == "$" else _canonical_offset(offset)
            rooms[key] = room
        with self._errors("read_updates"):
            reply: Any = await self.client.xread(streams, count=count, block=block_ms)
        # RESP2: [[key, [[id, fields], ...]], ...]; RESP3: {key: [[id, fields], ...]}
        results = reply.items() if isinstance(reply, dict) else (reply or [])
        updates: list[tuple[str, RoomEntry]] = []
        for key, entries in results:
            name = rooms.get(_text(key, "read_updates"))
            if name is None:
                raise StoreCorrupt(f"read_updates: the reply names an unknown stream {key!r}")
            for entry_id, fields in entries:
                updates.append((name, decode_stream_entry(name, entry_id, fields or {})))
        return updates
