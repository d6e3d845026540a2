"""The client's DNS wire format: queries read by dnslib, answers built by dnslib and by hand.

Every malformed or foreign message must raise :class:`MalformedResponse` or
:class:`Mismatch`, never another exception; a valid answer must read as dnspython
reads it.
"""

from __future__ import annotations

import struct

import dns.message
import dns.rdatatype
import pytest
from dnslib import CLASS, CNAME, QTYPE, RR, TXT, A, DNSHeader, DNSQuestion, DNSRecord
from hypothesis import given
from hypothesis import strategies as st

from rideout.client._dnswire import (
    Answer,
    MalformedResponse,
    Mismatch,
    encode_query,
    parse_response,
)
from rideout.client.errors import ClientError
from rideout.errors import InvalidArgument

NAME = "auction.rideout.test"
QID = 0x1234


def reply(*records: RR, name: str = NAME, qid: int = QID) -> DNSRecord:
    """dnslib's reply to our query for ``name``, with ``records`` in the answer section."""
    response = DNSRecord.parse(encode_query(name, qid)).reply()
    for record in records:
        response.add_answer(record)
    return response


def a(owner: str, address: str, ttl: int = 60) -> RR:
    return RR(owner, QTYPE.A, rdata=A(address), ttl=ttl)


def cname(owner: str, target: str, ttl: int = 60) -> RR:
    return RR(owner, QTYPE.CNAME, rdata=CNAME(target), ttl=ttl)


def header(qid: int = QID, flags: int = 0x8180, qdcount: int = 1, ancount: int = 0) -> bytes:
    return struct.pack("!6H", qid, flags, qdcount, ancount, 0, 0)


QUESTION = b"\x07auction\x07rideout\x04test\x00\x00\x01\x00\x01"  # at offset 12


def record(owner: bytes, rtype: int, rdata: bytes, ttl: int = 60, rclass: int = 1) -> bytes:
    return owner + struct.pack("!HHIH", rtype, rclass, ttl, len(rdata)) + rdata


def by_hand(*records: bytes, flags: int = 0x8180) -> bytes:
    """A response to our query with hand-made answer records (``\\xc0\\x0c`` is NAME)."""
    return header(flags=flags, ancount=len(records)) + QUESTION + b"".join(records)


PTR = b"\xc0\x0c"  # a compression pointer to the question's name


# --------------------------------------------------------------------------- queries


def test_query_as_dnslib_reads_it() -> None:
    query = DNSRecord.parse(encode_query(NAME, QID))
    assert query.header.id == QID
    assert (query.header.qr, query.header.opcode, query.header.rd) == (0, 0, 1)
    assert (query.header.q, query.header.a, query.header.auth, query.header.ar) == (1, 0, 0, 0)
    assert str(query.q.qname) == NAME + "."
    assert (query.q.qtype, query.q.qclass) == (QTYPE.A, CLASS.IN)
    assert encode_query(NAME + ".", 0) == encode_query(NAME, 0)  # no EDNS, a trailing dot is fine
    assert encode_query("x", 0xFFFF)[:2] == b"\xff\xff"


@pytest.mark.parametrize(
    "name",
    ["", ".", "a..b", ".a", "a.b..", "é.test", "x" * 64 + ".test", ("a" * 49 + ".") * 5 + "abcd"],
)
def test_bad_names_are_refused(name: str) -> None:
    with pytest.raises(InvalidArgument):
        encode_query(name, 1)


def test_longest_names() -> None:
    longest = ("a" * 49 + ".") * 5 + "abc"  # 253 characters
    assert len(longest) == 253
    assert str(DNSRecord.parse(encode_query(longest + ".", 1)).q.qname) == longest + "."
    assert DNSRecord.parse(encode_query("x" * 63, 1)).q.qname.label == (b"x" * 63,)


@pytest.mark.parametrize("qid", [-1, 0x10000])
def test_query_id_is_16_bits(qid: int) -> None:
    with pytest.raises(ValueError, match="query id"):
        encode_query(NAME, qid)


# --------------------------------------------------------------------------- answers


def test_answer_in_order_without_duplicates_and_smallest_ttl() -> None:
    wire = reply(
        a(NAME, "127.0.1.2", 30), a(NAME, "127.0.1.1", 20), a(NAME, "127.0.1.2", 40)
    ).pack()
    assert parse_response(wire, QID, NAME) == Answer(0, False, ("127.0.1.2", "127.0.1.1"), 20)


def test_names_compare_without_case_or_trailing_dot() -> None:
    wire = reply(a("AUCTION.Rideout.TEST", "127.0.1.1"), name="Auction.RIDEOUT.test").pack()
    assert parse_response(wire, QID, "auction.rideout.test.").addresses == ("127.0.1.1",)


def test_cname_chain_is_followed_with_its_ttls() -> None:
    wire = reply(
        cname(NAME, "alias.rideout.test", 300),
        cname("alias.rideout.test", "Edge.Region.test", 15),
        a("other.test", "127.9.9.9", 1),  # someone else's A record: not the answer
        a("edge.region.test", "127.0.2.1", 90),
        a("edge.region.test", "127.0.2.2", 60),
    ).pack()
    assert parse_response(wire, QID, NAME) == Answer(0, False, ("127.0.2.1", "127.0.2.2"), 15)


def test_a_records_of_the_name_win_over_a_cname() -> None:
    wire = reply(cname(NAME, "alias.test", 5), a(NAME, "127.0.1.1", 50)).pack()
    assert parse_response(wire, QID, NAME) == Answer(0, False, ("127.0.1.1",), 50)


@pytest.mark.parametrize(
    "records",
    [
        [],
        [cname(NAME, "nowhere.test")],  # a chain that ends without an A record
        [cname(NAME, "b.test"), cname("b.test", NAME)],  # a CNAME loop
        [cname(NAME, NAME)],
        [a("other.test", "127.0.1.1")],
    ],
)
def test_no_address(records: list[RR]) -> None:
    assert parse_response(reply(*records).pack(), QID, NAME) == Answer(0, False, (), 0)


def test_other_types_and_classes_are_skipped() -> None:
    wire = by_hand(
        record(PTR, 16, b"\x03txt"),  # TXT
        record(PTR, 28, bytes(16)),  # AAAA
        record(PTR, 1, b"\x7f\x00\x00\x09\x00", rclass=3),  # a CHAOS "A": not ours to check
        record(PTR, 1, b"\x7f\x00\x00\x01", ttl=7),
    )
    assert parse_response(wire, QID, NAME) == Answer(0, False, ("127.0.0.1",), 7)
    extra = reply(a(NAME, "127.0.1.1"))
    extra.add_ar(RR("x.test", QTYPE.TXT, rdata=TXT("additional, not read")))
    assert parse_response(extra.pack() + b"trailing junk", QID, NAME).addresses == ("127.0.1.1",)


def test_ttl_with_the_top_bit_set_reads_as_zero() -> None:
    wire = by_hand(record(PTR, 1, b"\x7f\x00\x00\x01", ttl=0x80000000))
    assert parse_response(wire, QID, NAME).ttl == 0


@pytest.mark.parametrize(("rcode", "truncated"), [(2, False), (3, False), (5, True), (4, False)])
def test_rcode_and_tc_bit(rcode: int, truncated: bool) -> None:
    response = reply()
    response.header.rcode = rcode
    response.header.tc = int(truncated)
    assert parse_response(response.pack(), QID, NAME) == Answer(rcode, truncated, (), 0)


def test_truncated_answer_section_is_not_read() -> None:
    wire = by_hand(b"\xc0", flags=0x8380)  # TC set, the record cut off
    assert parse_response(wire, QID, NAME) == Answer(0, True, (), 0)


@pytest.mark.parametrize("rcode", [1, 2, 4, 5])
def test_questionless_errors_are_answers(rcode: int) -> None:
    wire = header(flags=0x8180 | rcode, qdcount=0)
    assert parse_response(wire, QID, NAME) == Answer(rcode, False, (), 0)


# ------------------------------------------------------------------------- compression


def test_compression_pointers() -> None:
    # The CNAME's target is "edge" + a pointer to "rideout.test" in the question (offset
    # 20); the A record's owner is a pointer to that target: a chain of two pointers.
    target_at = FIRST + 2 + 10  # after the CNAME's owner pointer and fixed part
    wire = by_hand(
        record(PTR, 5, b"\x04edge\xc0\x14"),
        record(struct.pack("!H", 0xC000 | target_at), 1, b"\x7f\x00\x00\x05"),
    )
    assert parse_response(wire, QID, NAME).addresses == ("127.0.0.5",)
    packed = reply(cname(NAME, "a.rideout.test"), a("a.rideout.test", "127.0.0.6")).pack()
    assert packed.count(b"\xc0") >= 3  # dnslib compressed every name
    assert parse_response(packed, QID, NAME).addresses == ("127.0.0.6",)


FIRST = 12 + len(QUESTION)  # where the first answer record starts


@pytest.mark.parametrize(
    "owner",
    [
        b"\x03abc" + struct.pack("!H", 0xC000 | FIRST),  # to the start of its own name
        b"\x03abc" + struct.pack("!H", 0xC000 | FIRST + 4),  # to itself
        struct.pack("!H", 0xC000 | FIRST + 2),  # forwards
        b"\xc0\x00",  # into the header: reads header bytes as labels, then a bad label
    ],
)
def test_pointers_must_point_backwards(owner: bytes) -> None:
    wire = by_hand(record(owner, 1, b"\x7f\x00\x00\x01"))
    with pytest.raises(MalformedResponse):
        parse_response(wire, QID, NAME)


def test_pointer_loop() -> None:
    # A TXT record (skipped) holds "x" + a pointer to the next record's owner, which is a
    # pointer back into that TXT data: the second pointer is the loop, and is refused.
    data_at = FIRST + 2 + 10
    second = data_at + 4
    loop = b"\x01x" + struct.pack("!H", 0xC000 | second)
    wire = by_hand(
        record(PTR, 16, loop), record(struct.pack("!H", 0xC000 | data_at), 1, b"\x7f\0\0\1")
    )
    with pytest.raises(MalformedResponse, match="backwards"):
        parse_response(wire, QID, NAME)
    self_loop = header() + b"\xc0\x0c\x00\x01\x00\x01"  # the question points at itself
    with pytest.raises(MalformedResponse, match="backwards"):
        parse_response(self_loop, QID, NAME)


# ---------------------------------------------------------------------------- mismatch


@pytest.mark.parametrize(
    "wire",
    [
        header(qid=QID + 1) + QUESTION,  # another id
        header(flags=0x0100) + QUESTION,  # QR=0: a query, not a response
        header(flags=0x8980) + QUESTION,  # opcode 1
        header(qdcount=2) + QUESTION + QUESTION,
        header(qdcount=0),  # NOERROR needs the question
        header() + b"\x05other\x07rideout\x04test\x00\x00\x01\x00\x01",
        header() + QUESTION[:-4] + b"\x00\x1c\x00\x01",  # AAAA
        header() + QUESTION[:-4] + b"\x00\x01\x00\x03",  # CHAOS
    ],
)
def test_foreign_messages_mismatch(wire: bytes) -> None:
    with pytest.raises(Mismatch):
        parse_response(wire, QID, NAME)
    assert not issubclass(Mismatch, MalformedResponse)
    assert not issubclass(MalformedResponse, Mismatch)
    for error in (Mismatch, MalformedResponse):
        assert issubclass(error, ClientError)
        assert issubclass(error, ValueError)


def test_dnslib_reply_to_another_query_mismatches() -> None:
    with pytest.raises(Mismatch):
        parse_response(reply(a(NAME, "127.0.0.1"), qid=7).pack(), QID, NAME)
    with pytest.raises(Mismatch):
        parse_response(reply(a("x.test", "127.0.0.1"), name="x.test").pack(), QID, NAME)


# --------------------------------------------------------------------------- malformed


@pytest.mark.parametrize(
    ("wire", "match"),
    [
        (by_hand(record(PTR, 1, b"\x7f\x00\x00\x01\x00")), "not 4"),
        (by_hand(record(PTR, 1, b"\x7f\x00\x00")), "not 4"),
        (by_hand(record(PTR, 5, b"\x01x\x00junk")), "one name"),
        (by_hand(record(b"\x40abc", 1, b"\x7f\x00\x00\x01")), "reserved type 1"),
        (by_hand(record(b"\x80abc", 1, b"\x7f\x00\x00\x01")), "reserved type 2"),
        (by_hand(record(b"\x3f" + b"x" * 63, 1, b"")[:40]), "inside a label"),
        (by_hand(b"\xc0"), "inside a compression pointer"),
        (by_hand(PTR + b"\x00\x01\x00"), "inside a record"),
        (by_hand(PTR + b"\x00\x01\x00\x01\x00\x00\x00\x01\x00\x04\x7f"), "past the end"),
        (header() + QUESTION[:-2], "inside the question"),
        (header() + QUESTION[:10], "inside a label"),
        (header() + QUESTION[:21], "inside a name"),
        (b"\x12\x34\x81\x80\x00\x01", "shorter than a DNS header"),
    ],
)
def test_malformed(wire: bytes, match: str) -> None:
    with pytest.raises(MalformedResponse, match=match):
        parse_response(wire, QID, NAME)


def test_names_longer_than_255_bytes() -> None:
    # Five 63-byte labels (320 bytes) in one owner name, the last through a pointer.
    label = b"\x3f" + b"x" * 63
    owner1 = label * 3 + b"\x00"
    owner2 = label * 2 + struct.pack("!H", 0xC000 | FIRST)
    wire = by_hand(record(owner1, 16, b""), record(owner2, 1, b"\x7f\x00\x00\x01"))
    with pytest.raises(MalformedResponse, match="longer than 255"):
        parse_response(wire, QID, NAME)


def test_every_prefix_fails_cleanly() -> None:
    wires = [
        reply(cname(NAME, "alias.rideout.test"), a("alias.rideout.test", "127.0.0.1")).pack(),
        by_hand(record(PTR, 1, b"\x7f\x00\x00\x01"), record(b"\x01x\x00", 16, b"\x01y")),
    ]
    for wire in wires:
        assert parse_response(wire, QID, NAME).rcode == 0
        for n in range(len(wire)):
            with pytest.raises((MalformedResponse, Mismatch)):
                parse_response(wire[:n], QID, NAME)


# ---------------------------------------------------------------------------- properties


def check_clean(data: bytes, qid: int = QID) -> None:
    try:
        answer = parse_response(data, qid, NAME)
    except (MalformedResponse, Mismatch):
        return
    assert isinstance(answer, Answer)
    assert all(isinstance(address, str) for address in answer.addresses)
    assert 0 <= answer.ttl <= 0x7FFFFFFF


@given(st.binary(max_size=200))
def test_arbitrary_bytes(data: bytes) -> None:
    check_clean(data)
    check_clean(data, int.from_bytes(data[:2], "big") if len(data) >= 2 else QID)
    check_clean(header(ancount=len(data) % 4) + QUESTION + data)
    check_clean(header(flags=0x8183, ancount=3) + data)


VALID = reply(
    cname(NAME, "alias.rideout.test", 30),
    a("alias.rideout.test", "127.0.0.1", 40),
    a("alias.rideout.test", "127.0.0.2", 50),
).pack()


@given(
    st.lists(
        st.tuples(st.integers(0, len(VALID) - 1), st.integers(0, 255), st.sampled_from("sid")),
        min_size=1,
        max_size=6,
    )
)
def test_mutations_of_a_valid_response(edits: list[tuple[int, int, str]]) -> None:
    data = bytearray(VALID)
    for position, value, kind in edits:
        at = min(position, len(data))
        if kind == "s" and at < len(data):
            data[at] = value
        elif kind == "i":
            data.insert(at, value)
        elif at < len(data):
            del data[at]
    check_clean(bytes(data))


addresses = st.lists(
    st.tuples(st.integers(0, 255), st.integers(0, 255), st.integers(0, 255), st.integers(0, 255)),
    min_size=0,
    max_size=8,
).map(lambda quads: [".".join(map(str, quad)) for quad in quads])
ttls = st.integers(0, 0x7FFFFFFF)


@given(
    addresses,
    st.lists(ttls, min_size=8, max_size=8),
    st.lists(ttls, max_size=3),
    st.booleans(),
)
def test_agrees_with_dnspython(
    found: list[str], a_ttls: list[int], cname_ttls: list[int], noise: bool
) -> None:
    chain = [NAME] + [f"hop{i}.rideout.test" for i in range(len(cname_ttls))]
    records = [
        cname(owner, chain[i + 1], ttl)
        for i, (owner, ttl) in enumerate(zip(chain, cname_ttls, strict=False))
    ]
    if noise:
        records.insert(0, a("noise.rideout.test", "127.9.9.9", 1))
        records.append(RR(chain[-1], QTYPE.TXT, rdata=TXT("noise"), ttl=1))
    records += [a(chain[-1], address, ttl) for address, ttl in zip(found, a_ttls, strict=False)]
    wire = bytes(
        DNSRecord(DNSHeader(id=QID, qr=1, rd=1, ra=1), q=DNSQuestion(NAME), rr=records).pack()
    )
    ours = parse_response(wire, QID, NAME)
    message = dns.message.from_wire(wire)
    assert isinstance(message, dns.message.QueryMessage)
    theirs = message.resolve_chaining()
    if theirs.answer is None:
        assert ours == Answer(0, False, (), 0)
        assert not found
    else:
        assert theirs.answer.rdtype == dns.rdatatype.A
        assert ours.addresses == tuple(rdata.address for rdata in theirs.answer)
        assert ours.ttl == theirs.minimum_ttl
