"""The authoritative DNS server, asked with real packets over real UDP and TCP sockets."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import socket
import struct
from collections.abc import AsyncIterator

import dns.asyncquery
import dns.edns
import dns.flags
import dns.message
import dns.opcode
import dns.rcode
import dns.rdatatype
import dns.update
import pytest
import pytest_asyncio
from dnslib import DNSQuestion, DNSRecord
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rideout.dns.query import normalize_name, qtype_name, qtype_number, rcode_number
from rideout.dns.server import DnsMetrics, DnsServer
from tests.conftest import examples, free_port, until
from tests.dns.conftest import (
    APP,
    LONG_TEXT,
    PRIMARY,
    SECONDARY,
    SOA_TTL,
    ZONE,
    RecordsResolver,
    StubZone,
    framed,
    read_framed,
    tcp_client,
    udp_client,
)

Transport = str
TRANSPORTS = ["udp", "tcp"]


async def ask(
    server: DnsServer, name: str, rdtype: str = "A", transport: Transport = "udp", **kw: object
) -> dns.message.Message:
    query = dns.message.make_query(name, rdtype, **kw)  # type: ignore[arg-type]
    if transport == "udp":
        return await dns.asyncquery.udp(query, "127.0.0.1", port=server.port, timeout=2)
    return await dns.asyncquery.tcp(query, "127.0.0.1", port=server.port, timeout=2)


def addresses(response: dns.message.Message) -> list[str]:
    return sorted(rd.address for rrset in response.answer for rd in rrset)


def query_bytes(name: str = APP, rdtype: str = "A", ident: int = 4242) -> bytes:
    query = dns.message.make_query(name, rdtype, use_edns=False)
    query.id = ident
    return query.to_wire()


# --------------------------------------------------------------------------- answers


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_answer_is_authoritative_with_the_resolvers_ttl(
    server: DnsServer, zone: StubZone, transport: Transport
) -> None:
    response = await ask(server, APP, "A", transport)
    assert response.rcode() == dns.rcode.NOERROR
    assert response.flags & dns.flags.AA
    assert response.flags & dns.flags.QR
    assert response.flags & dns.flags.RD  # copied from the query
    assert not response.flags & dns.flags.RA  # no recursion offered
    assert addresses(response) == sorted(PRIMARY)
    assert [rrset.ttl for rrset in response.answer] == [zone.ttl]
    assert str(response.question[0].name) == APP + "."
    assert (APP, "A") in zone.asked


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_unknown_name_in_the_zone_is_nxdomain_with_the_soa(
    server: DnsServer, transport: Transport
) -> None:
    response = await ask(server, "nope." + ZONE, "A", transport)
    assert response.rcode() == dns.rcode.NXDOMAIN
    assert response.flags & dns.flags.AA
    assert response.answer == []
    [soa] = response.authority
    assert soa.rdtype == dns.rdatatype.SOA
    assert soa.ttl == SOA_TTL
    assert str(soa[0].mname) == f"ns1.{ZONE}."
    assert soa[0].minimum == 5


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_names_outside_the_zone_are_refused_without_aa(
    server: DnsServer, transport: Transport
) -> None:
    response = await ask(server, "example.com", "A", transport)
    assert response.rcode() == dns.rcode.REFUSED
    assert not response.flags & dns.flags.AA
    assert response.answer == []
    assert response.authority == []


async def test_aaaa_for_an_a_only_name_is_nodata(server: DnsServer, zone: StubZone) -> None:
    response = await ask(server, APP, "AAAA")
    assert response.rcode() == dns.rcode.NOERROR
    assert response.flags & dns.flags.AA
    assert response.answer == []
    assert [rrset.rdtype for rrset in response.authority] == [dns.rdatatype.SOA]
    assert zone.asked[-1] == (APP, "AAAA")


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_txt_records_including_one_over_255_octets(
    server: DnsServer, transport: Transport
) -> None:
    response = await ask(server, APP, "TXT", transport)
    [rrset] = response.answer
    assert [rd.strings for rd in rrset] == [(b"region=us-east-1",)]
    response = await ask(server, "long." + ZONE, "TXT", transport)
    [rrset] = response.answer
    [rd] = rrset
    assert b"".join(rd.strings) == LONG_TEXT.encode()
    assert len(rd.strings) == 2


async def test_any_returns_every_record_of_the_name(server: DnsServer) -> None:
    response = await ask(server, APP, "ANY", "tcp")
    types = sorted(dns.rdatatype.to_text(rrset.rdtype) for rrset in response.answer)
    assert types == ["A", "TXT"]
    apex = await ask(server, ZONE, "ANY")
    assert sorted(dns.rdatatype.to_text(r.rdtype) for r in apex.answer) == ["NS", "SOA"]


async def test_answers_follow_the_resolver_at_once_on_failover(
    server: DnsServer, zone: StubZone
) -> None:
    assert addresses(await ask(server, APP)) == sorted(PRIMARY)
    zone.primary_healthy = False
    assert addresses(await ask(server, APP)) == sorted(SECONDARY)
    assert addresses(await ask(server, APP, transport="tcp")) == sorted(SECONDARY)
    zone.primary_healthy = True
    assert addresses(await ask(server, APP)) == sorted(PRIMARY)


async def test_names_match_without_case_and_the_query_spelling_is_echoed(
    server: DnsServer, zone: StubZone
) -> None:
    spelled = "AuCtIoN.rIdEoUt.TEST."
    response = await ask(server, spelled)
    assert response.question[0].name.to_text() == spelled
    assert [rrset.name.to_text() for rrset in response.answer] == [spelled]
    assert addresses(response) == sorted(PRIMARY)
    assert (APP, "A") in zone.asked  # lowercased, without the dot


async def test_a_failing_resolver_gives_servfail_and_the_server_keeps_going(
    server: DnsServer, zone: StubZone
) -> None:
    zone.fail = True
    response = await ask(server, APP)
    assert response.rcode() == dns.rcode.SERVFAIL
    assert not response.flags & dns.flags.AA
    zone.fail = False
    assert addresses(await ask(server, APP)) == sorted(PRIMARY)


async def test_unencodable_resolver_records_give_servfail(
    server: DnsServer, zone: StubZone
) -> None:
    def bad(qname: str, qtype: str) -> object:
        from tests.dns.conftest import Resolution

        return Resolution("NOERROR", ((qname, "A", 5, "not-an-address"),))

    server.resolver = bad  # type: ignore[assignment]
    zone.ttl += 1  # a new generation: the precomputed replies were the old resolver's
    assert (await ask(server, APP)).rcode() == dns.rcode.SERVFAIL


async def test_other_classes_and_zone_transfers_are_refused(server: DnsServer) -> None:
    chaos = dns.message.make_query("version.bind", "TXT", rdclass="CH")
    response = await dns.asyncquery.udp(chaos, "127.0.0.1", port=server.port, timeout=2)
    assert response.rcode() == dns.rcode.REFUSED
    axfr = await ask(server, ZONE, "AXFR", "tcp")
    assert axfr.rcode() == dns.rcode.REFUSED


# --------------------------------------------------------------------------- size and EDNS


async def test_a_large_answer_is_truncated_over_udp_and_whole_over_tcp(
    server: DnsServer, zone: StubZone
) -> None:
    name = "big." + ZONE
    udp = await ask(server, name, "A", "udp", use_edns=False)
    assert udp.flags & dns.flags.TC
    assert udp.answer == []
    assert str(udp.question[0].name) == name + "."
    tcp = await ask(server, name, "A", "tcp", use_edns=False)
    assert not tcp.flags & dns.flags.TC
    assert len(addresses(tcp)) == zone.big == 40
    # A client that falls back by itself ends up with everything.
    query = dns.message.make_query(name, "A", use_edns=False)
    response, used_tcp = await dns.asyncquery.udp_with_fallback(
        query, "127.0.0.1", port=server.port, timeout=2
    )
    assert used_tcp
    assert len(addresses(response)) == 40


async def test_edns_buffer_size_lets_a_larger_answer_through_udp(
    server: DnsServer, zone: StubZone
) -> None:
    name = "big." + ZONE
    response = await ask(server, name, "A", "udp", use_edns=0, payload=1232)
    assert not response.flags & dns.flags.TC
    assert len(addresses(response)) == 40
    assert response.edns == 0  # an OPT record comes back
    assert response.payload == server.max_udp_payload
    # More than fits even in 1232 octets, or than the client may take: truncated.
    zone.big = 120
    response = await ask(server, name, "A", "udp", use_edns=0, payload=4096)
    assert response.flags & dns.flags.TC
    assert response.answer == []
    zone.big = 40
    response = await ask(server, name, "A", "udp", use_edns=0, payload=600)
    assert response.flags & dns.flags.TC


async def test_unknown_edns_version_gets_badvers(server: DnsServer) -> None:
    response = await ask(server, APP, "A", "udp", use_edns=1)
    assert response.rcode() == dns.rcode.BADVERS
    assert response.answer == []


# --------------------------------------------------------------------------- bad input


async def test_garbage_truncated_headers_and_responses_get_no_reply(server: DnsServer) -> None:
    async with udp_client(server.port) as client:
        for junk in (b"", b"\x00", b"\x12\x34\x01\x00\x00", query_bytes()[:11]):
            client.send(junk)
        response_packet = bytearray(query_bytes(ident=7))
        response_packet[2] |= 0x80  # QR=1: a response, not a query
        client.send(bytes(response_packet))
        reply, before = await client.ask(query_bytes(ident=99))
        assert before == []
        assert dns.message.from_wire(reply).rcode() == dns.rcode.NOERROR


async def test_a_readable_header_with_a_broken_body_gets_formerr(server: DnsServer) -> None:
    async with udp_client(server.port) as client:
        broken = query_bytes(ident=0x1234)[:20]  # header fine, question cut short
        reply, _ = await client.ask(broken)
        message = dns.message.from_wire(reply)
        assert message.id == 0x1234
        assert message.rcode() == dns.rcode.FORMERR
        assert message.flags & dns.flags.QR


@pytest.mark.parametrize("count", [0, 2])
async def test_other_than_one_question_is_formerr(server: DnsServer, count: int) -> None:
    record = DNSRecord()
    record.header.id = 777
    for i in range(count):
        record.add_question(DNSQuestion(f"q{i}.{ZONE}"))
    async with udp_client(server.port) as client:
        reply, _ = await client.ask(record.pack())
    message = dns.message.from_wire(reply)
    assert (message.id, message.rcode()) == (777, dns.rcode.FORMERR)


@pytest.mark.parametrize("opcode", [dns.opcode.NOTIFY, dns.opcode.UPDATE, dns.opcode.STATUS])
async def test_opcodes_other_than_query_are_notimp(server: DnsServer, opcode: int) -> None:
    if opcode == dns.opcode.UPDATE:
        query: dns.message.Message = dns.update.UpdateMessage(ZONE)
    else:
        query = dns.message.make_query(ZONE, "SOA")
        query.set_opcode(opcode)
    response = await dns.asyncquery.udp(query, "127.0.0.1", port=server.port, timeout=2)
    assert response.rcode() == dns.rcode.NOTIMP
    assert response.opcode() == opcode


@pytest.mark.parametrize(
    "name",
    [
        b"".join(b"\x3f" + b"a" * 63 for _ in range(4)) + b"\x00",  # 257 octets
        b"\x50" + b"a" * 80 + b"\x04test\x00",  # a label of 80 (0x40: extended label type)
    ],
    ids=["long-name", "long-label"],
)
async def test_oversized_names_are_formerr(server: DnsServer, name: bytes) -> None:
    header = struct.pack("!HHHHHH", 55, 0x0100, 1, 0, 0, 0)
    async with udp_client(server.port) as client:
        reply, _ = await client.ask(header + name + struct.pack("!HH", 1, 1))
    assert dns.message.from_wire(reply).rcode() == dns.rcode.FORMERR


# --------------------------------------------------------------------------- TCP


async def test_several_queries_on_one_tcp_connection_are_answered_in_order(
    server: DnsServer,
) -> None:
    async with tcp_client(server.port) as (reader, writer):
        names = [APP, "nope." + ZONE, "example.org"]
        writer.write(b"".join(framed(query_bytes(n, ident=i)) for i, n in enumerate(names)))
        replies = [dns.message.from_wire(await read_framed(reader)) for _ in names]
    assert [r.id for r in replies] == [0, 1, 2]
    assert [r.rcode() for r in replies] == [
        dns.rcode.NOERROR,
        dns.rcode.NXDOMAIN,
        dns.rcode.REFUSED,
    ]


async def test_tcp_garbage_is_formerr_or_ends_the_connection(server: DnsServer) -> None:
    async with tcp_client(server.port) as (reader, writer):
        garbage = struct.pack("!HHHHHH", 31337, 0, 3, 9, 9, 9) + b"\xff" * 30
        writer.write(framed(garbage))
        reply = dns.message.from_wire(await read_framed(reader))
        assert (reply.id, reply.rcode()) == (31337, dns.rcode.FORMERR)
        # The connection still serves.
        writer.write(framed(query_bytes()))
        assert dns.message.from_wire(await read_framed(reader)).rcode() == dns.rcode.NOERROR
        # A message too short for a header: nothing more can be trusted, the server hangs up.
        writer.write(framed(b"hello"))
        async with asyncio.timeout(2):
            assert await reader.read() == b""
    assert (await ask(server, APP, transport="tcp")).rcode() == dns.rcode.NOERROR


async def test_a_half_sent_message_is_cut_off_after_the_idle_timeout(zone: StubZone) -> None:
    async with DnsServer(zone, "127.0.0.1", 0, tcp_idle_timeout=0.3) as server:
        async with tcp_client(server.port) as (reader, writer):
            writer.write(struct.pack("!H", 100) + b"\x00" * 10)
            loop = asyncio.get_running_loop()
            started = loop.time()
            async with asyncio.timeout(3):
                assert await reader.read() == b""
            assert 0.2 < loop.time() - started < 2.5
        async with tcp_client(server.port) as (reader, writer):  # idle without a byte
            async with asyncio.timeout(3):
                assert await reader.read() == b""
        assert (await ask(server, APP, transport="tcp")).rcode() == dns.rcode.NOERROR


async def test_connections_over_the_limit_push_out_the_longest_waiting(zone: StubZone) -> None:
    metrics = DnsMetrics()
    async with DnsServer(zone, "127.0.0.1", 0, metrics=metrics, max_tcp_connections=5) as server:
        conns = [await asyncio.open_connection("127.0.0.1", server.port) for _ in range(12)]
        try:
            served = refused = 0
            for reader, writer in conns:
                try:
                    writer.write(framed(query_bytes()))
                    await writer.drain()
                    await read_framed(reader)
                    served += 1
                except (asyncio.IncompleteReadError, ConnectionError):
                    refused += 1
            assert (served, refused) == (5, 7)
            assert metrics.registry.get_sample_value("rideout_dns_tcp_connections") == 5
            assert (
                metrics.registry.get_sample_value(
                    "rideout_dns_dropped_total", {"reason": "tcp_evicted"}
                )
                == 7
            )
        finally:
            for _, writer in conns:
                writer.close()
                with contextlib.suppress(OSError):
                    await writer.wait_closed()
        # With the others gone, new connections are served again.
        await until(
            lambda: not metrics.registry.get_sample_value("rideout_dns_tcp_connections"),
            3,
            interval=0.01,
        )
        assert (await ask(server, APP, transport="tcp")).rcode() == dns.rcode.NOERROR


async def test_silent_tcp_connections_cannot_keep_queries_out(zone: StubZone) -> None:
    """Issue #28: 2 x 11,000 silent TCP connections kept every TCP query out (EOF) for
    ~40 s while UDP answered. At the cap, the connection that has waited longest for a
    query is closed for the new one (the app servers' rule, rideout._guard): among four
    times the cap of silent sockets, real TCP queries are answered."""
    metrics = DnsMetrics()
    async with DnsServer(zone, "127.0.0.1", 0, metrics=metrics, max_tcp_connections=8,
                         tcp_idle_timeout=30) as server:  # fmt: skip
        silent: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
        try:
            for _ in range(4):
                for _ in range(8):
                    silent.append(await asyncio.open_connection("127.0.0.1", server.port))
                answer = await ask(server, APP, transport="tcp")
                assert (answer.rcode(), bool(answer.answer)) == (dns.rcode.NOERROR, True)
            # The oldest silent ones made room: closed by the server, long before 30 s.
            async with asyncio.timeout(3):
                for reader, _ in silent[:8]:
                    assert await reader.read() == b""
            evicted = metrics.registry.get_sample_value(
                "rideout_dns_dropped_total", {"reason": "tcp_evicted"}
            )
            assert evicted is not None
            assert evicted >= 24
            assert (await ask(server, APP)).rcode() == dns.rcode.NOERROR
        finally:
            for _, writer in silent:
                writer.close()


async def test_stop_closes_every_socket_including_open_connections(zone: StubZone) -> None:
    server = DnsServer(zone, "127.0.0.1", 0)
    await server.start()
    port = server.port
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(framed(query_bytes()))
        await read_framed(reader)  # the connection is being served
    finally:
        await server.stop()
    async with asyncio.timeout(2):
        assert await reader.read() == b""
    writer.close()
    await writer.wait_closed()
    for kind in (socket.SOCK_DGRAM, socket.SOCK_STREAM):
        with socket.socket(socket.AF_INET, kind) as sock:
            # SO_REUSEADDR as any server sets it: the closed connection is in TIME_WAIT,
            # but a listener still open on the port would make this bind fail.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(("127.0.0.1", port))
            if kind == socket.SOCK_STREAM:
                sock.listen()
    assert not server.running


async def test_start_reports_a_port_in_use(zone: StubZone, server: DnsServer) -> None:
    with pytest.raises(OSError, match="in use"):
        await DnsServer(zone, "127.0.0.1", server.port).start()


async def test_metrics_count_queries_by_type_rcode_and_transport(
    server: DnsServer, metrics: DnsMetrics
) -> None:
    await ask(server, APP, "A")
    await ask(server, APP, "A", "tcp")
    await ask(server, "nope." + ZONE, "AAAA")
    await ask(server, APP, "TYPE65280")
    async with udp_client(server.port) as client:
        client.send(b"\x01")
        await client.ask(query_bytes()[:20])

    def value(**labels: str) -> float | None:
        return metrics.registry.get_sample_value("rideout_dns_queries_total", labels)

    assert value(qtype="A", rcode="NOERROR", transport="udp") == 1
    assert value(qtype="A", rcode="NOERROR", transport="tcp") == 1
    assert value(qtype="AAAA", rcode="NXDOMAIN", transport="udp") == 1
    assert value(qtype="other", rcode="NOERROR", transport="udp") == 1
    assert value(qtype="none", rcode="FORMERR", transport="udp") == 1
    dropped = metrics.registry.get_sample_value("rideout_dns_dropped_total", {"reason": "short"})
    assert dropped == 1


def test_code_tables() -> None:
    assert [rcode_number(n) for n in ("NOERROR", "formerr", "SERVFAIL", "NXDOMAIN")] == [0, 1, 2, 3]
    assert [rcode_number(n) for n in ("NOTIMP", "REFUSED", "BADVERS")] == [4, 5, 16]
    assert [qtype_number(t) for t in ("A", "aaaa", "TXT", "28", "TYPE65280", "ANY")] == [
        1,
        28,
        16,
        28,
        65280,
        255,
    ]
    assert [qtype_name(n) for n in (1, 16, 28, 255, 65280)] == [
        "A",
        "TXT",
        "AAAA",
        "ANY",
        "TYPE65280",
    ]
    for bad in ("", "BOGUS", "0", "65536", "-1", "١"):
        with pytest.raises(ValueError, match="DNS type"):
            qtype_number(bad)
    with pytest.raises(ValueError, match="unknown DNS rcode"):
        rcode_number("NOPE")
    assert normalize_name([b"AuCtIoN", b"x.y", b"\x00"]) == "auction.x\\046y.\\000"
    assert normalize_name([]) == "."


# --------------------------------------------------------------------------- dig


@pytest.mark.skipif(
    shutil.which("dig") is None, reason="dig (dnsutils / bind9-dnsutils) is not installed"
)
async def test_dig_gets_an_authoritative_answer(server: DnsServer) -> None:
    async def dig(*args: str) -> str:
        process = await asyncio.create_subprocess_exec(
            "dig", "@127.0.0.1", "-p", str(server.port), "+time=2", "+tries=1", *args,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        )  # fmt: skip
        out, _ = await asyncio.wait_for(process.communicate(), 10)
        assert process.returncode == 0, out
        return out.decode()

    out = await dig(APP)
    assert "status: NOERROR" in out
    assert "flags: qr aa rd;" in out
    for address in PRIMARY:
        assert address in out
    assert (await dig("+short", APP, "TXT")).strip() == '"region=us-east-1"'
    assert "status: NXDOMAIN" in await dig("nope." + ZONE)
    # dig retries over TCP when the UDP answer comes back truncated.
    big = await dig("+noedns", "big." + ZONE)
    assert "Truncated, retrying in TCP mode" in big
    assert "ANSWER: 40" in big


# --------------------------------------------------------------------------- fuzz

_VALID = query_bytes()
_mutated = st.tuples(
    st.integers(0, len(_VALID)), st.binary(min_size=1, max_size=8), st.integers(0, len(_VALID))
).map(lambda t: (_VALID[: t[0]] + t[1] + _VALID[t[0] + len(t[1]) :])[: max(t[2], 12)])
_headed = st.tuples(
    st.integers(0, 0xFFFF), st.integers(0, 0x7FFF), st.integers(0, 3), st.binary(max_size=300)
).map(lambda t: struct.pack("!HHHHHH", t[0], t[1], t[2], 0, 0, 0) + t[3])
packets = st.one_of(st.binary(max_size=600), _mutated, _headed)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def fuzz_server() -> AsyncIterator[DnsServer]:
    """Answering from precomputed replies (test_wire.py compares both paths on such bytes)."""
    zone = StubZone()
    port = free_port("127.0.0.1", udp=True)
    async with DnsServer(zone, "127.0.0.1", port, generation=zone.generation) as server:
        yield server


@pytest.mark.asyncio(loop_scope="module")
@settings(
    max_examples=examples(200),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(packet=packets)
async def test_no_datagram_stops_the_server(fuzz_server: DnsServer, packet: bytes) -> None:
    async with udp_client(fuzz_server.port) as client:
        client.send(packet)
        ident = 0xBEEE if packet[:2] == b"\xbe\xef" else 0xBEEF
        reply, before = await client.ask(query_bytes(ident=ident))
    assert dns.message.from_wire(reply).rcode() == dns.rcode.NOERROR
    for other in before:  # whatever the garbage got back is a well-formed DNS response
        message = dns.message.from_wire(other)
        assert message.flags & dns.flags.QR


# --------------------------------------------------------------------------- records.py


async def test_the_records_module_answers_through_the_server(
    records_resolver: RecordsResolver,
) -> None:
    r = records_resolver
    async with DnsServer(r, "127.0.0.1", 0) as server:
        response = await ask(server, APP)
        assert response.flags & dns.flags.AA
        assert addresses(response) == sorted(PRIMARY)
        assert response.answer[0].ttl == 1
        txt = await ask(server, APP.upper(), "TXT", "tcp")
        assert [rd.strings for rd in txt.answer[0]] == [
            (b"region=us-east-1 reason=primary-healthy",)
        ]
        # Failover: the primary's health check fails; the next query gets the secondary.
        r.healthy["us-east-1"] = False
        assert addresses(await ask(server, APP)) == sorted(SECONDARY)
        r.healthy["us-east-1"] = True
        r.evacuated.add("us1-az1")
        assert addresses(await ask(server, APP)) == [PRIMARY[1]]
        nodata = await ask(server, APP, "AAAA")
        assert nodata.rcode() == dns.rcode.NOERROR
        assert nodata.answer == []
        [soa] = nodata.authority
        assert str(soa[0].mname) == f"ns.{APP}."
        nx = await ask(server, "nope." + APP)
        assert nx.rcode() == dns.rcode.NXDOMAIN
        assert (await ask(server, "example.com")).rcode() == dns.rcode.REFUSED
        ns = await ask(server, APP, "NS")
        assert [str(rd.target) for rd in ns.answer[0]] == [f"ns.{APP}."]
