"""Operator sessions for the dashboard: one-time login codes, session cookies, CSRF.

An operator who holds the admin token (on disk, never served) asks for a login code
(``rideout up`` and ``rideout dashboard login`` do); opening the link redeems it once,
within its lifetime, for a session: a random id the browser keeps in an HttpOnly,
SameSite=Strict cookie, and a CSRF token the dashboard's script reads from
``/v1/dashboard`` and sends back on every POST.

Codes and session ids are kept only as SHA-256 hashes, in memory: a restarted control
plane forgets every session (open a new link). Pure: no I/O, the clock is injected.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass

from rideout import _validate

__all__ = ["OperatorSession", "OperatorSessions"]


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True, slots=True)
class OperatorSession:
    """One signed-in browser: its CSRF token and when the session ends."""

    csrf: str
    expires: float

    def csrf_matches(self, token: str | None) -> bool:
        """Whether `token` is this session's CSRF token (constant time)."""
        return token is not None and hmac.compare_digest(token.encode(), self.csrf.encode())


class OperatorSessions:
    """Login codes and the sessions they open; at most `max_codes` pending codes and
    `max_sessions` sessions (the oldest go first)."""

    def __init__(
        self,
        *,
        code_ttl: float = 300.0,
        session_ttl: float = 8 * 3600.0,
        clock: Callable[[], float] = time.time,
        max_codes: int = 16,
        max_sessions: int = 32,
    ) -> None:
        self.code_ttl = _validate.seconds("code_ttl", code_ttl)
        self.session_ttl = _validate.seconds("session_ttl", session_ttl)
        self._max_codes = _validate.count("max_codes", max_codes, low=1)
        self._max_sessions = _validate.count("max_sessions", max_sessions, low=1)
        self._clock = clock
        self._codes: dict[str, float] = {}  # sha256(code) -> expires (insertion ordered)
        self._sessions: dict[str, OperatorSession] = {}  # sha256(session id) -> session

    def mint_code(self) -> tuple[str, float]:
        """A new single-use login code and when it expires."""
        self._prune()
        code = secrets.token_urlsafe(32)
        expires = self._clock() + self.code_ttl
        self._codes[_digest(code)] = expires
        while len(self._codes) > self._max_codes:
            del self._codes[next(iter(self._codes))]
        return code, expires

    def redeem(self, code: str) -> tuple[str, OperatorSession] | None:
        """Use `code` (once): a new session id and its session, or None when the code is
        unknown, used or expired."""
        self._prune()
        expires = self._codes.pop(_digest(code), None)
        if expires is None or expires <= self._clock():
            return None
        session_id = secrets.token_urlsafe(32)
        session = OperatorSession(secrets.token_urlsafe(32), self._clock() + self.session_ttl)
        self._sessions[_digest(session_id)] = session
        while len(self._sessions) > self._max_sessions:
            del self._sessions[next(iter(self._sessions))]
        return session_id, session

    def session(self, session_id: str | None) -> OperatorSession | None:
        """The live session `session_id` names, if any."""
        if not session_id:
            return None
        key = _digest(session_id)
        session = self._sessions.get(key)
        if session is None:
            return None
        if session.expires <= self._clock():
            del self._sessions[key]
            return None
        return session

    def end(self, session_id: str | None) -> None:
        """Forget a session (sign out)."""
        if session_id:
            self._sessions.pop(_digest(session_id), None)

    def _prune(self) -> None:
        now = self._clock()
        for key in [k for k, expires in self._codes.items() if expires <= now]:
            del self._codes[key]
        for key in [k for k, s in self._sessions.items() if s.expires <= now]:
            del self._sessions[key]
