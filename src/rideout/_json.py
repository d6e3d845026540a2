"""Strict JSON: the one decoder for what arrives from outside (client messages, tokens,
key sets).

Refused: an object that names one key twice (RFC 8259 §4 leaves the meaning open, and
parsers disagree: a filter in front of the server that keeps the first value would read
another message than the server, which would keep the last), ``NaN`` and
``±Infinity`` (not JSON), an integer literal longer than :data:`MAX_INT_LITERAL`
characters and a number too large for a finite float. The decoder is built once, at
import: ``json.loads`` with hooks builds a new one on every call.
"""

from __future__ import annotations

import json
import math
from typing import Any, Final, NoReturn

from rideout.errors import RideoutError

__all__ = ["MAX_INT_LITERAL", "StrictJSONError", "decode", "decode_object"]

MAX_INT_LITERAL: Final = 32
"""Longest integer literal accepted, in characters (``int()`` of a long one is slow)."""


class StrictJSONError(RideoutError, ValueError):
    """JSON that the strict decoder refuses although ``json.loads`` might accept it."""


def _refuse_constant(name: str) -> NoReturn:
    raise StrictJSONError(f"{name} is not a JSON number")


def _parse_int(literal: str) -> int:
    if len(literal) > MAX_INT_LITERAL:
        raise StrictJSONError("number too large")
    return int(literal)


def _parse_float(literal: str) -> float:
    value = float(literal)
    if not math.isfinite(value):
        raise StrictJSONError("number too large")
    return value


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):  # the common case costs one comparison
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise StrictJSONError(f"duplicate key {key[:64]!r}")
            seen.add(key)
    return obj


_DECODER: Final = json.JSONDecoder(
    object_pairs_hook=_unique_keys,
    parse_constant=_refuse_constant,
    parse_int=_parse_int,
    parse_float=_parse_float,
)


def decode(text: str) -> Any:
    """Decode one JSON document strictly.

    Raises :class:`StrictJSONError` for what only the strict rules refuse,
    ``json.JSONDecodeError`` for text that is not JSON at all, and ``RecursionError``
    for nesting deeper than the interpreter's stack.
    """
    return _DECODER.decode(text)


def decode_object(data: bytes | str) -> dict[str, Any]:
    """Decode a JSON object strictly from text or UTF-8 bytes.

    Every failure is a ``ValueError``: :class:`StrictJSONError`, ``json.JSONDecodeError``,
    ``UnicodeDecodeError``, or a :class:`StrictJSONError` for deep nesting and for a
    document that is not an object.
    """
    text = data.decode("utf-8") if isinstance(data, bytes | bytearray) else data
    try:
        value = _DECODER.decode(text)
    except RecursionError:
        raise StrictJSONError("JSON nested too deeply") from None
    if not isinstance(value, dict):
        raise StrictJSONError("not a JSON object")
    return value
