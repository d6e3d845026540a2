"""Authentication for the WebSocket ``$connect`` authorizer.

One Ed25519 signing key shared by every region (:class:`SigningKey`), its JWKS, and
access tokens issued by :class:`TokenIssuer` and checked by :class:`TokenVerifier`
against a :class:`JWKSet`, no longer than a maximum lifetime. Revoked tokens are
described by :mod:`rideout.auth.revocation` (pure; the list lives in Redis). The
waiting room's own keys and token sets are :mod:`rideout.auth.room_tokens`. Every
rejection is an :class:`AuthError` carrying the HTTP status (401/403) and a
machine-readable reason; every error of the package is a :class:`CredentialError`.
"""

from __future__ import annotations

from rideout.auth.errors import (
    REASON_STATUS,
    AuthError,
    AuthReason,
    AuthUnavailable,
    CredentialError,
)
from rideout.auth.handshake import BEARER_SUBPROTOCOL, BearerToken, extract_token
from rideout.auth.keys import (
    KEY_FILENAME,
    JWKSError,
    JWKSet,
    KeyFileError,
    SigningKey,
    VerificationKey,
    jwk_thumbprint,
)
from rideout.auth.tokens import (
    DEFAULT_MAX_TOKEN_TTL,
    MAX_TOKEN_LENGTH,
    Claims,
    TokenIssuer,
    TokenVerifier,
)

__all__ = [
    "BEARER_SUBPROTOCOL",
    "DEFAULT_MAX_TOKEN_TTL",
    "KEY_FILENAME",
    "MAX_TOKEN_LENGTH",
    "REASON_STATUS",
    "AuthError",
    "AuthReason",
    "AuthUnavailable",
    "BearerToken",
    "Claims",
    "CredentialError",
    "JWKSError",
    "JWKSet",
    "KeyFileError",
    "SigningKey",
    "TokenIssuer",
    "TokenVerifier",
    "VerificationKey",
    "extract_token",
    "jwk_thumbprint",
]
