"""What the drill's clients saw, one typed record per event, each with its client index
and wall-clock time first.

Records are NamedTuples: as small as the tuples they replace, and picklable, since
worker processes ship them to the drill in batches (see :class:`~rideout.drill.clients.ClientFleet`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final, NamedTuple, TypeAlias, TypeVar

__all__ = [
    "OUTBID",
    "AckRecord",
    "AttemptRecord",
    "ConnectedRecord",
    "DisconnectedRecord",
    "DrillRecord",
    "FailedRecord",
    "GaveUpRecord",
    "RejectedRecord",
    "RestoredRecord",
    "of_kind",
]


class AttemptRecord(NamedTuple):
    """A (re)connect attempt, started at ``t`` (its backoff over, before the name is
    resolved), toward the region the DNS answer then named."""

    client: int
    t: float
    region: str
    due: float
    """When its backoff was to end: the time the policy chose (``t`` minus the client
    process's own lag)."""


class ConnectedRecord(NamedTuple):
    """A connection opened to a zone of ``region``."""

    client: int
    t: float
    region: str


class DisconnectedRecord(NamedTuple):
    """A connection to a zone of ``region`` lost or closed."""

    client: int
    t: float
    region: str


class RestoredRecord(NamedTuple):
    """A room's state restored from ``region`` (the client's ``StateRestored``)."""

    client: int
    t: float
    region: str


class AckRecord(NamedTuple):
    """An accepted bid as its client saw the ack."""

    client: int
    t: float
    room: str
    bidder: str
    amount: int
    offset: str | None
    """The stream entry id the ack named (its position), when it had one."""
    region: str
    rtt: float | None = None
    """Seconds from the bid's submission to its ack (retries included): what the
    bidder waited."""


OUTBID: Final = "too_low"
"""The reason a bid is refused when someone in its room bid higher first."""


class RejectedRecord(NamedTuple):
    """A bid that ended unaccepted: ``too_low``, ``unavailable``..."""

    client: int
    t: float
    reason: str
    region: str = "?"
    """The region whose server answered, when the client knew it."""
    rtt: float | None = None
    """Seconds from the bid's submission to its answer."""


class AbuseRecord(NamedTuple):
    """One thing an abuser of the overload drill tried, and what the server made of it:
    ``outcome`` is ``served``, ``throttled``, ``refused:CODE`` (an HTTP status or an
    error code), ``closed:CODE`` (the server closed the connection with that code),
    ``dropped`` (it ended without the server's close frame) or ``held`` (a slow reader
    still connected at the end)."""

    client: int
    t: float
    behaviour: str
    outcome: str


class GaveUpRecord(NamedTuple):
    """A client that stopped reconnecting."""

    client: int
    t: float


class FailedRecord(NamedTuple):
    """A client whose connection loop ended with an unexpected error (a bug in the
    client, not a give-up): ``error`` is its repr."""

    client: int
    t: float
    error: str


DrillRecord: TypeAlias = (
    AttemptRecord
    | ConnectedRecord
    | DisconnectedRecord
    | RestoredRecord
    | AckRecord
    | RejectedRecord
    | AbuseRecord
    | GaveUpRecord
    | FailedRecord
)

_R = TypeVar("_R", bound=DrillRecord)


def of_kind(records: Iterable[DrillRecord], kind: type[_R]) -> list[_R]:
    """The records of one kind, in order."""
    return [r for r in records if isinstance(r, kind)]
