"""The auction's ``$connect`` authorizer for the waiting room's tokens.

:class:`RoomAuthorizer` is a :class:`~rideout.realtime.zone.HandshakeAuthority` (``/ws``
asks it about tokens its own verifier refuses) and a
:class:`~rideout.realtime.app.ZoneExtension` (its start-up opens the room's store on the
zone's Redis). A token is the room's when its ``kid`` is in the room's key ring; it is
then accepted only if it verifies as an access token for an event that guards the
auction (``[auth] room_events``) and its session is still active in the room's store.
AWS's authorizer ignores session status: here a completed, abandoned or unknown session
is refused (403 ``session_completed``, ``session_abandoned``, ``session_unknown``), and a
revoked one by the handshake's revocation list (``sub`` is the request id).

Session statuses are cached for ``ttl`` seconds (:class:`SessionCache`, bounded in size),
so a connection costs no Redis round trip, and a session that ends is refused within
``ttl`` seconds. Handshakes that miss the cache for the same session at once share one
read. A store that does not answer refuses for now (503, :class:`AuthUnavailable`).
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Final, Protocol, cast

from rideout import _validate, routes
from rideout.auth import AuthError, AuthReason, AuthUnavailable
from rideout.auth.room_tokens import RoomClaims, RoomKeyWatcher, RoomTokenVerifier
from rideout.auth.tokens import Clock
from rideout.waitingroom.errors import RoomError, RoomUnavailable

if TYPE_CHECKING:
    import redis.asyncio as aioredis
    from starlette.routing import BaseRoute

    from rideout.auth.keys import Algorithm
    from rideout.config import Config, RegionConfig

__all__ = [
    "ABANDONED",
    "ACTIVE",
    "COMPLETED",
    "DEFAULT_CACHE_SIZE",
    "RoomAuthorizer",
    "SessionCache",
    "SessionSource",
    "Zone",
]

ACTIVE: Final = 0
COMPLETED: Final = 1
ABANDONED: Final = -1
DEFAULT_CACHE_SIZE: Final = 100_000
"""Sessions whose status one process remembers (least recently used dropped first)."""

_REFUSALS: Final[dict[int | None, tuple[AuthReason, str]]] = {
    COMPLETED: ("session_completed", "this waiting-room session has been completed"),
    ABANDONED: ("session_abandoned", "this waiting-room session was abandoned"),
    None: ("session_unknown", "the waiting room has no session for this token"),
}

SessionKey = tuple[str, str]  # (event id, request id)


class SessionSource(Protocol):
    """Where session statuses come from (:class:`~rideout.waitingroom.store.RoomStore`)."""

    async def session_status(self, event_id: str, request_id: str) -> int | None:
        """0 active, 1 completed, -1 abandoned, None when there is no such session."""


class Zone(Protocol):
    """What the authorizer needs of the zone it starts on (a ZoneServer)."""

    @property
    def redis(self) -> aioredis.Redis: ...

    @property
    def region(self) -> RegionConfig: ...


class SessionCache:
    """Session statuses for ``ttl`` seconds of ``clock``, at most ``size`` of them
    (pure: no I/O)."""

    __slots__ = ("_clock", "_entries", "size", "ttl")

    def __init__(
        self, ttl: float = 1.0, size: int = DEFAULT_CACHE_SIZE, *, clock: Clock = time.monotonic
    ) -> None:
        self.ttl = _validate.seconds("ttl", ttl, zero_ok=True)
        self.size = _validate.count("size", size, low=1)
        self._clock = clock
        self._entries: OrderedDict[SessionKey, tuple[float, int | None]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: SessionKey) -> tuple[bool, int | None]:
        """``(True, status)`` while a fresh entry exists, else ``(False, None)``."""
        entry = self._entries.get(key)
        if entry is None:
            return False, None
        if self._clock() - entry[0] >= self.ttl:
            del self._entries[key]
            return False, None
        self._entries.move_to_end(key)
        return True, entry[1]

    def put(self, key: SessionKey, status: int | None, *, read_at: float | None = None) -> None:
        """Remember ``status``, read at ``read_at`` (default: now), dropping the least
        recently used entry beyond ``size``."""
        if self.ttl == 0:
            return
        self._entries[key] = (self._clock() if read_at is None else read_at, status)
        self._entries.move_to_end(key)
        while len(self._entries) > self.size:
            self._entries.popitem(last=False)

    def now(self) -> float:
        return self._clock()


class RoomAuthorizer:
    """Accepts at ``/ws`` the room's access tokens whose session is active (see the
    module docstring). ``sessions`` may be given (tests); else :meth:`start` opens the
    room's store on the zone's Redis."""

    def __init__(
        self,
        verifier: RoomTokenVerifier,
        sessions: SessionSource | None = None,
        *,
        cache: SessionCache | None = None,
    ) -> None:
        self.verifier = verifier
        self.sessions = sessions
        self.cache = cache if cache is not None else SessionCache()
        self._reads: dict[SessionKey, asyncio.Future[int | None]] = {}

    @classmethod
    def from_config(cls, config: Config) -> RoomAuthorizer:
        """The authorizer of a deployment: the room's key ring in its keys directory
        (re-read when a rotation changes it), its ``[auth]`` room settings."""
        auth = config.auth
        algorithm = cast("Algorithm", config.waitingroom.token_algorithm)
        verifier = RoomTokenVerifier(
            RoomKeyWatcher(config.keys_dir, algorithm),
            issuer=routes.room_issuer(config),
            audiences=frozenset(auth.room_events),
            leeway=auth.leeway,
            # Revocations and stolen tokens are bounded by the auction's longest lifetime:
            # a room event's validity beyond it is refused here (lifetime_too_long).
            max_ttl=auth.max_token_ttl,
        )
        return cls(verifier, cache=SessionCache(auth.room_session_ttl))

    # ------------------------------------------------------------ the zone extension

    def routes(self, server: Zone) -> Sequence[BaseRoute]:
        return ()

    async def start(self, server: Zone) -> None:
        if self.sessions is None:
            from rideout.waitingroom.store import RoomStore

            self.sessions = RoomStore(server.redis, region=server.region.name)

    async def stop(self) -> None:
        return None

    # ------------------------------------------------------------ the authority

    async def authorize(self, token: str) -> RoomClaims | None:
        """The claims of an accepted room token; None for a token that is not the room's."""
        if not self.verifier.owns(token):
            return None
        claims = self.verifier.verify(token)
        status = await self.status(claims.event_id, claims.sub)
        if status == ACTIVE:
            return claims
        reason, message = _REFUSALS.get(status, _REFUSALS[None])
        raise AuthError.of(reason, message)

    async def status(self, event_id: str, request_id: str) -> int | None:
        """The session's status, from the cache while it is fresh."""
        key = (event_id, request_id)
        hit, status = self.cache.get(key)
        if hit:
            return status
        pending = self._reads.get(key)
        if pending is not None:
            await asyncio.wait([pending])  # never cancels the read it shares
            if not pending.cancelled():
                return pending.result()
            return await self.status(event_id, request_id)  # its reader was cancelled
        future: asyncio.Future[int | None] = asyncio.get_running_loop().create_future()
        self._reads[key] = future
        try:
            read_at = self.cache.now()
            status = await self._read(event_id, request_id)
        except asyncio.CancelledError:
            future.cancel()
            raise
        except Exception as exc:
            future.set_exception(exc)
            future.exception()  # retrieved, whether or not anyone waits for it
            raise
        finally:
            del self._reads[key]
        self.cache.put(key, status, read_at=read_at)
        future.set_result(status)
        return status

    async def _read(self, event_id: str, request_id: str) -> int | None:
        sessions = self.sessions
        if sessions is None:
            raise AuthUnavailable("the waiting room's store is not open yet")
        try:
            return await sessions.session_status(event_id, request_id)
        except RoomUnavailable as exc:
            raise AuthUnavailable(f"the waiting room's store does not answer: {exc}") from exc
        except RoomError:
            return None  # an id the store cannot hold has no session
