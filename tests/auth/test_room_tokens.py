"""The waiting room's key ring, token sets and verifier: real keys, real files, a fake clock."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rideout.auth import AuthError, JWKSet, KeyFileError
from rideout.auth.keys import Algorithm
from rideout.auth.room_tokens import (
    RING_FILENAME,
    RoomKey,
    RoomKeyRing,
    RoomKeyWatcher,
    RoomTokenIssuer,
    RoomTokenSet,
    RoomTokenVerifier,
)
from rideout.errors import InvalidArgument
from tests.auth.conftest import at_once, b64, b64json
from tests.conftest import FakeClock, examples

ISSUER = "https://room.rideout.test"
EVENT = "launch-2026"
REQUEST = "1f0c2a9e-6b1d-4c3f-9a2e-0d4b5c6e7f80"
NOW = 1_800_000_000.0
ALGORITHMS: list[Algorithm] = ["EdDSA", "ES256", "RS256"]
HYPOTHESIS = settings(
    database=None,
    max_examples=examples(150),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)


@pytest.fixture(scope="module")
def rings() -> dict[str, RoomKeyRing]:
    return {alg: RoomKeyRing.generate(alg) for alg in ALGORITHMS}


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(NOW)


def issue(ring: RoomKeyRing, clock: FakeClock, **overrides: Any) -> RoomTokenSet:
    arguments: dict[str, Any] = {
        "event_id": EVENT,
        "request_id": REQUEST,
        "queue_position": 7,
        "issued_at": NOW,
        "expires_at": NOW + 3600,
    }
    arguments.update(overrides)
    return RoomTokenIssuer(ring, issuer=ISSUER, clock=clock).issue(**arguments)


def verifier(ring: RoomKeyRing | JWKSet, clock: FakeClock, **options: Any) -> RoomTokenVerifier:
    return RoomTokenVerifier(ring, issuer=ISSUER, clock=clock, **options)


def refused(check: RoomTokenVerifier, token: str, **options: Any) -> tuple[int, str]:
    with pytest.raises(AuthError) as caught:
        check.verify(token, **options)
    return caught.value.status, caught.value.reason


def parts(token: str) -> tuple[dict[str, Any], dict[str, Any]]:
    header, payload, _ = token.split(".")
    return (
        json.loads(jwt.utils.base64url_decode(header)),
        json.loads(jwt.utils.base64url_decode(payload)),
    )


# --------------------------------------------------------------------------- issuing


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_a_set_round_trips_with_awss_claims(
    rings: dict[str, RoomKeyRing], clock: FakeClock, algorithm: Algorithm
) -> None:
    ring = rings[algorithm]
    tokens = issue(ring, clock)
    assert (tokens.token_type, tokens.expires_in) == ("Bearer", 3600)
    check = verifier(ring.jwk_set, clock)
    for use, token in zip(("access", "refresh", "id"), tokens[:3], strict=True):
        header, claims = parts(token)
        assert header == {"alg": algorithm, "kid": ring.current_kid, "typ": "JWT"}
        assert claims == {
            "aud": EVENT,
            "sub": REQUEST,
            "queue_position": 7,
            "token_use": use,
            "iat": int(NOW),
            "nbf": int(NOW),
            "exp": int(NOW) + 3600,
            "iss": ISSUER,
        }
        verified = check.verify(token, token_use=use, audience=EVENT)  # type: ignore[arg-type]
        assert (verified.sub, verified.event_id, verified.queue_position) == (REQUEST, EVENT, 7)
        assert (verified.token_use, verified.issuer, verified.jti) == (use, ISSUER, verified.jti)
    assert tokens.to_dict()["token_type"] == "Bearer"


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_the_same_inputs_give_the_same_claims(
    rings: dict[str, RoomKeyRing], clock: FakeClock, algorithm: Algorithm
) -> None:
    first, again = issue(rings[algorithm], clock), issue(rings[algorithm], clock)
    for a, b in zip(first[:3], again[:3], strict=True):
        assert parts(a) == parts(b)
        if algorithm != "ES256":  # ECDSA signatures are randomised; the others are not
            assert a == b
    check = verifier(rings[algorithm], clock)
    assert check.verify(first.access_token).jti == check.verify(again.access_token).jti


def test_expires_in_is_what_remains_at_the_time_of_the_call(
    rings: dict[str, RoomKeyRing], clock: FakeClock
) -> None:
    clock.advance(600.4)
    assert issue(rings["EdDSA"], clock).expires_in == 3000  # rounded up
    assert issue(rings["EdDSA"], clock, now=NOW + 3599.5).expires_in == 1
    assert issue(rings["EdDSA"], clock, now=NOW + 4000).expires_in == 0  # never negative


def test_the_nonce_goes_in_the_id_token_only(
    rings: dict[str, RoomKeyRing], clock: FakeClock
) -> None:
    tokens = issue(rings["EdDSA"], clock, nonce="n-0S6_WzA2Mj")
    assert parts(tokens.id_token)[1]["nonce"] == "n-0S6_WzA2Mj"
    assert "nonce" not in parts(tokens.access_token)[1]
    assert "nonce" not in parts(tokens.refresh_token)[1]
    claims = verifier(rings["EdDSA"], clock).verify(tokens.id_token, token_use="id")
    assert claims.nonce == "n-0S6_WzA2Mj"


def test_a_renewals_jti_goes_in_the_refresh_token_only(
    rings: dict[str, RoomKeyRing], clock: FakeClock
) -> None:
    tokens = issue(rings["EdDSA"], clock, refresh_jti="Xq3-r7_k2Lw0aBcDeFgHiJ")
    assert parts(tokens.refresh_token)[1]["jti"] == "Xq3-r7_k2Lw0aBcDeFgHiJ"
    assert "jti" not in parts(tokens.access_token)[1]
    assert "jti" not in parts(tokens.id_token)[1]
    check = verifier(rings["EdDSA"], clock)
    claims = check.verify(tokens.refresh_token, token_use="refresh")
    assert claims.jti == "Xq3-r7_k2Lw0aBcDeFgHiJ"  # the claim itself, not a digest
    first = check.verify(issue(rings["EdDSA"], clock).refresh_token, token_use="refresh")
    assert "jti" not in first.raw
    assert first.jti  # derived from the payload, as for AWS's tokens
    with pytest.raises(InvalidArgument, match="refresh_jti"):
        issue(rings["EdDSA"], clock, refresh_jti="")


def test_an_issuer_override_is_per_call(rings: dict[str, RoomKeyRing], clock: FakeClock) -> None:
    ring = rings["EdDSA"]
    issuer = RoomTokenIssuer(ring, issuer=ISSUER, clock=clock)
    base = {
        "event_id": EVENT, "request_id": REQUEST, "queue_position": 1,
        "issued_at": NOW, "expires_at": NOW + 60,
    }  # fmt: skip
    other = issuer.issue(**base, issuer="https://oidc.rideout.test")
    assert parts(other.access_token)[1]["iss"] == "https://oidc.rideout.test"
    assert parts(issuer.issue(**base).access_token)[1]["iss"] == ISSUER  # not persisted
    assert refused(verifier(ring, clock), other.access_token) == (401, "wrong_issuer")


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"event_id": ""}, "event_id"),
        ({"event_id": "x" * 256}, "event_id"),
        ({"request_id": "bad\nid"}, "request_id"),
        ({"request_id": 5}, "request_id"),
        ({"queue_position": 0}, "queue_position"),
        ({"queue_position": True}, "queue_position"),
        ({"issued_at": float("nan")}, "issued_at"),
        ({"expires_at": NOW}, "expires_at"),
        ({"expires_at": NOW + 30 * 86400 + 1}, "expires_at"),
        ({"nonce": ""}, "nonce"),
        ({"issuer": "\x00"}, "issuer"),
    ],
)
def test_bad_arguments_are_refused_by_name(
    rings: dict[str, RoomKeyRing], clock: FakeClock, overrides: dict[str, Any], message: str
) -> None:
    with pytest.raises(InvalidArgument, match=message):
        issue(rings["EdDSA"], clock, **overrides)


# --------------------------------------------------------------------------- verifying


@pytest.fixture
def ring(rings: dict[str, RoomKeyRing]) -> RoomKeyRing:
    return rings["EdDSA"]


def test_expired_and_not_yet_valid_tokens_are_refused(ring: RoomKeyRing, clock: FakeClock) -> None:
    tokens = issue(ring, clock, expires_at=NOW + 60)
    check = verifier(ring, clock, leeway=5)
    clock.advance(64.9)
    assert check.verify(tokens.access_token).sub == REQUEST  # within the leeway
    clock.advance(0.2)
    assert refused(check, tokens.access_token) == (401, "token_expired")
    future = issue(ring, clock, issued_at=clock.now + 30, expires_at=clock.now + 90)
    assert refused(check, future.access_token) == (401, "token_not_yet_valid")


def test_the_audience_must_be_a_guarded_event(ring: RoomKeyRing, clock: FakeClock) -> None:
    token = issue(ring, clock).access_token
    assert refused(verifier(ring, clock), token, audience="other") == (403, "wrong_audience")
    guarded = verifier(ring, clock, audiences=frozenset({"other", "third"}))
    assert refused(guarded, token) == (403, "wrong_audience")
    assert verifier(ring, clock, audiences=frozenset({EVENT})).verify(token).event_id == EVENT


def test_a_token_is_good_for_its_own_use_only(ring: RoomKeyRing, clock: FakeClock) -> None:
    tokens = issue(ring, clock)
    check = verifier(ring, clock)
    assert refused(check, tokens.refresh_token) == (403, "wrong_token_use")
    assert refused(check, tokens.id_token) == (403, "wrong_token_use")
    assert refused(check, tokens.access_token, token_use="refresh") == (403, "wrong_token_use")
    assert check.verify(tokens.refresh_token, token_use="refresh").token_use == "refresh"


def test_a_forged_payload_fails_the_signature(ring: RoomKeyRing, clock: FakeClock) -> None:
    header, _, signature = issue(ring, clock).access_token.split(".")
    _, claims = parts(issue(ring, clock).access_token)
    claims["queue_position"] = 1
    forged = f"{header}.{b64json(claims)}.{signature}"
    assert refused(verifier(ring, clock), forged) == (401, "bad_signature")


def test_a_key_outside_the_ring_is_unknown(ring: RoomKeyRing, clock: FakeClock) -> None:
    stranger = RoomKeyRing.generate()
    token = issue(stranger, clock).access_token
    check = verifier(ring, clock)
    assert not check.owns(token)
    assert check.owns(issue(ring, clock).access_token)
    assert refused(check, token) == (401, "unknown_kid")


def test_the_alg_is_bound_to_the_key(ring: RoomKeyRing, clock: FakeClock) -> None:
    _, claims = parts(issue(ring, clock).access_token)
    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    as_rs256 = jwt.PyJWS().encode(
        json.dumps(claims).encode(), rsa_key, algorithm="RS256", headers={"kid": ring.current_kid}
    )
    check = verifier(ring, clock)
    assert refused(check, as_rs256) == (401, "alg_not_allowed")
    none = f"{b64json({'alg': 'none', 'kid': ring.current_kid})}.{b64json(claims)}."
    assert refused(check, none) == (401, "alg_not_allowed")
    hs = f"{b64json({'alg': 'HS256', 'kid': ring.current_kid})}.{b64json(claims)}.{b64(b'x')}"
    assert refused(check, hs) == (401, "alg_not_allowed")


def test_oversized_tokens_are_refused_before_parsing(ring: RoomKeyRing, clock: FakeClock) -> None:
    check = verifier(ring, clock)
    assert refused(check, "a" * 4097) == (401, "token_too_long")
    assert refused(check, "") == (401, "missing_token")
    wide = "\U0001f600" * 255  # 4 bytes each in UTF-8
    with pytest.raises(InvalidArgument, match="longer than"):
        issue(ring, clock, event_id=wide, request_id=wide, issuer=wide)


def test_signed_but_malformed_claims_are_malformed(ring: RoomKeyRing, clock: FakeClock) -> None:
    _, claims = parts(issue(ring, clock).access_token)
    check = verifier(ring, clock)
    for change in ({"queue_position": "7"}, {"queue_position": 0}, {"sub": ""}, {"aud": ["a"]},
                   {"token_use": "other"}, {"exp": "soon"}, {"nonce": 5}, {"jti": 5},
                   {"jti": ""}):  # fmt: skip
        token = ring.current.sign(json.dumps({**claims, **change}).encode())
        assert refused(check, token) == (401, "malformed"), change


@HYPOTHESIS
@given(token=st.text(max_size=400))
def test_any_text_only_raises_auth_error(ring: RoomKeyRing, clock: FakeClock, token: str) -> None:
    with pytest.raises(AuthError):
        verifier(ring, clock).verify(token)


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=6,
)


@HYPOTHESIS
@given(
    overrides=st.dictionaries(
        st.sampled_from(
            ["aud", "sub", "queue_position", "token_use", "iat", "nbf", "exp", "iss", "nonce"]
        ),
        JSON,
        max_size=4,
    )
)
def test_signed_garbage_claims_verify_or_raise_auth_error(
    ring: RoomKeyRing, clock: FakeClock, overrides: dict[str, Any]
) -> None:
    _, claims = parts(issue(ring, clock).access_token)
    token = ring.current.sign(json.dumps({**claims, **overrides}).encode())
    try:
        verified = verifier(ring, clock).verify(token)
    except AuthError:
        return
    assert verified.token_use == "access"
    assert verified.raw["iss"] == ISSUER
    assert isinstance(verified.queue_position, int)
    assert verified.queue_position >= 1


# --------------------------------------------------------------------------- the ring's file


def test_the_ring_is_created_once_private_and_reloaded(tmp_path: Path) -> None:
    directory = tmp_path / "keys"
    created = RoomKeyRing.load_or_create(directory)
    path = directory / RING_FILENAME
    assert created.algorithm == "EdDSA"
    assert created.previous is None
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    content = path.read_bytes()
    again = RoomKeyRing.load_or_create(directory, "RS256")  # the file decides
    assert (again.current_kid, again.algorithm) == (created.current_kid, "EdDSA")
    assert path.read_bytes() == content
    assert os.listdir(directory) == [RING_FILENAME]
    assert RoomKeyRing.load(directory).current_kid == created.current_kid
    assert created.jwks() == {"keys": [created.public_jwk()]}


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_each_algorithm_is_selectable_and_published(tmp_path: Path, algorithm: Algorithm) -> None:
    ring = RoomKeyRing.load_or_create(tmp_path, algorithm)
    jwk = ring.public_jwk()
    assert (jwk["alg"], jwk["use"], jwk["kid"]) == (algorithm, "sig", ring.current_kid)
    assert {"d", "p", "q"}.isdisjoint(jwk)  # public only
    assert JWKSet(ring.jwks()).get(ring.current_kid).algorithm == algorithm  # type: ignore[union-attr]
    assert RoomKeyRing.load(tmp_path).algorithm == algorithm


def test_missing_ring_is_an_error_for_load(tmp_path: Path) -> None:
    with pytest.raises(KeyFileError, match="no room key ring"):
        RoomKeyRing.load(tmp_path)


def _pem(key: Any, password: bytes | None = None) -> bytes:
    encryption = (
        serialization.BestAvailableEncryption(password)
        if password
        else serialization.NoEncryption()
    )
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption
    )


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b"", "empty"),
        (b"not a key\n", "no PKCS8"),
        (_pem(Ed25519PrivateKey.generate()) + b"trailing", "nothing else"),
        (b"".join(_pem(Ed25519PrivateKey.generate()) for _ in range(3)), "one or two"),
        (_pem(Ed25519PrivateKey.generate(), b"secret"), "encrypted"),
        (_pem(ec.generate_private_key(ec.SECP384R1())), "P-256"),
        (_pem(rsa.generate_private_key(public_exponent=65537, key_size=1024)), "2048"),
        (_pem(Ed25519PrivateKey.generate()).replace(b"M", b"N", 1), "PEM"),
    ],
)
def test_a_corrupt_ring_is_an_error_and_left_alone(
    tmp_path: Path, content: bytes, problem: str
) -> None:
    path = tmp_path / RING_FILENAME
    path.write_bytes(content)
    with pytest.raises(KeyFileError, match=problem):
        RoomKeyRing.load_or_create(tmp_path)
    assert path.read_bytes() == content


def test_a_duplicated_key_is_refused(tmp_path: Path) -> None:
    block = _pem(Ed25519PrivateKey.generate())
    (tmp_path / RING_FILENAME).write_bytes(block + block)
    with pytest.raises(KeyFileError, match="previous key is the current"):
        RoomKeyRing.load(tmp_path)


def test_racing_creators_end_with_one_ring(tmp_path: Path) -> None:
    kids = at_once(8, lambda: RoomKeyRing.load_or_create(tmp_path).current_kid)
    assert len(set(kids)) == 1
    assert os.listdir(tmp_path) == [RING_FILENAME]


# --------------------------------------------------------------------------- rotation


def test_rotation_keeps_the_previous_key_and_drops_older(tmp_path: Path, clock: FakeClock) -> None:
    first = RoomKeyRing.load_or_create(tmp_path)
    old = issue(first, clock).access_token
    second = first.rotate()
    assert (second.previous and second.previous.kid) == first.current_kid
    assert [key["kid"] for key in second.jwks()["keys"]] == [
        second.current_kid,
        first.current_kid,
    ]
    new = issue(second, clock).access_token
    assert parts(new)[0]["kid"] == second.current_kid
    assert verifier(second, clock).verify(old).sub == REQUEST  # the previous still verifies
    third = second.rotate()
    assert verifier(third, clock).verify(new).sub == REQUEST
    assert refused(verifier(third, clock), old) == (401, "unknown_kid")  # older: dropped
    on_disk = RoomKeyRing.load(tmp_path)
    assert [key.kid for key in on_disk.keys] == [third.current_kid, second.current_kid]
    assert stat.S_IMODE((tmp_path / RING_FILENAME).stat().st_mode) == 0o600


def test_rotation_starts_from_the_file_not_a_stale_ring(tmp_path: Path) -> None:
    stale = RoomKeyRing.load_or_create(tmp_path)
    elsewhere = RoomKeyRing.load(tmp_path).rotate()  # another process rotated meanwhile
    rotated = stale.rotate()
    assert rotated.previous is not None
    assert rotated.previous.kid == elsewhere.current_kid


def test_concurrent_rotations_lose_no_key(tmp_path: Path) -> None:
    RoomKeyRing.load_or_create(tmp_path)
    made = at_once(6, lambda: RoomKeyRing.load(tmp_path).rotate())
    # Serialised: each rotation's previous is another rotation's current (or the first).
    currents = {ring.current_kid for ring in made}
    previous = [ring.previous.kid for ring in made if ring.previous is not None]
    assert len(currents) == 6
    assert len(set(previous)) == 6
    assert len(currents - set(previous)) == 1  # the last one
    assert RoomKeyRing.load(tmp_path).current_kid in currents - set(previous)


def test_rotation_may_change_the_algorithm(tmp_path: Path, clock: FakeClock) -> None:
    first = RoomKeyRing.load_or_create(tmp_path)
    old = issue(first, clock).access_token
    second = first.rotate("RS256")
    assert (second.algorithm, RoomKeyRing.load(tmp_path).algorithm) == ("RS256", "RS256")
    assert verifier(second, clock).verify(old).sub == REQUEST
    assert parts(issue(second, clock).access_token)[0]["alg"] == "RS256"


def test_an_in_memory_ring_rotates_in_memory() -> None:
    ring = RoomKeyRing.generate()
    rotated = ring.rotate()
    assert rotated.path is None
    assert rotated.previous is ring.current


def test_a_rotation_over_a_corrupt_file_is_refused(tmp_path: Path) -> None:
    ring = RoomKeyRing.load_or_create(tmp_path)
    (tmp_path / RING_FILENAME).write_bytes(b"garbage")
    with pytest.raises(KeyFileError):
        ring.rotate()
    assert (tmp_path / RING_FILENAME).read_bytes() == b"garbage"


def test_a_key_round_trips_through_pem() -> None:
    for algorithm in ALGORITHMS:
        key = RoomKey.generate(algorithm)
        assert RoomKey.from_pem(key.to_pem()).kid == key.kid


# --------------------------------------------------------------------------- the watcher


def test_the_watcher_picks_a_rotation_up_within_its_interval(
    tmp_path: Path, clock: FakeClock
) -> None:
    watch_clock = FakeClock(0.0)
    watcher = RoomKeyWatcher(tmp_path, clock=watch_clock)
    issuer = RoomTokenIssuer(watcher, issuer=ISSUER, clock=clock)
    check = RoomTokenVerifier(watcher, issuer=ISSUER, clock=clock)
    base = {
        "event_id": EVENT, "request_id": REQUEST, "queue_position": 1,
        "issued_at": NOW, "expires_at": NOW + 60,
    }  # fmt: skip
    before = issuer.issue(**base).access_token
    rotated = RoomKeyRing.load(tmp_path).rotate()  # `rideout room rotate-key`, elsewhere
    watch_clock.advance(0.5)
    assert parts(issuer.issue(**base).access_token)[0]["kid"] != rotated.current_kid  # not yet
    watch_clock.advance(0.5)
    after = issuer.issue(**base).access_token
    assert parts(after)[0]["kid"] == rotated.current_kid
    assert check.verify(before).sub == check.verify(after).sub == REQUEST


def test_the_watcher_keeps_the_last_good_ring(tmp_path: Path) -> None:
    watch_clock = FakeClock(0.0)
    errors: list[KeyFileError] = []
    watcher = RoomKeyWatcher(tmp_path, clock=watch_clock, on_error=errors.append)
    good = watcher.ring()
    (tmp_path / RING_FILENAME).write_bytes(b"half-written by hand")
    watch_clock.advance(1.0)
    assert watcher.ring() is good
    assert len(errors) == 1
    assert "room-keys.pem" in str(errors[0])
    watch_clock.advance(1.0)
    assert watcher.ring() is good
    assert len(errors) == 1
