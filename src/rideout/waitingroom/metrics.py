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
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter

from rideout._metrics import LabelCache

__all__ = ["RoomMetrics"]


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
        self._requests = LabelCache(self.requests)

    def answered(self, endpoint: str, status: int) -> None:
        self._requests(endpoint, str(status)).inc()
