"""Every Redis key rideout uses, in one place (like arq's constants).

All keys share the ``rideout:`` prefix so a shared Redis can be inspected or cleaned
without touching anything else. A room's keys share a ``{hash tag}``, and so do a
user's and a waiting-room event's, so each group stays in one slot of a Redis Cluster
(:mod:`rideout.store.slots`): a bid's keys (the room's state and stream, the user's
session in the room, the ack) are all under the room's tag, and the epoch has a copy in
every slot, which the scripts fence on (:func:`epoch_copy`). The calls that still name
keys of several slots are listed by tests/store/test_slots.py and docs/capacity.md. Every name is percent-escaped
(``:``, ``{`` and ``}`` included), so no user id, room or request id can reach into
another key's space.
"""

from __future__ import annotations

import functools
from urllib.parse import quote

from rideout.store.slots import key_slot, slot_tags

__all__ = [
    "CANARY_KEYS",
    "CONTROL_PLANE_FENCE",
    "CONTROL_PLANE_KEYS",
    "CONTROL_PLANE_LEASE",
    "CONTROL_PLANE_STATE",
    "DEMO_KEYS",
    "EPOCH",
    "EPOCH_COPIES",
    "EPOCH_COPY_PREFIX",
    "IDEMPOTENCY_KEYS",
    "PREFIX",
    "REVOCATIONS",
    "REVOCATIONS_VERSION",
    "REVOCATION_KEYS",
    "ROOM_KEYS",
    "ROOM_STREAMS",
    "USER_KEYS",
    "WAITINGROOM_INDEX",
    "WAITINGROOM_KEYS",
    "bid_ack",
    "canary_probe",
    "demo_identities",
    "demo_identities_from",
    "demo_name_claim",
    "epoch_copies",
    "epoch_copy",
    "idempotency",
    "legacy_bid_ack",
    "legacy_demo_name_claim",
    "room_session",
    "room_state",
    "room_stream",
    "user_bid_ack",
    "waitingroom_event_keys",
    "waitingroom_oidc",
    "waitingroom_refresh",
    "waitingroom_stamp",
    "waitingroom_tick",
]

PREFIX = "rideout:"

# The writer's epoch: an integer the failover controller increases on every promotion.
# Together with a stream offset it names a position in a room's history.
EPOCH = PREFIX + "epoch"
# Its copies, one in each hash slot (epoch_copy): what a script fences on, so that no
# script names a key of another slot than its own (a cluster refuses that). The
# controller writes the epoch and every copy together (store.replication).
EPOCH_COPIES = EPOCH + ":*"
# How each copy's name begins; a slot's tag and "}" end it (the scripts that read and
# write copies build and check names with it).
EPOCH_COPY_PREFIX = EPOCH + ":{"

# Glob patterns (Redis's MATCH and ACL key patterns) over the families below. The
# Redis users of store/acl.py may touch only keys these match: a new family of keys
# needs its pattern here and in the users that need it.
ROOM_KEYS = PREFIX + "room:*"
ROOM_STREAMS = PREFIX + "room:*:stream"
USER_KEYS = PREFIX + "user:*"
IDEMPOTENCY_KEYS = PREFIX + "idem:*"
# The canary's probe keys (see canary_probe).
CANARY_KEYS = PREFIX + "canary:*"
DEMO_KEYS = PREFIX + "demo:*"
# Revoked tokens (hash: "sub:NAME" or "jti:ID" -> {"until","expires","at"} in ms), and
# a value that changes with every revocation, which app servers poll (one tag: a
# revocation writes both at once).
REVOCATIONS = PREFIX + "{revocations}:entries"
REVOCATIONS_VERSION = PREFIX + "{revocations}:version"
# Both, as a glob pattern (for MATCH and for ACL key patterns).
REVOCATION_KEYS = PREFIX + "{revocations}:*"
# The waiting room (rideout.waitingroom): every key of every event, and the set of
# event ids. An event's keys share its ``{hash tag}``; the index is the one key outside.
WAITINGROOM_KEYS = PREFIX + "wr:*"
WAITINGROOM_INDEX = PREFIX + "wr:index"

# External mode, in the control plane's own Redis ([control_plane] state_redis_url):
# the lease (one holder acts), the fencing counter each new holder increments, and the
# state the holder saves (alarms, health checks, the controller). One tag: the lease's
# scripts touch them together. Only the controller user may touch them.
CONTROL_PLANE_LEASE = PREFIX + "{controlplane}:lease"
CONTROL_PLANE_FENCE = PREFIX + "{controlplane}:fence"
CONTROL_PLANE_STATE = PREFIX + "{controlplane}:state"
CONTROL_PLANE_KEYS = PREFIX + "{controlplane}:*"


def _safe(name: str) -> str:
    return quote(name, safe="-_.@+=")


def epoch_copy(key: str) -> str:
    """String: the copy of the epoch in `key`'s hash slot, which a script that touches
    `key` fences on (the same integer as :data:`EPOCH`; unset reads as 0)."""
    return f"{EPOCH_COPY_PREFIX}{slot_tags()[key_slot(key)]}}}"


@functools.cache
def epoch_copies() -> tuple[str, ...]:
    """Every copy of the epoch, one per hash slot, by slot."""
    return tuple(f"{EPOCH_COPY_PREFIX}{tag}}}" for tag in slot_tags())


def room_state(room: str) -> str:
    """Hash: the room's current state (bid, bidder, bid count, ...)."""
    return f"{PREFIX}room:{{{_safe(room)}}}:state"


def room_stream(room: str) -> str:
    """Stream: every accepted change of the room; the entry id is the offset."""
    return f"{PREFIX}room:{{{_safe(room)}}}:stream"


def room_session(room: str, sub: str) -> str:
    """Hash: a user's session in a room (its latest accepted bid there), keyed by the
    token's ``sub``, never by connection; under the room's tag, beside what a bid
    changes. (It ends in ``:session``: no room key but the stream ends in ``:stream``.)"""
    return f"{PREFIX}room:{{{_safe(room)}}}:user:{_safe(sub)}:session"


def bid_ack(sub: str, room: str, request_id: str) -> str:
    """String: the ack first sent for a user's bid id in a room, replayed for retries;
    under the room's tag. Scoped per room: one id used in two rooms names two bids."""
    return f"{PREFIX}room:{{{_safe(room)}}}:bid:{_safe(sub)}:{_safe(request_id)}:ack"


def user_bid_ack(sub: str, room: str, request_id: str) -> str:
    """String: an ack stored under the user's tag, before acks moved under the room's.

    The bid script still reads one (where ``AuctionSettings.legacy_acks``), so a bid
    decided before an upgrade is not applied again after it; none is written any more,
    and the last expires ``ack_ttl`` after the upgrade.
    """
    return f"{PREFIX}user:{{{_safe(sub)}}}:room:{_safe(room)}:bid:{_safe(request_id)}"


def legacy_bid_ack(sub: str, request_id: str) -> str:
    """String: an ack stored before ids were scoped per room (per user only).

    The bid script still reads one (where ``AuctionSettings.legacy_acks``) for a retry
    in the room it names; none is written any more.
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
    cannot pass for "alice"; under the tag of the region's counts of names
    (:func:`demo_identities`), which the claim's script updates with it."""
    return f"{PREFIX}demo:{{identities}}:claim:{_safe(name.casefold())}"


def legacy_demo_name_claim(name: str) -> str:
    """String: a claim stored under the user's tag, before claims moved beside the
    counts (one slot for the claim's script).

    Still read, so a name claimed before an upgrade stays its holder's (and is moved to
    :func:`demo_name_claim` when renewed); none is written any more, and the last
    expires ``auth.token_ttl`` after the upgrade.
    """
    return f"{PREFIX}user:{{{_safe(name.casefold())}}}:demo-claim"


def demo_identities() -> str:
    """Sorted set: every demo name claimed in the region (case-folded), scored by when its
    claim expires (ms): what ``[auth] max_demo_identities`` counts."""
    return f"{PREFIX}demo:{{identities}}:all"


def demo_identities_from(address: str) -> str:
    """Sorted set: the demo names claimed from one client address, scored as in
    :func:`demo_identities`: what ``max_demo_identities_per_address`` counts."""
    return f"{PREFIX}demo:{{identities}}:address:{_safe(address)}"


def idempotency(scope: str, key: str, user: str | None = None) -> str:
    """String: an ``Idempotency-Key``'s record (in flight, or the response to replay).

    Scoped per API (``scope``) and, when requests are authenticated, per user: one
    user's key never reaches another's record.
    """
    owner = "-" if user is None else "u=" + _safe(user)
    return f"{PREFIX}idem:{_safe(scope)}:{owner}:{_safe(key)}"


# The waiting room's keys of one event, in the order its scripts take them
# (rideout.store.room_scripts): name -> key.
_WAITINGROOM_PARTS = (
    "event",  # hash: the settings ("json") and the few fields the scripts read
    "counters",  # hash: queue, serving, tokens, expired, abandoned, completed, ...
    "requests",  # hash: request id -> "q,entry_ms,state,iat,exp,status"
    "queue",  # zset: request id by queue number
    "seen",  # zset: waiting request id by its last poll (ms): abandonment
    "tokens",  # zset: request id by its token's exp (s): every token
    "active",  # zset: request id by exp (s): tokens whose session is still 0
    "servable",  # zset: "counter:ms" by counter: when each position became servable
    "dead",  # zset: request id by queue number: expired or abandoned unserved
    "prequeue",  # zset: pre-queued request id by a random draw
    "events",  # stream: token_generated, session_updated, ... (bounded)
)


def waitingroom_event_keys(event_id: str) -> dict[str, str]:
    """Every key of one waiting-room event, by part (see ``_WAITINGROOM_PARTS``)."""
    tag = f"{PREFIX}wr:{{{_safe(event_id)}}}:"
    return {part: tag + part for part in _WAITINGROOM_PARTS}


def waitingroom_tick(event_id: str, task: str, tick: int) -> str:
    """String: claimed by the one process that runs `task` for `tick` (``SET NX``)."""
    return f"{PREFIX}wr:{{{_safe(event_id)}}}:tick:{_safe(task)}:{tick}"


def waitingroom_stamp(event_id: str, digest: str) -> str:
    """String: a proof-of-work stamp already used for `event_id` (kept while it is valid)."""
    return f"{PREFIX}wr:{{{_safe(event_id)}}}:pow:{_safe(digest)}"


def waitingroom_oidc(event_id: str, kind: str, digest: str) -> str:
    """String: an OpenID adapter's record of `event_id` (rideout.waitingroom.oidc):
    ``kind`` "authz" (an authorize request waiting in the room), "bound" (the request id
    it entered with), "code" (an authorization code) or "nonce"; named by a digest, so
    a key never shows a secret."""
    return f"{PREFIX}wr:{{{_safe(event_id)}}}:oidc:{_safe(kind)}:{_safe(digest)}"


def waitingroom_refresh(event_id: str, request_id: str) -> str:
    """String: a renewed session's refresh-token rotation, ``entry_ms:start_s:jti`` (the
    position's entry time, the session's first ``iat``, the one refresh token ``jti``
    a renewal takes); it expires after the session does."""
    return f"{PREFIX}wr:{{{_safe(event_id)}}}:refresh:{_safe(request_id)}"
