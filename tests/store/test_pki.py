"""The Redis TLS material's logic (rideout.store.pki): host specs, which hosts a config
names, and certificates that verify against the CA for exactly the addresses asked."""

from __future__ import annotations

import datetime
import ipaddress
import tomllib
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509 import verification
from cryptography.x509.oid import ExtendedKeyUsageOID

from rideout.config import parse_config
from rideout.errors import InvalidArgument
from rideout.store.pki import (
    CA_VALIDITY,
    LEAF_VALIDITY,
    CertificateAuthority,
    RedisHost,
    certificate_pem,
    certificate_problems,
    client_certificate,
    hosts_from_config,
    load_certificate,
    load_private_key,
    merge_hosts,
    new_private_key,
    parse_address,
    parse_redis_host,
    private_key_pem,
    server_certificate,
    subject_alt_names,
)

NOW = datetime.datetime(2026, 12, 7, 12, 0, tzinfo=datetime.UTC)


def test_a_host_spec_names_the_host_and_every_address() -> None:
    host = parse_redis_host("redis-east=10.0.1.5, Redis.USE1.internal.,10.0.1.5,::1")
    assert host == RedisHost("redis-east", ("10.0.1.5", "redis.use1.internal", "::1"))


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("10.0.1.5", "expected NAME=ADDRESS"),
        ("redis-east=", "expected NAME=ADDRESS"),
        ("=10.0.1.5", "is not 1 to 63"),
        ("Redis_East=10.0.1.5", "is not 1 to 63"),
        ("../etc=10.0.1.5", "is not 1 to 63"),
        ("east=10.0.1.300", "'10.0.1.300' is not an IP address"),
        ("east=10.0.1.5,", "'' is not an IP address or a DNS name"),
        ("east=redis east", "'redis east' is not an IP address or a DNS name"),
        ("east=-bad.example", "is not an IP address or a DNS name"),
        ("east=" + "a" * 64 + ".example", "is not an IP address or a DNS name"),
    ],
)
def test_a_bad_host_spec_is_refused_naming_it(spec: str, says: str) -> None:
    with pytest.raises(InvalidArgument, match="--redis-host") as refused:
        parse_redis_host(spec)
    assert says in str(refused.value)


def test_addresses_are_normalized() -> None:
    assert parse_address(" 10.0.0.1 ") == "10.0.0.1"
    assert parse_address("0:0::1") == "::1"
    assert parse_address("Localhost") == "localhost"


def test_merging_keeps_one_host_per_name_with_every_address() -> None:
    merged = merge_hosts(
        [RedisHost("a", ("10.0.0.1",)), RedisHost("b", ("10.0.0.2",)),
         RedisHost("a", ("a.internal", "10.0.0.1"))]
    )  # fmt: skip
    assert merged == (RedisHost("a", ("10.0.0.1", "a.internal")), RedisHost("b", ("10.0.0.2",)))


def _toml(tmp_path: Path, state_url: str) -> dict[str, Any]:
    return tomllib.loads(f"""
mode = "external"
data_dir = "{tmp_path}"
[control_plane]
state_redis_url = "{state_url}"
[[regions]]
name = "us-east-1"
role = "primary"
redis = {{ url = "rediss://redis.use1.internal:6380", replica = {{ address = "10.0.2.20" }} }}
zones = [{{ name = "use1-az1", address = "10.0.1.10" }}, {{ name = "use1-az2", address = "10.0.2.10" }}]
[[regions]]
name = "us-west-2"
role = "secondary"
redis = {{ url = "redis://10.1.1.20:6379" }}
zones = [{{ name = "usw2-az1", address = "10.1.1.10" }}]
""")


def test_the_config_names_its_tls_servers(tmp_path: Path) -> None:
    config = parse_config(_toml(tmp_path, "rediss://10.9.0.5:6380"))
    # us-west-2 is redis:// (no TLS): no certificate for it.
    assert hosts_from_config(config) == (
        RedisHost("us-east-1", ("redis.use1.internal",)),
        RedisHost("us-east-1-replica", ("10.0.2.20",)),
        RedisHost("control-plane-state", ("10.9.0.5",)),
    )
    # A state Redis that is a region's own server is not named twice.
    same = parse_config(_toml(tmp_path, "rediss://redis.use1.internal:6380"))
    assert [h.name for h in hosts_from_config(same)] == ["us-east-1", "us-east-1-replica"]
    # A host name no certificate can carry is refused, naming where it came from.
    bad = parse_config(_toml(tmp_path, "rediss://cp_state:6380"))
    with pytest.raises(InvalidArgument, match=r"control_plane.state_redis_url: 'cp_state' is not"):
        hosts_from_config(bad)
    # Local mode runs its own servers, without TLS.
    assert hosts_from_config(parse_config({"data_dir": str(tmp_path)})) == ()


def _verifier(ca: CertificateAuthority, now: datetime.datetime) -> verification.PolicyBuilder:
    return verification.PolicyBuilder().store(verification.Store([ca.certificate])).time(now)


def test_a_server_certificate_verifies_against_the_ca_for_its_addresses_only() -> None:
    ca = CertificateAuthority.new(new_private_key(), NOW)
    key = new_private_key()
    host = RedisHost("us-east-1", ("10.0.1.5", "redis.use1.internal"))
    cert = server_certificate(ca, host, key.public_key(), NOW)
    assert subject_alt_names(cert) == ["10.0.1.5", "redis.use1.internal"]
    later = NOW + datetime.timedelta(days=30)
    for subject in (x509.IPAddress(ipaddress.ip_address("10.0.1.5")),
                    x509.DNSName("redis.use1.internal")):  # fmt: skip
        chain = _verifier(ca, later).build_server_verifier(subject).verify(cert, [])
        assert chain[-1] == ca.certificate
    for other in (x509.IPAddress(ipaddress.ip_address("10.0.1.6")), x509.DNSName("other")):
        with pytest.raises(verification.VerificationError):
            _verifier(ca, later).build_server_verifier(other).verify(cert, [])
    # A replica presents it to its master as a client (tls-replication): both uses.
    uses = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(uses) == [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
    # Not after it expires, nor by another CA.
    expired = NOW + LEAF_VALIDITY + datetime.timedelta(days=1)
    subject = x509.IPAddress(ipaddress.ip_address("10.0.1.5"))
    with pytest.raises(verification.VerificationError):
        _verifier(ca, expired).build_server_verifier(subject).verify(cert, [])
    stranger = CertificateAuthority.new(new_private_key(), NOW)
    with pytest.raises(verification.VerificationError):
        _verifier(stranger, later).build_server_verifier(subject).verify(cert, [])


def test_the_client_certificate_is_for_clients_only() -> None:
    ca = CertificateAuthority.new(new_private_key(), NOW)
    cert = client_certificate(ca, new_private_key().public_key(), NOW)
    verified = _verifier(ca, NOW).build_client_verifier().verify(cert, [])
    assert verified.chain[-1] == ca.certificate
    uses = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(uses) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    as_server = _verifier(ca, NOW).build_server_verifier(x509.DNSName("rideout"))
    with pytest.raises(verification.VerificationError):
        as_server.verify(cert, [])


def test_key_types_and_validity() -> None:
    ca = CertificateAuthority.new(new_private_key(), NOW)
    assert isinstance(ca.key.curve, ec.SECP256R1)
    assert ca.certificate.not_valid_after_utc - NOW == CA_VALIDITY
    constraints = ca.certificate.extensions.get_extension_for_class(x509.BasicConstraints)
    assert constraints.critical
    assert (constraints.value.ca, constraints.value.path_length) == (True, 0)
    cert = client_certificate(ca, new_private_key().public_key(), NOW)
    assert cert.not_valid_after_utc - NOW == LEAF_VALIDITY
    assert cert.not_valid_before_utc < NOW  # a clock a little behind accepts it
    assert not cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca


def test_pem_round_trips_and_refuses_what_is_not_one() -> None:
    key = new_private_key()
    assert load_private_key(private_key_pem(key)).private_numbers() == key.private_numbers()
    ca = CertificateAuthority.new(key, NOW)
    assert load_certificate(certificate_pem(ca.certificate)) == ca.certificate
    with pytest.raises(ValueError, match="not an unencrypted PEM private key"):
        load_private_key(b"nonsense")
    with pytest.raises(ValueError, match="not a PEM certificate"):
        load_certificate(private_key_pem(key))


def test_an_existing_certificate_is_checked() -> None:
    ca = CertificateAuthority.new(new_private_key(), NOW)
    key = new_private_key()
    host = RedisHost("east", ("10.0.1.5",))
    cert = server_certificate(ca, host, key.public_key(), NOW)
    assert certificate_problems(cert, key, ca.certificate, NOW, ["10.0.1.5"]) == []
    assert certificate_problems(cert, key, ca.certificate, NOW, ["10.0.1.5", "east.internal"]) == [
        "it does not name east.internal"
    ]
    assert certificate_problems(cert, new_private_key(), ca.certificate, NOW) == [
        "it is not the certificate of the key beside it"
    ]
    stranger = CertificateAuthority.new(new_private_key(), NOW)
    assert certificate_problems(cert, key, stranger.certificate, NOW) == [
        "it was not signed by this CA (CN=rideout Redis CA)"
    ]
    expired = NOW + LEAF_VALIDITY + datetime.timedelta(days=1)
    assert certificate_problems(cert, key, ca.certificate, expired) == [
        f"it expired on {(NOW + LEAF_VALIDITY):%Y-%m-%d}"
    ]
