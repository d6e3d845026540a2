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
    "CANARY_KEYS",
    "EPOCH",
    "IDEMPOTENCY_KEYS",
    "PREFIX",
    "REVOCATIONS",
    "REVOCATIONS_VERSION",
    "REVOCATION_KEYS",
    "ROOM_KEYS",
    "ROOM_STREAMS",
    "USER_KEYS",
    "bid_ack",
    "canary_probe",
    "demo_name_claim",
    "idempotency",
    "legacy_bid_ack",
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
# The canary's probe keys (see canary_probe).
CANARY_KEYS = PREFIX + "canary:*"
# Revoked tokens (hash: "sub:NAME" or "jti:ID" -> {"until","expires","at"} in ms), and
# a value that changes with every revocation, which app servers poll (one tag: a
# revocation writes both at once).
REVOCATIONS = PREFIX + "{revocations}:entries"
REVOCATIONS_VERSION = PREFIX + "{revocations}:version"
# Both, as a glob pattern (for MATCH and for ACL key patterns).
REVOCATION_KEYS = PREFIX + "{revocations}:*"


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


def bid_ack(sub: str, room: str, request_id: str) -> str:
    """String: the ack first sent for a user's bid id in a room, replayed for retries.

    Scoped per room: one id used in two rooms names two bids.
    """
    return f"{PREFIX}user:{{{_safe(sub)}}}:room:{_safe(room)}:bid:{_safe(request_id)}"


def legacy_bid_ack(sub: str, request_id: str) -> str:
    """String: an ack stored before ids were scoped per room (per user only).

    The bid script still reads one for a retry in the room it names, so a bid decided
    before an upgrade is not applied again after it; none is written any more, and the
    last expires ``ack_ttl`` after the upgrade.
    """
    return f"{PREFIX}user:{{{_safe(sub)}}}:bid:{_safe(request_id)}"


def canary_probe(region: str, zone: str) -> str:
    """String: what the last store probe of a zone wrote (expires after a minute or so).

    The canary's probe (and each app server's own, for its heartbeats) writes and reads
    it through the path a bid takes, so a writer that cannot take a write is seen.
    """
    return f"{PREFIX}canary:{_safe(region)}:{_safe(zone)}"


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
