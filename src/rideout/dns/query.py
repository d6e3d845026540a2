"""One DNS question answered, for any transport (the server's UDP and TCP, and DoH):
codes and types by name and number, names as the resolver sees them, and
:func:`answer_query`, which asks the injected resolver and checks what it returns.

No sockets and no packets here: the server (:mod:`rideout.dns.server`) and DoH
(:mod:`rideout.dns.doh`) read the question and encode the :class:`QueryResult`.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final, Protocol

from dnslib import QTYPE, RCODE

__all__ = [
    "CLASS_ANY",
    "CLASS_IN",
    "OPT",
    "QueryResult",
    "RRTuple",
    "ResolutionLike",
    "Resolver",
    "answer_query",
    "normalize_name",
    "qtype_name",
    "qtype_number",
    "rcode_number",
    "wire_length",
]

logger = logging.getLogger(__name__)

RRTuple = tuple[str, str, int, str]
"""One resource record as the resolver gives it: ``(name, type, ttl, value)``."""


class ResolutionLike(Protocol):
    """What a resolver returns (`rideout.dns.records.Resolution` is one)."""

    @property
    def rcode(self) -> str: ...

    @property
    def answers(self) -> Sequence[RRTuple]: ...

    @property
    def authority(self) -> Sequence[RRTuple]: ...


Resolver = Callable[[str, str], ResolutionLike]
"""``(qname, qtype) -> resolution``: qname lowercased without the trailing dot, qtype by name."""


# --------------------------------------------------------------------------- codes

_EXTRA_RCODES: Final = {"BADVERS": 16}


def rcode_number(name: str) -> int:
    """The number of a response code by name (``"NXDOMAIN"`` → 3); ValueError if unknown."""
    upper = name.upper()
    if upper in _EXTRA_RCODES:
        return _EXTRA_RCODES[upper]
    try:
        return int(RCODE.reverse[upper])
    except KeyError:
        raise ValueError(f"unknown DNS rcode {name!r}") from None


_GENERIC_TYPE = re.compile(r"TYPE([0-9]{1,5})")


def qtype_number(name: str) -> int:
    """The number of an RR type given by name (``"aaaa"``), ``TYPEnnn`` or number (``"28"``).

    ValueError for anything else, or a number outside 1..65535.
    """
    text = name.strip().upper()
    if text.isdigit() and text.isascii():
        number = int(text)
    elif (generic := _GENERIC_TYPE.fullmatch(text)) is not None:
        number = int(generic.group(1))
    else:
        try:
            number = int(QTYPE.reverse[text])
        except KeyError:
            raise ValueError(f"unknown DNS type {name!r}") from None
    if not 1 <= number <= 65535:
        raise ValueError(f"DNS type {name!r} is out of range 1..65535")
    return number


def qtype_name(number: int) -> str:
    """The mnemonic of an RR type (1 → ``"A"``), ``TYPEnnn`` when it has none."""
    return str(QTYPE.forward.get(number, f"TYPE{number}"))


OPT: Final = 41
CLASS_IN, CLASS_ANY = 1, 255
_IXFR, _AXFR, _MAILB, _MAILA = 251, 252, 253, 254


# --------------------------------------------------------------------------- names


def _label_text(label: bytes) -> str:
    """One label as presentation text, escaping what is not plain (RFC 4343)."""
    if all(0x21 <= c <= 0x7E and c not in (0x2E, 0x5C) for c in label):
        return label.decode("ascii")
    return "".join(
        chr(c) if 0x21 <= c <= 0x7E and c not in (0x2E, 0x5C) else f"\\{c:03d}" for c in label
    )


def normalize_name(labels: Sequence[bytes]) -> str:
    """The resolver's form of a name: ASCII-lowercased, no trailing dot, ``"."`` for the root."""
    if not labels:
        return "."
    return ".".join(_label_text(label) for label in labels).lower()


def wire_length(labels: Sequence[bytes]) -> int:
    """Octets the name takes on the wire, uncompressed."""
    return sum(len(label) + 1 for label in labels) + 1


# --------------------------------------------------------------------------- one answer


@dataclass(frozen=True, slots=True)
class QueryResult:
    """What to say to one question, for any transport: checked, normalised, final."""

    rcode: str
    answers: tuple[RRTuple, ...] = ()
    authority: tuple[RRTuple, ...] = ()

    @property
    def authoritative(self) -> bool:
        return self.rcode in ("NOERROR", "NXDOMAIN")


_KNOWN_RCODES: Final = frozenset({"NOERROR", "NXDOMAIN", "REFUSED", "SERVFAIL"})
_ENCODABLE: Final = frozenset({"A", "AAAA", "TXT", "SOA", "NS", "CNAME"})


def _records(raw: Sequence[RRTuple], what: str) -> tuple[RRTuple, ...]:
    out: list[RRTuple] = []
    for record in raw:
        name, rtype, ttl, value = record
        rtype = str(rtype).upper()
        if rtype not in _ENCODABLE:
            raise ValueError(f"{what} record of unsupported type {rtype!r}")
        if not isinstance(ttl, int) or not 0 <= ttl <= 0x7FFFFFFF:
            raise ValueError(f"{what} record with bad TTL {ttl!r}")
        out.append((str(name), rtype, ttl, str(value)))
    return tuple(out)


def answer_query(resolver: Resolver, qname: str, qtype: int) -> QueryResult:
    """Ask `resolver` about ``qname``/``qtype`` (number), shared by the server and DoH.

    Meta types are settled here (OPT: FORMERR; AXFR/IXFR: REFUSED; MAILA/MAILB: NOTIMP).
    A resolver that raises, or returns what cannot be sent, gives SERVFAIL (logged).
    """
    if qtype == OPT:
        return QueryResult("FORMERR")
    if qtype in (_AXFR, _IXFR):
        return QueryResult("REFUSED")
    if qtype in (_MAILA, _MAILB):
        return QueryResult("NOTIMP")
    try:
        resolution = resolver(qname, qtype_name(qtype))
        rcode = str(resolution.rcode).upper()
        if rcode not in _KNOWN_RCODES:
            raise ValueError(f"resolver returned unknown rcode {rcode!r}")
        return QueryResult(
            rcode,
            _records(resolution.answers, "answer"),
            _records(resolution.authority, "authority"),
        )
    except Exception:
        logger.exception("DNS resolver failed for %s %s", qname, qtype_name(qtype))
        return QueryResult("SERVFAIL")
