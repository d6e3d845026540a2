"""Real keys, a controllable clock and a token forger for the auth tests."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from rideout.auth import JWKSet, SigningKey, TokenIssuer, TokenVerifier
from tests.conftest import FakeClock

T = TypeVar("T")

ISSUER = "https://auth.rideout.test"
AUDIENCE = "auction"
NOW = 1_800_000_000.25


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def b64json(value: Any) -> str:
    return b64(json.dumps(value, separators=(",", ":")).encode())


def at_once(count: int, work: Callable[[], T]) -> list[T]:
    """Run `work` in `count` threads released together; what each returned."""
    barrier = threading.Barrier(count)
    results: list[T] = []

    def run() -> None:
        barrier.wait()
        results.append(work())

    threads = [threading.Thread(target=run) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == count, "a thread failed"
    return results


@dataclass
class Forge:
    """Builds tokens by hand, the way an attacker (or a foreign issuer) would."""

    private_key: Ed25519PrivateKey
    kid: str
    clock: FakeClock
    jws: jwt.PyJWS = field(default_factory=jwt.PyJWS)

    def claims(self, **overrides: Any) -> dict[str, Any]:
        now = int(self.clock.now)
        claims: dict[str, Any] = {
            "iss": ISSUER,
            "sub": "user-1",
            "aud": AUDIENCE,
            "iat": now,
            "nbf": now,
            "exp": now + 300,
            "jti": "jti-1",
            "token_use": "access",
        }
        claims.update(overrides)
        return {name: value for name, value in claims.items() if value is not _DROP}

    def header(self, **overrides: Any) -> dict[str, Any]:
        header: dict[str, Any] = {"alg": "EdDSA", "kid": self.kid, "typ": "JWT"}
        header.update(overrides)
        return {name: value for name, value in header.items() if value is not _DROP}

    def sign(
        self,
        payload: dict[str, Any] | bytes | None = None,
        *,
        key: Any = None,
        algorithm: str = "EdDSA",
        **header: Any,
    ) -> str:
        """Sign with a real key through PyJWT (default: the trusted Ed25519 key)."""
        body = (
            payload if isinstance(payload, bytes) else json.dumps(payload or self.claims()).encode()
        )
        headers = {n: v for n, v in {"kid": self.kid, **header}.items() if v is not _DROP}
        return self.jws.encode(body, key or self.private_key, algorithm=algorithm, headers=headers)

    def hmac_token(self, secret: bytes, header: dict[str, Any], payload: dict[str, Any]) -> str:
        """An HS256 token MACed with ``secret`` (the algorithm-confusion attack)."""
        signing_input = f"{b64json(header)}.{b64json(payload)}"
        mac = hmac.new(secret, signing_input.encode(), hashlib.sha256).digest()
        return f"{signing_input}.{b64(mac)}"

    def unsigned(self, header: dict[str, Any], payload: dict[str, Any], signature: str = "") -> str:
        return f"{b64json(header)}.{b64json(payload)}.{signature}"


class _Drop:
    def __repr__(self) -> str:
        return "DROP"


_DROP: Any = _Drop()


@pytest.fixture
def drop() -> Any:
    """Pass as a claim/header value to leave that member out."""
    return _DROP


@pytest.fixture
def clock() -> FakeClock:
    """A clock the test moves by hand: no sleeping."""
    return FakeClock(NOW)


@pytest.fixture(scope="session")
def private_key() -> Ed25519PrivateKey:
    return Ed25519PrivateKey.generate()


@pytest.fixture(scope="session")
def signing_key(private_key: Ed25519PrivateKey) -> SigningKey:
    return SigningKey(private_key)


@pytest.fixture(scope="session")
def rsa_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@pytest.fixture(scope="session")
def ec_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


@pytest.fixture
def issuer(signing_key: SigningKey, clock: FakeClock) -> TokenIssuer:
    return TokenIssuer(signing_key, ISSUER, AUDIENCE, ttl=300, clock=clock)


@pytest.fixture
def verifier(signing_key: SigningKey, clock: FakeClock) -> TokenVerifier:
    return TokenVerifier(JWKSet(signing_key.jwks()), ISSUER, AUDIENCE, leeway=5, clock=clock)


@pytest.fixture
def forge(private_key: Ed25519PrivateKey, signing_key: SigningKey, clock: FakeClock) -> Forge:
    return Forge(private_key, signing_key.kid, clock)
