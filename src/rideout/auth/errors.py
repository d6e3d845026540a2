"""The auth package's exceptions: :class:`CredentialError` above everything it raises.

:class:`AuthError` is the one a request can cause (a token rejected, with the HTTP
status to answer); the others (:class:`~rideout.auth.keys.KeyFileError`,
:class:`~rideout.auth.keys.JWKSError`, :class:`~rideout.auth.admin.AdminTokenError`)
mean the operator's key material cannot be used; :class:`AuthUnavailable` that a
credential cannot be judged for now (answer 503, never accept). They are siblings, not subclasses of
:class:`AuthError`, so a handshake that catches :class:`AuthError` to answer 401/403
never turns a broken key file into a rejected client.
"""

from __future__ import annotations

from typing import Final, Literal, get_args

from rideout.errors import RideoutError

__all__ = ["REASON_STATUS", "AuthError", "AuthReason", "AuthUnavailable", "CredentialError"]

AuthReason = Literal[
    # 401: no usable proof of identity.
    "missing_token",
    "malformed",
    "bad_signature",
    "unknown_kid",
    "alg_not_allowed",
    "token_expired",
    "token_not_yet_valid",
    "lifetime_too_long",
    "token_too_long",
    "wrong_issuer",
    # 403: a genuine token that does not grant this access.
    "wrong_audience",
    "not_access_token",
    "wrong_token_use",
    "token_revoked",
    "session_completed",
    "session_abandoned",
    "session_unknown",
]
"""Machine-readable reason codes carried by :class:`AuthError`."""

_FORBIDDEN: Final = frozenset(
    {
        "wrong_audience",
        "not_access_token",
        "wrong_token_use",
        "token_revoked",
        "session_completed",
        "session_abandoned",
        "session_unknown",
    }
)

REASON_STATUS: Final[dict[AuthReason, Literal[401, 403]]] = {
    reason: 403 if reason in _FORBIDDEN else 401 for reason in get_args(AuthReason)
}
"""The HTTP status each reason maps to (401 unauthenticated, 403 forbidden)."""


class CredentialError(RideoutError):
    """Base of every auth error: a credential or the key material behind it is unusable."""


class AuthError(CredentialError):
    """A credential was missing or rejected.

    ``status`` is the HTTP status to answer the handshake with (401 or 403),
    ``reason`` a stable machine code, ``message`` a human explanation that never
    contains the token itself.
    """

    status: int
    reason: AuthReason
    message: str

    def __init__(self, status: int, reason: AuthReason, message: str | None = None) -> None:
        if status not in (401, 403):
            raise ValueError(f"AuthError status must be 401 or 403, not {status!r}")
        self.status = status
        self.reason = reason
        self.message = message if message is not None else reason.replace("_", " ")
        super().__init__(status, reason, self.message)

    @classmethod
    def of(cls, reason: AuthReason, message: str | None = None) -> AuthError:
        """Build an error whose status follows from ``reason`` (see ``REASON_STATUS``)."""
        return cls(REASON_STATUS[reason], reason, message)

    def __str__(self) -> str:
        return f"{self.status} {self.reason}: {self.message}"

    def __reduce__(self) -> tuple[type[AuthError], tuple[int, AuthReason, str]]:
        return (type(self), (self.status, self.reason, self.message))


class AuthUnavailable(CredentialError):
    """A credential cannot be judged right now (what it depends on, such as the store
    holding session status, does not answer): refuse for now with 503, never accept."""

    def __init__(self, message: str, *, retry_after: float = 1.0) -> None:
        self.message = message
        self.retry_after = retry_after
        super().__init__(message)
