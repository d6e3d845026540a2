"""TLS for the Redis servers of an external deployment: a private CA, one server
certificate per Redis host, one client certificate for rideout's parts.

Pure: keys and certificates go in and out as objects or PEM bytes and the clock is
passed in; :mod:`.tls_files` keeps them in the secrets directory. Every key is ECDSA
P-256, every signature SHA-256. The CA is valid for :data:`CA_VALIDITY` and may sign
only end-entity certificates (path length 0); a server or client certificate is valid
for :data:`LEAF_VALIDITY`. A server certificate names its host's addresses as subject
alternative names (IP addresses, or DNS names: what the ``rediss://`` URLs use, as
clients check it) and serves both as a server and, on a replica, as the client that
connects to its master (``tls-replication``), so it allows both uses.
"""

from __future__ import annotations

import datetime
import ipaddress
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final
from urllib.parse import urlsplit

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from rideout.config import Config
from rideout.errors import InvalidArgument

__all__ = [
    "CA_NAME",
    "CA_VALIDITY",
    "CLIENT_NAME",
    "LEAF_VALIDITY",
    "STATE_HOST",
    "CertificateAuthority",
    "RedisHost",
    "certificate_pem",
    "certificate_problems",
    "client_certificate",
    "hosts_from_config",
    "load_certificate",
    "load_private_key",
    "merge_hosts",
    "new_private_key",
    "parse_address",
    "parse_redis_host",
    "private_key_pem",
    "server_certificate",
    "subject_alt_names",
]

CA_VALIDITY: Final = datetime.timedelta(days=3650)
LEAF_VALIDITY: Final = datetime.timedelta(days=825)
_BACKDATE: Final = datetime.timedelta(minutes=5)  # clocks a little behind still accept it
CA_NAME: Final = "rideout Redis CA"
CLIENT_NAME: Final = "rideout"
STATE_HOST: Final = "control-plane-state"

_HOST_NAME: Final = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")
_DNS_LABEL: Final = re.compile(r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)")

PrivateKey = ec.EllipticCurvePrivateKey


# ------------------------------------------------------------------------------ hosts


@dataclass(frozen=True, slots=True)
class RedisHost:
    """A Redis server that gets a certificate: its name (in file names) and the
    addresses clients reach it by (IP addresses or DNS names, the certificate's SANs)."""

    name: str
    addresses: tuple[str, ...]


def parse_address(value: str) -> str:
    """`value` as a SAN: an IP address (normalized) or a DNS name (lower case).

    Raises :class:`InvalidArgument` naming what is wrong.
    """
    value = value.strip()
    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        pass
    name = value.rstrip(".").lower()
    labels = name.split(".")
    if not name or len(name) > 253 or not all(_DNS_LABEL.fullmatch(label) for label in labels):
        raise InvalidArgument(f"{value!r} is not an IP address or a DNS name")
    if labels[-1].isdigit():
        raise InvalidArgument(
            f"{value!r} is not an IP address (nor a DNS name: it ends in a number)"
        )
    return name


def parse_redis_host(spec: str) -> RedisHost:
    """``NAME=ADDRESS[,ADDRESS...]`` (``redis-east=10.0.1.5,redis.use1.internal``).

    Raises :class:`InvalidArgument` naming what is wrong.
    """
    name, sep, addresses = spec.partition("=")
    name = name.strip()
    if not sep or not addresses.strip():
        raise InvalidArgument(f"--redis-host {spec!r}: expected NAME=ADDRESS[,ADDRESS...]")
    if not _HOST_NAME.fullmatch(name):
        raise InvalidArgument(
            f"--redis-host {spec!r}: the name {name!r} is not 1 to 63 lower-case letters, "
            "digits and '-' (it names the host's files)"
        )
    try:
        parsed = tuple(dict.fromkeys(parse_address(a) for a in addresses.split(",")))
    except InvalidArgument as exc:
        raise InvalidArgument(f"--redis-host {spec!r}: {exc}") from None
    return RedisHost(name, parsed)


def merge_hosts(hosts: Iterable[RedisHost]) -> tuple[RedisHost, ...]:
    """One host per name (in first-seen order) with every address any of them gave."""
    merged: dict[str, dict[str, None]] = {}
    for host in hosts:
        merged.setdefault(host.name, {}).update(dict.fromkeys(host.addresses))
    return tuple(RedisHost(name, tuple(addresses)) for name, addresses in merged.items())


def hosts_from_config(config: Config) -> tuple[RedisHost, ...]:
    """The Redis servers an external `config` reaches over TLS (``rediss://``): each
    region's (named after the region), its in-region replica (``REGION-replica``) and
    the control plane's state Redis (``control-plane-state``) unless it is one of those.
    None in local mode, which runs its own servers without TLS."""
    if config.mode != "external":
        return ()
    hosts: list[RedisHost] = []
    seen: set[tuple[str, int]] = set()
    for region in config.regions:
        for suffix, node in zip(("", "-replica"), region.redis_nodes, strict=False):
            seen.add((node.address, node.port))
            if node.tls is not None:
                where = f"region {region.name}'s redis{'.replica' if suffix else ''}"
                hosts.append(_config_host(region.name + suffix, node.address, where))
    state = urlsplit(config.control_plane.state_redis_url)
    if (
        state.scheme == "rediss"
        and state.hostname
        and (state.hostname, state.port or 6379) not in seen
    ):
        hosts.append(_config_host(STATE_HOST, state.hostname, "control_plane.state_redis_url"))
    return tuple(hosts)


def _config_host(name: str, address: str, where: str) -> RedisHost:
    try:
        return RedisHost(name, (parse_address(address),))
    except InvalidArgument as exc:
        raise InvalidArgument(f"{where}: {exc}") from None


# ------------------------------------------------------------------------ keys, PEM


def new_private_key() -> PrivateKey:
    """A new ECDSA P-256 key."""
    return ec.generate_private_key(ec.SECP256R1())


def private_key_pem(key: PrivateKey) -> bytes:
    """`key` as unencrypted PKCS#8 PEM (what redis-server and redis-py read)."""
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def load_private_key(data: bytes) -> PrivateKey:
    """An ECDSA private key from PEM; ValueError when it is not one."""
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"not an unencrypted PEM private key ({exc})") from None
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise ValueError("not an ECDSA private key")
    return key


def certificate_pem(certificate: x509.Certificate) -> bytes:
    return certificate.public_bytes(serialization.Encoding.PEM)


def load_certificate(data: bytes) -> x509.Certificate:
    """A certificate from PEM; ValueError when it is not one."""
    try:
        return x509.load_pem_x509_certificate(data)
    except ValueError as exc:
        raise ValueError(f"not a PEM certificate ({exc})") from None


def _public_bytes(key: ec.EllipticCurvePublicKey | PrivateKey) -> bytes:
    public = key.public_key() if isinstance(key, ec.EllipticCurvePrivateKey) else key
    return public.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )


# ---------------------------------------------------------------------- certificates


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _key_usage(*, ca: bool) -> x509.KeyUsage:
    """A CA signs certificates (and CRLs); an end entity signs its TLS handshakes."""
    return x509.KeyUsage(
        digital_signature=not ca, content_commitment=False, key_encipherment=False,
        data_encipherment=False, key_agreement=False, key_cert_sign=ca, crl_sign=ca,
        encipher_only=False, decipher_only=False,
    )  # fmt: skip


def _san(address: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(address))
    except ValueError:
        return x509.DNSName(address)


@dataclass(frozen=True, slots=True)
class CertificateAuthority:
    """The deployment's private CA: it signs the Redis servers' and the client's
    certificates, and is the one every part and every server trusts."""

    key: PrivateKey
    certificate: x509.Certificate

    @classmethod
    def new(cls, key: PrivateKey, now: datetime.datetime) -> CertificateAuthority:
        """A self-signed CA for `key`, valid from `now` for :data:`CA_VALIDITY`."""
        public = key.public_key()
        certificate = (
            x509.CertificateBuilder()
            .subject_name(_name(CA_NAME))
            .issuer_name(_name(CA_NAME))
            .public_key(public)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - _BACKDATE)
            .not_valid_after(now + CA_VALIDITY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(_key_usage(ca=True), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
            .sign(key, hashes.SHA256())
        )
        return cls(key, certificate)

    def issue(
        self,
        common_name: str,
        public: ec.EllipticCurvePublicKey,
        now: datetime.datetime,
        *,
        addresses: Sequence[str] = (),
        server: bool,
    ) -> x509.Certificate:
        """An end-entity certificate for `public`, valid from `now` for
        :data:`LEAF_VALIDITY`: a client's, or (`server`) a server's that also
        authenticates its replication link."""
        uses = [ExtendedKeyUsageOID.CLIENT_AUTH]
        if server:
            uses.insert(0, ExtendedKeyUsageOID.SERVER_AUTH)
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name))
            .issuer_name(self.certificate.subject)
            .public_key(public)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - _BACKDATE)
            .not_valid_after(now + LEAF_VALIDITY)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(_key_usage(ca=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage(uses), critical=False)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()),
                critical=False,
            )
        )
        if addresses:
            builder = builder.add_extension(
                x509.SubjectAlternativeName([_san(a) for a in addresses]), critical=False
            )
        return builder.sign(self.key, hashes.SHA256())


def server_certificate(
    ca: CertificateAuthority, host: RedisHost, public: ec.EllipticCurvePublicKey,
    now: datetime.datetime,
) -> x509.Certificate:  # fmt: skip
    """`host`'s server certificate: its name as the common name, its addresses as SANs."""
    return ca.issue(host.name, public, now, addresses=host.addresses, server=True)


def client_certificate(
    ca: CertificateAuthority, public: ec.EllipticCurvePublicKey, now: datetime.datetime
) -> x509.Certificate:
    """The certificate rideout's parts present to a Redis that requires one (mutual
    TLS), named ``rideout`` (a SAN too, which strict verifiers require of a client)."""
    return ca.issue(CLIENT_NAME, public, now, addresses=(CLIENT_NAME,), server=False)


def _subject_alt_names(certificate: x509.Certificate) -> set[str]:
    try:
        san = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return set()
    ips = {str(ip) for ip in san.get_values_for_type(x509.IPAddress)}
    return ips | {name.lower() for name in san.get_values_for_type(x509.DNSName)}


def certificate_problems(
    certificate: x509.Certificate,
    key: PrivateKey,
    ca: x509.Certificate,
    now: datetime.datetime,
    addresses: Sequence[str] = (),
) -> list[str]:
    """What makes an existing certificate unfit (empty: none): not for `key`, not
    signed by `ca`, expired, or missing one of `addresses` from its SANs."""
    problems = []
    if _public_bytes(certificate.public_key()) != _public_bytes(key):  # type: ignore[arg-type]
        problems.append("it is not the certificate of the key beside it")
    try:
        certificate.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        problems.append(f"it was not signed by this CA ({ca.subject.rfc4514_string()})")
    if certificate.not_valid_after_utc <= now:
        problems.append(f"it expired on {certificate.not_valid_after_utc:%Y-%m-%d}")
    missing = [a for a in addresses if a not in _subject_alt_names(certificate)]
    if missing:
        problems.append(f"it does not name {', '.join(missing)}")
    return problems


def subject_alt_names(certificate: x509.Certificate) -> list[str]:
    """The certificate's SANs (IP addresses and DNS names), sorted."""
    return sorted(_subject_alt_names(certificate))
