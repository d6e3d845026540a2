from __future__ import annotations

import errno
import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from rideout.auth import KEY_FILENAME, JWKSError, JWKSet, KeyFileError, SigningKey, jwk_thumbprint
from rideout.auth.keys import _publish
from tests.auth.conftest import at_once
from tests.conftest import until_sync

# RFC 8037 Appendix A.1-A.3: an Ed25519 key and its RFC 7638 thumbprint.
RFC8037_D = "nWGxne_9WmC6hEr0kuwsxERJxWl7MmkZcDusAxyuf2A"
RFC8037_X = "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"
RFC8037_THUMBPRINT = "kPrK_qmxVWaYVA9wwBF6Iuo3vVzz7TxHCTwXBygrS4k"
# RFC 7638 §3.1: an RSA key and its thumbprint.
RFC7638_N = (
    "0vx7agoebGcQSuuPiLJXZptN9nndrQmbXEps2aiAFbWhM78LhWx4cbbfAAtVT86zwu1RK7aPFFxuhDR1L6tSoc"
    "_BJECPebWKRXjBZCiFV4n3oknjhMstn64tZ_2W-5JsGY4Hc5n9yBXArwl93lqt7_RN5w6Cf0h4QyQ5v-65YGjQR0"
    "_FDW2QvzqY368QQMicAtaSqzs8KJZgnYb9c7d0zgdAZHzu6qMQvRL5hajrn1n91CbOpbISD08qNLyrdkt-bFTWhA"
    "I4vMQFh6WeZu0fM4lFd2NcRwr3XPksINHaQ-G_xBniIqbw0Ls1jF44-csFCur-kEgU8awapJzKnqDKgw"
)
RFC7638_THUMBPRINT = "NzbLsXh8uDCcd-6MNwXF4W_7noWXFZAfHkxZsRGC9Xs"


def _b64decode(text: str) -> bytes:
    import base64

    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def rsa_jwk(key: rsa.RSAPrivateKey, **extra: Any) -> dict[str, Any]:
    """The public JWK as PyJWT (an independent implementation) writes it."""
    jwk = jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key(), as_dict=True)
    return {**jwk, "kid": "rsa-1", **extra}


def ec_jwk(key: ec.EllipticCurvePrivateKey, **extra: Any) -> dict[str, Any]:
    jwk = jwt.algorithms.ECAlgorithm.to_jwk(key.public_key(), as_dict=True)
    return {**jwk, "kid": "ec-1", **extra}


# --------------------------------------------------------------------------- thumbprints


def test_kid_is_the_rfc7638_thumbprint_of_the_rfc8037_key() -> None:
    key = SigningKey(Ed25519PrivateKey.from_private_bytes(_b64decode(RFC8037_D)))
    assert key.kid == RFC8037_THUMBPRINT
    assert key.public_jwk() == {
        "kty": "OKP",
        "crv": "Ed25519",
        "x": RFC8037_X,
        "kid": RFC8037_THUMBPRINT,
        "alg": "EdDSA",
        "use": "sig",
    }


def test_rsa_thumbprint_matches_rfc7638_example() -> None:
    jwk = {"kty": "RSA", "n": RFC7638_N, "e": "AQAB", "alg": "RS256", "kid": "2011-04-29"}
    assert jwk_thumbprint(jwk) == RFC7638_THUMBPRINT


@pytest.mark.parametrize(
    "jwk",
    [{"kty": "oct", "k": "c2VjcmV0"}, {"kty": "OKP", "crv": "Ed25519"}, {"x": "abc"}],
)
def test_thumbprint_refuses_incomplete_or_unknown_keys(jwk: dict[str, Any]) -> None:
    with pytest.raises(JWKSError):
        jwk_thumbprint(jwk)


# --------------------------------------------------------------------------- SigningKey


def test_generated_keys_are_distinct_and_publish_a_jwks() -> None:
    first, second = SigningKey.generate(), SigningKey.generate()
    assert first.kid != second.kid
    assert first.jwks() == {"keys": [first.public_jwk()]}
    jwk = first.public_jwk()
    assert jwk_thumbprint(jwk) == first.kid
    jwk["kid"] = "mutated"
    assert first.public_jwk()["kid"] == first.kid  # callers get copies


def test_pem_round_trip_and_repr_hides_the_secret() -> None:
    key = SigningKey.generate()
    pem = key.to_pem()
    assert pem.startswith(b"-----BEGIN PRIVATE KEY-----")
    assert SigningKey.from_pem(pem).kid == key.kid
    assert repr(key) == f"SigningKey(kid={key.kid!r})"


def test_signing_key_requires_an_ed25519_key(ec_key: ec.EllipticCurvePrivateKey) -> None:
    with pytest.raises(TypeError, match="Ed25519"):
        SigningKey(ec_key)  # type: ignore[arg-type]


def test_load_or_create_creates_once_then_reloads_the_same_key(tmp_path: Path) -> None:
    directory = tmp_path / "data" / "nested"
    created = SigningKey.load_or_create(directory)
    path = directory / KEY_FILENAME
    assert path.is_file()
    content = path.read_bytes()
    again = SigningKey.load_or_create(directory)
    assert again.kid == created.kid
    assert path.read_bytes() == content
    assert sorted(os.listdir(directory)) == [KEY_FILENAME]  # no temp files left behind


def test_key_file_is_private(tmp_path: Path) -> None:
    SigningKey.load_or_create(tmp_path)
    assert stat.S_IMODE((tmp_path / KEY_FILENAME).stat().st_mode) == 0o600


def test_losing_the_creation_race_adopts_the_winners_key(tmp_path: Path) -> None:
    winner = SigningKey.load_or_create(tmp_path)
    loser = SigningKey.generate()
    adopted = _publish(tmp_path / KEY_FILENAME, loser)
    assert adopted.kid == winner.kid != loser.kid
    assert SigningKey.load_or_create(tmp_path).kid == winner.kid
    assert sorted(os.listdir(tmp_path)) == [KEY_FILENAME]


def test_concurrent_threads_end_with_one_key(tmp_path: Path) -> None:
    for round_ in range(10):
        directory = tmp_path / str(round_)
        kids = at_once(8, lambda directory=directory: SigningKey.load_or_create(directory).kid)
        assert set(kids) == {SigningKey.load_or_create(directory).kid}
        assert os.listdir(directory) == [KEY_FILENAME]


_CREATOR = """
import sys, time
from pathlib import Path
from rideout.auth import SigningKey
base = Path(sys.argv[1])
(base / f"ready-{sys.argv[2]}").touch()
deadline = time.monotonic() + 30
while not (base / "go").exists() and time.monotonic() < deadline:
    time.sleep(0.001)
print(SigningKey.load_or_create(base / "data").kid)
"""


def test_concurrent_processes_end_with_one_key(tmp_path: Path) -> None:
    count = 4
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", _CREATOR, str(tmp_path), str(i)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
        for i in range(count)
    ]
    # Every helper process has imported rideout, so they race for the key together.
    until_sync(lambda: len(list(tmp_path.glob("ready-*"))) == count, 30, interval=0.005)
    (tmp_path / "go").touch()
    kids = set()
    for process in processes:
        out, err = process.communicate(timeout=30)
        assert process.returncode == 0, err.decode()
        kids.add(out.decode().strip())
    assert kids == {SigningKey.load_or_create(tmp_path / "data").kid}
    assert os.listdir(tmp_path / "data") == [KEY_FILENAME]


def test_filesystems_without_hard_links_fall_back_to_exclusive_create(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A filesystem without hard links cannot be mounted here, so os.link is made to fail
    # the way it does on one (EPERM); everything else is real.
    def no_links(src: Any, dst: Any) -> None:
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(os, "link", no_links)
    created = SigningKey.load_or_create(tmp_path)
    assert SigningKey.load_or_create(tmp_path).kid == created.kid
    assert stat.S_IMODE((tmp_path / KEY_FILENAME).stat().st_mode) == 0o600
    assert _publish(tmp_path / KEY_FILENAME, SigningKey.generate()).kid == created.kid
    assert os.listdir(tmp_path) == [KEY_FILENAME]


def _encrypted_pem() -> bytes:
    return Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(b"secret"),
    )


def _ec_pem() -> bytes:
    return ec.generate_private_key(ec.SECP256R1()).private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b"", "empty"),
        (b"\n  \n", "empty"),
        (b"not a key at all", "not a PEM private key"),
        (SigningKey.generate().to_pem()[:60], "not a PEM private key"),
        (_encrypted_pem(), "encrypted"),
        (_ec_pem(), "expected an Ed25519 private key"),
    ],
    ids=["empty", "blank", "garbage", "truncated", "encrypted", "wrong-type"],
)
def test_corrupt_key_file_is_reported_and_kept(
    tmp_path: Path, content: bytes, problem: str
) -> None:
    path = tmp_path / KEY_FILENAME
    path.write_bytes(content)
    with pytest.raises(KeyFileError, match=problem) as caught:
        SigningKey.load_or_create(tmp_path)
    assert caught.value.path == path
    assert str(path) in str(caught.value)
    assert path.read_bytes() == content  # never overwritten


def test_unreadable_key_file_is_a_key_file_error(tmp_path: Path) -> None:
    (tmp_path / KEY_FILENAME).mkdir()
    with pytest.raises(KeyFileError, match="cannot read"):
        SigningKey.load_or_create(tmp_path)


def test_dangling_symlink_is_a_key_file_error(tmp_path: Path) -> None:
    (tmp_path / KEY_FILENAME).symlink_to(tmp_path / "gone.pem")
    with pytest.raises(KeyFileError, match="dangling symlink"):
        SigningKey.load_or_create(tmp_path)
    assert not (tmp_path / "gone.pem").exists()


def test_directory_that_is_a_file_is_a_key_file_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(KeyFileError):
        SigningKey.load_or_create(blocker / "data")


# --------------------------------------------------------------------------- JWKSet


def test_jwks_round_trip(signing_key: SigningKey) -> None:
    keys = JWKSet.from_json(json.dumps(signing_key.jwks()))
    assert keys.kids == (signing_key.kid,)
    assert len(keys) == 1
    assert signing_key.kid in keys
    found = keys.get(signing_key.kid)
    assert found is not None
    assert found.algorithm == "EdDSA"
    assert isinstance(found.key, Ed25519PublicKey)
    assert found.key.public_bytes_raw() == _b64decode(signing_key.public_jwk()["x"])
    assert keys.get("other") is None
    assert list(keys) == [found]


def test_algorithms_are_bound_from_kty_and_crv(
    signing_key: SigningKey, rsa_key: rsa.RSAPrivateKey, ec_key: ec.EllipticCurvePrivateKey
) -> None:
    ed = {k: v for k, v in signing_key.public_jwk().items() if k not in ("alg", "use")}
    keys = JWKSet({"keys": [ed, rsa_jwk(rsa_key), ec_jwk(ec_key)]})
    bound = {key.kid: key.algorithm for key in keys}
    assert bound == {signing_key.kid: "EdDSA", "rsa-1": "RS256", "ec-1": "ES256"}
    assert isinstance(keys.get("rsa-1").key, rsa.RSAPublicKey)  # type: ignore[union-attr]
    assert isinstance(keys.get("ec-1").key, ec.EllipticCurvePublicKey)  # type: ignore[union-attr]


def test_explicit_alg_use_and_key_ops_are_accepted(rsa_key: rsa.RSAPrivateKey) -> None:
    keys = JWKSet({"keys": [rsa_jwk(rsa_key, alg="RS256", use="sig", key_ops=["verify"])]})
    assert keys.get("rsa-1").algorithm == "RS256"  # type: ignore[union-attr]


_RSA = rsa.generate_private_key(public_exponent=65537, key_size=2048)
_SMALL_RSA = rsa.generate_private_key(public_exponent=65537, key_size=1024)
_EC = ec.generate_private_key(ec.SECP256R1())
_ED = SigningKey.generate().public_jwk()
_NOT_ON_CURVE = {**ec_jwk(_EC), "y": ec_jwk(_EC)["x"]}

BAD_JWKS: list[tuple[str, Any, str]] = [
    ("oct", {"keys": [{"kty": "oct", "k": "c2VjcmV0", "kid": "h"}]}, "symmetric"),
    ("oct-without-k", {"keys": [{"kty": "oct", "kid": "h"}]}, "symmetric"),
    ("unknown-kty", {"keys": [{"kty": "XYZ", "kid": "x"}]}, "unsupported key type"),
    ("ed448", {"keys": [{**_ED, "crv": "Ed448"}]}, "unsupported curve"),
    ("x25519", {"keys": [{**_ED, "crv": "X25519"}]}, "unsupported curve"),
    ("p384", {"keys": [{**ec_jwk(_EC), "crv": "P-384"}]}, "unsupported curve"),
    ("okp-private", {"keys": [{**_ED, "d": "AAAA"}]}, "private key material"),
    ("rsa-private", {"keys": [rsa_jwk(_RSA, d="AAAA", p="AAAA")]}, "private key material"),
    ("no-kid", {"keys": [{k: v for k, v in _ED.items() if k != "kid"}]}, "kid"),
    ("empty-kid", {"keys": [{**_ED, "kid": ""}]}, "kid"),
    ("int-kid", {"keys": [{**_ED, "kid": 7}]}, "kid"),
    ("duplicate-kid", {"keys": [_ED, dict(_ED)]}, "duplicate kid"),
    ("rsa-hs256", {"keys": [rsa_jwk(_RSA, alg="HS256")]}, "not allowed"),
    ("rsa-ps256", {"keys": [rsa_jwk(_RSA, alg="PS256")]}, "not allowed"),
    ("okp-es256", {"keys": [{**_ED, "alg": "ES256"}]}, "not allowed"),
    ("alg-not-string", {"keys": [{**_ED, "alg": 5}]}, "must be a string"),
    ("use-enc", {"keys": [{**_ED, "use": "enc"}]}, "use"),
    ("key-ops", {"keys": [{**_ED, "key_ops": ["encrypt"]}]}, "key_ops"),
    ("padded-x", {"keys": [{**_ED, "x": _ED["x"] + "=="}]}, "base64url"),
    ("short-x", {"keys": [{**_ED, "x": "A" * 40}]}, "32 bytes, not 30"),
    ("int-x", {"keys": [{**_ED, "x": 12}]}, "base64url"),
    ("not-on-curve", {"keys": [_NOT_ON_CURVE]}, "not on curve"),
    ("rsa-1024", {"keys": [rsa_jwk(_SMALL_RSA)]}, "1024 bits"),
    ("rsa-even-e", {"keys": [rsa_jwk(_RSA, e="AAAC")]}, "invalid RSA public key"),
    ("key-not-object", {"keys": ["not an object"]}, "JSON object"),
    ("no-kty", {"keys": [{"kid": "no-kty"}]}, "kty"),
    ("no-keys", {"keys": []}, "no usable"),
    ("keys-not-list", {"keys": {}}, "'keys' list"),
    ("keys-missing", {}, "'keys' list"),
    ("not-object", [], "JSON object"),
]


@pytest.mark.parametrize(
    ("document", "message"), [c[1:] for c in BAD_JWKS], ids=[c[0] for c in BAD_JWKS]
)
def test_invalid_jwks_are_refused_with_a_clear_error(document: Any, message: str) -> None:
    with pytest.raises(JWKSError, match=message):
        JWKSet(document)


@pytest.mark.parametrize("text", ["", "[]", "{", '{"keys": NaN}', '{"keys": [], "keys": []}'])
def test_invalid_jwks_json_is_refused(text: str) -> None:
    with pytest.raises(JWKSError):
        JWKSet.from_json(text)


def test_ignore_unsupported_skips_foreign_keys_but_not_dangerous_ones(
    signing_key: SigningKey, rsa_key: rsa.RSAPrivateKey
) -> None:
    ed = signing_key.public_jwk()
    foreign = [
        rsa_jwk(rsa_key, kid="enc", use="enc"),
        rsa_jwk(rsa_key, kid="pss", alg="PS256"),
        {**ed, "kid": "x", "crv": "X448"},
        {"kty": "XYZ", "kid": "strange"},
    ]
    keys = JWKSet({"keys": [*foreign, ed]}, ignore_unsupported=True)
    assert keys.kids == (signing_key.kid,)
    with pytest.raises(JWKSError, match="no usable"):
        JWKSet({"keys": foreign}, ignore_unsupported=True)
    for dangerous in ({"kty": "oct", "k": "c2VjcmV0", "kid": "h"}, {**ed, "d": "AAAA"}):
        with pytest.raises(JWKSError):
            JWKSet({"keys": [ed, dangerous]}, ignore_unsupported=True)
