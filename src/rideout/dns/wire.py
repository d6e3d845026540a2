"""Precomputed DNS answers: a query's header and question read without a DNS library.

The answer set changes only when health changes (a new DNS view), so for one view the
reply to a given question is always the same bytes but for the id, the RD and CD bits
and the spelling of the query name. :func:`read_query` reads just the header, the
question and an EDNS(0) OPT record of an ordinary query and gives the :class:`Query`'s
cache key; anything unusual (another opcode, several questions, a compression pointer
in the question, an EDNS version other than 0, records in other sections, trailing
bytes) gives None, and the caller answers it the slow way, with the full parser.

:class:`Template` is one cached reply split around the question name: a reply is
``id + head + the query's own name bytes + tail``. The name's length does not depend on
its case, so every offset in the template, compression pointers included, still holds;
pointers into the question name read the query's spelling (RFC 1035 compares names
without case, and RFC 4343 asks servers to preserve the query's case where they can).
The cache key holds the lowercased name, the type and class, whether the query had
an OPT record and its DO bit, and the RD and CD bits: every input the answer depends
on except the id, the name's case and (over UDP) the client's buffer size, which picks
between a template's whole and truncated forms.

:class:`TemplateCache` keeps one view's templates, bounded so that a flood of random
names cannot grow it without end (past the bound, queries take the slow path).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Final, NamedTuple

__all__ = [
    "MIN_UDP_PAYLOAD",
    "Query",
    "Template",
    "TemplateCache",
    "canonical_query",
    "read_query",
    "rotations",
]

MIN_UDP_PAYLOAD: Final = 512
_OPT_TYPE: Final = b"\x00\x29"
# Bytes 4..11 of the header of an ordinary query: one question, nothing else but an OPT.
_ONE_QUESTION: Final = b"\x00\x01\x00\x00\x00\x00"
_VARIANTS: Final = tuple(bytes((v,)) for v in range(16))


class Query(NamedTuple):
    """An ordinary query as :func:`read_query` found it."""

    key: bytes  # lowercased name + type + class + variant byte (see the module docstring)
    name_end: int  # offset just past the question name (it starts at 12)
    udp_size: int  # the client's UDP payload size: 512 without EDNS
    edns: bool  # whether the query had an OPT record


def read_query(data: bytes) -> Query | None:
    """The cache key of an ordinary query, or None when only the full parser may answer it."""
    n = len(data)
    if n < 17 or data[2] & 0xF8 or data[4:10] != _ONE_QUESTION:  # QR, opcode, counts
        return None
    arcount = data[10] << 8 | data[11]
    if arcount > 1:
        return None
    i = 12
    while True:
        length = data[i]
        if length == 0:
            break
        if length > 63:  # a pointer (or an obsolete label type) in the question
            return None
        i += length + 1
        if i >= n:
            return None
    end = i + 1
    if end - 12 > 255 or end + 4 > n:
        return None
    variant = (data[2] & 0x01) << 2 | (data[3] & 0x10) >> 1  # RD, CD
    pos = end + 4
    udp_size = MIN_UDP_PAYLOAD
    if arcount == 0:
        if pos != n:
            return None
    else:
        # OPT: root name, TYPE 41, CLASS = UDP size, TTL = ext-rcode, version, flags; RDLEN.
        if n < pos + 11 or data[pos] != 0 or data[pos + 1 : pos + 3] != _OPT_TYPE:
            return None
        if data[pos + 5] or data[pos + 6]:  # an extended rcode in a query, or version > 0
            return None
        udp_size = data[pos + 3] << 8 | data[pos + 4]
        variant |= 1 | (data[pos + 7] & 0x80) >> 6  # OPT present, DO
        rdlen = data[pos + 9] << 8 | data[pos + 10]
        j, stop = pos + 11, pos + 11 + rdlen
        if stop != n:
            return None
        while j < stop:  # options (cookies, padding, ...) are ignored, but must be whole
            if j + 4 > stop:
                return None
            j += 4 + (data[j + 2] << 8 | data[j + 3])
        if j != stop:
            return None
    key = data[12:end].lower() + data[end:pos] + _VARIANTS[variant]
    return Query(key, end, udp_size, bool(arcount))


def canonical_query(key: bytes, name_end: int, udp_size: int) -> bytes:
    """The query a template is built from: id 0, the key's flags, name, type, class, OPT."""
    variant = key[-1]
    flags = bytes(((variant & 0x04) >> 2, (variant & 0x08) << 1))
    question = key[: name_end - 12 + 4]
    if not variant & 1:
        return b"\x00\x00" + flags + _ONE_QUESTION + b"\x00\x00" + question
    opt = (
        b"\x00"
        + _OPT_TYPE
        + udp_size.to_bytes(2, "big")
        + b"\x00\x00"
        + bytes((0x80 if variant & 0x02 else 0, 0))
        + b"\x00\x00"
    )
    return b"\x00\x00" + flags + _ONE_QUESTION + b"\x00\x01" + question + opt


@dataclass(frozen=True, slots=True)
class Template:
    """One cached reply, whole and truncated (TC=1, records removed), and what it says.

    An answer of several address records of one name is served in turn in each of its
    rotations (``tails``), as Route 53 answers a multi-value record in varying order and
    BIND's ``rrset-order cyclic`` does: clients that take the first address spread over
    the zones instead of all landing on the first one.
    """

    head: bytes  # header bytes 2..11
    tail: bytes  # everything after the question name
    whole_length: int
    truncated_head: bytes
    truncated_tail: bytes
    qtype: str
    rcode: str
    tails: tuple[bytes, ...] = ()  # the whole reply's rotations (empty: only `tail`)
    _turn: Iterator[int] = field(default_factory=lambda: itertools.count(), compare=False)

    @classmethod
    def split(
        cls, whole: bytes, truncated: bytes, name_end: int, qtype: str, rcode: str
    ) -> Template:
        """A template from two replies to a `canonical_query` (id 0)."""
        whole, truncated = bytes(whole), bytes(truncated)
        tail = whole[name_end:]
        return cls(
            whole[2:12],
            tail,
            len(whole),
            truncated[2:12],
            truncated[name_end:],
            qtype,
            rcode,
            rotations(tail, int.from_bytes(whole[6:8], "big")),
        )

    def reply(self, data: bytes, name_end: int, limit: int) -> tuple[bytes, bool]:
        """The reply to query `data` within `limit` octets, and whether it was truncated."""
        if self.whole_length <= limit:
            tails = self.tails
            tail = tails[next(self._turn) % len(tails)] if tails else self.tail
            return b"".join((data[:2], self.head, data[12:name_end], tail)), False
        return (
            b"".join((data[:2], self.truncated_head, data[12:name_end], self.truncated_tail)),
            True,
        )


_A_RECORD: Final = 16  # a pointer to the question name, A, IN, TTL, RDLENGTH 4, address
_POINTER_TO_QUESTION: Final = b"\xc0\x0c"


def rotations(tail: bytes, ancount: int) -> tuple[bytes, ...]:
    """Every rotation of `tail`'s answer section when it is two or more A records of the
    question's name with one TTL (``tail``: the reply after the question name, starting
    with the question's type and class); () for any other answer, which keeps its order."""
    start, end = 4, 4 + ancount * _A_RECORD
    if ancount < 2 or len(tail) < end:
        return ()
    records = [tail[i : i + _A_RECORD] for i in range(start, end, _A_RECORD)]
    for record in records:
        if (
            record[:2] != _POINTER_TO_QUESTION
            or record[2:6] != b"\x00\x01\x00\x01"  # A, IN
            or record[6:10] != records[0][6:10]  # one TTL
            or record[10:12] != b"\x00\x04"
        ):
            return ()
    head, rest = tail[:start], tail[end:]
    return tuple(b"".join((head, *records[k:], *records[:k], rest)) for k in range(len(records)))


def _fits(reply: bytes, canonical: bytes, name_end: int) -> bool:
    """Whether `reply` echoes the question of `canonical` in place, so it can be a template."""
    return (
        len(reply) >= name_end + 4
        and reply[4:6] == b"\x00\x01"
        and reply[12 : name_end + 4] == canonical[12 : name_end + 4]
    )


class TemplateCache:
    """One view's templates, rebuilt whenever `generation()` changes (compared with ==).

    `build(canonical, transport_is_tcp)` answers a canonical query the full way, giving
    ``(reply or None, qtype, rcode)``; a reply that cannot be a template (no reply,
    SERVFAIL, a question not echoed in place) is remembered as such, so that key always
    takes the full path in this view.
    """

    def __init__(
        self,
        generation: Callable[[], object],
        build: Callable[[bytes, bool], tuple[bytes | None, str, str]],
        *,
        max_entries: int = 10_000,
        on_rebuild: Callable[[], None] | None = None,
    ) -> None:
        self._generation = generation
        self._build = build
        self._on_rebuild = on_rebuild
        self.max_entries = max_entries
        self._entries: dict[bytes, Template | None] = {}
        self._token: object = _UNSET
        self.rebuilds = 0

    def current(self) -> dict[bytes, Template | None]:
        """The templates of the view in force (emptied when the view changed)."""
        token = self._generation()
        if token is not self._token and token != self._token:
            self._token = token
            self._entries = {}
            self.rebuilds += 1
            if self._on_rebuild is not None:
                self._on_rebuild()
        return self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def lookup(self, query: Query, entries: dict[bytes, Template | None]) -> Template | None:
        """The template for `query` in `entries` (from `current`), built on first use."""
        try:
            return entries[query.key]
        except KeyError:
            pass
        template = self._make(query.key, query.name_end)
        if len(entries) < self.max_entries:
            entries[query.key] = template
        return template

    def warm(self, keys: list[tuple[bytes, int]]) -> None:
        """Build the templates of `keys` (``(key, name_end)``) now rather than on first use."""
        entries = self.current()
        for key, name_end in keys:
            if key not in entries and len(entries) < self.max_entries:
                entries[key] = self._make(key, name_end)

    def _make(self, key: bytes, name_end: int) -> Template | None:
        edns = bool(key[-1] & 1)
        whole_query = canonical_query(key, name_end, 65535)
        whole, qtype, rcode = self._build(whole_query, True)
        if whole is None or rcode == "SERVFAIL" or not _fits(whole, whole_query, name_end):
            return None
        if len(whole) <= MIN_UDP_PAYLOAD:  # fits every client: never truncated
            return Template.split(whole, whole, name_end, qtype, rcode)
        small_query = canonical_query(key, name_end, MIN_UDP_PAYLOAD) if edns else whole_query
        truncated, _, _ = self._build(small_query, False)
        if truncated is None or not _fits(truncated, small_query, name_end):
            return None
        return Template.split(whole, truncated, name_end, qtype, rcode)


class _Unset:
    def __eq__(self, other: object) -> bool:
        return other is self

    def __hash__(self) -> int:
        return 0


_UNSET: Final = _Unset()
