"""Signing keys, their JWKS, and the verifier's key set.

The signing side is one Ed25519 key (JWS ``alg`` ``EdDSA``) kept as a PKCS8 PEM file
in the data directory every region's servers share. The verifier side, :class:`JWKSet`,
accepts Ed25519, P-256 and RSA public keys and binds each to exactly one algorithm, so a
token can never choose how its own signature is checked.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal, TypeAlias

import jwt
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes

from rideout.auth import _keyfiles
from rideout.auth._encoding import b64url_decode, b64url_encode, strict_json_object
from rideout.auth.errors import CredentialError

__all__ = [
    "KEY_FILENAME",
    "SUPPORTED_ALGORITHMS",
    "Algorithm",
    "JWKSError",
    "JWKSet",
    "KeyFileError",
    "PublicKey",
    "SigningKey",
    "VerificationKey",
    "jwk_thumbprint",
    "load_private_pem",
    "private_pem",
]

KEY_FILENAME: Final = "signing-key.pem"
"""Name of the signing key file inside the data directory."""

Algorithm: TypeAlias = Literal["EdDSA", "ES256", "RS256"]
"""The JWS algorithms a verification key may be bound to."""

PublicKey: TypeAlias = Ed25519PublicKey | ec.EllipticCurvePublicKey | rsa.RSAPublicKey

SUPPORTED_ALGORITHMS: Final[frozenset[str]] = frozenset({"EdDSA", "ES256", "RS256"})

MAX_KID_LENGTH: Final = 256
RSA_MIN_BITS: Final = 2048
RSA_MAX_BITS: Final = 8192  # bounds the cost of one verification

# Members that only a private (or symmetric) JWK carries.
_PRIVATE_MEMBERS: Final = frozenset({"d", "p", "q", "dp", "dq", "qi", "oth", "k"})
# RFC 7638 §3.2: the required members hashed for each key type.
_THUMBPRINT_MEMBERS: Final[dict[str, tuple[str, ...]]] = {
    "OKP": ("crv", "kty", "x"),
    "EC": ("crv", "kty", "x", "y"),
    "RSA": ("e", "kty", "n"),
}


class KeyFileError(CredentialError):
    """The signing key file exists but cannot be used; it is never overwritten."""

    def __init__(self, path: Path, problem: str) -> None:
        self.path = path
        self.problem = problem
        super().__init__(f"signing key file {path}: {problem}")


class JWKSError(CredentialError, ValueError):
    """A JWKS document (or one of its keys) is invalid or unsupported."""


def jwk_thumbprint(jwk: Mapping[str, Any]) -> str:
    """RFC 7638 SHA-256 thumbprint of a public JWK (OKP, EC or RSA), base64url."""
    kty = jwk.get("kty")
    members = _THUMBPRINT_MEMBERS.get(kty) if isinstance(kty, str) else None
    if members is None:
        raise JWKSError(f"cannot compute a thumbprint for kty {kty!r}")
    required: dict[str, str] = {}
    for name in members:
        value = jwk.get(name)
        if not isinstance(value, str):
            raise JWKSError(f"{kty} JWK member {name!r} must be a string")
        required[name] = value
    canonical = json.dumps(required, separators=(",", ":"), sort_keys=True, ensure_ascii=False)
    return b64url_encode(hashlib.sha256(canonical.encode("utf-8")).digest())


# --------------------------------------------------------------------------- signing


class SigningKey:
    """An Ed25519 private key with its RFC 7638 ``kid``; signs JWTs with ``EdDSA``."""

    __slots__ = ("_jws", "_private_key", "_public_jwk", "kid")

    algorithm: Final = "EdDSA"

    def __init__(self, private_key: Ed25519PrivateKey) -> None:
        if not isinstance(private_key, Ed25519PrivateKey):
            raise TypeError(f"expected an Ed25519PrivateKey, got {type(private_key).__name__}")
        self._private_key = private_key
        raw = private_key.public_key().public_bytes(
            serialization.Encoding.Raw, serialization.PublicFormat.Raw
        )
        x = b64url_encode(raw)
        self.kid: str = jwk_thumbprint({"kty": "OKP", "crv": "Ed25519", "x": x})
        self._public_jwk: dict[str, str] = {
            "kty": "OKP",
            "crv": "Ed25519",
            "x": x,
            "kid": self.kid,
            "alg": self.algorithm,
            "use": "sig",
        }
        self._jws = jwt.PyJWS(algorithms=[self.algorithm])

    def __repr__(self) -> str:
        return f"SigningKey(kid={self.kid!r})"

    @classmethod
    def generate(cls) -> SigningKey:
        """A fresh random key."""
        return cls(Ed25519PrivateKey.generate())

    @classmethod
    def from_pem(cls, data: bytes) -> SigningKey:
        """Load an unencrypted PKCS8 PEM Ed25519 private key; ValueError if it is not one."""
        if not data.strip():
            raise ValueError("the file is empty")
        key = load_private_pem(data)
        if not isinstance(key, Ed25519PrivateKey):
            raise ValueError(f"expected an Ed25519 private key, found {type(key).__name__}")
        return cls(key)

    def to_pem(self) -> bytes:
        """The private key as unencrypted PKCS8 PEM (secret: store with mode 0600)."""
        return private_pem(self._private_key)

    @classmethod
    def load_or_create(cls, directory: Path) -> SigningKey:
        """Load ``directory/signing-key.pem``, creating it (mode 0600) on first use.

        Creation is atomic and race-free: the key is written to a private temp file and
        hard-linked into place, which fails if another process got there first; the
        loser then loads the winner's key, so every server sharing the directory ends up
        with the same key. A file that exists but is unusable raises KeyFileError.
        """
        return _keyfiles.load_or_create(
            Path(directory) / KEY_FILENAME, cls.from_pem, _fresh, KeyFileError, hint=_KEY_HINT
        )

    def public_jwk(self) -> dict[str, str]:
        """The public key as a JWK: kty, crv, x, kid, alg, use."""
        return dict(self._public_jwk)

    def jwks(self) -> dict[str, list[dict[str, str]]]:
        """A JWKS document holding this key's public JWK."""
        return {"keys": [self.public_jwk()]}

    def encode(self, claims: Mapping[str, Any]) -> str:
        """Sign ``claims`` as a compact JWT with header ``{alg: EdDSA, kid, typ: JWT}``.

        Raises ValueError or TypeError if the claims are not JSON-serialisable.
        """
        payload = json.dumps(dict(claims), separators=(",", ":"), allow_nan=False).encode()
        return self._jws.encode(
            payload, self._private_key, algorithm=self.algorithm, headers={"kid": self.kid}
        )


_KEY_HINT: Final = "; fix or remove the file (a new key invalidates issued tokens)"


def load_private_pem(data: bytes) -> PrivateKeyTypes:
    """An unencrypted PEM private key; ValueError for an encrypted or unreadable one."""
    try:
        return serialization.load_pem_private_key(data, password=None)
    except TypeError as exc:
        raise ValueError("the key is encrypted; an unencrypted PKCS8 key is required") from exc
    except (ValueError, UnsupportedAlgorithm) as exc:
        raise ValueError(f"not a PEM private key ({exc})") from exc


def private_pem(key: PrivateKeyTypes) -> bytes:
    """`key` as unencrypted PKCS8 PEM (secret: store with mode 0600)."""
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _fresh() -> tuple[SigningKey, bytes]:
    key = SigningKey.generate()
    return key, key.to_pem()


def _publish(path: Path, key: SigningKey) -> SigningKey:
    """Install ``key`` at ``path`` unless a key is already there; return the key in place."""
    return _keyfiles.publish(
        path, (key, key.to_pem()), SigningKey.from_pem, KeyFileError, hint=_KEY_HINT
    )


# --------------------------------------------------------------------------- verifying


@dataclass(frozen=True, slots=True)
class VerificationKey:
    """A public key from a JWKS, bound to the one algorithm it may verify."""

    kid: str
    algorithm: Algorithm
    key: PublicKey


class JWKSet:
    """The verifier's trusted public keys, looked up by ``kid``.

    Built from a JWKS document (``{"keys": [...]}``). Every key must have a unique
    ``kid``; symmetric (``oct``) keys, private key material, keys for encryption and
    unsupported key types or algorithms are refused with :class:`JWKSError`. With
    ``ignore_unsupported=True``, keys of an unsupported type/curve/algorithm or for
    ``use: enc`` are skipped instead (for third-party JWKS that also list keys rideout
    does not use); malformed supported keys, ``oct`` keys and private material are
    still errors. Parsing happens once, here, never per request.
    """

    __slots__ = ("_keys",)

    def __init__(self, jwks: Mapping[str, Any], *, ignore_unsupported: bool = False) -> None:
        if not isinstance(jwks, Mapping):
            raise JWKSError("a JWKS must be a JSON object with a 'keys' list")
        entries = jwks.get("keys")
        if not isinstance(entries, list):
            raise JWKSError("a JWKS must have a 'keys' list")
        keys: dict[str, VerificationKey] = {}
        for index, entry in enumerate(entries):
            try:
                parsed = _parse_jwk(entry)
            except _UnsupportedKey as exc:
                if ignore_unsupported:
                    continue
                raise JWKSError(f"JWKS key #{index}: {exc}") from None
            except JWKSError as exc:
                raise JWKSError(f"JWKS key #{index}: {exc}") from None
            if parsed.kid in keys:
                raise JWKSError(f"JWKS key #{index}: duplicate kid {parsed.kid!r}")
            keys[parsed.kid] = parsed
        if not keys:
            raise JWKSError("the JWKS has no usable signature verification keys")
        self._keys = keys

    @classmethod
    def from_json(cls, data: str | bytes, *, ignore_unsupported: bool = False) -> JWKSet:
        """Parse a JWKS JSON document."""
        try:
            document = strict_json_object(data)
        except ValueError as exc:
            raise JWKSError(f"the JWKS is not a valid JSON object: {exc}") from None
        return cls(document, ignore_unsupported=ignore_unsupported)

    def get(self, kid: str) -> VerificationKey | None:
        """The key with this ``kid``, or None."""
        return self._keys.get(kid)

    @property
    def kids(self) -> tuple[str, ...]:
        """The key ids, in document order."""
        return tuple(self._keys)

    def __contains__(self, kid: object) -> bool:
        return kid in self._keys

    def __iter__(self) -> Iterator[VerificationKey]:
        return iter(self._keys.values())

    def __len__(self) -> int:
        return len(self._keys)

    def __repr__(self) -> str:
        return f"JWKSet(kids={list(self._keys)!r})"


class _UnsupportedKey(JWKSError):
    """A well-formed key rideout does not verify with (may be skipped)."""


def _parse_jwk(entry: object) -> VerificationKey:
    if not isinstance(entry, Mapping):
        raise JWKSError("a key must be a JSON object")
    kty = entry.get("kty")
    if not isinstance(kty, str):
        raise JWKSError("'kty' is missing or not a string")
    if kty == "oct":
        raise JWKSError(
            "symmetric ('oct') keys are refused: a verifier key must be public, "
            "and HMAC keys enable algorithm-confusion forgeries"
        )
    private = sorted(_PRIVATE_MEMBERS & set(entry))
    if private:
        raise JWKSError(f"private key material ({', '.join(private)}) must not be in a JWKS")
    kid = entry.get("kid")
    if not isinstance(kid, str) or not kid or len(kid) > MAX_KID_LENGTH:
        raise JWKSError(f"'kid' must be a non-empty string of at most {MAX_KID_LENGTH} characters")
    use = entry.get("use")
    if use is not None and use != "sig":
        raise _UnsupportedKey(f"kid {kid!r}: 'use' is {use!r}, only 'sig' keys verify tokens")
    key_ops = entry.get("key_ops")
    if key_ops is not None and (not isinstance(key_ops, list) or "verify" not in key_ops):
        raise _UnsupportedKey(f"kid {kid!r}: 'key_ops' does not include 'verify'")
    alg = entry.get("alg")
    if alg is not None and not isinstance(alg, str):
        raise JWKSError(f"kid {kid!r}: 'alg' must be a string")

    if kty == "OKP":
        algorithm: Algorithm = "EdDSA"
        _expect_curve(entry, kid, "Ed25519")
        _check_alg(alg, algorithm, kid)
        x = _coordinate(entry, "x", 32, kid)
        try:
            public: PublicKey = Ed25519PublicKey.from_public_bytes(x)
        except ValueError:  # pragma: no cover - any 32 bytes load; checked at verify time
            raise JWKSError(f"kid {kid!r}: invalid Ed25519 public key") from None
    elif kty == "EC":
        algorithm = "ES256"
        _expect_curve(entry, kid, "P-256")
        _check_alg(alg, algorithm, kid)
        point = b"\x04" + _coordinate(entry, "x", 32, kid) + _coordinate(entry, "y", 32, kid)
        try:
            public = ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), point)
        except ValueError:
            raise JWKSError(f"kid {kid!r}: the point (x, y) is not on curve P-256") from None
    elif kty == "RSA":
        algorithm = "RS256"
        _check_alg(alg, algorithm, kid)
        n = int.from_bytes(_coordinate(entry, "n", None, kid), "big")
        e = int.from_bytes(_coordinate(entry, "e", None, kid), "big")
        if not RSA_MIN_BITS <= n.bit_length() <= RSA_MAX_BITS:
            raise JWKSError(
                f"kid {kid!r}: RSA modulus is {n.bit_length()} bits, "
                f"must be {RSA_MIN_BITS}..{RSA_MAX_BITS}"
            )
        try:
            public = rsa.RSAPublicNumbers(e, n).public_key()
        except ValueError as exc:
            raise JWKSError(f"kid {kid!r}: invalid RSA public key ({exc})") from None
    else:
        raise _UnsupportedKey(f"kid {kid!r}: unsupported key type {kty!r} (use OKP, EC or RSA)")
    return VerificationKey(kid=kid, algorithm=algorithm, key=public)


def _expect_curve(entry: Mapping[str, Any], kid: str, curve: str) -> None:
    crv = entry.get("crv")
    if crv != curve:
        raise _UnsupportedKey(f"kid {kid!r}: unsupported curve {crv!r} (expected {curve!r})")


def _check_alg(alg: str | None, bound: Algorithm, kid: str) -> None:
    if alg is not None and alg != bound:
        raise _UnsupportedKey(f"kid {kid!r}: 'alg' {alg!r} is not allowed for this key ({bound})")


def _coordinate(entry: Mapping[str, Any], name: str, size: int | None, kid: str) -> bytes:
    value = entry.get(name)
    if not isinstance(value, str) or not value:
        raise JWKSError(f"kid {kid!r}: {name!r} must be a non-empty base64url string")
    try:
        data = b64url_decode(value)
    except ValueError:
        raise JWKSError(f"kid {kid!r}: {name!r} is not valid unpadded base64url") from None
    if size is not None and len(data) != size:
        raise JWKSError(f"kid {kid!r}: {name!r} must encode {size} bytes, not {len(data)}")
    return data
