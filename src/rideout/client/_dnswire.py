"""The DNS wire format of one A lookup: the query out, its answer in (sans-I/O).

:func:`encode_query` writes a standard recursive query for a name's A records;
:func:`parse_response` reads the answer to it. Only what a client asking one server
needs is read: the header, the question and the answer section (never authority or
additional). Every read is bounds-checked: bad bytes raise :class:`MalformedResponse`,
a well-formed message that does not answer the query (another id or question, not a
response) raises :class:`Mismatch`, which a UDP caller ignores and keeps waiting.
Names are compared as lower-case wire bytes (RFC 4343: ASCII case only).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Final

from rideout.client.errors import ClientError
from rideout.errors import InvalidArgument

__all__ = ["Answer", "MalformedResponse", "Mismatch", "encode_query", "parse_response"]

_TYPE_A: Final = 1
_TYPE_CNAME: Final = 5
_CLASS_IN: Final = 1
_QUESTION_TAIL: Final = b"\x00\x01\x00\x01"  # QTYPE A, QCLASS IN
_HEADER: Final = struct.Struct("!HHHH")  # id, flags, QDCOUNT, ANCOUNT
_RECORD: Final = struct.Struct("!HHIH")  # type, class, TTL, RDLENGTH
# FORMERR, SERVFAIL, NOTIMP, REFUSED: some servers answer them without the question.
_QUESTIONLESS_RCODES: Final = frozenset({1, 2, 4, 5})


class MalformedResponse(ClientError, ValueError):
    """Bytes that are not a well-formed DNS response."""


class Mismatch(ClientError, ValueError):
    """A well-formed message that is not the response to this query."""


@dataclass(frozen=True, slots=True)
class Answer:
    """A response: its rcode, its TC bit, the name's addresses and their TTL (0 if none).

    A truncated response's answer section is not read (ask again over TCP).
    """

    rcode: int
    truncated: bool
    addresses: tuple[str, ...]
    ttl: int


def _wire_name(name: str) -> bytes:
    """``name`` (a trailing dot allowed) as uncompressed wire labels.

    A name that cannot be asked (empty, an empty label or one over 63 bytes, over 253
    characters, not ASCII) raises :class:`~rideout.errors.InvalidArgument`.
    """
    text = name[:-1] if name.endswith(".") else name
    if not text.isascii():
        raise InvalidArgument(f"{name!r} is not an ASCII name (IDNA is not supported)")
    if len(text) > 253:
        raise InvalidArgument(f"{name[:20]!r}... is longer than 253 characters")
    wire = bytearray()
    for label in text.encode("ascii").split(b"."):
        if not 1 <= len(label) <= 63:
            raise InvalidArgument(f"{name!r} has a label of {len(label)} bytes (1 to 63 allowed)")
        wire.append(len(label))
        wire += label
    return bytes(wire) + b"\x00"


def encode_query(name: str, query_id: int) -> bytes:
    """A query for ``name``'s A records (opcode QUERY, RD set, no EDNS) with ``query_id``."""
    if not 0 <= query_id <= 0xFFFF:
        raise InvalidArgument(f"query id must be 0 to 65535, not {query_id!r}")
    header = query_id.to_bytes(2, "big") + b"\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00"
    return header + _wire_name(name) + _QUESTION_TAIL


def _read_name(data: bytes, pos: int) -> tuple[bytes, int]:
    """The name at ``pos`` (lower-case uncompressed wire form) and the offset after it.

    Each compression pointer must point before the stretch of name being read, so the
    targets strictly decrease and a pointer loop cannot be built.
    """
    wire = bytearray()
    end = -1  # the offset after the name: just past its first pointer, if it has one
    floor = pos
    while True:
        if pos >= len(data):
            raise MalformedResponse("the message ends inside a name")
        length = data[pos]
        if length >= 0xC0:
            if pos + 1 >= len(data):
                raise MalformedResponse("the message ends inside a compression pointer")
            target = (length & 0x3F) << 8 | data[pos + 1]
            if target >= floor:
                raise MalformedResponse("a compression pointer does not point backwards")
            if end < 0:
                end = pos + 2
            pos = floor = target
        elif length > 63:
            raise MalformedResponse(f"a name has a label of reserved type {length >> 6}")
        elif length == 0:
            return bytes(wire.lower()) + b"\x00", end if end >= 0 else pos + 1
        elif pos + 1 + length > len(data):
            raise MalformedResponse("the message ends inside a label")
        else:
            wire += data[pos : pos + 1 + length]
            if len(wire) > 254:
                raise MalformedResponse("a name is longer than 255 bytes")
            pos += 1 + length


def parse_response(data: bytes, query_id: int, name: str) -> Answer:
    """The answer in ``data`` to the A query ``query_id`` for ``name``.

    The addresses are the A records of the name or of the end of a CNAME chain found
    in the answer section, in order, without duplicates; the TTL is the smallest of
    those records and of the CNAMEs followed.
    """
    if len(data) < 12:
        raise MalformedResponse(f"a {len(data)}-byte message is shorter than a DNS header")
    ident, flags, qdcount, ancount = _HEADER.unpack_from(data)
    if ident != query_id or not flags & 0x8000 or flags & 0x7800:
        raise Mismatch("not a response to this query (id, QR or opcode)")
    rcode, truncated = flags & 0xF, bool(flags & 0x200)
    if qdcount == 0 and rcode in _QUESTIONLESS_RCODES:
        return Answer(rcode, truncated, (), 0)
    if qdcount != 1:
        raise Mismatch(f"the response has {qdcount} questions")
    qname, pos = _read_name(data, 12)
    if pos + 4 > len(data):
        raise MalformedResponse("the message ends inside the question")
    if qname != _wire_name(name).lower() or data[pos : pos + 4] != _QUESTION_TAIL:
        raise Mismatch("the response's question is not the query's")
    pos += 4
    if truncated:
        return Answer(rcode, True, (), 0)
    a_records: dict[bytes, list[tuple[str, int]]] = {}
    cnames: dict[bytes, tuple[bytes, int]] = {}
    for _ in range(ancount):
        owner, pos = _read_name(data, pos)
        if pos + 10 > len(data):
            raise MalformedResponse("the message ends inside a record")
        rtype, rclass, ttl, rdlength = _RECORD.unpack_from(data, pos)
        ttl = 0 if ttl > 0x7FFFFFFF else ttl  # RFC 2181 section 8
        start, pos = pos + 10, pos + 10 + rdlength
        if pos > len(data):
            raise MalformedResponse("a record's data runs past the end of the message")
        if rclass != _CLASS_IN:
            continue
        if rtype == _TYPE_A:
            if rdlength != 4:
                raise MalformedResponse(f"an A record has {rdlength} bytes of data, not 4")
            address = ".".join(map(str, data[start:pos]))
            a_records.setdefault(owner, []).append((address, ttl))
        elif rtype == _TYPE_CNAME:
            target, after = _read_name(data, start)
            if after != pos:
                raise MalformedResponse("a CNAME's data is not one name")
            cnames.setdefault(owner, (target, ttl))
    return _follow(rcode, qname, a_records, cnames)


def _follow(
    rcode: int,
    name: bytes,
    a_records: dict[bytes, list[tuple[str, int]]],
    cnames: dict[bytes, tuple[bytes, int]],
) -> Answer:
    """The A records of ``name``, or of where its CNAME chain leads (a loop: none)."""
    ttls: list[int] = []
    for _ in range(len(cnames) + 1):
        found = a_records.get(name)
        if found:
            addresses = tuple(dict.fromkeys(address for address, _ in found))
            return Answer(rcode, False, addresses, min(ttls + [ttl for _, ttl in found]))
        if name not in cnames:
            break
        name, cname_ttl = cnames[name]
        ttls.append(cname_ttl)
    return Answer(rcode, False, (), 0)
