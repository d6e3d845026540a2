"""`rideout dns` as `rideout up` runs it, under a herd of UDP queries (issue #11, finding 5).

A real subprocess, real packets on loopback, the view handed over in a real file.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import dns.flags
import dns.message
import dns.rcode
import dns.rdatatype
import httpx
import pytest
from bench._dnsload import burst as send_burst
from prometheus_client.parser import text_string_to_metric_families

from rideout.cluster.runstate import DNS_VIEW
from rideout.config import Config, dump_toml, parse_config
from rideout.dns.feed import DnsView, ViewFile
from rideout.dns.records import SOA_TTL
from rideout.routes import HEALTH, METRICS, dns_metrics_url
from tests.conftest import config_data, until_sync

pytestmark = pytest.mark.slow

BURST = 5000
EAST, WEST = "us-east-1", "us-west-2"


@dataclass
class DnsProcess:
    config: Config
    feed: ViewFile
    proc: subprocess.Popen[bytes]
    log: Path

    @property
    def port(self) -> int:
        return self.config.control_plane.dns_port

    def publish(self, writer: str, serial: int) -> None:
        publish(self.config, self.feed, writer, serial)

    def http(self, path: str) -> httpx.Response:
        with httpx.Client(trust_env=False, timeout=5) as client:
            return client.get(dns_metrics_url(self.config, path))

    def metric(self, name: str, labels: dict[str, str] | None = None) -> float | None:
        for family in text_string_to_metric_families(self.http(METRICS).text):
            for sample in family.samples:
                if sample.name == name and sample.labels == (labels or {}):
                    return float(sample.value)
        return None

    def addresses(self, region: str) -> list[str]:
        return sorted(z.address for z in self.config.region(region).zones)


def publish(config: Config, feed: ViewFile, writer: str, serial: int) -> None:
    """What the control plane publishes: the writer's region healthy, the other not."""
    health = {r.name: r.name == writer for r in config.regions}
    feed.publish(DnsView(config.app_domain, health, serial, time.time()))


@contextlib.contextmanager
def running_dns(
    workdir: Path, ready: Callable[[DnsProcess], bool], config: Config | None = None
) -> Iterator[DnsProcess]:
    """`rideout dns` on `config` (a fresh one under `workdir`), the primary's view
    published; stopped (SIGTERM, then SIGKILL) however the test ends."""
    config = config or parse_config(config_data(workdir / ".rideout"))
    (workdir / "rideout.toml").write_text(dump_toml(config))
    feed = ViewFile(config.run_dir / DNS_VIEW)
    publish(config, feed, EAST, 1)
    log = workdir / "dns.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "rideout", "dns", "--config", "rideout.toml"],
            cwd=workdir, stdout=out, stderr=subprocess.STDOUT, env={**os.environ},
        )  # fmt: skip
    server = DnsProcess(config, feed, proc, log)
    try:

        def started() -> bool:
            assert server.proc.poll() is None, server.log.read_text()
            return ready(server)

        until_sync(started, 45, interval=0.1)
        yield server
    finally:
        if server.proc.poll() is None:
            server.proc.send_signal(signal.SIGTERM)
            try:
                server.proc.wait(15)
            except subprocess.TimeoutExpired:
                server.proc.kill()
                server.proc.wait()


def health_says_serial_1(server: DnsProcess) -> bool:
    with contextlib.suppress(httpx.HTTPError):
        return bool(server.http(HEALTH).json()["view"]["serial"] == 1)
    return False


@pytest.fixture
def dns_process(tmp_path: Path) -> Iterator[DnsProcess]:
    with running_dns(tmp_path, health_says_serial_1) as server:
        yield server


def questions(app: str) -> list[tuple[str, str, bool]]:
    """A mix of what resolvers ask: (name, type, EDNS), names in 0x20-randomised case."""
    mixed = "".join(c.upper() if i % 2 else c for i, c in enumerate(app))
    return [
        (app, "A", False),
        (mixed, "A", True),
        (app, "TXT", False),
        (f"{EAST}.{app}", "AAAA", True),
    ]


def burst(port: int, count: int, app: str) -> dict[int, tuple[bytes, tuple[str, str, bool]]]:
    """`count` queries of the `questions` mix over 8 sockets, as fast as each can send;
    every reply that came back within 60 s, by id, with what it answers."""
    asked = questions(app)
    templates = []
    for name, rdtype, edns in asked:
        q = dns.message.make_query(name, rdtype, use_edns=0 if edns else False)
        templates.append(q.to_wire())
    replies = send_burst(port, count, templates, sockets=8).replies
    return {i: (reply, asked[i % len(asked)]) for i, reply in replies.items()}


def check(reply: bytes, asked: tuple[str, str, bool], dns_process: DnsProcess, region: str) -> None:
    name, rdtype, edns = asked
    message = dns.message.from_wire(reply)
    assert message.rcode() == dns.rcode.NOERROR
    assert message.flags & dns.flags.AA
    assert message.question[0].name.to_text() == name + "."  # the spelling echoed
    assert (message.edns >= 0) is edns
    ttl = dns_process.config.timing.dns_ttl
    if rdtype == "A":
        assert sorted(
            rd.address for rrset in message.answer for rd in rrset
        ) == dns_process.addresses(region)
        assert message.answer[0].ttl == ttl
    elif rdtype == "TXT":
        assert message.answer[0][0].strings[0].startswith(f"region={region} ".encode())
    else:  # NODATA, with the SOA for negative caching
        assert not message.answer
        assert [(rrset.rdtype, rrset.ttl) for rrset in message.authority] == [
            (dns.rdatatype.SOA, SOA_TTL)
        ]


def test_a_burst_of_5000_queries_gets_5000_correct_answers(dns_process: DnsProcess) -> None:
    """Before the precomputed replies and the drained socket: ~256 of 3,000 answered."""
    app = dns_process.config.app_domain
    replies = burst(dns_process.port, BURST, app)
    missing = sorted(set(range(BURST)) - set(replies))
    assert not missing, f"{len(missing)} of {BURST} unanswered (first ids {missing[:10]})"
    for reply, asked in replies.values():
        check(reply, asked, dns_process, EAST)
    assert dns_process.metric("rideout_dns_udp_kernel_drops") == 0
    cached = dns_process.metric("rideout_dns_answers_total", {"transport": "udp", "path": "cache"})
    assert cached is not None
    assert cached >= BURST - len(questions(app)) * 2


def test_answers_follow_a_new_view_within_a_poll_and_the_last_view_outlives_its_file(
    dns_process: DnsProcess,
) -> None:
    app = dns_process.config.app_domain
    dns_process.publish(WEST, 2)
    start = time.monotonic()

    def answers() -> list[str]:
        reply = burst(dns_process.port, 1, app)
        message = dns.message.from_wire(reply[0][0])
        return sorted(rd.address for rrset in message.answer for rd in rrset)

    until_sync(lambda: answers() == dns_process.addresses(WEST), 10, interval=0.02)
    took = time.monotonic() - start
    assert took < 2.0, f"the answer changed {took:.2f} s after the view (polled every 0.1 s)"
    for reply, asked in burst(dns_process.port, 400, app).values():
        check(reply, asked, dns_process, WEST)
    # The control plane goes away and its file with it: the last view stays in force.
    dns_process.feed.path.unlink()
    time.sleep(0.5)
    replies = burst(dns_process.port, 400, app)
    assert len(replies) == 400
    for reply, asked in replies.values():
        check(reply, asked, dns_process, WEST)
    health = dns_process.http(HEALTH).json()["view"]
    assert (health["serial"], health["region"]) == (2, WEST)
    assert health["age"] >= 0.5
    age = dns_process.metric("rideout_dns_view_age_seconds")
    assert age is not None
    assert age >= 0.5
    assert dns_process.metric("rideout_dns_view_serial") == 2


def test_dns_answers_even_when_its_metrics_port_is_taken(tmp_path: Path) -> None:
    """The metrics port is a convenience: a squatter on it must not take DNS down."""
    config = parse_config(config_data(tmp_path / ".rideout"))
    cp = config.control_plane

    def answering(server: DnsProcess) -> bool:
        query = dns.message.make_query(config.app_domain, "A").to_wire()
        return bool(send_burst(server.port, 1, [query], sockets=1, timeout=0.3).replies)

    with socket.socket() as squatter:
        squatter.bind((cp.address, cp.dns_metrics_port))
        squatter.listen()
        with running_dns(tmp_path, answering, config) as server:
            replies = burst(server.port, 100, config.app_domain)
            assert len(replies) == 100
            for reply, asked in replies.values():
                check(reply, asked, server, EAST)
            assert "serving DNS without it" in server.log.read_text()
