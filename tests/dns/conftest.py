"""A stand-in resolver with failover state, and real sockets to talk to the DNS server."""

from __future__ import annotations

import asyncio
import contextlib
import struct
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest
import pytest_asyncio

from rideout.dns import records
from rideout.dns.records import DnsZoneConfig, Endpoint, RegionRecords
from rideout.dns.server import DnsMetrics, DnsServer
from tests.conftest import free_port

ZONE = "rideout.test"
APP = "auction." + ZONE
PRIMARY = ("127.0.1.1", "127.0.1.2")
SECONDARY = ("127.0.2.1", "127.0.2.2")
SOA_TTL = 60
SOA_MINIMUM = 5
SOA_VALUE = f"ns1.{ZONE} hostmaster.{ZONE} 7 60 30 600 {SOA_MINIMUM}"
LONG_TEXT = "x" * 200 + "y" * 100  # over 255 octets: two character-strings on the wire

RR = tuple[str, str, int, str]


@dataclass(frozen=True)
class Resolution:
    """The shape `rideout.dns.records.resolve` returns."""

    rcode: str
    answers: tuple[RR, ...] = ()
    authority: tuple[RR, ...] = ()


@dataclass
class StubZone:
    """``rideout.test`` with a failover name: the primary's addresses while it is healthy."""

    primary_healthy: bool = True
    ttl: int = 1
    big: int = 40
    fail: bool = False
    asked: list[tuple[str, str]] = field(default_factory=list)

    def rrsets(self) -> dict[str, list[RR]]:
        active = PRIMARY if self.primary_healthy else SECONDARY
        region = "us-east-1" if self.primary_healthy else "us-west-2"
        return {
            ZONE: [(ZONE, "SOA", SOA_TTL, SOA_VALUE), (ZONE, "NS", SOA_TTL, f"ns1.{ZONE}")],
            f"ns1.{ZONE}": [(f"ns1.{ZONE}", "A", SOA_TTL, "127.0.0.1")],
            APP: [
                *((APP, "A", self.ttl, address) for address in active),
                (APP, "TXT", self.ttl, f"region={region}"),
            ],
            f"long.{ZONE}": [(f"long.{ZONE}", "TXT", 30, LONG_TEXT)],
            f"big.{ZONE}": [
                (f"big.{ZONE}", "A", 30, f"10.0.0.{i}") for i in range(1, self.big + 1)
            ],
        }

    def generation(self) -> tuple[bool, int, int, bool]:
        """What the answers depend on: a new value whenever they may change."""
        return (self.primary_healthy, self.ttl, self.big, self.fail)

    def __call__(self, qname: str, qtype: str) -> Resolution:
        self.asked.append((qname, qtype))
        if self.fail:
            raise RuntimeError("resolver is broken")
        if qname != ZONE and not qname.endswith("." + ZONE):
            return Resolution("REFUSED")
        soa = (ZONE, "SOA", SOA_TTL, SOA_VALUE)
        rrsets = self.rrsets().get(qname)
        if rrsets is None:
            return Resolution("NXDOMAIN", authority=(soa,))
        answers = tuple(r for r in rrsets if qtype in ("ANY", r[1]))
        if not answers:
            return Resolution("NOERROR", authority=(soa,))
        return Resolution("NOERROR", answers)


@pytest.fixture
def zone() -> StubZone:
    return StubZone()


@pytest.fixture
def metrics() -> DnsMetrics:
    return DnsMetrics()


@pytest_asyncio.fixture(params=["full", "cached"])
async def server(
    request: pytest.FixtureRequest, zone: StubZone, metrics: DnsMetrics
) -> AsyncIterator[DnsServer]:
    """The server on a free port of 127.0.0.1 (UDP and TCP), stopped afterwards.

    Every test runs twice: asking the resolver for every query, and answering from
    precomputed replies (rebuilt whenever the zone's generation changes).
    """
    cached = request.param == "cached"
    async with DnsServer(
        zone,
        "127.0.0.1",
        free_port("127.0.0.1", udp=True),
        metrics=metrics,
        tcp_idle_timeout=2.0,
        generation=zone.generation if cached else None,
        warm=[(APP, "A"), (ZONE, "SOA")] if cached else (),
    ) as s:
        yield s


# --------------------------------------------------------------------------- raw clients


class _Collector(asyncio.DatagramProtocol):
    def __init__(self) -> None:
        self.queue: asyncio.Queue[bytes] = asyncio.Queue()
        self.closed = asyncio.get_running_loop().create_future()

    def datagram_received(self, data: bytes, addr: object) -> None:
        self.queue.put_nowait(data)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed.done():
            self.closed.set_result(None)


@dataclass
class UdpClient:
    """A connected UDP socket that keeps every datagram it gets."""

    transport: asyncio.DatagramTransport
    protocol: _Collector

    def send(self, data: bytes) -> None:
        self.transport.sendto(data)

    async def recv(self, timeout: float = 2.0) -> bytes | None:
        try:
            return await asyncio.wait_for(self.protocol.queue.get(), timeout)
        except TimeoutError:
            return None

    async def ask(self, data: bytes, timeout: float = 2.0) -> tuple[bytes, list[bytes]]:
        """Send `data` and wait for the reply with its id; also return what came before."""
        ident = data[:2]
        self.send(data)
        before: list[bytes] = []
        async with asyncio.timeout(timeout):
            while True:
                reply = await self.protocol.queue.get()
                if reply[:2] == ident and len(reply) >= 12 and reply[2] & 0x80:
                    return reply, before
                before.append(reply)


@contextlib.asynccontextmanager
async def udp_client(port: int) -> AsyncIterator[UdpClient]:
    loop = asyncio.get_running_loop()
    transport, protocol = await loop.create_datagram_endpoint(
        _Collector, remote_addr=("127.0.0.1", port)
    )
    try:
        yield UdpClient(transport, protocol)
    finally:
        transport.close()
        await protocol.closed


@contextlib.asynccontextmanager
async def tcp_client(port: int) -> AsyncIterator[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        yield reader, writer
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


def framed(message: bytes) -> bytes:
    return struct.pack("!H", len(message)) + message


async def read_framed(reader: asyncio.StreamReader, timeout: float = 2.0) -> bytes:
    async with asyncio.timeout(timeout):
        (length,) = struct.unpack("!H", await reader.readexactly(2))
        return await reader.readexactly(length)


# --------------------------------------------------------------------------- the real records


@dataclass
class RecordsResolver:
    """`rideout.dns.records.resolve` over mutable health and evacuation state."""

    zone: DnsZoneConfig
    healthy: dict[str, bool] = field(default_factory=lambda: {"us-east-1": True, "us-west-2": True})
    evacuated: set[str] = field(default_factory=set)

    def __call__(self, qname: str, qtype: str) -> records.Resolution:
        return records.resolve(self.zone, qname, qtype, self.healthy, frozenset(self.evacuated))


@pytest.fixture
def records_resolver() -> RecordsResolver:
    def region(name: str, role: records.Role, addresses: tuple[str, str]) -> RegionRecords:
        endpoints = tuple(
            Endpoint(address, f"{name[:2]}{name[-1]}-az{i}")
            for i, address in enumerate(addresses, 1)
        )
        return RegionRecords(name, role, endpoints, health_check_id=name)

    return RecordsResolver(
        DnsZoneConfig(
            app_domain=APP,
            ttl=1,
            regions=(
                region("us-east-1", "primary", PRIMARY),
                region("us-west-2", "secondary", SECONDARY),
            ),
            nameserver_address="127.0.0.1",
        )
    )
