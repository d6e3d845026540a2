"""The room's Prometheus metrics, registered in the zone's registry (its ``/metrics``).

``rideout_room_requests_total{endpoint,status}``
    every answer of the room's API, by path and HTTP status
``rideout_room_counter_polls_total``
    reads of the shared counters (``serving_num``, ``waiting_num``, ``estimated_wait``)
``rideout_room_counter_loads_total``
    those that reached Redis (the rest came from the micro-cache): the origin's polling
    load, with the cache's effect as the ratio of the two
``rideout_room_position_polls_total``
    ``queue_num`` polls of a known event
``rideout_room_position_loads_total``
    those that read the position from Redis (the rest came from the position cache)
``rideout_room_position_touches_total``
    abandonment-clock touches sent on their own (a cached answer's; a load's touch
    rides in the same round trip)
``rideout_room_queue_number{event}``, ``rideout_room_serving_number{event}``
    the event's queue counter (the last number given) and serving counter, as the
    process's scheduler last read them (every ``tick_interval``); their growth over a
    window is the arrivals and the admissions
``rideout_room_waiting{event}``, ``rideout_room_tokens{event}``
    positions still waiting, and tokens generated, read at the same moment
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge

from rideout._metrics import LabelCache
from rideout.waitingroom.model import Counters

__all__ = ["RoomMetrics"]

_COUNTER_GAUGES = (
    # (the Counters field, the gauge's name, its help), each labelled by event
    ("queue", "rideout_room_queue_number",
     "A waiting-room event's queue counter: the last queue number given."),
    ("serving", "rideout_room_serving_number",
     "A waiting-room event's serving counter: positions up to it may take a token."),
    ("waiting", "rideout_room_waiting",
     "A waiting-room event's positions without a token, neither expired nor abandoned."),
    ("tokens", "rideout_room_tokens",
     "A waiting-room event's tokens generated (admissions that took theirs)."),
)  # fmt: skip


class RoomMetrics:
    """The room's counters in `registry` (one set per registry)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.requests = Counter(
            "rideout_room_requests",
            "Waiting-room API answers, by endpoint and HTTP status.",
            ["endpoint", "status"],
            registry=registry,
        )
        self.polls = Counter(
            "rideout_room_counter_polls",
            "Reads of a waiting room's shared counters.",
            registry=registry,
        )
        self.loads = Counter(
            "rideout_room_counter_loads",
            "Reads of a waiting room's shared counters that reached Redis.",
            registry=registry,
        )
        self.position_polls = Counter(
            "rideout_room_position_polls",
            "queue_num polls of a known waiting-room event.",
            registry=registry,
        )
        self.position_loads = Counter(
            "rideout_room_position_loads",
            "queue_num polls that read the position from Redis.",
            registry=registry,
        )
        self.position_touches = Counter(
            "rideout_room_position_touches",
            "Abandonment-clock touches sent apart from a position read.",
            registry=registry,
        )
        self._counters = {
            field: Gauge(name, doc, ["event"], registry=registry)
            for field, name, doc in _COUNTER_GAUGES
        }
        self._events: set[str] = set()
        self._requests = LabelCache(self.requests)

    def observe(self, event_id: str, counters: Counters) -> None:
        """Set an event's counter gauges from `counters` (read at one moment)."""
        for field, gauge in self._counters.items():
            gauge.labels(event_id).set(getattr(counters, field))
        self._events.add(event_id)

    def forget_others(self, events: set[str]) -> None:
        """Drop the counter gauges of every event not in `events` (deleted ones)."""
        for event_id in self._events - events:
            for gauge in self._counters.values():
                gauge.remove(event_id)
        self._events &= events

    def answered(self, endpoint: str, status: int) -> None:
        self._requests(endpoint, str(status)).inc()
