"""Real parts for the WebSocket client tests: rideout's DNS server with a switchable
answer, tiny `websockets` servers that misbehave on purpose, and small recorders.

Nothing here is a mock: the DNS server is `rideout.dns.server.DnsServer` answering real
packets, the misbehaving servers are real WebSocket servers on loopback.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from websockets.asyncio.server import ServerConnection, serve

from rideout.backoff import FullJitter
from rideout.client.resolve import CachingResolver, NameserverResolver
from rideout.client.ws import ClientSettings, Event
from rideout.config import Config
from rideout.dns import records
from rideout.dns.records import DnsZoneConfig, Record
from rideout.dns.server import DnsServer
from tests.conftest import free_port

E = TypeVar("E")

SPARE = "127.0.1.3"  # a loopback address for a tiny test server, in the primary's /24
DEAD = "127.0.1.9"  # nothing ever listens here: connections are refused
HUNG = "127.0.1.4"  # a second address for a tiny test server


def fast_settings(**overrides: Any) -> ClientSettings:
    """Heartbeats and backoff scaled down for tests (still real timers and sockets),
    and a name's addresses tried in the answer's order, so that a test knows which zone
    a client reaches (the shuffle has its own tests)."""
    values: dict[str, Any] = {
        "shuffle_addresses": False,
        "heartbeat_interval": 0.25,
        "heartbeat_timeout": 2.0,
        "heartbeat_failures": 2,
        "backoff": FullJitter(0.05, 0.2),
        "open_timeout": 2.0,
        "close_timeout": 0.5,
    }
    values.update(overrides)
    return ClientSettings(**values)


# ------------------------------------------------------------------------------ DNS


class ManualClock:
    """The caching resolver's clock: time moves only when a test says so."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@dataclass
class Answers:
    """The DNS server's resolver: `rideout.dns.records.resolve` given `healthy` (the
    failover answer), unless `fixed` pins the app domain's A records (`()`: NXDOMAIN)."""

    zone: DnsZoneConfig
    healthy: dict[str, bool]
    evacuated: set[str] = field(default_factory=set)
    fixed: tuple[str, ...] | None = None
    asked: int = 0  # A queries for the app domain

    def __call__(self, qname: str, qtype: str) -> records.Resolution:
        apex = self.zone.app_domain
        if qname == apex and qtype == "A":
            self.asked += 1
        if self.fixed is not None and qname == apex:
            if not self.fixed:
                return records.Resolution("NXDOMAIN")
            answers = tuple(Record(apex, "A", self.zone.ttl, a) for a in self.fixed)
            return records.Resolution("NOERROR", answers if qtype in ("A", "ANY") else ())
        return records.resolve(self.zone, qname, qtype, self.healthy, frozenset(self.evacuated))


@dataclass
class Dns:
    answers: Answers
    server: DnsServer
    clock: ManualClock

    def resolver(self) -> CachingResolver:
        """What a client uses: the nameserver, cached for each answer's TTL on `clock`."""
        return CachingResolver(NameserverResolver("127.0.0.1", self.server.port), clock=self.clock)

    def expire(self) -> None:
        """Let the cached answer's TTL run out."""
        self.clock.advance(self.answers.zone.ttl + 0.001)

    def answer(self, *addresses: str) -> None:
        """Pin the answer to `addresses` (none: the failover answer again); the old
        answer's TTL runs out, as it would have by the time a real client reconnects."""
        self.answers.fixed = addresses or None
        self.expire()


@contextlib.asynccontextmanager
async def running_dns(config: Config) -> AsyncIterator[Dns]:
    """rideout's DNS server for `config`'s app domain, both regions healthy."""
    answers = Answers(
        DnsZoneConfig.from_config(config), healthy={r.name: True for r in config.regions}
    )
    async with DnsServer(answers, "127.0.0.1", free_port("127.0.0.1", udp=True)) as server:
        yield Dns(answers, server, ManualClock())


# ------------------------------------------------------------------ tiny WS servers


@dataclass
class TinyServer:
    """What a tiny server saw: one list of received frames per connection."""

    connections: list[list[str]] = field(default_factory=list)

    def frames(self) -> list[dict[str, Any]]:
        return [json.loads(f) for conn in self.connections for f in conn]

    def actions(self, action: str) -> list[dict[str, Any]]:
        return [f for f in self.frames() if f.get("action") == action]


@contextlib.asynccontextmanager
async def silent_server(host: str, port: int) -> AsyncIterator[TinyServer]:
    """Accepts WebSockets, reads everything, answers nothing (a hung backend)."""
    seen = TinyServer()

    async def handler(ws: ServerConnection) -> None:
        frames: list[str] = []
        seen.connections.append(frames)
        with contextlib.suppress(Exception):
            async for message in ws:
                frames.append(str(message))

    async with serve(handler, host, port, compression=None, ping_interval=None):
        yield seen


@contextlib.asynccontextmanager
async def hung_server(host: str, port: int) -> AsyncIterator[TinyServer]:
    """Completes TCP handshakes and never answers a byte, as the kernel of a frozen
    (SIGSTOPped) server does: a client's WebSocket upgrade waits out its open timeout."""
    seen = TinyServer()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.connections.append([])
        with contextlib.suppress(Exception):
            while await reader.read(4096):
                pass
        writer.close()

    server = await asyncio.start_server(handler, host, port)
    try:
        yield seen
    finally:
        server.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(server.wait_closed(), 2)


@contextlib.asynccontextmanager
async def closing_server(
    host: str, port: int, code: int, reasons: list[str]
) -> AsyncIterator[TinyServer]:
    """Accepts each WebSocket and closes it at once with `code` and the next reason
    of `reasons` (the last one repeats)."""
    seen = TinyServer()

    async def handler(ws: ServerConnection) -> None:
        index = min(len(seen.connections), len(reasons) - 1)
        seen.connections.append([])
        await ws.close(code, reasons[index])

    async with serve(handler, host, port, compression=None, ping_interval=None):
        yield seen


# -------------------------------------------------------------------------- recorders


class Sleeps:
    """An injected sleep: records each requested delay, waits at most `limit` for real."""

    def __init__(self, limit: float = 0.05) -> None:
        self.delays: list[float] = []
        self.limit = limit

    async def __call__(self, delay: float) -> None:
        self.delays.append(delay)
        await asyncio.sleep(min(delay, self.limit))


def of_type(events: Iterable[Event], kind: type[E]) -> list[E]:
    return [e for e in events if isinstance(e, kind)]
