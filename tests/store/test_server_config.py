"""The external-mode Redis configuration: one function, and docs/external.md's step 3 is
what it writes (the page's example is compared with the function's output for the same
host, directive by directive)."""

from __future__ import annotations

import re
from pathlib import Path

from rideout.store.embedded import RedisServer
from rideout.store.server_config import redis_config

DOC = Path(__file__).parents[2] / "docs" / "external.md"
SECRETS = Path("/run/secrets/rideout")


def _directives(text: str) -> list[str]:
    """Each line without its comment and with its spacing normalised."""
    lines = (re.sub(r"\s+#.*$", "", line).strip() for line in text.splitlines())
    return [" ".join(line.split()) for line in lines if line]


def _doc_example() -> list[str]:
    page = DOC.read_text(encoding="utf-8")
    step = page[page.index("## Step 3") :]
    block = step[step.index("```\n") + 4 :]
    return _directives(block[: block.index("```")])


def test_docs_external_step_3_is_what_redis_config_writes() -> None:
    server = RedisServer(Path("/usr/bin/redis-server"), "redis", (7, 0, 15))
    written = redis_config(
        server=server, address="10.0.1.20", port=6380, certificate_name="us-east-1",
        secrets=SECRETS, directory=Path("/var/lib/redis"),
    )  # fmt: skip
    assert _directives(written) == _doc_example()


def test_a_6_2_server_gets_its_acl_file_and_no_bind_source_addr() -> None:
    server = RedisServer(Path("/opt/redis-server"), "redis", (6, 2, 14))
    written = _directives(
        redis_config(
            server=server, address="10.0.1.21", port=6380, certificate_name="us-east-1-replica",
            secrets=SECRETS, directory=Path("/data"), replica_of=("10.0.1.20", 6380),
        )
    )  # fmt: skip
    assert f"aclfile {SECRETS}/redis/users.acl" in written
    assert not [line for line in written if line.startswith("bind-source-addr")]
    assert "replica-announce-ip 10.0.1.21" in written
    assert written[-1] == "replicaof 10.0.1.20 6380"
    assert f"tls-cert-file {SECRETS}/redis/tls/server-us-east-1-replica.pem" in written
