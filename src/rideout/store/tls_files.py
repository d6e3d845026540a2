"""The Redis part of a deployment's secrets directory, made once and kept.

``KEYS_DIR/redis/`` holds each ACL user's password, the ACL files and the servers'
replication config, exactly as local mode writes them (:func:`.acl.prepare_server_auth`),
and ``KEYS_DIR/redis/tls/`` the TLS material (:mod:`.pki`)::

    ca.pem  ca.key                    the CA: every part and every Redis trusts ca.pem;
                                      ca.key signs, and stays with the secrets
    client.pem  client.key            what rideout's parts present (mutual TLS)
    server-NAME.pem  server-NAME.key  Redis host NAME's certificate and key

A file that exists is never replaced: a key is loaded, a certificate checked (for its
key, against the CA, for the addresses asked for, not expired) and what is wrong with
it reported, with the files to remove for a new one. A missing certificate whose key is
there is issued for that key. Every file is mode 0600, created exclusively (two runs at
once agree on one).
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Literal, TypeVar

from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec

from rideout._files import create_exclusively
from rideout.store.acl import (
    ACL_FILENAME,
    FUNCTIONS_ACL_FILENAME,
    SERVER_CONFIG_FILENAME,
    CredentialsUnavailable,
    RedisRole,
    credentials_dir,
    password_file,
    prepare_server_auth,
)
from rideout.store.errors import StoreError
from rideout.store.pki import (
    CertificateAuthority,
    RedisHost,
    certificate_pem,
    certificate_problems,
    client_certificate,
    load_certificate,
    load_private_key,
    merge_hosts,
    new_private_key,
    private_key_pem,
    server_certificate,
    subject_alt_names,
)

__all__ = [
    "TLS_DIRNAME",
    "FileOutcome",
    "RedisSecrets",
    "ServerFiles",
    "TlsFiles",
    "TlsMaterialError",
    "ensure_redis_secrets",
    "ensure_redis_users",
    "ensure_tls",
]

TLS_DIRNAME: Final = "tls"

State = Literal["made", "kept", "rewritten"]
T = TypeVar("T")


class TlsMaterialError(StoreError):
    """The secrets directory cannot be written or read."""


@dataclass(frozen=True, slots=True)
class FileOutcome:
    """What happened to one file: made now, kept as it was, or (a file derived from the
    passwords, such as the ACL file) rewritten because rideout's rules changed."""

    path: Path
    state: State
    note: str = ""


@dataclass(frozen=True, slots=True)
class TlsFiles:
    """Where the TLS material lives in a keys directory."""

    directory: Path

    @classmethod
    def of(cls, keys_dir: Path) -> TlsFiles:
        return cls(credentials_dir(keys_dir) / TLS_DIRNAME)

    @property
    def ca(self) -> tuple[Path, Path]:
        """(certificate, key)"""
        return self.directory / "ca.pem", self.directory / "ca.key"

    @property
    def client(self) -> tuple[Path, Path]:
        return self.directory / "client.pem", self.directory / "client.key"

    def server(self, name: str) -> tuple[Path, Path]:
        return self.directory / f"server-{name}.pem", self.directory / f"server-{name}.key"


@dataclass(frozen=True, slots=True)
class ServerFiles:
    """A Redis host's certificate as it is on disk: what it names, until when."""

    name: str
    certificate: Path
    key: Path
    addresses: tuple[str, ...]
    valid_until: datetime.datetime


@dataclass(slots=True)
class RedisSecrets:
    """What :func:`ensure_redis_secrets` did, and what it could not (``problems``: each
    names the file, what is wrong and how to mend it)."""

    files: list[FileOutcome] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    servers: list[ServerFiles] = field(default_factory=list)


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise TlsMaterialError(f"{path}: cannot read it: {exc.strerror or exc}") from exc


def _create(path: Path, data: bytes) -> State:
    """Write `data` unless the file exists: made, or kept (another run got there first)."""
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        return "made" if create_exclusively(path, data) else "kept"
    except OSError as exc:
        raise TlsMaterialError(f"{path}: cannot create it: {exc.strerror or exc}") from exc


def ensure_redis_users(keys_dir: Path) -> list[FileOutcome]:
    """Each ACL user's password (made once), the ACL files (``users-functions.acl`` for
    Redis 7.0+ and Valkey, ``users.acl`` for 6.2) and ``server.conf`` (the replication
    user's ``masteruser``/``masterauth``), as local mode writes them."""
    directory = credentials_dir(keys_dir)
    passwords = [password_file(keys_dir, role) for role in RedisRole]
    derived = [
        directory / n for n in (FUNCTIONS_ACL_FILENAME, ACL_FILENAME, SERVER_CONFIG_FILENAME)
    ]
    before = {path: _read(path) for path in (*passwords, *derived)}
    try:
        prepare_server_auth(keys_dir)
    except CredentialsUnavailable as exc:
        raise TlsMaterialError(str(exc)) from exc
    outcomes = []
    for path, old in before.items():
        if old is None:
            outcomes.append(FileOutcome(path, "made"))
        elif path in derived and _read(path) != old:
            outcomes.append(FileOutcome(path, "rewritten", "rideout's ACL rules changed"))
        else:
            outcomes.append(FileOutcome(path, "kept"))
    return outcomes


Issue = Callable[[ec.EllipticCurvePrivateKey], x509.Certificate]
"""Makes the certificate of a key (a leaf's uses only its public half)."""


@dataclass(slots=True)
class _Pair:
    """A key and its certificate, made or loaded; `problems` when unusable."""

    key: ec.EllipticCurvePrivateKey | None = None
    certificate: x509.Certificate | None = None
    files: list[FileOutcome] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def _ensure(
    path: Path, data: bytes | None, make: Callable[[], bytes] | None, out: _Pair
) -> bytes | None:
    """The file's bytes: as found (kept), or made now by `make`; None if neither."""
    if data is not None:
        out.files.append(FileOutcome(path, "kept"))
        return data
    if make is None:
        return None
    out.files.append(FileOutcome(path, _create(path, make())))
    return _read(path)


def _parsed(path: Path, data: bytes, parse: Callable[[bytes], T], out: _Pair, fix: str) -> T | None:
    try:
        return parse(data)
    except ValueError as exc:
        out.problems.append(f"{path}: {exc}; {fix}")
        return None


def _pair(cert_path: Path, key_path: Path, issue: Issue | None) -> _Pair:
    """Load or make the key, then load or (with `issue`) make its certificate."""
    out = _Pair()
    key_data, cert_data = _read(key_path), _read(cert_path)
    fix = f"remove {cert_path.name} and {key_path.name} to make a new pair"
    if key_data is None and cert_data is not None:
        out.problems.append(f"{cert_path}: its key {key_path.name} is missing; {fix}")
        return out
    new_key = None if issue is None else (lambda: private_key_pem(new_private_key()))
    key_data = _ensure(key_path, key_data, new_key, out)
    if key_data is None:
        return out  # nothing to sign with: the caller says why
    key = out.key = _parsed(key_path, key_data, load_private_key, out, fix)
    if key is None:
        return out
    new_cert = None if issue is None else (lambda: certificate_pem(issue(key)))
    cert_data = _ensure(cert_path, cert_data, new_cert, out)
    if cert_data is None:
        out.problems.append(f"{cert_path}: missing, and no usable CA to issue it")
        return out
    out.certificate = _parsed(cert_path, cert_data, load_certificate, out, fix)
    return out


def ensure_tls(keys_dir: Path, hosts: Sequence[RedisHost], now: datetime.datetime) -> RedisSecrets:
    """The CA, the client certificate and each of `hosts`' server certificate (made if
    missing, checked if there). Nothing is made when `hosts` is empty and no CA exists."""
    layout = TlsFiles.of(keys_dir)
    out = RedisSecrets()
    ca_cert_path, ca_key_path = layout.ca
    if not hosts and _read(ca_cert_path) is None and _read(ca_key_path) is None:
        return out
    # The hosts of earlier runs too: kept, checked, and in the summary.
    made_before = sorted(layout.directory.glob("server-*.pem"))
    hosts = merge_hosts([*hosts, *(RedisHost(p.stem[len("server-") :], ()) for p in made_before)])

    ca_pair = _pair(
        ca_cert_path, ca_key_path, lambda key: CertificateAuthority.new(key, now).certificate
    )
    out.files += ca_pair.files
    out.problems += ca_pair.problems
    ca: CertificateAuthority | None = None
    if ca_pair.key is not None and ca_pair.certificate is not None:
        ca = CertificateAuthority(ca_pair.key, ca_pair.certificate)
        out.problems += [
            f"{ca_cert_path}: {problem}; remove every file in {layout.directory} to make a "
            "new CA (then give every Redis and every part the new files)"
            for problem in certificate_problems(ca.certificate, ca.key, ca.certificate, now)
        ]
    wanted: list[tuple[tuple[Path, Path], Issue | None, Sequence[str]]] = [
        (
            layout.client,
            None if ca is None else lambda k: client_certificate(ca, k.public_key(), now),
            (),
        ),
    ]
    for host in hosts:
        issue = None if ca is None else _server_issuer(ca, host, now)
        wanted.append((layout.server(host.name), issue, host.addresses))
    for (cert_path, key_path), issue, addresses in wanted:
        pair = _pair(cert_path, key_path, issue)
        out.files += pair.files
        out.problems += pair.problems
        if pair.certificate is not None and cert_path.name.startswith("server-"):
            name = cert_path.stem[len("server-") :]
            out.servers.append(ServerFiles(name, cert_path, key_path,
                                           tuple(subject_alt_names(pair.certificate)),
                                           pair.certificate.not_valid_after_utc))  # fmt: skip
        if ca is None:
            if not pair.problems:
                out.problems.append(f"{cert_path}: not checked or made: the CA is not usable")
            continue
        if pair.key is not None and pair.certificate is not None:
            out.problems += [
                f"{cert_path}: {problem}; remove {cert_path.name} to issue a new one for "
                f"its key (or {key_path.name} too, for a new key)"
                for problem in certificate_problems(
                    pair.certificate, pair.key, ca.certificate, now, addresses
                )
            ]
    return out


def _server_issuer(ca: CertificateAuthority, host: RedisHost, now: datetime.datetime) -> Issue:
    return lambda key: server_certificate(ca, host, key.public_key(), now)


def ensure_redis_secrets(
    keys_dir: Path, hosts: Sequence[RedisHost], now: datetime.datetime
) -> RedisSecrets:
    """The ACL users' files (:func:`ensure_redis_users`) and the TLS material
    (:func:`ensure_tls`) in `keys_dir`; raises :class:`TlsMaterialError` when a file
    cannot be read or made."""
    users = ensure_redis_users(keys_dir)
    tls = ensure_tls(keys_dir, hosts, now)
    return RedisSecrets(users + tls.files, tls.problems, tls.servers)
