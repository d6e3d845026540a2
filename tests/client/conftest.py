"""Real servers for the client tests: a test DNS server (dnslib) and HTTP "domains".

No mocks: the DNS server answers real packets over UDP and TCP on 127.0.0.1, and each
"domain" is a Starlette app under uvicorn on a loopback address of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, cast

import pytest
from dnslib import QTYPE, RCODE, RR, A, DNSRecord
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tests.conftest import FakeClock, free_port, serving

# ------------------------------------------------------------------------- test DNS


@dataclass
class DnsServer:
    """A tiny authoritative DNS server whose answers a test controls.

    ``records[name] = (addresses, ttl)``; ``modes[name]`` overrides with ``servfail``,
    ``refused``, ``nxdomain``, ``notimp``, ``silent`` (never answers), ``truncate`` (UDP
    answers are truncated, so the client must retry over TCP), ``tc_always`` (TCP
    answers are truncated too), ``hangup`` (UDP answers are truncated and TCP closes
    without an answer), ``stray`` (over UDP, two replies that answer another query come
    first: one with another id, one for another name, both with the address 127.6.6.6;
    then the answer, twice), ``drop_first`` (the first query for the name gets no
    answer) or ``malformed`` (the UDP answer loses its last byte).
    """

    port: int = 0
    host: str = "127.0.0.1"
    records: dict[str, tuple[list[str], int]] = field(default_factory=dict)
    modes: dict[str, str] = field(default_factory=dict)
    queries: list[tuple[str, str]] = field(default_factory=list)

    def answer(self, data: bytes, proto: str) -> bytes | None:
        request = DNSRecord.parse(data)
        qname = str(request.q.qname).rstrip(".").lower()
        self.queries.append((qname, proto))
        reply = request.reply()
        mode = self.modes.get(qname)
        if mode == "silent" or (mode == "drop_first" and self.queries.count((qname, proto)) == 1):
            return None
        if mode == "hangup" and proto == "tcp":
            return None
        if mode == "servfail":
            reply.header.rcode = RCODE.SERVFAIL
        elif mode == "refused":
            reply.header.rcode = RCODE.REFUSED
        elif mode == "notimp":
            reply.header.rcode = RCODE.NOTIMP
        elif mode == "nxdomain" or qname not in self.records:
            reply.header.rcode = RCODE.NXDOMAIN
        elif request.q.qtype == QTYPE.A:
            addresses, ttl = self.records[qname]
            for address in addresses:
                reply.add_answer(RR(qname + ".", QTYPE.A, rdata=A(address), ttl=ttl))
        if (mode in ("truncate", "hangup") and proto == "udp") or mode == "tc_always":
            reply.rr = []
            reply.header.tc = 1
        packed = bytes(reply.pack())
        return packed[:-1] if mode == "malformed" and proto == "udp" else packed

    def udp_replies(self, data: bytes) -> list[bytes]:
        """The datagrams that answer ``data``: :meth:`answer`'s, after the strays."""
        reply = self.answer(data, "udp")
        if reply is None:
            return []
        request = DNSRecord.parse(data)
        if self.modes.get(str(request.q.qname).rstrip(".").lower()) != "stray":
            return [reply]
        other_id = request.reply()
        other_id.header.id = (request.header.id + 1) % 65536
        other_name = DNSRecord.question("stray.rideout.test")
        other_name.header.id = request.header.id
        strays = [other_id, other_name.reply()]
        for stray in strays:
            stray.add_answer(RR(stray.q.qname, QTYPE.A, rdata=A("127.6.6.6"), ttl=1))
        return [bytes(stray.pack()) for stray in strays] + [reply, reply]


class _DNSProtocol(asyncio.DatagramProtocol):
    def __init__(self, server: DnsServer) -> None:
        self.server = server
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.DatagramTransport, transport)

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        for reply in self.server.udp_replies(data):
            if self.transport is not None:
                self.transport.sendto(reply, addr)


@contextlib.asynccontextmanager
async def running_dns(host: str = "127.0.0.1") -> AsyncIterator[DnsServer]:
    """A :class:`DnsServer` on ``host`` (UDP and TCP, one port), in this event loop.

    On another host than 127.0.0.1 (``::1``) the UDP port is the kernel's choice.
    """
    server = DnsServer(port=free_port(host, udp=True) if host == "127.0.0.1" else 0, host=host)
    loop = asyncio.get_running_loop()
    transport, _ = await loop.create_datagram_endpoint(
        lambda: _DNSProtocol(server), local_addr=(server.host, server.port)
    )
    server.port = transport.get_extra_info("sockname")[1]

    async def handle_tcp(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                size = int.from_bytes(await reader.readexactly(2), "big")
                reply = server.answer(await reader.readexactly(size), "tcp")
                if reply is None:
                    if server.modes.get(server.queries[-1][0]) == "hangup":
                        break  # close the connection without an answer
                    continue
                writer.write(len(reply).to_bytes(2, "big") + reply)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    try:
        tcp = await asyncio.start_server(handle_tcp, server.host, server.port)
        try:
            yield server
        finally:
            tcp.close()
            await tcp.wait_closed()
    finally:
        transport.close()


@pytest.fixture
async def dns_server() -> AsyncIterator[DnsServer]:
    async with running_dns() as server:
        yield server


def doh_app(dns: DnsServer, modes: dict[str, str]) -> Starlette:
    """A DNS-over-HTTPS JSON endpoint (Google's shape) answering from ``dns``'s records.

    ``modes[name]``: ``http500``, ``not_json``, ``bad_data`` (an A record that is not
    an address), ``no_status``, ``slow`` (answers after 1 s).
    """

    async def query(request: Request) -> Response:
        name = request.query_params["name"].rstrip(".").lower()
        mode = modes.get(name)
        if mode == "http500":
            return Response("boom", status_code=500)
        if mode == "not_json":
            return Response("<html>not json</html>", media_type="text/html")
        if mode == "no_status":
            return JSONResponse({"Answer": []})
        if mode == "slow":
            await asyncio.sleep(1.0)
        if mode == "servfail":
            return JSONResponse({"Status": 2})
        if name not in dns.records:
            return JSONResponse({"Status": 3, "Question": [{"name": name, "type": 1}]})
        addresses, ttl = dns.records[name]
        answer: list[dict[str, Any]] = [
            {"name": name, "type": 5, "TTL": ttl + 100, "data": "alias." + name}
        ]
        answer += [{"name": name, "type": 1, "TTL": ttl, "data": a} for a in addresses]
        if mode == "bad_data":
            answer[-1]["data"] = "not-an-address"
        return JSONResponse({"Status": 0, "Answer": answer}, media_type="application/dns-json")

    return Starlette(routes=[Route("/dns-query", query)])


# ------------------------------------------------------------------- HTTP "domains"

ALL_METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]


@dataclass(frozen=True)
class Act:
    """What a domain does with one request: wait ``hang`` seconds, then answer ``status``
    (with ``trickle``, the body a byte at a time, ``trickle`` seconds apart)."""

    status: int = 200
    headers: tuple[tuple[str, str], ...] = ()
    hang: float = 0.0
    trickle: float = 0.0


@dataclass(frozen=True)
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Domain:
    """One test domain: a loopback server whose answers a test scripts."""

    name: str
    url: str
    script: list[Act] = field(default_factory=list)
    default: Act = field(default_factory=Act)
    seen: list[Seen] = field(default_factory=list)
    release: asyncio.Event = field(default_factory=asyncio.Event)

    def next_act(self) -> Act:
        return self.script.pop(0) if self.script else self.default

    def always(
        self, status: int = 200, *headers: tuple[str, str], hang: float = 0.0, trickle: float = 0.0
    ) -> None:
        self.script.clear()
        self.default = Act(status, tuple(headers), hang, trickle)

    def then(self, *acts: Act) -> None:
        self.script.extend(acts)


def domain_app(domain: Domain) -> Starlette:
    async def handle(request: Request) -> Response:
        body = await request.body()
        domain.seen.append(Seen(request.method, request.url.path, dict(request.headers), body))
        act = domain.next_act()
        if act.hang:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(domain.release.wait(), act.hang)
        payload = json.dumps({"domain": domain.name, "count": len(domain.seen)})
        if act.trickle:
            return StreamingResponse(
                _trickle(payload.encode(), act.trickle),
                status_code=act.status,
                headers={**dict(act.headers), "content-length": str(len(payload))},
                media_type="application/json",
            )
        return Response(
            payload,
            status_code=act.status,
            headers=dict(act.headers),
            media_type="application/json",
        )

    return Starlette(routes=[Route("/{path:path}", handle, methods=ALL_METHODS)])


async def _trickle(body: bytes, interval: float) -> AsyncIterator[bytes]:
    for i in range(len(body)):
        yield body[i : i + 1]
        await asyncio.sleep(interval)


DOMAIN_ADDRESSES = ("127.0.5.1", "127.0.5.2", "127.0.5.3", "127.0.5.4")
DOMAIN_NAMES = ("primary", "backup", "regional1", "regional2")


@dataclass
class Domains:
    """The four domains of a seed-001 plan: primary, backup, regional 1 and 2."""

    items: list[Domain]
    port: int

    def __getitem__(self, index: int) -> Domain:
        return self.items[index]

    @property
    def urls(self) -> tuple[str, ...]:
        return tuple(d.url for d in self.items)

    def all(
        self, status: int = 200, *headers: tuple[str, str], hang: float = 0.0, trickle: float = 0.0
    ) -> None:
        for domain in self.items:
            domain.always(status, *headers, hang=hang, trickle=trickle)

    def counts(self) -> list[int]:
        return [len(d.seen) for d in self.items]


@pytest.fixture
async def domains() -> AsyncIterator[Domains]:
    port = free_port(*DOMAIN_ADDRESSES)
    items = [
        Domain(name, f"http://{address}:{port}")
        for name, address in zip(DOMAIN_NAMES, DOMAIN_ADDRESSES, strict=True)
    ]
    async with contextlib.AsyncExitStack() as stack:
        servers = [
            await stack.enter_async_context(serving(domain_app(domain), address, port))
            for domain, address in zip(items, DOMAIN_ADDRESSES, strict=True)
        ]
        try:
            yield Domains(items, port)
        finally:
            for domain in items:
                domain.release.set()  # end any hanging handler before the servers stop
            for server in servers:
                server.should_exit = True  # all at once: each takes ~0.1 s to notice


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()
