"""Revoked access tokens: every token of a subject issued before a time, or one token.

Pure: no I/O, the clock is injected. :class:`RevocationList` is what an app server keeps
in memory (read from the region's Redis every ``auth.revocation_interval`` by
:mod:`rideout.realtime.revocation`), so a handshake is checked without a round trip;
:func:`revoke_subject` and :func:`revoke_token` build the entries ``rideout token
revoke`` records.

- **By subject** (``sub``): every token of that subject whose ``iat`` is before
  ``until`` is refused; a token issued afterwards works (the user signs in again).
  ``until`` is the time of the revocation unless given: a later ``until`` locks the
  subject out until then. Since issuers' clocks may run up to ``leeway`` seconds ahead,
  a token issued in the ``leeway`` seconds after ``until`` is refused too.
- **By token id** (``jti``): that one token is refused until ``until``, by default for
  as long as any token issued so far can live (``max_ttl`` plus twice the leeway).

Every entry carries ``expires``, the time after which no token it refuses can still be
accepted (with the verifier's maximum lifetime); it is dropped then, so the list holds
only what is in force and cannot grow without bound.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final, Literal, TypeAlias, get_args

from rideout._json import decode_object
from rideout.auth.tokens import MAX_JTI_LENGTH, MAX_SUBJECT_LENGTH, Clock

__all__ = [
    "Revocation",
    "RevocationKind",
    "RevocationList",
    "revoke_subject",
    "revoke_token",
]

RevocationKind: TypeAlias = Literal["sub", "jti"]
_KINDS: Final = frozenset(get_args(RevocationKind))


@dataclass(frozen=True, slots=True)
class Revocation:
    """One revocation. Times are seconds since the epoch, kept to the millisecond.

    ``until``: for ``sub``, tokens issued before it are refused; for ``jti``, the token
    is refused until then. ``expires``: when the entry can go. ``at``: when it was made.
    """

    kind: RevocationKind
    value: str
    until: float
    expires: float
    at: float

    @property
    def field(self) -> str:
        """Its name in the revocation hash: ``sub:NAME`` or ``jti:ID``."""
        return f"{self.kind}:{self.value}"

    def record(self) -> Mapping[str, int]:
        """The entry's times as the hash stores them: integer milliseconds."""
        return {
            "until": _millis(self.until),
            "expires": _millis(self.expires),
            "at": _millis(self.at),
        }

    @classmethod
    def parse(cls, field: str, text: str) -> Revocation:
        """The entry stored under ``field`` as ``text`` (see :meth:`record`).

        Raises ValueError for anything rideout did not write.
        """
        kind, sep, value = field.partition(":")
        if not sep or kind not in _KINDS or not value:
            raise ValueError(f"{field[:80]!r} is not a revocation (sub:NAME or jti:ID)")
        obj = decode_object(text)
        times: list[float] = []
        for name in ("until", "expires", "at"):
            ms = obj.get(name)
            if isinstance(ms, bool) or not isinstance(ms, int) or not 0 <= ms < 2**53:
                raise ValueError(f"revocation {field[:80]!r}: {name!r} is not a time in ms")
            times.append(ms / 1000)
        return cls(kind, value, *times)  # type: ignore[arg-type]  # kind checked above


def revoke_subject(
    sub: str, *, now: float, max_ttl: float, leeway: float, until: float | None = None
) -> Revocation:
    """Refuse every token of ``sub`` issued before ``until`` (default: ``now``)."""
    _check_value(sub, MAX_SUBJECT_LENGTH, "sub")
    cutoff = now if until is None else _future(until, now)
    return Revocation("sub", sub, cutoff, cutoff + _horizon(max_ttl, leeway), now)


def revoke_token(
    jti: str, *, now: float, max_ttl: float, leeway: float, until: float | None = None
) -> Revocation:
    """Refuse the token with id ``jti`` until ``until`` (default: until any token issued
    by ``now`` has expired)."""
    _check_value(jti, MAX_JTI_LENGTH, "jti")
    end = now + _horizon(max_ttl, leeway) if until is None else _future(until, now)
    return Revocation("jti", jti, end, end, now)


class RevocationList:
    """The revocations in force, as one app server holds them (replaced as a whole)."""

    __slots__ = ("_clock", "_jtis", "_subs", "leeway")

    def __init__(self, leeway: float = 5.0, clock: Clock = time.time) -> None:
        if not (math.isfinite(leeway) and leeway >= 0):
            raise ValueError(f"leeway must be a finite number >= 0, not {leeway!r}")
        self.leeway = leeway
        self._clock = clock
        self._subs: dict[str, Revocation] = {}
        self._jtis: dict[str, Revocation] = {}

    def __len__(self) -> int:
        """Entries held (some may have expired since they were read)."""
        return len(self._subs) + len(self._jtis)

    def replace(self, entries: Iterable[Revocation]) -> None:
        """Hold ``entries`` (and nothing else) from now on."""
        subs: dict[str, Revocation] = {}
        jtis: dict[str, Revocation] = {}
        for entry in entries:
            table = subs if entry.kind == "sub" else jtis
            held = table.get(entry.value)
            if held is None or entry.until > held.until:
                table[entry.value] = entry
        self._subs, self._jtis = subs, jtis

    def match(self, sub: str, jti: str, iat: float) -> Revocation | None:
        """The revocation that refuses the token (``sub``, ``jti``, ``iat``), or None."""
        if not self._subs and not self._jtis:
            return None  # the common case: nothing revoked
        now = self._clock()
        entry = self._jtis.get(jti)
        if entry is not None and now < entry.until:
            return entry
        entry = self._subs.get(sub)
        if entry is not None and now < entry.expires and iat < entry.until + self.leeway:
            return entry
        return None


def _horizon(max_ttl: float, leeway: float) -> float:
    """How long after a cutoff a token issued before it can still be accepted."""
    if not (math.isfinite(max_ttl) and max_ttl > 0):
        raise ValueError(f"max_ttl must be a finite number of seconds > 0, not {max_ttl!r}")
    if not (math.isfinite(leeway) and leeway >= 0):
        raise ValueError(f"leeway must be a finite number >= 0, not {leeway!r}")
    return max_ttl + 2 * leeway


def _future(until: float, now: float) -> float:
    if not (math.isfinite(until) and until > now):
        raise ValueError(f"until must be a time after now ({now:.3f}), not {until!r}")
    return until


def _check_value(value: object, limit: int, name: str) -> None:
    if not isinstance(value, str) or not 0 < len(value) <= limit or not value.isprintable():
        raise ValueError(
            f"{name} must be a non-empty printable string of at most {limit} characters"
        )


def _millis(seconds: float) -> int:
    return math.ceil(round(seconds * 1000, 6))
