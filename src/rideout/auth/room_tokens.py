"""The waiting room's tokens: its key ring, the token sets it issues, their verification.

The room signs with keys of its own, apart from the auction's: a ring of a current key
and the previous one (after a rotation), kept as PKCS8 PEM blocks in one file,
``KEYS_DIR/room-keys.pem`` (mode 0600), current first. Every region's servers share the
keys directory, so a token issued in one region verifies in the other. The ring is read
once and held in memory (AWS reads its private key from Secrets Manager on every call);
:class:`RoomKeyWatcher` re-reads it when the file changes (checked at most once a
second), so a rotation reaches running servers without a restart.

A token set is three JWTs with the claims AWS's Virtual Waiting Room puts in its own:
``aud`` (the event id), ``sub`` (the request id), ``queue_position``, ``token_use``
(``access``, ``refresh`` or ``id``), ``iat``, ``nbf``, ``exp``, ``iss``, and a ``kid`` in
the header; the id token also carries ``nonce`` when one is given (the OpenID adapter's).
The same inputs give the same claims, so a request that asks again gets the same tokens
(EdDSA and RS256 signatures are deterministic; ES256 ones are not, their claims are).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import math
import os
import re
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final, Literal, NamedTuple, Protocol, TypeAlias, TypeGuard, get_args

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from rideout import _validate
from rideout.auth import _keyfiles
from rideout.auth._encoding import b64url_encode
from rideout.auth.errors import AuthError
from rideout.auth.keys import (
    RSA_MIN_BITS,
    Algorithm,
    JWKSet,
    KeyFileError,
    jwk_thumbprint,
    load_private_pem,
    private_pem,
)
from rideout.auth.tokens import (
    DEFAULT_MAX_TOKEN_TTL,
    MAX_SUBJECT_LENGTH,
    MAX_TOKEN_LENGTH,
    Claims,
    Clock,
    check_validity,
    numeric_dates,
    signature_checker,
    token_kid,
    verified_payload,
)
from rideout.errors import InvalidArgument

__all__ = [
    "MAX_VALIDITY",
    "RING_FILENAME",
    "TOKEN_USES",
    "KeySource",
    "RoomClaims",
    "RoomKey",
    "RoomKeyRing",
    "RoomKeyWatcher",
    "RoomTokenIssuer",
    "RoomTokenSet",
    "RoomTokenVerifier",
    "TokenUse",
]

RING_FILENAME: Final = "room-keys.pem"
"""The room's key ring inside the keys directory: the current key, then the previous."""
_LOCK_SUFFIX: Final = ".lock"

TokenUse: TypeAlias = Literal["access", "refresh", "id"]
TOKEN_USES: Final[tuple[TokenUse, ...]] = get_args(TokenUse)

MAX_VALIDITY: Final = 30 * 86400.0
"""The longest a room token may live (``exp - iat``) unless the issuer says otherwise."""
RSA_BITS: Final = 2048  # what AWS generates; verifiers that need RS256 expect it
_PEM_BLOCK: Final = re.compile(
    rb"-----BEGIN (ENCRYPTED )?PRIVATE KEY-----\r?\n.+?-----END \1?PRIVATE KEY-----\r?\n?",
    re.DOTALL,
)
_RING_HINT: Final = "; fix or remove the file (a new ring invalidates the room's tokens)"
_RELOAD_INTERVAL: Final = 1.0

PrivateKey: TypeAlias = Ed25519PrivateKey | ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey


# --------------------------------------------------------------------------- keys


class RoomKey:
    """One private key of the ring, its algorithm and its RFC 7638 ``kid``."""

    __slots__ = ("_jws", "_private_key", "_public_jwk", "algorithm", "kid")

    def __init__(self, private_key: PrivateKey) -> None:
        self._private_key = private_key
        self.algorithm: Algorithm = _algorithm_of(private_key)
        members = _public_members(private_key)
        self.kid: str = jwk_thumbprint(members)
        self._public_jwk = {**members, "kid": self.kid, "alg": self.algorithm, "use": "sig"}
        self._jws = jwt.PyJWS(algorithms=[self.algorithm])

    def __repr__(self) -> str:
        return f"RoomKey(algorithm={self.algorithm!r}, kid={self.kid!r})"

    @classmethod
    def generate(cls, algorithm: Algorithm = "EdDSA") -> RoomKey:
        """A fresh random key for ``algorithm`` (EdDSA: Ed25519, ES256: P-256, RS256:
        RSA 2048)."""
        _validate.choice("algorithm", algorithm, get_args(Algorithm))
        if algorithm == "EdDSA":
            return cls(Ed25519PrivateKey.generate())
        if algorithm == "ES256":
            return cls(ec.generate_private_key(ec.SECP256R1()))
        return cls(rsa.generate_private_key(public_exponent=65537, key_size=RSA_BITS))

    @classmethod
    def from_pem(cls, block: bytes) -> RoomKey:
        """Load one unencrypted PKCS8 PEM private key; ValueError if it is not a usable one."""
        key = load_private_pem(block)
        if not isinstance(key, Ed25519PrivateKey | ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey):
            raise ValueError(f"a {type(key).__name__} cannot sign the room's tokens")
        return cls(key)

    def to_pem(self) -> bytes:
        """The private key as unencrypted PKCS8 PEM (secret: store with mode 0600)."""
        return private_pem(self._private_key)

    def public_jwk(self) -> dict[str, str]:
        """The public key as a JWK, with ``kid``, ``alg`` and ``use``."""
        return dict(self._public_jwk)

    def sign(self, payload: bytes) -> str:
        """A compact JWS of ``payload`` with header ``{alg, kid, typ: JWT}``."""
        return self._jws.encode(
            payload, self._private_key, algorithm=self.algorithm, headers={"kid": self.kid}
        )


def _algorithm_of(key: PrivateKey) -> Algorithm:
    if isinstance(key, Ed25519PrivateKey):
        return "EdDSA"
    if isinstance(key, ec.EllipticCurvePrivateKey):
        if not isinstance(key.curve, ec.SECP256R1):
            raise ValueError(f"an EC key must be on P-256 (ES256), not {key.curve.name}")
        return "ES256"
    if key.key_size < RSA_MIN_BITS:
        raise ValueError(f"an RSA key must have at least {RSA_MIN_BITS} bits, not {key.key_size}")
    return "RS256"


def _public_members(key: PrivateKey) -> dict[str, str]:
    """The JWK members RFC 7638 hashes (and the JWK's whole public part)."""
    if isinstance(key, Ed25519PrivateKey):
        raw = key.public_key().public_bytes(
            serialization.Encoding.Raw, serialization.PublicFormat.Raw
        )
        return {"kty": "OKP", "crv": "Ed25519", "x": b64url_encode(raw)}
    if isinstance(key, ec.EllipticCurvePrivateKey):
        numbers = key.public_key().public_numbers()
        return {
            "kty": "EC",
            "crv": "P-256",
            "x": b64url_encode(numbers.x.to_bytes(32, "big")),
            "y": b64url_encode(numbers.y.to_bytes(32, "big")),
        }
    public = key.public_key().public_numbers()
    return {"kty": "RSA", "n": _uint(public.n), "e": _uint(public.e)}


def _uint(value: int) -> str:
    return b64url_encode(value.to_bytes(max(1, (value.bit_length() + 7) // 8), "big"))


class KeySource(Protocol):
    """Where signers and verifiers get the ring from: a ring itself, or a watcher."""

    def ring(self) -> RoomKeyRing:
        """The ring to use now."""


class RoomKeyRing:
    """The room's current key and, after a rotation, the previous one (immutable).

    ``path`` is the file it was read from (None for a ring made in memory); ``rotate``
    writes there.
    """

    __slots__ = ("_jwk_set", "current", "path", "previous")

    def __init__(
        self, current: RoomKey, previous: RoomKey | None = None, *, path: Path | None = None
    ) -> None:
        if previous is not None and previous.kid == current.kid:
            raise ValueError("the previous key is the current key")
        self.current = current
        self.previous = previous
        self.path = path
        self._jwk_set = JWKSet(self.jwks())

    def __repr__(self) -> str:
        previous = self.previous.kid if self.previous else None
        return f"RoomKeyRing(current={self.current.kid!r}, previous={previous!r})"

    @classmethod
    def generate(cls, algorithm: Algorithm = "EdDSA") -> RoomKeyRing:
        """A ring of one fresh key, in memory only (tests, benchmarks)."""
        return cls(RoomKey.generate(algorithm))

    @classmethod
    def from_pem(cls, data: bytes, *, path: Path | None = None) -> RoomKeyRing:
        """Parse a ring file: one or two PKCS8 PEM blocks, current first; ValueError else."""
        blocks = [match.group(0) for match in _PEM_BLOCK.finditer(data)]
        rest = _PEM_BLOCK.sub(b"", data).strip()
        if not blocks:
            raise ValueError("no PKCS8 PEM private key in it" if data.strip() else "it is empty")
        if rest or len(blocks) > 2:
            raise ValueError("a ring is one or two PKCS8 PEM private keys and nothing else")
        keys = [RoomKey.from_pem(block) for block in blocks]
        return cls(keys[0], keys[1] if len(keys) > 1 else None, path=path)

    def to_pem(self) -> bytes:
        """The ring as its file holds it (secret)."""
        return b"".join(key.to_pem() for key in self.keys)

    @classmethod
    def load(cls, directory: Path) -> RoomKeyRing:
        """Read ``directory/room-keys.pem``; KeyFileError if it is missing or unusable."""
        path = Path(directory) / RING_FILENAME
        try:
            return _keyfiles.read(path, _parser(path), KeyFileError, hint=_RING_HINT)
        except FileNotFoundError:
            raise KeyFileError(
                path, "there is no room key ring (the room has not run yet)"
            ) from None

    @classmethod
    def load_or_create(cls, directory: Path, algorithm: Algorithm = "EdDSA") -> RoomKeyRing:
        """Read ``directory/room-keys.pem``, creating it (mode 0600, exclusively: every
        process racing to create it ends with the same ring) with one ``algorithm`` key.

        ``algorithm`` only chooses the first key: once the file exists it decides
        (``rotate`` may change the algorithm). A file that exists but is unusable raises
        KeyFileError and is left as it is.
        """
        _validate.choice("algorithm", algorithm, get_args(Algorithm))
        path = Path(directory) / RING_FILENAME

        def fresh() -> tuple[RoomKeyRing, bytes]:
            ring = cls(RoomKey.generate(algorithm), path=path)
            return ring, ring.to_pem()

        return _keyfiles.load_or_create(path, _parser(path), fresh, KeyFileError, hint=_RING_HINT)

    def rotate(self, algorithm: Algorithm | None = None) -> RoomKeyRing:
        """A new current key (of ``algorithm``, by default the current one's); the
        current key becomes the previous, the previous is dropped.

        For a ring read from a file, the file is rotated, under a lock, from what it
        holds now (so two rotations at once lose no key), and replaced in one step.
        """
        new = RoomKey.generate(algorithm or self.current.algorithm)
        if self.path is None:
            return RoomKeyRing(new, self.current)
        with _locked(self.path):
            on_disk = _keyfiles.read(self.path, _parser(self.path), KeyFileError, hint=_RING_HINT)
            rotated = RoomKeyRing(new, on_disk.current, path=self.path)
            _keyfiles.replace(self.path, rotated.to_pem(), KeyFileError)
        return rotated

    def ring(self) -> RoomKeyRing:
        """Itself (a ring is a :class:`KeySource` that never changes)."""
        return self

    @property
    def keys(self) -> tuple[RoomKey, ...]:
        """The current key, then the previous one if any."""
        return (self.current,) if self.previous is None else (self.current, self.previous)

    @property
    def current_kid(self) -> str:
        return self.current.kid

    @property
    def algorithm(self) -> Algorithm:
        """The current key's algorithm: what new tokens are signed with."""
        return self.current.algorithm

    @property
    def jwk_set(self) -> JWKSet:
        """The ring's public keys, parsed once, for :class:`RoomTokenVerifier`."""
        return self._jwk_set

    def public_jwk(self) -> dict[str, str]:
        """The current key's public JWK (what AWS's ``/public_key`` returns)."""
        return self.current.public_jwk()

    def jwks(self) -> dict[str, list[dict[str, str]]]:
        """``{"keys": [current, previous]}`` (the previous only after a rotation)."""
        return {"keys": [key.public_jwk() for key in self.keys]}


def _parser(path: Path) -> Callable[[bytes], RoomKeyRing]:
    return lambda data: RoomKeyRing.from_pem(data, path=path)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock beside ``path`` (one rotation at a time, across processes)."""
    lock = path.with_name(path.name + _LOCK_SUFFIX)
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as exc:
        raise KeyFileError(lock, f"cannot open the lock: {_keyfiles.why(exc)}") from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


class RoomKeyWatcher:
    """The ring in ``directory``, re-read when its file changes (a rotation by another
    process), checked at most once per ``interval`` seconds of ``clock``.

    A file that changed into something unusable is reported by ``on_error`` (the
    KeyFileError) and the last good ring is kept: a botched edit does not stop the
    room from verifying the tokens it issued.
    """

    __slots__ = ("_checked", "_clock", "_on_error", "_ring", "_stamp", "interval", "path")

    def __init__(
        self,
        directory: Path,
        algorithm: Algorithm = "EdDSA",
        *,
        interval: float = _RELOAD_INTERVAL,
        clock: Clock = time.monotonic,
        on_error: Callable[[KeyFileError], None] | None = None,
    ) -> None:
        self.interval = _validate.seconds("interval", interval, zero_ok=True)
        self.path = Path(directory) / RING_FILENAME
        self._clock = clock
        self._on_error = on_error
        self._ring = RoomKeyRing.load_or_create(directory, algorithm)
        self._stamp = _stamp(self.path)
        self._checked = clock()

    def ring(self) -> RoomKeyRing:
        """The ring, re-read first if the file changed since the last look."""
        now = self._clock()
        if now - self._checked < self.interval:
            return self._ring
        self._checked = now
        stamp = _stamp(self.path)
        if stamp != self._stamp:
            try:
                self._ring = _keyfiles.read(
                    self.path, _parser(self.path), KeyFileError, hint=_RING_HINT
                )
            except (KeyFileError, FileNotFoundError) as exc:
                error = exc if isinstance(exc, KeyFileError) else KeyFileError(self.path, "gone")
                if self._on_error is not None:
                    self._on_error(error)
            self._stamp = stamp
        return self._ring


def _stamp(path: Path) -> tuple[int, int, int] | None:
    try:
        info = path.stat()
    except OSError:
        return None
    return (info.st_ino, info.st_mtime_ns, info.st_size)


# --------------------------------------------------------------------------- issuing


class RoomTokenSet(NamedTuple):
    """What ``generate_token`` answers (AWS's field names and types)."""

    access_token: str
    refresh_token: str
    id_token: str
    token_type: str = "Bearer"
    expires_in: int = 0

    def to_dict(self) -> dict[str, str | int]:
        return self._asdict()


class RoomTokenIssuer:
    """Signs the room's token sets with the current key of ``keys`` (a ring or a
    watcher). ``issuer`` is the ``iss`` of every set unless one is given per call."""

    __slots__ = ("_clock", "_keys", "issuer", "max_ttl")

    def __init__(
        self,
        keys: KeySource,
        *,
        issuer: str,
        clock: Clock = time.time,
        max_ttl: float = MAX_VALIDITY,
    ) -> None:
        self._keys = keys
        self.issuer = _bounded_text("issuer", issuer)
        self.max_ttl = _validate.seconds("max_ttl", max_ttl)
        self._clock = clock

    def issue(
        self,
        *,
        event_id: str,
        request_id: str,
        queue_position: int,
        issued_at: float,
        expires_at: float,
        issuer: str | None = None,
        nonce: str | None = None,
        refresh_jti: str | None = None,
        now: float | None = None,
    ) -> RoomTokenSet:
        """The set for one served request; the same arguments give the same claims.

        Times are whole seconds (``iat = nbf = floor(issued_at)``, ``exp =
        floor(expires_at)``); ``expires_in`` is what remains of it at ``now`` (default:
        the clock), never below 0. ``refresh_jti`` is the refresh token's ``jti`` (a
        renewal's: the room records it, and takes only that refresh token next; the
        first set's refresh token has none). Raises InvalidArgument for a bad argument
        or a lifetime over ``max_ttl``.
        """
        iat = math.floor(_validate.number("issued_at", issued_at))
        exp = math.floor(_validate.number("expires_at", expires_at))
        if not 0 < exp - iat <= self.max_ttl:
            raise InvalidArgument(
                f"expires_at must be after issued_at, by at most {self.max_ttl:g} s; "
                f"got {exp - iat} s"
            )
        claims: dict[str, Any] = {
            "aud": _bounded_text("event_id", event_id),
            "sub": _bounded_text("request_id", request_id),
            "queue_position": _validate.count("queue_position", queue_position, low=1),
            "token_use": "access",
            "iat": iat,
            "nbf": iat,
            "exp": exp,
            "iss": self.issuer if issuer is None else _bounded_text("issuer", issuer),
        }
        id_claims = {**claims, "token_use": "id"}
        if nonce is not None:
            id_claims["nonce"] = _bounded_text("nonce", nonce)
        key = self._keys.ring().current
        access = key.sign(_payload(claims))
        refresh_claims = {**claims, "token_use": "refresh"}
        if refresh_jti is not None:
            refresh_claims["jti"] = _bounded_text("refresh_jti", refresh_jti)
        refresh = key.sign(_payload(refresh_claims))
        id_token = key.sign(_payload(id_claims))
        if max(len(access), len(refresh), len(id_token)) > MAX_TOKEN_LENGTH:
            raise InvalidArgument(f"the tokens would be longer than {MAX_TOKEN_LENGTH} characters")
        moment = self._clock() if now is None else _validate.number("now", now)
        return RoomTokenSet(access, refresh, id_token, "Bearer", max(0, math.ceil(exp - moment)))


def _payload(claims: Mapping[str, Any]) -> bytes:
    return json.dumps(claims, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _bounded_text(name: str, value: object) -> str:
    text = _validate.text(name, value)
    if len(text) > MAX_SUBJECT_LENGTH or not text.isprintable():
        raise InvalidArgument(
            f"{name} must be printable and at most {MAX_SUBJECT_LENGTH} characters"
        )
    return text


# --------------------------------------------------------------------------- verifying


@dataclass(frozen=True, slots=True)
class RoomClaims(Claims):
    """The verified claims of a room token. A :class:`~rideout.auth.tokens.Claims`
    (``sub`` is the request id), so the auction's handshake takes it as it is; ``jti``
    is the token's own claim when it has one (a renewed refresh token), else (AWS's
    tokens have none) derived from the payload, unique per token."""

    event_id: str = ""
    queue_position: int = 0
    token_use: TokenUse = "access"
    issuer: str = ""
    nbf: float | None = None
    nonce: str | None = field(default=None)


class RoomTokenVerifier:
    """Verifies the room's tokens against ``keys`` (a JWKSet, or a ring or watcher,
    whose current keys are used); raises :class:`AuthError` only.

    The shape, size, header, signature (each key bound to its one algorithm) and
    lifetime checks are the auction verifier's (:mod:`rideout.auth.tokens`); then
    ``iss``, ``aud`` (one event, or any of ``audiences``) and ``token_use``.
    """

    __slots__ = ("_clock", "_jws", "_keys", "audiences", "issuer", "leeway", "max_ttl")

    def __init__(
        self,
        keys: JWKSet | KeySource,
        *,
        issuer: str,
        audiences: frozenset[str] | None = None,
        leeway: float = 5.0,
        clock: Clock = time.time,
        max_ttl: float = DEFAULT_MAX_TOKEN_TTL,
    ) -> None:
        self._keys = keys
        self.issuer = _validate.text("issuer", issuer)
        self.audiences = audiences
        self.leeway = _validate.seconds("leeway", leeway, zero_ok=True)
        self.max_ttl = _validate.seconds("max_ttl", max_ttl)
        self._clock = clock
        self._jws = signature_checker()

    @property
    def keys(self) -> JWKSet:
        """The public keys in use now."""
        keys = self._keys
        return keys if isinstance(keys, JWKSet) else keys.ring().jwk_set

    def owns(self, token: object) -> bool:
        """Whether ``token`` names one of these keys (unverified: which verifier to ask)."""
        kid = token_kid(token)
        return kid is not None and kid in self.keys

    def verify(
        self, token: str, *, token_use: TokenUse = "access", audience: str | None = None
    ) -> RoomClaims:
        """Check ``token`` completely: a ``token_use`` token for ``audience`` (else any
        of the verifier's ``audiences``, else any event)."""
        payload, segment = verified_payload(token, self.keys, self._jws)
        exp, iat, nbf = numeric_dates(payload)
        sub, aud = payload.get("sub"), payload.get("aud")
        position, use = payload.get("queue_position"), payload.get("token_use")
        nonce, jti = payload.get("nonce"), payload.get("jti")
        if not (_is_text(sub) and _is_text(aud)):
            raise AuthError.of("malformed", "'sub' and 'aud' must be printable strings")
        if isinstance(position, bool) or not isinstance(position, int) or position < 1:
            raise AuthError.of("malformed", "'queue_position' must be a positive integer")
        if use not in TOKEN_USES or any(v is not None and not _is_text(v) for v in (nonce, jti)):
            raise AuthError.of("malformed", "'token_use', 'nonce' or 'jti' is not valid")
        if payload.get("iss") != self.issuer:
            raise AuthError.of("wrong_issuer", "the token was not issued by this waiting room")
        check_validity(exp, iat, nbf, now=self._clock(), leeway=self.leeway, max_ttl=self.max_ttl)
        wanted = self.audiences if audience is None else frozenset({audience})
        if wanted is not None and aud not in wanted:
            raise AuthError.of("wrong_audience", "the token is for another event")
        if use != token_use:
            raise AuthError.of("wrong_token_use", f"a {use} token, where {token_use} is needed")
        return RoomClaims(
            sub=sub, exp=exp, iat=iat, jti=_jti(segment) if jti is None else jti,
            raw=MappingProxyType(payload),
            event_id=aud, queue_position=position, token_use=use, issuer=self.issuer,
            nbf=nbf, nonce=nonce,
        )  # fmt: skip


def _is_text(value: object) -> TypeGuard[str]:
    return isinstance(value, str) and 0 < len(value) <= MAX_SUBJECT_LENGTH and value.isprintable()


def _jti(segment: str) -> str:
    return b64url_encode(hashlib.sha256(segment.encode("ascii")).digest()[:16])
