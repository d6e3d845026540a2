"""Every Redis key rideout uses, in one place (like arq's constants).

All keys share the ``rideout:`` prefix so a shared Redis can be inspected or cleaned
without touching anything else. A room's keys share a ``{hash tag}``, and so do a
user's, so each group stays in one slot should a deployment move to Redis Cluster
(the bid script touches a room and a user together: on Cluster it would need both
tags co-located, which rideout does not attempt today). Every name is percent-escaped
(``:``, ``{`` and ``}`` included), so no user id, room or request id can reach into
another key's space.
"""

from __future__ import annotations

from urllib.parse import quote

__all__ = [
    "EPOCH",
    "IDEMPOTENCY_KEYS",
    "PREFIX",
    "ROOM_KEYS",
    "ROOM_STREAMS",
    "USER_KEYS",
    "bid_ack",
    "demo_name_claim",
    "idempotency",
    "room_state",
    "room_stream",
    "user_session",
]

PREFIX = "rideout:"

# The writer's epoch: an integer the failover controller increases on every promotion.
# Together with a stream offset it names a position in a room's history.
EPOCH = PREFIX + "epoch"

# Glob patterns (Redis's MATCH and ACL key patterns) over the families below. The
# Redis users of store/acl.py may touch only keys these match: a new family of keys
# needs its pattern here and in the users that need it.
ROOM_KEYS = PREFIX + "room:*"
ROOM_STREAMS = PREFIX + "room:*:stream"
USER_KEYS = PREFIX + "user:*"
IDEMPOTENCY_KEYS = PREFIX + "idem:*"


def _safe(name: str) -> str:
    return quote(name, safe="-_.@+=")


def room_state(room: str) -> str:
    """Hash: the room's current state (bid, bidder, bid count, ...)."""
    return f"{PREFIX}room:{{{_safe(room)}}}:state"


def room_stream(room: str) -> str:
    """Stream: every accepted change of the room; the entry id is the offset."""
    return f"{PREFIX}room:{{{_safe(room)}}}:stream"


def user_session(sub: str) -> str:
    """Hash: a user's session state, keyed by the token's ``sub``, never by connection."""
    return f"{PREFIX}user:{{{_safe(sub)}}}:session"


def bid_ack(sub: str, request_id: str) -> str:
    """String: the ack first sent for a user's bid id, replayed for retries."""
    return f"{PREFIX}user:{{{_safe(sub)}}}:bid:{_safe(request_id)}"


def demo_name_claim(name: str) -> str:
    """String: who holds a demo bidder name (a hash of its browser's secret), for as
    long as the tokens issued for it live. Keyed by the case-folded name, so "Alice"
    cannot pass for "alice"; under the user's hash tag."""
    return f"{PREFIX}user:{{{_safe(name.casefold())}}}:demo-claim"


def idempotency(scope: str, key: str, user: str | None = None) -> str:
    """String: an ``Idempotency-Key``'s record (in flight, or the response to replay).

    Scoped per API (``scope``) and, when requests are authenticated, per user: one
    user's key never reaches another's record.
    """
    owner = "-" if user is None else "u=" + _safe(user)
    return f"{PREFIX}idem:{_safe(scope)}:{owner}:{_safe(key)}"
