"""Issue and verify the access tokens the WebSocket ``$connect`` authorizer accepts.

Verification order, so the answer never depends on unauthenticated content beyond
what is needed to pick a key: shape and size, header (``alg`` allow-list, ``kid``),
signature (PyJWT with the key's one algorithm), then claims: well-formedness, issuer
and lifetime (401), audience and ``token_use`` (403).
"""

from __future__ import annotations

import math
import re
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final, TypeGuard

import jwt
from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm

from rideout.auth._encoding import b64url_decode, strict_json_object
from rideout.auth.errors import AuthError
from rideout.auth.keys import SUPPORTED_ALGORITHMS, JWKSet, SigningKey, VerificationKey

__all__ = [
    "ACCESS_TOKEN_USE",
    "DEFAULT_MAX_TOKEN_TTL",
    "MAX_SUBJECT_LENGTH",
    "MAX_TOKEN_LENGTH",
    "RESERVED_CLAIMS",
    "Claims",
    "Clock",
    "TokenIssuer",
    "TokenVerifier",
    "check_validity",
    "numeric_dates",
    "signature_checker",
    "token_kid",
    "verified_payload",
]

Clock = Callable[[], float]

MAX_TOKEN_LENGTH: Final = 4096
"""Longest token accepted (characters); longer ones are rejected before any parsing.

Well under the 8 KiB that the HTTP layer allows for the request line (``?token=``) and
for one header line (``Authorization``, ``Sec-WebSocket-Protocol``), so every token
that is too long reaches the authorizer and gets its 401."""
DEFAULT_MAX_TOKEN_TTL: Final = 86400.0
"""The longest lifetime (``exp - iat``, seconds) issued or accepted unless configured."""
MAX_SUBJECT_LENGTH: Final = 255
MAX_JTI_LENGTH: Final = 255
ACCESS_TOKEN_USE: Final = "access"
RESERVED_CLAIMS: Final = frozenset({"iss", "aud", "sub", "iat", "nbf", "exp", "jti", "token_use"})
"""Claims the issuer sets itself; ``extra_claims`` may not override them."""

_MAX_NUMERIC_DATE: Final = 2**53  # beyond this a NumericDate is not a plausible time
_TOKEN_SHAPE: Final = re.compile(r"([A-Za-z0-9_-]+)\.[A-Za-z0-9_-]*\.[A-Za-z0-9_-]*")
_UNSUPPORTED_HEADERS: Final = ("crit", "b64")


@dataclass(frozen=True, slots=True)
class Claims:
    """The verified claims of an access token (``raw`` holds every claim, read-only)."""

    sub: str
    exp: float
    iat: float
    jti: str
    raw: Mapping[str, Any] = field(repr=False, compare=False)


class TokenIssuer:
    """Signs access tokens with a :class:`SigningKey`.

    Times are whole seconds: ``iat = nbf = floor(clock())`` and
    ``exp = iat + ceil(ttl)``. No token lives longer than ``max_ttl`` seconds: a longer
    ``ttl`` is refused, here and by the verifier.
    """

    __slots__ = ("_clock", "_key", "audience", "issuer", "max_ttl", "ttl")

    def __init__(
        self,
        key: SigningKey,
        issuer: str,
        audience: str,
        ttl: float,
        clock: Clock = time.time,
        *,
        max_ttl: float = DEFAULT_MAX_TOKEN_TTL,
    ) -> None:
        _require_text(issuer, "issuer")
        _require_text(audience, "audience")
        self._key = key
        self.issuer = issuer
        self.audience = audience
        self.max_ttl = _check_ttl(max_ttl, "max_ttl")
        self.ttl = self._lifetime(ttl)
        self._clock = clock

    def _lifetime(self, ttl: float) -> float:
        ttl = _check_ttl(ttl)
        if math.ceil(ttl) > self.max_ttl:
            raise ValueError(
                f"ttl {ttl:g} s is longer than the longest token lifetime, {self.max_ttl:g} s "
                "(auth.max_token_ttl)"
            )
        return ttl

    def issue(
        self,
        sub: str,
        *,
        ttl: float | None = None,
        extra_claims: Mapping[str, Any] | None = None,
    ) -> str:
        """A signed access token for ``sub``, valid for ``ttl`` seconds (default: the issuer's).

        Raises ValueError for an invalid subject, a ttl that is not positive or longer
        than ``max_ttl``, extra claims that collide with the reserved ones or are not
        JSON, or a token longer than ``MAX_TOKEN_LENGTH``.
        """
        if not _valid_subject(sub):
            raise ValueError(
                f"sub must be a non-empty printable string of at most {MAX_SUBJECT_LENGTH} "
                "characters"
            )
        lifetime = self.ttl if ttl is None else self._lifetime(ttl)
        extra = dict(extra_claims or {})
        clash = sorted(RESERVED_CLAIMS.intersection(extra))
        if clash:
            raise ValueError(f"extra_claims may not set reserved claims: {', '.join(clash)}")
        iat = math.floor(self._clock())
        claims: dict[str, Any] = {
            "iss": self.issuer,
            "sub": sub,
            "aud": self.audience,
            "iat": iat,
            "nbf": iat,
            "exp": iat + math.ceil(lifetime),
            "jti": secrets.token_urlsafe(16),
            "token_use": ACCESS_TOKEN_USE,
            **extra,
        }
        try:
            token = self._key.encode(claims)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"extra_claims are not JSON-serialisable: {exc}") from exc
        if len(token) > MAX_TOKEN_LENGTH:
            raise ValueError(
                f"the token would be {len(token)} characters, over the {MAX_TOKEN_LENGTH} limit"
            )
        return token


class TokenVerifier:
    """Verifies access tokens against a :class:`JWKSet`; raises :class:`AuthError` only.

    ``leeway`` (seconds) absorbs clock skew between regions for ``exp``, ``nbf`` and
    ``iat``. A token whose lifetime ``exp - iat`` is longer than ``max_ttl`` seconds is
    refused (``lifetime_too_long``), whoever signed it: revocation entries and stolen
    tokens then have a bounded life. Header parameters that point at keys (``jku``,
    ``jwk``, ``x5u``, ``x5c``) are ignored: keys come from the JWKS alone.
    """

    __slots__ = ("_clock", "_jws", "audience", "issuer", "keys", "leeway", "max_ttl")

    def __init__(
        self,
        keys: JWKSet,
        issuer: str,
        audience: str,
        leeway: float = 5.0,
        clock: Clock = time.time,
        *,
        max_ttl: float = DEFAULT_MAX_TOKEN_TTL,
    ) -> None:
        _require_text(issuer, "issuer")
        _require_text(audience, "audience")
        if not (math.isfinite(leeway) and leeway >= 0):
            raise ValueError(f"leeway must be a finite number >= 0, not {leeway!r}")
        self.keys = keys
        self.issuer = issuer
        self.audience = audience
        self.leeway = leeway
        self.max_ttl = _check_ttl(max_ttl, "max_ttl")
        self._clock = clock
        self._jws = signature_checker()

    def verify(self, token: str) -> Claims:
        """Check ``token`` completely and return its claims, or raise :class:`AuthError`."""
        payload, _ = verified_payload(token, self.keys, self._jws)
        return self._check_claims(payload)

    def _check_claims(self, payload: dict[str, Any]) -> Claims:
        exp, iat, nbf = numeric_dates(payload)
        sub = payload.get("sub")
        if not _valid_subject(sub):
            raise AuthError.of(
                "malformed",
                f"'sub' must be a non-empty printable string of at most {MAX_SUBJECT_LENGTH} "
                "characters",
            )
        jti = payload.get("jti")
        if not isinstance(jti, str) or not 0 < len(jti) <= MAX_JTI_LENGTH:
            raise AuthError.of("malformed", "'jti' must be a non-empty string")

        if payload.get("iss") != self.issuer:
            raise AuthError.of("wrong_issuer", "the token was not issued by a trusted issuer")
        check_validity(
            exp, iat, nbf, now=self._clock(), leeway=self.leeway, max_ttl=self.max_ttl
        )  # fmt: skip

        aud = payload.get("aud")
        if not (aud == self.audience or (isinstance(aud, list) and self.audience in aud)):
            raise AuthError.of("wrong_audience", "the token is not meant for this service")
        if payload.get("token_use") != ACCESS_TOKEN_USE:
            raise AuthError.of("not_access_token", "the token is not an access token")
        return Claims(sub=sub, exp=exp, iat=iat, jti=jti, raw=MappingProxyType(payload))


def signature_checker() -> jwt.PyJWS:
    """The JWS decoder every verifier checks signatures with (each key's one algorithm)."""
    return jwt.PyJWS(
        algorithms=sorted(SUPPORTED_ALGORITHMS),
        options={"verify_signature": True, "enforce_minimum_key_length": True},
    )


def verified_payload(token: object, keys: JWKSet, jws: jwt.PyJWS) -> tuple[dict[str, Any], str]:
    """The payload of ``token`` (and its base64url segment) once its size, shape,
    header and signature are checked against ``keys``; nothing about its claims.

    Raises :class:`AuthError`: ``missing_token``, ``token_too_long``, ``malformed``,
    ``alg_not_allowed``, ``unknown_kid`` or ``bad_signature``.
    """
    if token is None or token == "":
        raise AuthError.of("missing_token", "no token was presented")
    if not isinstance(token, str):
        raise AuthError.of("malformed", "the token must be a string")
    if len(token) > MAX_TOKEN_LENGTH:
        raise AuthError.of(
            "token_too_long", f"the token is longer than {MAX_TOKEN_LENGTH} characters"
        )
    shape = _TOKEN_SHAPE.fullmatch(token)
    if shape is None:
        raise AuthError.of("malformed", "a token is three base64url segments joined by dots")
    key = _select_key(keys, _parse_header(shape.group(1)))
    try:
        decoded = jws.decode_complete(token, key.key, algorithms=[key.algorithm])
    except jwt.InvalidSignatureError:
        raise AuthError.of("bad_signature", "the token signature is not valid") from None
    except jwt.InvalidAlgorithmError:
        raise AuthError.of("alg_not_allowed", "the token's alg is not allowed") from None
    except (
        jwt.PyJWTError,
        InvalidSignature,
        UnsupportedAlgorithm,
        ValueError,
        TypeError,
        RecursionError,
    ):
        raise AuthError.of("malformed", "the token could not be decoded") from None
    try:
        payload = strict_json_object(decoded["payload"])
    except ValueError:
        raise AuthError.of("malformed", "the token payload is not a JSON object") from None
    return payload, token.split(".", 2)[1]


def token_kid(token: object) -> str | None:
    """The ``kid`` in the header of something shaped like a token, else None (unverified:
    only to tell which verifier a token is meant for)."""
    if not isinstance(token, str) or len(token) > MAX_TOKEN_LENGTH:
        return None
    shape = _TOKEN_SHAPE.fullmatch(token)
    if shape is None:
        return None
    try:
        kid = _parse_header(shape.group(1)).get("kid")
    except AuthError:
        return None
    return kid if isinstance(kid, str) and kid else None


def numeric_dates(payload: Mapping[str, Any]) -> tuple[float, float, float | None]:
    """``exp``, ``iat`` and ``nbf`` (None when absent); ``malformed`` if not NumericDates."""
    exp = _numeric_date(payload, "exp")
    iat = _numeric_date(payload, "iat")
    nbf = _numeric_date(payload, "nbf") if "nbf" in payload else None
    return exp, iat, nbf


def check_validity(
    exp: float, iat: float, nbf: float | None, *, now: float, leeway: float, max_ttl: float
) -> None:
    """Refuse a token outside its validity at ``now`` (give or take ``leeway``), or one
    that lives longer than ``max_ttl``: ``token_expired``, ``token_not_yet_valid``,
    ``lifetime_too_long``."""
    if now >= exp + leeway:
        raise AuthError.of("token_expired", "the token has expired")
    if nbf is not None and nbf > now + leeway:
        raise AuthError.of("token_not_yet_valid", "the token is not valid yet (nbf)")
    if iat > now + leeway:
        raise AuthError.of("token_not_yet_valid", "the token was issued in the future (iat)")
    if exp - iat > max_ttl:
        raise AuthError.of(
            "lifetime_too_long",
            f"the token lives longer (exp - iat) than the {max_ttl:g} s this service accepts",
        )


def _select_key(keys: JWKSet, header: Mapping[str, Any]) -> VerificationKey:
    alg = header.get("alg")
    if not isinstance(alg, str) or alg not in SUPPORTED_ALGORITHMS:
        raise AuthError.of(
            "alg_not_allowed", "the token's alg is not an allowed signature algorithm"
        )
    kid = header.get("kid")
    if not isinstance(kid, str) or not kid:
        raise AuthError.of("unknown_kid", "the token header has no kid")
    key = keys.get(kid)
    if key is None:
        raise AuthError.of("unknown_kid", "the token's kid is not a trusted key")
    if alg != key.algorithm:
        raise AuthError.of(
            "alg_not_allowed",
            f"the token's alg does not match its key, which uses {key.algorithm}",
        )
    return key


def _parse_header(segment: str) -> dict[str, Any]:
    try:
        header = strict_json_object(b64url_decode(segment))
    except ValueError:
        raise AuthError.of("malformed", "the token header is not a base64url JSON object") from None
    for name in _UNSUPPORTED_HEADERS:
        if name in header:
            raise AuthError.of("malformed", f"the token header parameter {name!r} is not supported")
    return header


def _numeric_date(payload: Mapping[str, Any], name: str) -> float:
    value = payload.get(name)
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not 0 <= value <= _MAX_NUMERIC_DATE  # also false for NaN
    ):
        raise AuthError.of("malformed", f"{name!r} must be a NumericDate (seconds since the epoch)")
    return value


def _valid_subject(sub: object) -> TypeGuard[str]:
    return isinstance(sub, str) and 0 < len(sub) <= MAX_SUBJECT_LENGTH and sub.isprintable()


def _require_text(value: object, name: str) -> None:
    if not isinstance(value, str) or not value:
        raise ValueError(f"{name} must be a non-empty string")


def _check_ttl(ttl: float, name: str = "ttl") -> float:
    if isinstance(ttl, bool) or not (math.isfinite(ttl) and ttl > 0):
        raise ValueError(f"{name} must be a finite number of seconds > 0, not {ttl!r}")
    return ttl
