"""Sans-I/O realtime message protocol: the WebSocket wire protocol (ARCHITECTURE.md, "The wire protocol").

Client → server messages are JSON objects routed on ``action``; server → client
messages are JSON objects with a ``type``, except the heartbeat reply, which is the
bare text ``pong``. This module only turns text into validated messages and messages
into text: it owns no socket, no clock and no state, so the server, the Python
client and the canary share one definition of the wire format.

Parsing never raises anything but :class:`ProtocolError`, whatever the input.
Unknown keys in an object are ignored so that either side may add fields; a key named
twice in one object is refused (``bad_request``), so that nothing in front of the
server can read a message differently from it.
"""

from __future__ import annotations

import email.utils
import json
import math
import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import IntEnum, StrEnum
from typing import Any, Final, TypeAlias, TypeGuard

from rideout import _json as strict_json
from rideout._json import StrictJSONError
from rideout.errors import RideoutError

__all__ = [
    "MAX_AMOUNT",
    "MAX_EPOCH",
    "MAX_NAME_LENGTH",
    "MAX_REQUEST_ID_LENGTH",
    "MAX_RETRY_HINT",
    "MAX_TICKET_LENGTH",
    "MESSAGE_TOO_BIG",
    "PONG",
    "Ack",
    "Bid",
    "ClientMessage",
    "CloseCode",
    "ErrorCode",
    "ErrorMsg",
    "GetState",
    "Heartbeat",
    "OffsetKey",
    "Pong",
    "Position",
    "Probe",
    "ProbeMsg",
    "ProtocolError",
    "ServerMessage",
    "StateMsg",
    "TicketMsg",
    "TicketRequest",
    "Update",
    "encode_ack",
    "encode_client_message",
    "encode_error",
    "encode_missed",
    "encode_probe",
    "encode_server_message",
    "encode_state",
    "encode_ticket",
    "encode_update",
    "is_valid_name",
    "is_valid_offset",
    "is_valid_request_id",
    "offset_key",
    "overloaded_reason",
    "parse_client_message",
    "parse_retry_after",
    "parse_retry_hint",
    "parse_server_message",
]

PONG: Final = "pong"
"""The bare-text heartbeat reply (the seed client's ``returnMessage``)."""

MESSAGE_TOO_BIG: Final = "message_too_big"
""":attr:`ProtocolError.code` of an oversize message; the server closes with 1009."""

MAX_NAME_LENGTH: Final = 64
"""Longest room or region name."""

MAX_REQUEST_ID_LENGTH: Final = 64
"""Longest client request id."""

MAX_AMOUNT: Final = 2**53 - 1
"""Largest bid amount: the largest integer a JavaScript client holds exactly."""

MAX_EPOCH: Final = 2**63 - 1
"""Largest epoch (a Redis integer)."""

MAX_TICKET_LENGTH: Final = 1024
"""Longest resumption ticket a server sends (``rideout.auth.resume.MAX_TICKET_LENGTH``)."""

MAX_RETRY_HINT: Final = 3600.0
"""Largest retry hint, in seconds, that :func:`overloaded_reason` writes."""

_MAX_OFFSET_PART: Final = 2**64 - 1  # each half of a Redis stream entry id is a u64

_NAME_RE: Final = re.compile(rf"[A-Za-z0-9_.:-]{{1,{MAX_NAME_LENGTH}}}")
_OFFSET_RE: Final = re.compile(r"([0-9]{1,20})-([0-9]{1,20})")
_HINT_RE: Final = re.compile(r"[0-9]{1,15}(?:\.[0-9]{1,15})?")
_NAME_RULE: Final = f"1-{MAX_NAME_LENGTH} characters from A-Z a-z 0-9 _ . : -"


class ErrorCode(StrEnum):
    """``code`` of a ``{type:"error"}`` reply."""

    BAD_REQUEST = "bad_request"
    UNAUTHORIZED = "unauthorized"
    FORBIDDEN = "forbidden"
    THROTTLED = "throttled"
    UNAVAILABLE = "unavailable"
    INTERNAL = "internal"


class CloseCode(IntEnum):
    """WebSocket close codes the server uses, with the client's expected reaction."""

    NORMAL = 1000
    """Done; do not reconnect."""
    POLICY = 1008
    """Token expired or revoked: get a new token before reconnecting."""
    MESSAGE_TOO_BIG = 1009
    """The client sent a message larger than the server accepts."""
    INTERNAL = 1011
    """Unexpected server error: reconnect with backoff."""
    DRAINING = 1012
    """Region or server draining: reconnect now (re-resolve the name)."""
    OVERLOADED = 1013
    """Overloaded: reconnect later; the reason carries a retry hint."""


class ProtocolError(RideoutError, ValueError):
    """A message that does not follow the wire protocol.

    ``code`` is :data:`MESSAGE_TOO_BIG` or ``"bad_request"``; ``request_id`` is the
    message's ``id`` when it could be read, so the reply can be correlated.
    """

    code: str
    message: str
    request_id: str | None

    def __init__(self, code: str, message: str, request_id: str | None = None) -> None:
        super().__init__(code, message, request_id)
        self.code = code
        self.message = message
        self.request_id = request_id

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"

    @property
    def close_code(self) -> CloseCode | None:
        """The close code this error calls for, or None to reply with an error object."""
        return CloseCode.MESSAGE_TOO_BIG if self.code == MESSAGE_TOO_BIG else None


# --------------------------------------------------------------------------- messages


@dataclass(frozen=True, slots=True)
class Position:
    """A place in a room's history: the writer's ``epoch`` and a stream entry id."""

    epoch: int
    offset: str


OffsetKey: TypeAlias = tuple[int, int]
"""A stream entry id as a comparable pair of milliseconds and sequence number."""


def offset_key(offset: str) -> OffsetKey:
    """A stream entry id as a comparable pair (``"1700000000000-3"`` → (1700000000000, 3))."""
    ms, _, seq = offset.partition("-")
    return int(ms), int(seq or 0)


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """``{action:"heartbeat"}``; answered with :data:`PONG`."""


@dataclass(frozen=True, slots=True)
class GetState:
    """``{action:"getState", room, since?}``: full state, plus what was missed since."""

    room: str
    since: Position | None = None


@dataclass(frozen=True, slots=True)
class Bid:
    """``{action:"bid", room, amount, id}``; ``id`` makes the bid idempotent."""

    room: str
    amount: int
    id: str


@dataclass(frozen=True, slots=True)
class Probe:
    """``{action:"probe"}`` (canary tokens only): answered with :class:`ProbeMsg` once a
    write and a read of the zone's probe key went through the state store."""


@dataclass(frozen=True, slots=True)
class TicketRequest:
    """``{action:"ticket"}``: a resumption ticket for this connection's identity, to
    present instead of the access token on the next handshake (answered with
    :class:`TicketMsg`; servers before 2026-12-07 answer ``bad_request``)."""


ClientMessage: TypeAlias = Heartbeat | GetState | Bid | Probe | TicketRequest


@dataclass(frozen=True, slots=True)
class Pong:
    """The bare-text heartbeat reply."""


@dataclass(frozen=True, slots=True)
class Update:
    """``{type:"update", room, state, position, region}``: a room changed."""

    room: str
    state: Any
    position: Position
    region: str


@dataclass(frozen=True, slots=True)
class StateMsg:
    """``{type:"state", ...}``: the reply to ``getState``.

    ``recovered`` is True when ``missed`` holds every update after the requested
    position; False means the client must rely on ``state`` alone.
    """

    region: str
    room: str
    state: Any
    user: Any
    position: Position
    recovered: bool
    missed: tuple[Update, ...] = ()


@dataclass(frozen=True, slots=True)
class Ack:
    """``{type:"ack", id, room, accepted, reason?, position, region, state?}``: the reply
    to a bid.

    A bid is identified by its room and ``id`` together (the same id in another room is
    another bid). ``room`` is None only from a server older than the field. ``state`` is
    the room's state the decision was made against: after the bid when accepted, as it
    stood when refused (so an outbid client knows the price that beat it without
    waiting for the update); None from a server older than the field.
    """

    id: str
    accepted: bool
    position: Position
    region: str
    reason: str | None = None
    room: str | None = None
    state: Any = None


@dataclass(frozen=True, slots=True)
class ErrorMsg:
    """``{type:"error", code, message, id?}``."""

    code: str
    message: str
    id: str | None = None


@dataclass(frozen=True, slots=True)
class ProbeMsg:
    """``{type:"probe", region, zone, role, epoch, replicas, full, busy}``: the store took
    the probe.

    ``role`` is ``writer`` or ``replica``; ``replicas`` (sync mode, on the writer) is
    how many replicas had the probe's write in time, else None. ``full``: the process is
    at its connection cap for ordinary users (they get 503 ``zone_full``), still healthy.
    ``busy``: the process is shedding load as it answers (its event loop runs late, so
    part of the new connections and bids are refused), which is why the answer may come
    late. Both absent from older servers: False.
    """

    region: str
    zone: str
    role: str
    epoch: int
    replicas: int | None = None
    full: bool = False
    busy: bool = False


@dataclass(frozen=True, slots=True)
class TicketMsg:
    """``{type:"ticket", ticket, ttl, expires}``: the reply to ``{action:"ticket"}``.

    ``ticket`` is the resumption ticket (opaque text, at most
    :data:`MAX_TICKET_LENGTH` characters); ``ttl`` the seconds it is valid for from now
    (measure its life with this, not the client's wall clock), ``expires`` the same as
    seconds since the epoch.
    """

    ticket: str
    ttl: float
    expires: int


ServerMessage: TypeAlias = Pong | StateMsg | Ack | Update | ErrorMsg | ProbeMsg | TicketMsg


# ------------------------------------------------------------------------- validation


class _Invalid(Exception):
    """Internal: a validation failure, turned into a ProtocolError by the caller."""


def is_valid_name(value: object) -> TypeGuard[str]:
    """Whether ``value`` is a valid room or region name (it may become part of a key)."""
    return isinstance(value, str) and _NAME_RE.fullmatch(value) is not None


def is_valid_request_id(value: object) -> TypeGuard[str]:
    """Whether ``value`` is a valid client request id (non-empty, short, printable)."""
    return (
        isinstance(value, str) and 0 < len(value) <= MAX_REQUEST_ID_LENGTH and value.isprintable()
    )


def is_valid_offset(value: object) -> TypeGuard[str]:
    """Whether ``value`` is a Redis stream entry id such as ``1700000000000-0``."""
    if not isinstance(value, str):
        return False
    match = _OFFSET_RE.fullmatch(value)
    return match is not None and all(int(part) <= _MAX_OFFSET_PART for part in match.groups())


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _preview(value: str, limit: int = 32) -> str:
    return repr(value[:limit] + "...") if len(value) > limit else repr(value)


def _require(obj: Mapping[str, Any], key: str) -> Any:
    if key not in obj:
        raise _Invalid(f"'{key}' is required")
    return obj[key]


def _name(obj: Mapping[str, Any], key: str) -> str:
    value = _require(obj, key)
    if not is_valid_name(value):
        raise _Invalid(f"'{key}' must be a string of {_NAME_RULE}")
    return value


def _request_id(obj: Mapping[str, Any], key: str) -> str:
    value = _require(obj, key)
    if not is_valid_request_id(value):
        raise _Invalid(
            f"'{key}' must be a string of 1-{MAX_REQUEST_ID_LENGTH} printable characters"
        )
    return value


def _readable_id(obj: Mapping[str, Any]) -> str | None:
    value = obj.get("id")
    return value if is_valid_request_id(value) else None


def _optional_request_id(obj: Mapping[str, Any], key: str) -> str | None:
    return None if obj.get(key) is None else _request_id(obj, key)


def _bool(obj: Mapping[str, Any], key: str) -> bool:
    value = _require(obj, key)
    if not isinstance(value, bool):
        raise _Invalid(f"'{key}' must be true or false")
    return value


def _str(obj: Mapping[str, Any], key: str) -> str:
    value = _require(obj, key)
    if not isinstance(value, str):
        raise _Invalid(f"'{key}' must be a string")
    return value


def _amount(obj: Mapping[str, Any]) -> int:
    value = _require(obj, "amount")
    if not _is_int(value) or not 0 < value <= MAX_AMOUNT:
        raise _Invalid(f"'amount' must be an integer from 1 to {MAX_AMOUNT}")
    return value


def _position(value: object, key: str) -> Position:
    if not isinstance(value, dict):
        raise _Invalid(f"'{key}' must be an object {{epoch, offset}}")
    epoch = value.get("epoch")
    if not _is_int(epoch) or not 0 <= epoch <= MAX_EPOCH:
        raise _Invalid(f"'{key}.epoch' must be an integer from 0 to {MAX_EPOCH}")
    offset = value.get("offset")
    if not is_valid_offset(offset):
        raise _Invalid(f"'{key}.offset' must be a stream entry id such as '1700000000000-0'")
    return Position(epoch, offset)


# ---------------------------------------------------------------------------- parsing


def _text(data: object, max_size: int | None) -> str:
    """Check the size of ``data`` (in UTF-8 bytes) and return it as text."""
    if isinstance(data, str):
        size = len(data)
        if max_size is not None and size <= max_size < size * 4:
            size = len(data.encode("utf-8", "surrogatepass"))
        if max_size is not None and size > max_size:
            raise ProtocolError(MESSAGE_TOO_BIG, f"message larger than {max_size} bytes")
        return data
    if isinstance(data, bytes | bytearray | memoryview):
        raw = bytes(data)
        if max_size is not None and len(raw) > max_size:
            raise ProtocolError(MESSAGE_TOO_BIG, f"message larger than {max_size} bytes")
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise ProtocolError(ErrorCode.BAD_REQUEST, "message is not valid UTF-8") from None
    raise ProtocolError(ErrorCode.BAD_REQUEST, "message must be text")


def _load_object(text: str, what: str) -> dict[str, Any]:
    """Decode strict JSON (:mod:`rideout._json`: no duplicate keys, no NaN/Infinity,
    bounded numbers) that must be an object."""
    try:
        value = strict_json.decode(text)
    except StrictJSONError as exc:
        raise ProtocolError(ErrorCode.BAD_REQUEST, f"message is not valid: {exc}") from None
    except json.JSONDecodeError as exc:
        raise ProtocolError(
            ErrorCode.BAD_REQUEST, f"message is not valid JSON: {exc.msg} at position {exc.pos}"
        ) from None
    except RecursionError:
        raise ProtocolError(ErrorCode.BAD_REQUEST, "message nests too deeply") from None
    except ValueError:  # pragma: no cover - defensive: json raises JSONDecodeError
        raise ProtocolError(ErrorCode.BAD_REQUEST, "message is not valid JSON") from None
    if not isinstance(value, dict):
        raise ProtocolError(ErrorCode.BAD_REQUEST, f"message must be a JSON object with {what}")
    return value


def parse_client_message(data: str | bytes, *, max_size: int) -> ClientMessage:
    """Parse and validate one client → server message.

    ``max_size`` bounds the message in UTF-8 bytes. Raises :class:`ProtocolError`
    (and nothing else) for any input that is not a valid message; its
    ``request_id`` is the message's ``id`` when that was readable.
    """
    obj = _load_object(_text(data, max_size), "an 'action'")
    request_id = _readable_id(obj)
    try:
        return _client_message(obj)
    except _Invalid as exc:
        raise ProtocolError(ErrorCode.BAD_REQUEST, str(exc), request_id) from None


def _client_message(obj: dict[str, Any]) -> ClientMessage:
    action = _require(obj, "action")
    if not isinstance(action, str):
        raise _Invalid("'action' must be a string")
    if action == "heartbeat":
        return Heartbeat()
    if action == "getState":
        since = obj.get("since")
        return GetState(
            room=_name(obj, "room"),
            since=None if since is None else _position(since, "since"),
        )
    if action == "bid":
        return Bid(room=_name(obj, "room"), amount=_amount(obj), id=_request_id(obj, "id"))
    if action == "probe":
        return Probe()
    if action == "ticket":
        return TicketRequest()
    raise _Invalid(
        f"unknown action {_preview(action)}; expected heartbeat, getState, bid, probe or ticket"
    )


def parse_server_message(data: str | bytes) -> ServerMessage:
    """Parse and validate one server → client message (used by clients and canaries).

    Raises :class:`ProtocolError` (and nothing else) for anything that is not a valid
    server message.
    """
    text = _text(data, None)
    if text == PONG:
        return Pong()
    obj = _load_object(text, "a 'type'")
    request_id = _readable_id(obj)
    try:
        return _server_message(obj)
    except _Invalid as exc:
        raise ProtocolError(ErrorCode.BAD_REQUEST, str(exc), request_id) from None


def _update(obj: Mapping[str, Any]) -> Update:
    return Update(
        room=_name(obj, "room"),
        state=_require(obj, "state"),
        position=_position(_require(obj, "position"), "position"),
        region=_name(obj, "region"),
    )


def _server_message(obj: dict[str, Any]) -> ServerMessage:
    kind = _require(obj, "type")
    if not isinstance(kind, str):
        raise _Invalid("'type' must be a string")
    if kind == "update":
        return _update(obj)
    if kind == "ack":
        reason = obj.get("reason")
        return Ack(
            id=_request_id(obj, "id"),
            accepted=_bool(obj, "accepted"),
            position=_position(_require(obj, "position"), "position"),
            region=_name(obj, "region"),
            reason=None if reason is None else _str(obj, "reason"),
            room=None if obj.get("room") is None else _name(obj, "room"),
            state=obj.get("state"),
        )
    if kind == "state":
        missed = _require(obj, "missed")
        if not isinstance(missed, list):
            raise _Invalid("'missed' must be a list of updates")
        updates = []
        for entry in missed:
            if not isinstance(entry, dict):
                raise _Invalid("'missed' must be a list of updates")
            updates.append(_update(entry))
        return StateMsg(
            region=_name(obj, "region"),
            room=_name(obj, "room"),
            state=_require(obj, "state"),
            user=_require(obj, "user"),
            position=_position(_require(obj, "position"), "position"),
            recovered=_bool(obj, "recovered"),
            missed=tuple(updates),
        )
    if kind == "error":
        return ErrorMsg(
            code=_str(obj, "code"),
            message=_str(obj, "message"),
            id=_optional_request_id(obj, "id"),
        )
    if kind == "probe":
        role = _str(obj, "role")
        if role not in _PROBE_ROLES:
            raise _Invalid(f"'role' must be one of {', '.join(_PROBE_ROLES)}")
        epoch = _require(obj, "epoch")
        replicas = obj.get("replicas")
        if not _is_int(epoch) or not 0 <= epoch <= MAX_EPOCH:
            raise _Invalid(f"'epoch' must be an integer from 0 to {MAX_EPOCH}")
        if replicas is not None and (not _is_int(replicas) or replicas < 0):
            raise _Invalid("'replicas' must be a non-negative integer or null")
        full, busy = obj.get("full", False), obj.get("busy", False)
        if not isinstance(full, bool):
            raise _Invalid("'full' must be a boolean")
        if not isinstance(busy, bool):
            raise _Invalid("'busy' must be a boolean")
        return ProbeMsg(
            region=_name(obj, "region"), zone=_name(obj, "zone"), role=role,
            epoch=epoch, replicas=replicas, full=full, busy=busy,
        )  # fmt: skip
    if kind == "ticket":
        ticket = _str(obj, "ticket")
        if (
            not 0 < len(ticket) <= MAX_TICKET_LENGTH
            or not ticket.isascii()
            or not ticket.isprintable()
        ):
            raise _Invalid(f"'ticket' must be 1-{MAX_TICKET_LENGTH} printable ASCII characters")
        ttl = _require(obj, "ttl")
        expires = _require(obj, "expires")
        if isinstance(ttl, bool) or not isinstance(ttl, int | float) or not 0 <= ttl <= 2**31:
            raise _Invalid("'ttl' must be a number of seconds")
        if not _is_int(expires) or not 0 <= expires <= MAX_EPOCH:
            raise _Invalid("'expires' must be an integer time (seconds since the epoch)")
        return TicketMsg(ticket=ticket, ttl=float(ttl), expires=expires)
    raise _Invalid(
        f"unknown type {_preview(kind)}; expected state, ack, update, error, probe or ticket"
    )


_PROBE_ROLES: Final = ("writer", "replica")


# --------------------------------------------------------------------------- encoding


def _dump(obj: object) -> str:
    # ASCII-only output is valid UTF-8 whatever the strings hold; allow_nan=False
    # keeps the output readable by JSON.parse in browsers.
    return json.dumps(obj, separators=(",", ":"), allow_nan=False)


def _position_json(position: Position) -> dict[str, object]:
    return {"epoch": position.epoch, "offset": position.offset}


def _update_json(room: str, state: object, position: Position, region: str) -> dict[str, object]:
    return {
        "type": "update",
        "room": room,
        "state": state,
        "position": _position_json(position),
        "region": region,
    }


def encode_state(
    *,
    region: str,
    room: str,
    state: object,
    user: object,
    position: Position,
    recovered: bool,
    missed: Iterable[Update] = (),
    missed_json: str | None = None,
) -> str:
    """Encode the reply to ``getState``. ``state`` and ``user`` must be JSON-serializable.

    ``missed_json``, when given, is ``missed`` already encoded by :func:`encode_missed`
    (many replies of one room from one position share it; ``missed`` is then ignored).
    """
    text = _dump(
        {
            "type": "state",
            "region": region,
            "room": room,
            "state": state,
            "user": user,
            "position": _position_json(position),
            "recovered": recovered,
            "missed": [] if missed_json is not None else
            [_update_json(u.room, u.state, u.position, u.region) for u in missed],
        }
    )  # fmt: skip
    if missed_json is None:
        return text
    return text[: -len(_NO_MISSED)] + missed_json + "}"


_NO_MISSED: Final = "[]}"


def encode_missed(missed: Iterable[Update]) -> str:
    """The ``missed`` list of a ``state`` reply, encoded once for many replies."""
    return _dump([_update_json(u.room, u.state, u.position, u.region) for u in missed])


def encode_ack(
    *,
    request_id: str,
    accepted: bool,
    position: Position,
    region: str,
    reason: str | None = None,
    room: str | None = None,
    state: object = None,
) -> str:
    """Encode the reply to a bid; ``reason``, ``room`` and ``state`` are omitted when None."""
    obj: dict[str, object] = {"type": "ack", "id": request_id}
    if room is not None:
        obj["room"] = room
    obj["accepted"] = accepted
    if reason is not None:
        obj["reason"] = reason
    obj["position"] = _position_json(position)
    obj["region"] = region
    if state is not None:
        obj["state"] = state
    return _dump(obj)


def encode_update(*, room: str, state: object, position: Position, region: str) -> str:
    """Encode a room update pushed to every subscriber."""
    return _dump(_update_json(room, state, position, region))


def encode_error(code: ErrorCode | str, message: str, request_id: str | None = None) -> str:
    """Encode an error reply; ``code`` must be an :class:`ErrorCode` value (else ValueError)."""
    obj: dict[str, object] = {"type": "error", "code": ErrorCode(code).value, "message": message}
    if request_id is not None:
        obj["id"] = request_id
    return _dump(obj)


def encode_probe(
    *,
    region: str,
    zone: str,
    role: str,
    epoch: int,
    replicas: int | None,
    full: bool = False,
    busy: bool = False,
) -> str:
    """Encode the reply to a ``probe``."""
    return _dump(
        {"type": "probe", "region": region, "zone": zone, "role": role, "epoch": epoch,
         "replicas": replicas, "full": full, "busy": busy}
    )  # fmt: skip


def encode_ticket(*, ticket: str, ttl: float, expires: int) -> str:
    """Encode the reply to ``{action:"ticket"}`` (``ttl`` kept to the millisecond)."""
    return _dump({"type": "ticket", "ticket": ticket, "ttl": round(ttl, 3), "expires": expires})


def encode_server_message(message: ServerMessage) -> str:
    """Encode any server → client message object."""
    if isinstance(message, Pong):
        return PONG
    if isinstance(message, TicketMsg):
        return encode_ticket(ticket=message.ticket, ttl=message.ttl, expires=message.expires)
    if isinstance(message, ProbeMsg):
        return encode_probe(
            region=message.region, zone=message.zone, role=message.role,
            epoch=message.epoch, replicas=message.replicas, full=message.full,
            busy=message.busy,
        )  # fmt: skip
    if isinstance(message, Update):
        return encode_update(
            room=message.room, state=message.state, position=message.position, region=message.region
        )
    if isinstance(message, Ack):
        return encode_ack(
            request_id=message.id,
            accepted=message.accepted,
            position=message.position,
            region=message.region,
            reason=message.reason,
            room=message.room,
            state=message.state,
        )
    if isinstance(message, StateMsg):
        return encode_state(
            region=message.region,
            room=message.room,
            state=message.state,
            user=message.user,
            position=message.position,
            recovered=message.recovered,
            missed=message.missed,
        )
    return encode_error(message.code, message.message, message.id)


def encode_client_message(message: ClientMessage) -> str:
    """Encode a client → server message (used by the Python client and canaries)."""
    if isinstance(message, Heartbeat):
        return _dump({"action": "heartbeat"})
    if isinstance(message, Probe):
        return _dump({"action": "probe"})
    if isinstance(message, TicketRequest):
        return _dump({"action": "ticket"})
    if isinstance(message, GetState):
        obj: dict[str, object] = {"action": "getState", "room": message.room}
        if message.since is not None:
            obj["since"] = _position_json(message.since)
        return _dump(obj)
    return _dump(
        {"action": "bid", "room": message.room, "amount": message.amount, "id": message.id}
    )


# ------------------------------------------------------------------------ retry hints


def overloaded_reason(retry_after: float) -> str:
    """Close reason for :attr:`CloseCode.OVERLOADED`, e.g. ``"overloaded; retry-after=2.5"``.

    ``retry_after`` (seconds, >= 0) is rounded up to the millisecond (sub-microsecond
    float noise aside) and capped at :data:`MAX_RETRY_HINT`, so the reason fits the
    123-byte close-reason limit.
    """
    if isinstance(retry_after, bool) or not isinstance(retry_after, int | float):
        raise TypeError(f"retry_after must be a number of seconds, not {retry_after!r}")
    if not (math.isfinite(retry_after) and retry_after >= 0):
        raise ValueError(f"retry_after must be a finite number >= 0, not {retry_after!r}")
    millis = math.ceil(round(min(retry_after, MAX_RETRY_HINT) * 1000, 6))
    text = f"{millis // 1000}.{millis % 1000:03d}".rstrip("0").rstrip(".")
    return f"overloaded; retry-after={text}"


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds a ``Retry-After`` value asks for, or None when absent or invalid.

    Accepts delta-seconds (``"120"``) and an HTTP-date (``"Wed, 21 Oct 2015 07:28:00
    GMT"``, measured from ``now``, Unix seconds, default the wall clock; a date in the
    past means 0).
    """
    if value is None:
        return None
    text = value.strip()
    if text.isdigit() and text.isascii():
        return float(text)  # inf for an absurdly long value (int() would refuse it)
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    current = time.time() if now is None else now
    return max(0.0, when.timestamp() - current)


def parse_retry_hint(reason: str | None) -> float | None:
    """The ``retry-after`` seconds in a close reason, or None if there is none readable.

    Tolerant: any ``;``-separated part ``retry-after=SECONDS`` (case-insensitive,
    spaces allowed) counts; anything else, or a non-string, gives None.
    """
    if not isinstance(reason, str):
        return None
    for part in reason.split(";"):
        key, sep, value = part.partition("=")
        if sep and key.strip().lower() == "retry-after":
            value = value.strip()
            if _HINT_RE.fullmatch(value):
                return float(value)
    return None
