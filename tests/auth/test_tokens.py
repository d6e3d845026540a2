from __future__ import annotations

import base64
import json
from dataclasses import FrozenInstanceError
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rideout.auth import (
    DEFAULT_MAX_TOKEN_TTL,
    MAX_TOKEN_LENGTH,
    AuthError,
    Claims,
    JWKSet,
    SigningKey,
    TokenIssuer,
    TokenVerifier,
)
from tests.auth.conftest import AUDIENCE, ISSUER, Forge, b64, b64json
from tests.conftest import FakeClock, examples, json_values

HYPOTHESIS = settings(
    database=None,
    max_examples=examples(200),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)


def rejected(verifier: TokenVerifier, token: str) -> AuthError:
    with pytest.raises(AuthError) as caught:
        verifier.verify(token)
    return caught.value


def assert_rejected(verifier: TokenVerifier, token: str, status: int, reason: str) -> None:
    error = rejected(verifier, token)
    assert (error.status, error.reason) == (status, reason), error.message
    if isinstance(token, str) and len(token) > 8:
        assert token not in error.message  # the token never leaks into messages/logs


# --------------------------------------------------------------------------- happy path


def test_issue_and_verify(issuer: TokenIssuer, verifier: TokenVerifier, clock: FakeClock) -> None:
    token = issuer.issue("user-1", extra_claims={"room": "r1", "tier": 2})
    claims = verifier.verify(token)
    iat = int(clock.now)
    assert (claims.sub, claims.iat, claims.exp) == ("user-1", iat, iat + 300)
    assert claims.raw["token_use"] == "access"
    assert claims.raw["iss"] == ISSUER
    assert claims.raw["aud"] == AUDIENCE
    assert claims.raw["nbf"] == iat
    assert (claims.raw["room"], claims.raw["tier"]) == ("r1", 2)
    assert claims.jti == claims.raw["jti"]
    assert len(claims.jti) >= 16
    header = jwt.get_unverified_header(token)
    assert header == {"alg": "EdDSA", "kid": issuer._key.kid, "typ": "JWT"}


def test_jti_is_random(issuer: TokenIssuer, verifier: TokenVerifier) -> None:
    jtis = {verifier.verify(issuer.issue("u")).jti for _ in range(20)}
    assert len(jtis) == 20


def test_ttl_override_is_rounded_up_to_whole_seconds(
    issuer: TokenIssuer, verifier: TokenVerifier, clock: FakeClock
) -> None:
    claims = verifier.verify(issuer.issue("u", ttl=0.5))
    assert claims.exp == int(clock.now) + 1


def test_claims_are_read_only(issuer: TokenIssuer, verifier: TokenVerifier) -> None:
    claims = verifier.verify(issuer.issue("u"))
    with pytest.raises(FrozenInstanceError):
        claims.sub = "admin"  # type: ignore[misc]
    with pytest.raises(TypeError):
        claims.raw["sub"] = "admin"  # type: ignore[index]


def test_verifies_rs256_and_es256_keys_from_a_jwks(
    forge: Forge,
    signing_key: SigningKey,
    rsa_key: rsa.RSAPrivateKey,
    ec_key: ec.EllipticCurvePrivateKey,
    clock: FakeClock,
) -> None:
    rsa_jwk = {**jwt.algorithms.RSAAlgorithm.to_jwk(rsa_key.public_key(), as_dict=True), "kid": "r"}
    ec_jwk = {**jwt.algorithms.ECAlgorithm.to_jwk(ec_key.public_key(), as_dict=True), "kid": "e"}
    keys = JWKSet({"keys": [signing_key.public_jwk(), rsa_jwk, ec_jwk]})
    verifier = TokenVerifier(keys, ISSUER, AUDIENCE, clock=clock)
    rs = forge.sign(forge.claims(sub="rsa-user"), key=rsa_key, algorithm="RS256", kid="r")
    es = forge.sign(forge.claims(sub="ec-user"), key=ec_key, algorithm="ES256", kid="e")
    assert verifier.verify(rs).sub == "rsa-user"
    assert verifier.verify(es).sub == "ec-user"
    # ...and each key verifies only its own algorithm.
    assert_rejected(
        verifier, forge.sign(key=rsa_key, algorithm="RS512", kid="r"), 401, "alg_not_allowed"
    )
    assert_rejected(
        verifier, forge.sign(key=rsa_key, algorithm="PS256", kid="r"), 401, "alg_not_allowed"
    )
    assert_rejected(
        verifier, forge.sign(key=rsa_key, algorithm="RS256", kid="e"), 401, "alg_not_allowed"
    )
    assert_rejected(
        verifier, forge.sign(key=ec_key, algorithm="ES256", kid="r"), 401, "alg_not_allowed"
    )


def test_audience_list_containing_ours_is_accepted(forge: Forge, verifier: TokenVerifier) -> None:
    token = forge.sign(forge.claims(aud=["other", AUDIENCE]))
    assert verifier.verify(token).sub == "user-1"


def test_float_times_and_missing_nbf_are_accepted(
    forge: Forge, verifier: TokenVerifier, clock: FakeClock, drop: Any
) -> None:
    token = forge.sign(forge.claims(nbf=drop, iat=clock.now - 0.5, exp=clock.now + 0.5))
    assert verifier.verify(token).exp == clock.now + 0.5


# --------------------------------------------------------------------------- time


def test_expiry_respects_leeway(
    issuer: TokenIssuer, verifier: TokenVerifier, clock: FakeClock
) -> None:
    token = issuer.issue("u")
    exp = verifier.verify(token).exp
    clock.now = exp + 4.9  # within the 5 s leeway
    assert verifier.verify(token).sub == "u"
    clock.now = exp + 5
    assert_rejected(verifier, token, 401, "token_expired")


def test_expiry_without_leeway(
    signing_key: SigningKey, issuer: TokenIssuer, clock: FakeClock
) -> None:
    strict = TokenVerifier(JWKSet(signing_key.jwks()), ISSUER, AUDIENCE, leeway=0, clock=clock)
    token = issuer.issue("u")
    exp = strict.verify(token).exp
    clock.now = exp - 0.001
    assert strict.verify(token).sub == "u"
    clock.now = exp
    assert_rejected(strict, token, 401, "token_expired")


def test_not_yet_valid(issuer: TokenIssuer, verifier: TokenVerifier, clock: FakeClock) -> None:
    token = issuer.issue("u")
    iat = int(clock.now)
    clock.now = iat - 4.9  # clock skew within leeway
    assert verifier.verify(token).sub == "u"
    clock.now = iat - 5.1
    assert_rejected(verifier, token, 401, "token_not_yet_valid")


def test_future_nbf_is_rejected(forge: Forge, verifier: TokenVerifier, clock: FakeClock) -> None:
    token = forge.sign(forge.claims(nbf=int(clock.now) + 60))
    assert_rejected(verifier, token, 401, "token_not_yet_valid")


def test_future_iat_is_rejected(
    forge: Forge, verifier: TokenVerifier, clock: FakeClock, drop: Any
) -> None:
    token = forge.sign(forge.claims(nbf=drop, iat=int(clock.now) + 60))
    assert_rejected(verifier, token, 401, "token_not_yet_valid")


# --------------------------------------------------------------------------- claims


def test_wrong_audience_is_forbidden(
    issuer: TokenIssuer, signing_key: SigningKey, clock: FakeClock
) -> None:
    other = TokenVerifier(JWKSet(signing_key.jwks()), ISSUER, "admin-api", clock=clock)
    assert_rejected(other, issuer.issue("u"), 403, "wrong_audience")


@pytest.mark.parametrize("aud", [None, "", "Auction", ["other"], [], 7, {"aud": AUDIENCE}])
def test_bad_audience_claims_are_forbidden(forge: Forge, verifier: TokenVerifier, aud: Any) -> None:
    assert_rejected(verifier, forge.sign(forge.claims(aud=aud)), 403, "wrong_audience")


def test_missing_audience_is_forbidden(forge: Forge, verifier: TokenVerifier, drop: Any) -> None:
    assert_rejected(verifier, forge.sign(forge.claims(aud=drop)), 403, "wrong_audience")


@pytest.mark.parametrize("iss", ["https://evil.test", "", None, [ISSUER], ISSUER + "/"])
def test_wrong_issuer_is_unauthorized(forge: Forge, verifier: TokenVerifier, iss: Any) -> None:
    assert_rejected(verifier, forge.sign(forge.claims(iss=iss)), 401, "wrong_issuer")


def test_wrong_issuer_via_verifier_config(
    issuer: TokenIssuer, signing_key: SigningKey, clock: FakeClock
) -> None:
    other = TokenVerifier(JWKSet(signing_key.jwks()), "https://other.test", AUDIENCE, clock=clock)
    assert_rejected(other, issuer.issue("u"), 401, "wrong_issuer")


@pytest.mark.parametrize("token_use", ["id", "refresh", "", None, "ACCESS"])
def test_non_access_tokens_are_forbidden(
    forge: Forge, verifier: TokenVerifier, token_use: Any
) -> None:
    assert_rejected(
        verifier, forge.sign(forge.claims(token_use=token_use)), 403, "not_access_token"
    )


def test_missing_token_use_is_forbidden(forge: Forge, verifier: TokenVerifier, drop: Any) -> None:
    assert_rejected(verifier, forge.sign(forge.claims(token_use=drop)), 403, "not_access_token")


@pytest.mark.parametrize(
    "claims",
    [
        {"sub": "DROP"},
        {"sub": ""},
        {"sub": None},
        {"sub": 42},
        {"sub": ["u"]},
        {"sub": "x" * 256},
        {"sub": "user\n1"},
        {"jti": "DROP"},
        {"jti": ""},
        {"jti": 5},
        {"exp": "DROP"},
        {"exp": "1900000000"},
        {"exp": True},
        {"exp": None},
        {"exp": -1},
        {"exp": 1e300},
        {"exp": 2**64},
        {"iat": "DROP"},
        {"iat": [1]},
        {"nbf": "soon"},
        {"nbf": None},
    ],
    ids=repr,
)
def test_malformed_claims_are_rejected(
    forge: Forge, verifier: TokenVerifier, drop: Any, claims: dict[str, Any]
) -> None:
    overrides = {name: drop if value == "DROP" else value for name, value in claims.items()}
    assert_rejected(verifier, forge.sign(forge.claims(**overrides)), 401, "malformed")


@pytest.mark.parametrize(
    "payload",
    [
        b'{"exp": NaN}',
        b'{"exp": Infinity}',
        b'{"sub": "a", "sub": "b"}',
        b"[1, 2]",
        b'"claims"',
        b"not json",
        b"\xff\xfe",
        b"",
        b"[" * 1400 + b"]" * 1400,  # deeper than the recursion limit, under 4 KiB
    ],
    ids=["nan", "infinity", "duplicate", "array", "string", "not-json", "binary", "empty", "deep"],
)
def test_signed_but_broken_payloads_are_malformed(
    forge: Forge, verifier: TokenVerifier, payload: bytes
) -> None:
    assert_rejected(verifier, forge.sign(payload), 401, "malformed")


def test_duplicate_claims_cannot_smuggle_a_second_value(
    forge: Forge, verifier: TokenVerifier, clock: FakeClock
) -> None:
    claims = json.dumps(forge.claims())[:-1] + ', "sub": "admin"}'
    assert_rejected(verifier, forge.sign(claims.encode()), 401, "malformed")


# --------------------------------------------------------------------------- attacks


@pytest.mark.parametrize("alg", ["none", "None", "NONE", "nOnE", "", None, 1])
def test_alg_none_is_rejected(forge: Forge, verifier: TokenVerifier, alg: Any) -> None:
    token = forge.unsigned(forge.header(alg=alg), forge.claims())
    assert_rejected(verifier, token, 401, "alg_not_allowed")
    # with a (meaningless) signature part too
    assert_rejected(verifier, token + "c2ln", 401, "alg_not_allowed")


def test_missing_alg_is_rejected(forge: Forge, verifier: TokenVerifier, drop: Any) -> None:
    assert_rejected(
        verifier, forge.unsigned(forge.header(alg=drop), forge.claims()), 401, "alg_not_allowed"
    )


def _public_secrets(public_jwk: dict[str, Any], public_key: Any) -> list[bytes]:
    """Everything public an attacker might try as the HMAC secret."""
    pem = public_key.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    secrets = [pem, pem.strip(), json.dumps(public_jwk).encode()]
    if "x" in public_jwk:
        secrets.append(public_jwk["x"].encode())
        secrets.append(base64.urlsafe_b64decode(public_jwk["x"] + "=="))
    return secrets


@pytest.mark.parametrize("alg", ["HS256", "HS384", "HS512"])
def test_hmac_with_the_public_key_is_rejected_ed25519(
    forge: Forge,
    verifier: TokenVerifier,
    signing_key: SigningKey,
    private_key: Ed25519PrivateKey,
    alg: str,
) -> None:
    for secret in _public_secrets(signing_key.public_jwk(), private_key.public_key()):
        token = forge.hmac_token(secret, forge.header(alg=alg), forge.claims(sub="admin"))
        assert_rejected(verifier, token, 401, "alg_not_allowed")


def test_hmac_with_the_public_key_is_rejected_rsa_and_ec(
    forge: Forge, rsa_key: rsa.RSAPrivateKey, ec_key: ec.EllipticCurvePrivateKey, clock: FakeClock
) -> None:
    rsa_jwk = {**jwt.algorithms.RSAAlgorithm.to_jwk(rsa_key.public_key(), as_dict=True), "kid": "r"}
    ec_jwk = {**jwt.algorithms.ECAlgorithm.to_jwk(ec_key.public_key(), as_dict=True), "kid": "e"}
    verifier = TokenVerifier(JWKSet({"keys": [rsa_jwk, ec_jwk]}), ISSUER, AUDIENCE, clock=clock)
    for kid, jwk, key in (("r", rsa_jwk, rsa_key), ("e", ec_jwk, ec_key)):
        for secret in _public_secrets(jwk, key.public_key()):
            token = forge.hmac_token(secret, forge.header(alg="HS256", kid=kid), forge.claims())
            assert_rejected(verifier, token, 401, "alg_not_allowed")


def test_asymmetric_alg_swap_is_rejected(forge: Forge, verifier: TokenVerifier) -> None:
    for alg in ("ES256", "RS256", "PS256", "ES256K", "Ed25519", "EdDSA "):
        token = forge.unsigned(forge.header(alg=alg), forge.claims(), signature="c2ln")
        assert_rejected(verifier, token, 401, "alg_not_allowed")


def test_tampered_payload_with_original_signature(
    issuer: TokenIssuer, verifier: TokenVerifier, forge: Forge
) -> None:
    header, _, signature = issuer.issue("user-1").split(".")
    forged = f"{header}.{b64json(forge.claims(sub='admin'))}.{signature}"
    assert_rejected(verifier, forged, 401, "bad_signature")


def test_tampered_header_with_original_signature(
    issuer: TokenIssuer, verifier: TokenVerifier, forge: Forge
) -> None:
    _, payload, signature = issuer.issue("user-1").split(".")
    forged = f"{b64json(forge.header(typ='at+jwt'))}.{payload}.{signature}"
    assert_rejected(verifier, forged, 401, "bad_signature")


def test_flipped_signature_bit(issuer: TokenIssuer, verifier: TokenVerifier) -> None:
    header, payload, signature = issuer.issue("user-1").split(".")
    raw = bytearray(base64.urlsafe_b64decode(signature + "=="))
    raw[10] ^= 1
    assert_rejected(verifier, f"{header}.{payload}.{b64(bytes(raw))}", 401, "bad_signature")
    assert_rejected(verifier, f"{header}.{payload}.", 401, "bad_signature")
    assert_rejected(verifier, f"{header}.{payload}.{b64(bytes(raw[:60]))}", 401, "bad_signature")


def test_non_canonical_signature_spelling_is_rejected(
    issuer: TokenIssuer, verifier: TokenVerifier
) -> None:
    token = issuer.issue("user-1")
    # 64 signature bytes leave 4 unused bits in the last character: set one of them.
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    last = alphabet.index(token[-1])
    twin = token[:-1] + alphabet[last | 1]
    assert twin != token
    assert rejected(verifier, twin).status == 401


def test_unknown_kid(forge: Forge, verifier: TokenVerifier) -> None:
    assert_rejected(verifier, forge.sign(kid="someone-else"), 401, "unknown_kid")


@pytest.mark.parametrize("kid", ["DROP", "", None, 7, ["kid"]])
def test_missing_or_invalid_kid(forge: Forge, verifier: TokenVerifier, drop: Any, kid: Any) -> None:
    token = forge.unsigned(forge.header(kid=drop if kid == "DROP" else kid), forge.claims(), "c2ln")
    assert_rejected(verifier, token, 401, "unknown_kid")


def test_other_key_claiming_our_kid(forge: Forge, verifier: TokenVerifier) -> None:
    impostor = Ed25519PrivateKey.generate()
    assert_rejected(
        verifier, forge.sign(forge.claims(sub="admin"), key=impostor), 401, "bad_signature"
    )


def test_token_from_another_trusted_issuer_key_cannot_borrow_a_kid(
    forge: Forge, signing_key: SigningKey, clock: FakeClock
) -> None:
    second = SigningKey.generate()
    keys = JWKSet({"keys": [signing_key.public_jwk(), second.public_jwk()]})
    verifier = TokenVerifier(keys, ISSUER, AUDIENCE, clock=clock)
    token = second.encode(forge.claims())
    assert verifier.verify(token).sub == "user-1"  # key rotation: both keys verify
    _, payload, signature = token.split(".")
    swapped = f"{b64json(forge.header(kid=signing_key.kid))}.{payload}.{signature}"
    assert_rejected(verifier, swapped, 401, "bad_signature")


@pytest.mark.parametrize(
    "header",
    [{"crit": ["exp"]}, {"crit": ["b64"], "b64": False}, {"b64": True}],
    ids=["crit", "b64-false", "b64-true"],
)
def test_unsupported_header_extensions_are_rejected(
    forge: Forge, verifier: TokenVerifier, header: dict[str, Any]
) -> None:
    token = forge.unsigned(forge.header(**header), forge.claims(), "c2ln")
    assert_rejected(verifier, token, 401, "malformed")


def test_key_urls_in_the_header_are_ignored(forge: Forge, verifier: TokenVerifier) -> None:
    attacker = Ed25519PrivateKey.generate()
    attacker_jwk = SigningKey(attacker).public_jwk()
    token = forge.sign(key=attacker, jwk=attacker_jwk, jku="https://evil.test/jwks.json")
    assert_rejected(verifier, token, 401, "bad_signature")


def test_oversized_tokens_are_rejected_before_parsing(
    forge: Forge, verifier: TokenVerifier, signing_key: SigningKey
) -> None:
    padding = "x" * MAX_TOKEN_LENGTH
    genuine = signing_key.encode(forge.claims(padding=padding))  # validly signed, just too big
    assert len(genuine) > MAX_TOKEN_LENGTH
    assert_rejected(verifier, genuine, 401, "token_too_long")
    assert "longer than" in rejected(verifier, "a" * (MAX_TOKEN_LENGTH + 1)).message


# --------------------------------------------------------------------------- lifetime


def test_a_token_living_longer_than_the_maximum_is_refused(
    forge: Forge, signing_key: SigningKey, clock: FakeClock
) -> None:
    verifier = TokenVerifier(JWKSet(signing_key.jwks()), ISSUER, AUDIENCE, clock=clock, max_ttl=600)
    now = int(clock.now)
    assert verifier.verify(forge.sign(forge.claims(exp=now + 600))).exp == now + 600
    too_long = forge.sign(forge.claims(exp=now + 601))
    assert_rejected(verifier, too_long, 401, "lifetime_too_long")
    assert "600 s" in rejected(verifier, too_long).message
    # Measured from iat, not from now: an old token with a far exp is just as long-lived.
    assert_rejected(
        verifier, forge.sign(forge.claims(iat=now - 3000, nbf=now - 3000, exp=now + 60)), 401,
        "lifetime_too_long",
    )  # fmt: skip


def test_the_default_maximum_lifetime_is_a_day(forge: Forge, verifier: TokenVerifier) -> None:
    now = int(forge.clock.now)
    assert verifier.max_ttl == DEFAULT_MAX_TOKEN_TTL == 86400
    assert verifier.verify(forge.sign(forge.claims(exp=now + 86400))).exp == now + 86400
    assert_rejected(verifier, forge.sign(forge.claims(exp=now + 86401)), 401, "lifetime_too_long")


def test_the_issuer_refuses_a_lifetime_over_its_maximum(signing_key: SigningKey) -> None:
    issuer = TokenIssuer(signing_key, ISSUER, AUDIENCE, ttl=60, max_ttl=600)
    issuer.issue("u", ttl=600)
    for ttl in (600.5, 601, 10**9):
        with pytest.raises(ValueError, match="longer than the longest token lifetime"):
            issuer.issue("u", ttl=ttl)
    with pytest.raises(ValueError, match="longer than the longest token lifetime"):
        TokenIssuer(signing_key, ISSUER, AUDIENCE, ttl=601, max_ttl=600)
    with pytest.raises(ValueError, match="max_ttl"):
        TokenIssuer(signing_key, ISSUER, AUDIENCE, ttl=60, max_ttl=0)
    assert TokenIssuer(signing_key, ISSUER, AUDIENCE, ttl=60).max_ttl == DEFAULT_MAX_TOKEN_TTL


@pytest.mark.parametrize(
    "header_segment",
    [
        b64(b"not json"),
        b64(b"[]"),
        b64(b'"EdDSA"'),
        b64(b"\xff\xfe\xfa"),
        b64(b'{"alg":"EdDSA","alg":"none"}'),
        b64(b'{"alg":NaN}'),
        b64(b"[" * 1400 + b"]" * 1400),  # deeper than the recursion limit, under 4 KiB
        b64(b'{"alg":"EdDSA"}') + "=",
        b64(b'{"alg":"EdDSA"}')[:-1] + "!",
        "a",
    ],
    ids=[
        "text",
        "array",
        "string",
        "binary",
        "duplicate",
        "nan",
        "deep",
        "padded",
        "bang",
        "bad-length",
    ],
)
def test_broken_headers_are_malformed(
    forge: Forge, verifier: TokenVerifier, header_segment: str
) -> None:
    token = f"{header_segment}.{b64json(forge.claims())}.c2ln"
    assert_rejected(verifier, token, 401, "malformed")


@pytest.mark.parametrize(
    "token",
    [
        "a",
        "a.b",
        "a.b.c.d",
        "...",
        ".b.c",
        "é.é.é",
        "a b.c.d",
        " eyJ.eyJ.c2ln",
        "eyJ.eyJ.c2ln\n",
        "eyJhbGciOiJFZERTQSJ9.eyJ9.c2ln=",
        "Bearer eyJ.eyJ.c2ln",
        "\x00",
        "\ud800.\ud800.\ud800",
    ],
)
def test_garbage_is_malformed(verifier: TokenVerifier, token: str) -> None:
    assert_rejected(verifier, token, 401, "malformed")


def test_empty_or_non_string_token(verifier: TokenVerifier) -> None:
    for token in ("", None):
        assert_rejected(verifier, token, 401, "missing_token")  # type: ignore[arg-type]
    for not_text in (b"eyJ.eyJ.c2ln", 42):
        assert_rejected(verifier, not_text, 401, "malformed")  # type: ignore[arg-type]


# --------------------------------------------------------------------------- issuer input


def test_issuer_refuses_bad_input(issuer: TokenIssuer) -> None:
    for sub in ("", "x" * 256, "a\tb", None):
        with pytest.raises(ValueError, match="sub"):
            issuer.issue(sub)  # type: ignore[arg-type]
    for ttl in (0, -1, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="ttl"):
            issuer.issue("u", ttl=ttl)
    with pytest.raises(ValueError, match="reserved claims: aud, sub"):
        issuer.issue("u", extra_claims={"sub": "admin", "aud": "x"})
    with pytest.raises(ValueError, match="JSON"):
        issuer.issue("u", extra_claims={"when": object()})
    with pytest.raises(ValueError, match="JSON"):
        issuer.issue("u", extra_claims={"score": float("nan")})
    with pytest.raises(ValueError, match="limit"):
        issuer.issue("u", extra_claims={"blob": "x" * MAX_TOKEN_LENGTH})


def test_constructors_validate_configuration(signing_key: SigningKey) -> None:
    keys = JWKSet(signing_key.jwks())
    with pytest.raises(ValueError, match="issuer"):
        TokenIssuer(signing_key, "", AUDIENCE, ttl=60)
    with pytest.raises(ValueError, match="audience"):
        TokenVerifier(keys, ISSUER, "")
    with pytest.raises(ValueError, match="ttl"):
        TokenIssuer(signing_key, ISSUER, AUDIENCE, ttl=0)
    with pytest.raises(ValueError, match="leeway"):
        TokenVerifier(keys, ISSUER, AUDIENCE, leeway=-1)


def test_claims_equality_ignores_raw() -> None:
    a = Claims(sub="u", exp=2, iat=1, jti="j", raw={"x": 1})
    assert a == Claims(sub="u", exp=2, iat=1, jti="j", raw={})
    assert "raw" not in repr(a)


# --------------------------------------------------------------------------- properties

B64URLISH = st.text(
    alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_=+/. \x00é",
    max_size=60,
)

CLAIM_NAMES = st.sampled_from(["iss", "aud", "sub", "iat", "nbf", "exp", "jti", "token_use", "x"])


@HYPOTHESIS
@given(token=st.text(max_size=300))
def test_any_text_only_raises_auth_error(verifier: TokenVerifier, token: str) -> None:
    with pytest.raises(AuthError):
        verifier.verify(token)


@HYPOTHESIS
@given(parts=st.lists(B64URLISH, min_size=1, max_size=5))
def test_dotted_base64ish_only_raises_auth_error(verifier: TokenVerifier, parts: list[str]) -> None:
    with pytest.raises(AuthError):
        verifier.verify(".".join(parts))


@HYPOTHESIS
@given(
    header=st.dictionaries(
        st.sampled_from(["alg", "kid", "typ", "crit", "b64", "jwk"]), json_values
    ),
    rest=B64URLISH,
)
def test_arbitrary_headers_only_raise_auth_error(
    verifier: TokenVerifier, forge: Forge, header: dict[str, Any], rest: str
) -> None:
    header.setdefault("kid", forge.kid)
    with pytest.raises(AuthError):
        verifier.verify(f"{b64json(header)}.{rest}.{rest}")


@HYPOTHESIS
@given(overrides=st.dictionaries(CLAIM_NAMES, json_values, max_size=4))
def test_signed_arbitrary_claims_verify_or_raise_auth_error(
    verifier: TokenVerifier, forge: Forge, overrides: dict[str, Any]
) -> None:
    token = forge.sign(forge.claims(**overrides))
    try:
        claims = verifier.verify(token)
    except AuthError:
        return  # the only failure allowed
    assert claims.raw["iss"] == ISSUER
    assert claims.raw["token_use"] == "access"
    assert isinstance(claims.sub, str)
    assert claims.sub
