"""A Redis server's configuration in external mode, as docs/external.md's step 3 writes
it: one function, used by ``rideout lab up`` for its servers and by the external-mode
tests for theirs, so the documented configuration is the one that runs.

TLS only (``port 0``), with client certificates; the ACL users ``rideout secrets init``
made (the 7.0+ file or 6.2's, chosen by the server's version as ``rideout up`` chooses
for its own servers); replication over TLS as the replication user (``server.conf``'s
``masteruser``/``masterauth``); an append-only file fsynced every second.

Two lines docs/external.md explains for hosts with more than one path between servers:
``bind-source-addr`` (7.0+) makes a replica connect from the address the configuration
names, and ``replica-announce-ip`` makes a server announce that address to its master
even when its connection arrives through a relay (``FAILOVER TO`` names the replica by
the address its master sees).
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

from rideout.store.acl import (
    ACL_FILENAME,
    FUNCTIONS_ACL_FILENAME,
    SERVER_CONFIG_FILENAME,
    credentials_dir,
)
from rideout.store.embedded import RedisServer
from rideout.store.tls_files import TlsFiles

__all__ = ["BIND_SOURCE_ADDR_SINCE", "redis_config"]

BIND_SOURCE_ADDR_SINCE: Final = (7, 0)  # Redis 7.0 added bind-source-addr


def redis_config(
    *,
    server: RedisServer,
    address: str,
    port: int,
    certificate_name: str,
    secrets: Path,
    directory: Path,
    replica_of: tuple[str, int] | None = None,
) -> str:
    """The redis.conf of the Redis host `certificate_name` (its certificate
    ``server-NAME.pem`` in `secrets`), listening on ``address:port`` with its data in
    `directory`, following ``replica_of`` if given."""
    tls = TlsFiles.of(secrets)
    cert, key = tls.server(certificate_name)
    acl = FUNCTIONS_ACL_FILENAME if server.key_permissions else ACL_FILENAME
    lines = [
        f"include {credentials_dir(secrets) / SERVER_CONFIG_FILENAME}",
        f"aclfile {credentials_dir(secrets) / acl}",
        "port 0",
        f"tls-port {port}",
        f"bind {address}",
        *([f"bind-source-addr {address}"] if server.version[:2] >= BIND_SOURCE_ADDR_SINCE else []),
        f"replica-announce-ip {address}",
        f"tls-cert-file {cert}",
        f"tls-key-file {key}",
        f"tls-ca-cert-file {tls.ca[0]}",
        "tls-auth-clients yes",
        "tls-replication yes",
        f"dir {directory}",
        "appendonly yes",
        "appendfsync everysec",
        'save ""',
        "repl-diskless-sync yes",
        "repl-diskless-sync-delay 0",
        "daemonize no",
        *([f"replicaof {replica_of[0]} {replica_of[1]}"] if replica_of else []),
    ]
    return "\n".join(lines) + "\n"
