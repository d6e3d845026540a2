"""Bids awaiting their ack, across connections (no I/O, ``now`` given)."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from rideout.backoff import DelayPolicy
from rideout.client.ws._errors import QueueFull
from rideout.errors import InvalidArgument

__all__ = ["BidBook", "PendingBid"]


@dataclass(slots=True)
class PendingBid:
    """A bid awaiting its ack."""

    id: str
    room: str
    amount: int
    seq: int
    sent: bool = False
    sends: int = 0
    retries: int = 0
    retry_at: float | None = None


class BidBook:
    """Bids not yet acknowledged, in submission order (no I/O).

    A bid is *unsent* (queued, or lost with a connection, or waiting for ``retry_at``)
    or *sent* (in flight on the current connection).
    """

    def __init__(
        self,
        limit: int,
        retry_policy: DelayPolicy,
        max_retries: int,
        rng: random.Random | None = None,
    ) -> None:
        self.limit = limit
        self.retry_policy = retry_policy
        self.max_retries = max_retries
        self._rng = rng
        self._bids: dict[str, PendingBid] = {}
        self._seq = 0

    def __len__(self) -> int:
        return len(self._bids)

    def __contains__(self, request_id: object) -> bool:
        return request_id in self._bids

    def get(self, request_id: str) -> PendingBid | None:
        return self._bids.get(request_id)

    def pending(self) -> tuple[PendingBid, ...]:
        """Every bid awaiting its ack, oldest first."""
        return tuple(self._bids.values())

    def add(self, room: str, amount: int, request_id: str) -> PendingBid:
        """Queue a bid; :class:`QueueFull` at the limit, ValueError for an id already pending."""
        if request_id in self._bids:
            raise InvalidArgument(f"bid {request_id!r} is already awaiting its ack")
        if len(self._bids) >= self.limit:
            raise QueueFull(
                f"{len(self._bids)} bids already await their ack (max_queued_bids={self.limit})"
            )
        self._seq += 1
        bid = PendingBid(request_id, room, amount, self._seq)
        self._bids[request_id] = bid
        return bid

    def take_sendable(self, now: float) -> list[PendingBid]:
        """The unsent bids that may go now (oldest first), marked sent."""
        ready = []
        for bid in self._bids.values():
            if not bid.sent and (bid.retry_at is None or bid.retry_at <= now):
                bid.sent = True
                bid.sends += 1
                bid.retry_at = None
                ready.append(bid)
        return ready

    def connection_lost(self) -> None:
        """Every bid is unsent again, to go (same id) right after the next restore."""
        for bid in self._bids.values():
            bid.sent = False
            bid.retry_at = None

    def acked(self, request_id: str) -> PendingBid | None:
        """The acknowledged bid, removed; None for an id not pending."""
        return self._bids.pop(request_id, None)

    def unavailable(self, request_id: str, now: float) -> tuple[PendingBid, float | None] | None:
        """An ``unavailable`` error: ``(bid, retry_at)``, or ``(bid, None)`` when it is rejected."""
        bid = self._bids.get(request_id)
        if bid is None:
            return None
        bid.retries += 1
        if bid.retries > self.max_retries:
            del self._bids[request_id]
            return bid, None
        bid.sent = False
        bid.retry_at = now + self.retry_policy.delay(bid.retries - 1, self._rng)
        return bid, bid.retry_at

    def rejected(self, request_id: str) -> PendingBid | None:
        """A final error: the bid removed; None for an id not pending."""
        return self._bids.pop(request_id, None)

    def next_retry(self) -> float:
        """The earliest ``retry_at`` of a bid waiting to retry (inf when none)."""
        return min(
            (b.retry_at for b in self._bids.values() if not b.sent and b.retry_at is not None),
            default=math.inf,
        )
