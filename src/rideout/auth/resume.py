"""Resumption tickets: a cheap credential for reconnecting, minted by a zone for a
connection its own access token opened, accepted by any zone of the deployment.

A handshake with an access token pays an Ed25519 verification (~150-200 µs, a third of
its cost); after a failover a region's thousand clients pay it at once. A ticket is an
HMAC-SHA256 under a key every app server shares, so checking one costs a few
microseconds. It proves nothing new: it restates the identity of the token that opened
the connection it was minted on (``sub``, ``jti``, ``iat``, ``exp``) and lives a few
minutes (``auth.resume_ttl``), never past that token's ``exp``. Revocation holds
unchanged: the handshake matches the ticket's ``sub``, ``jti`` and ``iat`` against the
revocation list exactly as a token's.

Format (ASCII, at most ~400 characters): ``rt1.KID.PAYLOAD.MAC`` where ``KID`` names
the key (11 base64url characters of a SHA-256 of it), ``PAYLOAD`` is the base64url of
a JSON object ``{"sub","jti","iat","tex","exp"[,"carry"]}`` (``tex``: the token's
``exp``; ``exp``: the ticket's own; ``carry``: the few claims the minter chose to
keep, such as the demo flag) and ``MAC`` the base64url of HMAC-SHA256 over
``rt1.KID.PAYLOAD`` (the version and the key id are covered). The MAC is checked, in
constant time, before the payload is parsed.

Rotation: the ring holds the current key and, while a rotation is under way, the
previous one (:data:`PREVIOUS_SUFFIX`); tickets are minted with the current key and
accepted under either. A ticket under a key a server does not hold is refused
(``unknown_kid``, 401), so the client falls back to its access token: a rotation, a
server without the key or a tampered ticket never locks anyone out.

Pure but for :func:`load_resume_keys` (files); the clock is injected.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import re
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final, TypeGuard

from rideout._validate import seconds
from rideout.auth import _keyfiles
from rideout.auth._encoding import b64url_decode, b64url_encode, strict_json_object
from rideout.auth.errors import AuthError, CredentialError
from rideout.auth.tokens import MAX_JTI_LENGTH, MAX_SUBJECT_LENGTH, Claims, Clock
from rideout.protocol import MAX_TICKET_LENGTH

__all__ = [
    "MAX_TICKET_LENGTH",
    "PREVIOUS_SUFFIX",
    "RESUME_KEY_FILENAME",
    "TICKET_PREFIX",
    "ResumeKey",
    "ResumeKeyError",
    "ResumeKeyRing",
    "ResumeTickets",
    "Ticket",
    "is_ticket",
    "load_resume_keys",
    "resume_key_path",
]

TICKET_PREFIX: Final = "rt1."
"""What every ticket starts with (the format's version); no JWT does (a JWT's first
segment is base64url JSON, ``eyJ``)."""
RESUME_KEY_FILENAME: Final = "resume.key"
PREVIOUS_SUFFIX: Final = ".previous"
MAX_CARRIED: Final = 4
"""The most claims a ticket carries besides the identity (small scalars only)."""

_DOMAIN: Final = b"rideout resumption ticket\x00"  # the MAC's input starts with this
_KID_DOMAIN: Final = b"rideout resume key id\x00"
_MIN_SECRET: Final = 32
_SHAPE: Final = re.compile(r"rt1\.([A-Za-z0-9_-]{11})\.([A-Za-z0-9_-]{1,900})\.([A-Za-z0-9_-]{43})")
_MAX_DATE: Final = 2**53
_FIELDS: Final = frozenset({"sub", "jti", "iat", "tex", "exp", "carry"})


class ResumeKeyError(CredentialError):
    """A resume key file exists but cannot be used."""


def is_ticket(credential: object) -> bool:
    """Whether `credential` is shaped as a ticket (its prefix only; nothing verified)."""
    return isinstance(credential, str) and credential.startswith(TICKET_PREFIX)


@dataclass(frozen=True, slots=True)
class ResumeKey:
    """One shared secret and its public id (the secret never shows in a repr)."""

    secret: bytes = field(repr=False)
    kid: str = ""

    def __post_init__(self) -> None:
        if len(self.secret) < _MIN_SECRET:
            raise ValueError(f"a resume key is at least {_MIN_SECRET} bytes")
        kid = b64url_encode(hashlib.sha256(_KID_DOMAIN + self.secret).digest())[:11]
        object.__setattr__(self, "kid", kid)

    @classmethod
    def generate(cls) -> ResumeKey:
        return cls(secrets.token_urlsafe(32).encode())

    def mac(self, signed: bytes) -> str:
        return b64url_encode(hmac.new(self.secret, _DOMAIN + signed, hashlib.sha256).digest())


@dataclass(frozen=True, slots=True)
class ResumeKeyRing:
    """The key tickets are minted with and, during a rotation, the previous one."""

    current: ResumeKey
    previous: ResumeKey | None = None

    def get(self, kid: str) -> ResumeKey | None:
        if kid == self.current.kid:
            return self.current
        if self.previous is not None and kid == self.previous.kid:
            return self.previous
        return None


@dataclass(frozen=True, slots=True)
class Ticket:
    """A minted ticket: its text, and the seconds it is valid for from its minting."""

    value: str
    ttl: float
    expires: int  # seconds since the epoch


class ResumeTickets:
    """Mints and verifies tickets with a :class:`ResumeKeyRing` (immutable policy).

    ``ttl``: a ticket's longest life (seconds); ``leeway``: the clock skew tolerated
    between the zone that minted it and the one checking it; ``max_ttl``: the longest
    token lifetime accepted (``auth.max_token_ttl``), checked again on the token's
    dates a ticket carries.
    """

    __slots__ = ("_clock", "leeway", "max_ttl", "ring", "ttl")

    def __init__(
        self,
        ring: ResumeKeyRing,
        ttl: float,
        *,
        leeway: float = 5.0,
        max_ttl: float = 86400.0,
        clock: Clock = time.time,
    ) -> None:
        self.ring = ring
        self.ttl = seconds("ttl", ttl)
        self.leeway = seconds("leeway", leeway, zero_ok=True)
        self.max_ttl = seconds("max_ttl", max_ttl)
        self._clock = clock

    def mint(
        self, claims: Claims, carry: Mapping[str, bool | int | str] | None = None
    ) -> Ticket | None:
        """A ticket restating `claims` (and `carry`), or None when the token expires
        within the second (nothing worth resuming)."""
        now = self._clock()
        token_exp = math.floor(claims.exp)
        exp = min(math.floor(now + self.ttl), token_exp)
        if exp <= now:
            return None
        body: dict[str, Any] = {
            "sub": claims.sub,
            "jti": claims.jti,
            "iat": math.floor(claims.iat),
            "tex": token_exp,
            "exp": exp,
        }
        if carry:
            if len(carry) > MAX_CARRIED:
                raise ValueError(f"a ticket carries at most {MAX_CARRIED} claims")
            body["carry"] = dict(carry)
        payload = b64url_encode(json.dumps(body, separators=(",", ":")).encode())
        key = self.ring.current
        signed = f"{TICKET_PREFIX}{key.kid}.{payload}"
        value = f"{signed}.{key.mac(signed.encode('ascii'))}"
        if len(value) > MAX_TICKET_LENGTH:
            raise ValueError(f"the ticket would be {len(value)} characters")
        return Ticket(value, exp - now, exp)

    def verify(self, ticket: str) -> Claims:
        """The claims of the token a valid ticket restates (``exp`` is the token's; the
        carried claims are in ``raw``), or :class:`AuthError` with a token's reasons:
        ``malformed``, ``unknown_kid``, ``bad_signature``, ``token_expired``,
        ``token_not_yet_valid``, ``lifetime_too_long`` (all 401)."""
        if not isinstance(ticket, str) or len(ticket) > MAX_TICKET_LENGTH:
            raise AuthError.of("malformed", "the resumption ticket is not readable")
        shape = _SHAPE.fullmatch(ticket)
        if shape is None:
            raise AuthError.of("malformed", "the resumption ticket is not readable")
        kid, payload, mac = shape.groups()
        key = self.ring.get(kid)
        if key is None:
            raise AuthError.of("unknown_kid", "the resumption ticket's key is not known here")
        signed = ticket[: -len(mac) - 1].encode("ascii")
        if not hmac.compare_digest(key.mac(signed), mac):
            raise AuthError.of("bad_signature", "the resumption ticket is not valid")
        return self._claims(payload)

    def _claims(self, payload: str) -> Claims:
        try:
            body = strict_json_object(b64url_decode(payload))
        except ValueError:
            raise AuthError.of("malformed", "the resumption ticket is not readable") from None
        if not set(body) <= _FIELDS:
            raise AuthError.of("malformed", "the resumption ticket has unknown fields")
        sub, jti = body.get("sub"), body.get("jti")
        if not _text(sub, MAX_SUBJECT_LENGTH) or not _text(jti, MAX_JTI_LENGTH):
            raise AuthError.of("malformed", "the resumption ticket names no subject or token")
        iat, tex, exp = (_date(body.get(name)) for name in ("iat", "tex", "exp"))
        carry = body.get("carry", {})
        if not (
            isinstance(carry, dict)
            and len(carry) <= MAX_CARRIED
            and all(isinstance(v, bool | int | str) for v in carry.values())
            and not {"sub", "jti", "iat", "exp"} & set(carry)
        ):
            raise AuthError.of("malformed", "the resumption ticket carries bad claims")
        now = self._clock()
        if exp > tex or tex - iat > self.max_ttl:
            raise AuthError.of("lifetime_too_long", "the resumption ticket outlives its token")
        if exp > now + self.ttl + self.leeway:
            raise AuthError.of("lifetime_too_long", "the resumption ticket lives too long")
        if now >= exp + self.leeway:
            raise AuthError.of("token_expired", "the resumption ticket has expired")
        if iat > now + self.leeway:
            raise AuthError.of(
                "token_not_yet_valid", "the resumption ticket's token is not valid yet"
            )
        raw = {**carry, "sub": sub, "jti": jti, "iat": iat, "exp": tex}
        return Claims(sub=sub, exp=tex, iat=iat, jti=jti, raw=MappingProxyType(raw))


def _text(value: object, limit: int) -> TypeGuard[str]:
    return isinstance(value, str) and 0 < len(value) <= limit and value.isprintable()


def _date(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= _MAX_DATE:
        raise AuthError.of("malformed", "the resumption ticket's dates are not readable")
    return value


# ----------------------------------------------------------------------------- files


def resume_key_path(directory: Path) -> Path:
    """Where the deployment's resume key lives in the keys `directory`."""
    return Path(directory) / RESUME_KEY_FILENAME


def _parse(data: bytes) -> ResumeKey:
    secret = data.strip()
    if len(secret) < _MIN_SECRET:
        raise ValueError("too short to be a secret; remove it to make a new one")
    return ResumeKey(secret)


def _fresh() -> tuple[ResumeKey, bytes]:
    key = ResumeKey.generate()
    return key, key.secret


def _fail(path: Path, problem: str) -> ResumeKeyError:
    return ResumeKeyError(f"{path}: {problem}")


def load_resume_keys(directory: Path, *, create: bool) -> ResumeKeyRing | None:
    """The ring in `directory`: ``resume.key`` (created, mode 0600, when `create` and
    missing) and ``resume.key.previous`` while a rotation leaves it there. None when
    there is no current key and `create` is off (external mode before ``rideout
    secrets init`` made one: tickets are then off). Raises :class:`ResumeKeyError` for
    a file that exists but cannot be used."""
    path = resume_key_path(directory)
    if create:
        current = _keyfiles.load_or_create(path, _parse, _fresh, _fail)
    else:
        try:
            current = _keyfiles.read(path, _parse, _fail)
        except FileNotFoundError:
            return None
    previous_path = path.with_name(RESUME_KEY_FILENAME + PREVIOUS_SUFFIX)
    try:
        previous: ResumeKey | None = _keyfiles.read(previous_path, _parse, _fail)
    except FileNotFoundError:
        previous = None
    if previous is not None and previous.kid == current.kid:
        previous = None
    return ResumeKeyRing(current, previous)
