"""`rideout lab up` end to end (root): the whole two-region external deployment in a lab,
driven by the `rideout lab` commands from another process, as an operator would.

It starts `lab up` as a process of its own, waits for it to say the lab is up, then
runs `lab status` (rideout status from inside the lab), a partition that silences one
region for the other and its heal, 35 ms on the WAN link that replication crosses, and a
bid placed from a lab host through the control plane's DNS; then SIGTERM, after which no
namespace of the lab and no process of it is left.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from rideout.lab.deployment import APP_PORT, LabPaths
from rideout.lab.netns import exec_argv, lab_namespaces
from rideout.lab.run import http_status
from rideout.lab.topology import netns_prefix
from tests.lab.test_run import processes_of

pytestmark = pytest.mark.timeout(240)

UP_WITHIN = 120.0  # seconds: 13 processes start on 2 shared cores (about 40 s alone)

BID = """
import asyncio
from pathlib import Path
from rideout.auth import SigningKey, TokenIssuer
from rideout.client.resolve import CachingResolver, NameserverResolver
from rideout.client.ws import AuctionClient, ClientSettings
from rideout.config import load_config

async def main():
    config = load_config(Path({config!r}), env={{}})
    key = SigningKey.load_or_create(config.keys_dir)
    issuer = TokenIssuer(key, config.auth.issuer, config.auth.audience, 600.0)
    resolver = CachingResolver(NameserverResolver({dns!r}, {dns_port}, timeout=2.0))
    async with AuctionClient(
        config.app_domain, port=config.app_port, token=lambda: issuer.issue("lab-bidder"),
        resolver=resolver, rooms=["lot-lab"], settings=ClientSettings.from_config(config),
    ) as client:
        ack = await client.bid_and_wait("lot-lab", 100, timeout=30)
        print("accepted" if ack.accepted else "refused", ack.region)

asyncio.run(main())
"""


class Up:
    """`rideout lab up` as a process; its output lines collected by a thread."""

    def __init__(self, lab_id: str, lab_dir: Path, redis_server: str) -> None:
        self.lines: list[str] = []
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "rideout", "lab", "up", "--id", lab_id,
             "--dir", str(lab_dir), "--redis-server", redis_server],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            env={**os.environ, "COLUMNS": "200"},
        )  # fmt: skip
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def wait_for(self, text: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not any(text in line for line in self.lines):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self._reader.join(5)
                pytest.fail(f"no {text!r} from lab up:\n" + "\n".join(self.lines))
            time.sleep(0.2)

    def stop(self) -> int:
        """SIGTERM; its exit code (SIGKILL after 60 s, then -9)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        self._reader.join(5)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        return code


def lab(*args: str, lab_id: str, lab_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rideout", "lab", *args, "--id", lab_id, "--dir", str(lab_dir)],
        capture_output=True, text=True, timeout=90, check=False,
        env={**os.environ, "COLUMNS": "200"},
    )  # fmt: skip


def test_lab_up_status_partition_heal_latency_and_a_bid(
    lab_dir: Path, redis_tls_binary: str
) -> None:
    lab_id = "u" + secrets.token_hex(3)
    prefix = netns_prefix(lab_id)
    paths = LabPaths(lab_dir / lab_id)
    started = time.monotonic()
    up = Up(lab_id, lab_dir, redis_tls_binary)
    try:
        up.wait_for(f"lab {lab_id} is up in", UP_WITHIN)
        took_up = time.monotonic() - started

        def run(*args: str) -> subprocess.CompletedProcess[str]:
            return lab(*args, lab_id=lab_id, lab_dir=lab_dir)

        shown = run("status")
        assert shown.returncode == 0, shown.stdout + shown.stderr
        out = shown.stdout
        assert "us-west-2 127.100.2.0/24: redis-usw2 127.100.2.1" in out
        assert "partitions: none" in out
        assert "us-west-2->redis-use1  up: clear; down: clear" in out
        assert "acting" in out
        assert "standby: lease held by cp-1" in out
        assert "replica, epoch 1 (link up)" in out  # us-west-2 follows us-east-1
        assert "writer us-east-1, epoch 1" in out

        # Replication crosses the WAN link: the router holds us-west-2's connection to
        # us-east-1's Redis (on that Redis's own address) and the link's to it.
        sockets = subprocess.run(
            [*exec_argv(prefix + "router"), "ss", "-tnH", "state", "established"],
            capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
        assert "127.100.1.1:6380 127.100.2.1:" in " ".join(sockets.split()), sockets

        def ready_across(src: str, dst_address: str, timeout: float = 2.0) -> int | None:
            return asyncio.run(http_status(prefix + src, dst_address, APP_PORT, "/ready", timeout))

        assert ready_across("usw2-az1", "127.100.1.3") == 200  # us-west-2 to use1-az1

        cut = run("partition", "us-east-1", "us-west-2")
        assert cut.returncode == 0, cut.stderr
        assert "partitioned: us-east-1 -> us-west-2, us-west-2 -> us-east-1" in cut.stdout
        assert ready_across("usw2-az1", "127.100.1.3", 1.5) is None  # silence
        assert ready_across("cp-2", "127.100.1.3") == 200  # global still reaches it
        healed = run("heal", "us-east-1", "us-west-2")
        assert healed.returncode == 0, healed.stderr
        assert "healed: us-east-1 -> us-west-2, us-west-2 -> us-east-1" in healed.stdout
        assert ready_across("usw2-az1", "127.100.1.3") == 200

        slow = run("latency", "35")
        assert slow.returncode == 0, slow.stderr
        assert "us-west-2->redis-use1  up: latency 35 ms; down: latency 35 ms" in slow.stdout
        links = run("status", "--no-deployment")
        assert links.returncode == 0, links.stderr
        assert links.stdout.count("latency 35 ms") == 8  # 4 links, both directions

        # A bid from a lab host: DNS from cp-1, the WebSocket to a us-east-1 zone.
        bid = subprocess.run(
            [*exec_argv(prefix + "cp-2"), sys.executable, "-c",
             textwrap.dedent(BID.format(config=str(paths.config), dns="127.100.3.1",
                                        dns_port=5300))],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert bid.returncode == 0, bid.stderr[-3000:]
        assert bid.stdout.strip() == "accepted us-east-1", bid.stdout
    finally:
        code = up.stop()
        if code not in (0, 130):
            lab("down", lab_id=lab_id, lab_dir=lab_dir)  # whatever it left
    print(f"\nlab up: ready in {took_up:.1f} s; whole test {time.monotonic() - started:.1f} s")
    assert code == 0, "\n".join(up.lines)
    assert "SIGTERM received: lab removed" in up.lines[-1]
    assert not [ns for ns in lab_namespaces() if ns.startswith(prefix)]
    assert processes_of(paths.work) == []
    assert not (lab_dir / f"{lab_id}.json").exists()
