"""Precomputed replies (`rideout.dns.wire`): the cheap parse; the same replies as the full path."""

from __future__ import annotations

import struct

import dns.edns
import dns.flags
import dns.message
import dns.rcode
import dns.rdatatype
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rideout.dns.server import DnsMetrics, DnsServer
from rideout.dns.wire import TemplateCache, read_query, rotations
from tests.conftest import examples
from tests.dns.conftest import APP, PRIMARY, SECONDARY, ZONE, StubZone


def make_query(
    name: str = APP,
    rdtype: str = "A",
    *,
    edns: int | None = None,
    payload: int = 1232,
    do: bool = False,
    rd: bool = True,
    cd: bool = False,
    ident: int = 4242,
    options: list[dns.edns.Option] | None = None,
) -> bytes:
    q = dns.message.make_query(
        name, rdtype, use_edns=edns if edns is not None else False, payload=payload,
        want_dnssec=do, options=options,
    )  # fmt: skip
    q.id = ident
    if not rd:
        q.flags &= ~dns.flags.RD
    if cd:
        q.flags |= dns.flags.CD
    return q.to_wire()


def servers(zone: StubZone) -> tuple[DnsServer, DnsServer, DnsMetrics]:
    """Two unstarted servers on one zone: the full path, and precomputed replies."""
    metrics = DnsMetrics()
    full = DnsServer(zone, port=0)
    cached = DnsServer(zone, port=0, metrics=metrics, generation=zone.generation)
    return full, cached, metrics


def same(a: bytes | None, b: bytes | None) -> None:
    """Two replies say the same: as parsed, names compared without case (compression and
    the case of names outside the question may differ), and each RRset's records as a
    set (a cached reply rotates an address set)."""
    assert (a is None) == (b is None)
    if a is None or b is None:
        return
    assert a[:2] == b[:2]
    left, right = dns.message.from_wire(bytes(a)), dns.message.from_wire(bytes(b))
    assert left.question == right.question
    assert [q.name.labels for q in left.question] == [q.name.labels for q in right.question]
    assert sorted_text(left) == sorted_text(right)


def sorted_text(message: dns.message.Message) -> list[list[str]]:
    """The message as text, lowercased, cut at its section headers (``;ANSWER``...),
    each section's lines in sorted order."""
    sections: list[list[str]] = [[]]
    for line in message.to_text().lower().splitlines():
        if line.startswith(";"):
            sections.append([line])
        else:
            sections[-1].append(line)
    return [sorted(section) for section in sections]


def test_an_address_set_is_served_in_turn_in_each_rotation() -> None:
    full, cached, _ = servers(StubZone())
    firsts = []
    for ident in range(6):
        reply = cached.handle(make_query(APP, ident=ident), "udp")
        assert reply is not None
        (rrset,) = dns.message.from_wire(reply).answer
        assert sorted(r.address for r in rrset) == sorted(PRIMARY)
        firsts.append(next(iter(rrset)).address)
        same(reply, full.handle(make_query(APP, ident=ident), "udp"))
    assert firsts == [PRIMARY[0], PRIMARY[1]] * 3


def test_only_an_address_set_of_the_question_rotates() -> None:
    record = b"\xc0\x0c\x00\x01\x00\x01\x00\x00\x00\x05\x00\x04" + bytes(4)
    question_tail = b"\x00\x01\x00\x01"
    assert len(rotations(question_tail + record * 3, 3)) == 3
    assert rotations(question_tail + record, 1) == ()  # one address: nothing to turn
    other = record[:2] + b"\x00\x1c" + record[4:]  # not an A record
    assert rotations(question_tail + record + other, 2) == ()
    ttl = record[:6] + b"\x00\x00\x00\x09" + record[10:]
    assert rotations(question_tail + record + ttl, 2) == ()
    assert rotations(question_tail + record, 2) == ()  # shorter than its count says


# --------------------------------------------------------------------------- read_query


def test_an_ordinary_query_is_read_and_its_key_ignores_case_and_id() -> None:
    plain = read_query(make_query(ident=1))
    shouted = read_query(make_query(APP.upper(), ident=2))
    assert plain is not None
    assert shouted is not None
    assert plain.key == shouted.key
    assert (plain.name_end, plain.udp_size, plain.edns) == (12 + len(APP) + 2, 512, False)
    edns = read_query(make_query(edns=0, payload=4096))
    assert edns is not None
    assert (edns.udp_size, edns.edns) == (4096, True)
    assert edns.key != plain.key
    keys = {
        read_query(make_query(**kw)).key  # type: ignore[union-attr, arg-type]
        for kw in ({}, {"rd": False}, {"cd": True}, {"edns": 0}, {"edns": 0, "do": True})
    }
    assert len(keys) == 5  # every flag the reply copies is part of the key
    assert read_query(make_query(rdtype="TXT")).key != plain.key  # type: ignore[union-attr]


def test_options_are_ignored_when_whole() -> None:
    cookie = dns.edns.GenericOption(dns.edns.OptionType.COOKIE, b"\x01" * 8)
    query = read_query(make_query(edns=0, options=[cookie]))
    assert query is not None
    assert query.key == read_query(make_query(edns=0)).key  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "packet",
    [
        make_query()[:-1],  # cut short
        make_query() + b"\x00",  # trailing garbage
        make_query(edns=1),  # EDNS version 1: BADVERS, the full path's
        make_query()[:2] + b"\x28\x00" + make_query()[4:],  # opcode 5 (UPDATE)
        make_query()[:2] + b"\x81\x00" + make_query()[4:],  # a response
        make_query()[:4] + b"\x00\x02" + make_query()[6:],  # two questions
        make_query()[:12] + b"\xc0\x0c" + make_query()[-4:],  # a pointer in the question
        make_query(edns=0)[:-2] + b"\x00\x05",  # OPT RDLEN past the end
    ],
)
def test_anything_unusual_is_left_to_the_full_path(packet: bytes) -> None:
    assert read_query(packet) is None


# --------------------------------------------------------------------------- replies


QUESTIONS = [
    (APP, "A"), (APP.upper(), "A"), ("AuCtIoN.RiDeOuT.tEsT", "TXT"), (ZONE, "SOA"),
    (ZONE, "NS"), (f"ns1.{ZONE}", "A"), (f"nope.{ZONE}", "A"), (f"NoPe.{ZONE}", "AAAA"),
    ("example.com", "A"), (f"big.{ZONE}", "A"), (f"long.{ZONE}", "TXT"), (APP, "ANY"),
    (APP, "AXFR"), (APP, "OPT"), (APP, "MAILA"), (APP, "TYPE65280"),
]  # fmt: skip


@settings(max_examples=examples(300), deadline=None)
@given(
    question=st.sampled_from(QUESTIONS),
    edns=st.sampled_from([None, 0]),
    payload=st.sampled_from([0, 512, 600, 1232, 4096, 65535]),
    do=st.booleans(),
    rd=st.booleans(),
    cd=st.booleans(),
    ident=st.integers(0, 0xFFFF),
)
def test_a_precomputed_reply_says_what_the_full_path_says(
    question: tuple[str, str],
    edns: int | None,
    payload: int,
    do: bool,
    rd: bool,
    cd: bool,
    ident: int,
) -> None:
    full, cached, _ = servers(StubZone())
    name, rdtype = question
    packet = make_query(
        name, rdtype, edns=edns, payload=payload, do=do and edns is not None, rd=rd, cd=cd,
        ident=ident,
    )  # fmt: skip
    for transport in ("udp", "tcp"):
        cached.handle(packet, transport)  # the first builds the template
        same(cached.handle(packet, transport), full.handle(packet, transport))


def test_replies_come_from_the_cache_and_echo_the_querys_spelling() -> None:
    zone = StubZone()
    _, cached, metrics = servers(zone)
    for ident in range(50):
        reply = cached.handle(make_query("AUCTION.rideout.TEST", ident=ident), "udp")
        assert reply is not None
        assert reply[:2] == struct.pack("!H", ident)
        message = dns.message.from_wire(reply)
        assert message.question[0].name.to_text() == "AUCTION.rideout.TEST."
        assert [rrset.name.to_text() for rrset in message.answer] == ["AUCTION.rideout.TEST."]
    assert zone.asked.count((APP, "A")) == 1  # resolved once, then copied
    value = metrics.registry.get_sample_value
    assert value("rideout_dns_answers_total", {"transport": "udp", "path": "cache"}) == 50
    assert value("rideout_dns_queries_total", {"qtype": "A", "rcode": "NOERROR", "transport": "udp"}) == 50  # fmt: skip
    assert value("rideout_dns_cached_answers") == 1


def test_a_new_generation_rebuilds_the_replies() -> None:
    zone = StubZone()
    _, cached, metrics = servers(zone)

    def answer() -> list[str]:
        reply = dns.message.from_wire(bytes(cached.handle(make_query(), "udp") or b""))
        return sorted(rd.address for rrset in reply.answer for rd in rrset)

    assert answer() == sorted(PRIMARY)
    zone.primary_healthy = False
    assert answer() == sorted(SECONDARY)
    assert metrics.registry.get_sample_value("rideout_dns_cache_rebuilds_total") == 2


def test_oversized_answers_are_truncated_per_the_clients_size_and_counted() -> None:
    _, cached, metrics = servers(StubZone(big=60))  # ~1 KB of A records
    for payload, truncated in [(0, True), (512, True), (1232, False), (4096, False)]:
        packet = make_query(f"big.{ZONE}", edns=None if payload == 0 else 0, payload=payload)
        reply = dns.message.from_wire(bytes(cached.handle(packet, "udp") or b""))
        assert bool(reply.flags & dns.flags.TC) is truncated, payload
        assert len(reply.answer) == (0 if truncated else 1)
        tcp = dns.message.from_wire(bytes(cached.handle(packet, "tcp") or b""))
        assert not tcp.flags & dns.flags.TC
        assert len(tcp.answer[0]) == 60
    assert metrics.registry.get_sample_value("rideout_dns_truncated_total", {"transport": "udp"}) == 2  # fmt: skip


def test_the_cache_is_bounded_and_servfail_is_never_kept() -> None:
    zone = StubZone()
    full = DnsServer(zone, port=0)
    cached = DnsServer(zone, port=0, generation=zone.generation, max_cached_answers=3)
    for i in range(10):
        packet = make_query(f"n{i}.{ZONE}")
        same(cached.handle(packet, "udp"), full.handle(packet, "udp"))
    assert cached.cache is not None
    assert len(cached.cache) == 3
    zone.fail = True
    assert dns.message.from_wire(bytes(cached.handle(make_query(), "udp") or b"")).rcode() == dns.rcode.SERVFAIL  # fmt: skip
    zone.fail = False  # a new generation, and the SERVFAIL was not kept anyway
    assert dns.message.from_wire(bytes(cached.handle(make_query(), "udp") or b"")).rcode() == dns.rcode.NOERROR  # fmt: skip


def test_template_cache_takes_generations_by_equality() -> None:
    token = [("a", 1)]
    built: list[bytes] = []

    def build(query: bytes, tcp: bool) -> tuple[bytes | None, str, str]:
        built.append(query)
        return None, "", "SERVFAIL"

    cache = TemplateCache(lambda: list(token), build)
    first = cache.current()
    assert cache.current() is first  # an equal value, a new object: the same generation
    token.append(("b", 2))
    assert cache.current() is not first
    assert cache.rebuilds == 2


# --------------------------------------------------------------------------- fuzz

_VALID = make_query(edns=0)
_mutations = st.tuples(
    st.integers(0, len(_VALID)), st.binary(min_size=1, max_size=6), st.integers(12, len(_VALID) + 4)
).map(lambda t: (_VALID[: t[0]] + t[1] + _VALID[t[0] + len(t[1]) :])[: t[2]])


@settings(max_examples=examples(500), deadline=None)
@given(packet=st.one_of(st.binary(max_size=300), _mutations))
def test_any_bytes_get_the_full_paths_reply_or_none_and_never_an_exception(packet: bytes) -> None:
    full, cached, _ = servers(StubZone())
    for transport in ("udp", "tcp"):
        cached.handle(packet, transport)
        same(cached.handle(packet, transport), full.handle(packet, transport))
