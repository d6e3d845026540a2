"""The room's events: one bounded Redis stream per event, named as AWS's EventBridge
detail types, written by the scripts in the same atomic step as the change they
describe (a token's ``token_generated`` exists exactly when its claims do).

=================================  ==========================================  ===========================
type                               detail                                      written by
=================================  ==========================================  ===========================
``token_generated``                ``event_id, request_id, queue_position``    the first token of a position
``session_updated``                ``event_id, request_id, status``            ``update_session``
                                   (``completed`` | ``abandoned``)
``session_renewed``                ``event_id, request_id, queue_position,``   a refresh token's renewal
                                   ``expires_at`` (the new ``exp``)            (rideout's; AWS has none)
``automatic_serving_counter_incr`` ``event_id, previous_serving_counter_``     the expiry sweep
                                   ``position, increment_by, current_...``     (``incr_on_expiry``)
``waiting_room_metrics``           ``event_id, num_active_tokens`` (int), and  every ``metrics_interval``
                                   ``total_num_tokens, queue_counter,``        (one process of the
                                   ``serving_number, completed_sessions,``     writer region)
                                   ``abandoned_sessions`` (strings, as AWS)
``reset``                          ``event_id``                                ``reset_initial_state``
=================================  ==========================================  ===========================

Each entry has the fields ``type``, ``detail`` (JSON) and ``time`` (ms).
"""

from __future__ import annotations

import json
import math
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Final

import redis.asyncio as aioredis

from rideout import _validate
from rideout.store import keys
from rideout.waitingroom.model import check_event_id
from rideout.waitingroom.store import RoomStore

__all__ = [
    "AUTOMATIC_SERVING_COUNTER_INCR",
    "EVENT_TYPES",
    "RESET",
    "SESSION_RENEWED",
    "SESSION_UPDATED",
    "TOKEN_GENERATED",
    "WAITING_ROOM_METRICS",
    "RoomEvent",
    "follow_events",
    "read_events",
    "write_metrics",
]

TOKEN_GENERATED: Final = "token_generated"
SESSION_UPDATED: Final = "session_updated"
SESSION_RENEWED: Final = "session_renewed"
AUTOMATIC_SERVING_COUNTER_INCR: Final = "automatic_serving_counter_incr"
WAITING_ROOM_METRICS: Final = "waiting_room_metrics"
RESET: Final = "reset"
EVENT_TYPES: Final = (
    TOKEN_GENERATED, SESSION_UPDATED, SESSION_RENEWED, AUTOMATIC_SERVING_COUNTER_INCR,
    WAITING_ROOM_METRICS, RESET,
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class RoomEvent:
    """One entry of an event's stream: ``id`` (the stream id, a cursor), ``type``,
    ``detail`` and ``time`` (epoch seconds)."""

    id: str
    type: str
    detail: dict[str, Any]
    time: float

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "type": self.type, "detail": self.detail, "time": self.time}


def _text(value: object) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _decode(entry_id: object, fields: dict[Any, Any]) -> RoomEvent:
    data = {_text(k): _text(v) for k, v in fields.items()}
    try:
        detail = json.loads(data.get("detail", "{}"))
    except ValueError:
        detail = {"unreadable": data.get("detail", "")}
    try:
        when = int(data.get("time", "0")) / 1000
    except ValueError:
        when = 0.0
    return RoomEvent(_text(entry_id), data.get("type", "?"), detail, when)


async def read_events(
    redis: aioredis.Redis, event_id: str, *, after: str = "0-0", count: int = 100
) -> list[RoomEvent]:
    """Up to `count` entries after the stream id `after` (oldest first)."""
    check_event_id(event_id)
    _validate.count("count", count, low=1, high=10_000)
    key = keys.waitingroom_event_keys(event_id)["events"]
    entries: Any = await redis.xrange(key, f"({after}", "+", count=count)
    return [_decode(entry_id, fields) for entry_id, fields in entries]


async def follow_events(
    redis: aioredis.Redis, event_id: str, *, after: str = "$", block: float = 5.0
) -> AsyncIterator[RoomEvent]:
    """Every entry after `after` (``$``: from now on), as they come (``XREAD BLOCK``);
    runs until cancelled. `redis` should have a socket timeout above `block`."""
    check_event_id(event_id)
    key = keys.waitingroom_event_keys(event_id)["events"]
    cursor = after
    block_ms = max(1, math.floor(_validate.seconds("block", block) * 1000))
    while True:
        found: Any = await redis.xread({key: cursor}, count=100, block=block_ms)
        for _stream, entries in found or ():
            for entry_id, fields in entries:
                event = _decode(entry_id, fields)
                cursor = event.id
                yield event


async def write_metrics(store: RoomStore, event_id: str) -> RoomEvent:
    """Append a ``waiting_room_metrics`` entry with the event's counters now."""
    counters = await store.counters(event_id)
    active = await store.num_active_tokens(event_id)
    detail = {
        "event_id": event_id,
        "num_active_tokens": active,
        "total_num_tokens": str(counters.tokens),
        "queue_counter": str(counters.queue),
        "serving_number": str(counters.serving),
        "completed_sessions": str(counters.completed),
        "abandoned_sessions": str(counters.sessions_abandoned),
        # rideout's own, besides AWS's
        "waiting_num": counters.waiting,
        "expired_positions": counters.expired,
        "abandoned_positions": counters.abandoned,
    }
    now_ms = math.floor(store.clock() * 1000)
    key = keys.waitingroom_event_keys(event_id)["events"]
    with store.errors(f"write_metrics {event_id}"):
        entry_id = await store.redis.xadd(
            key,
            {"type": WAITING_ROOM_METRICS, "detail": json.dumps(detail), "time": str(now_ms)},
            maxlen=store.stream_length,
            approximate=True,
        )
    return RoomEvent(_text(entry_id), WAITING_ROOM_METRICS, detail, now_ms / 1000)
