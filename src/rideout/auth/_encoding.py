"""Strict base64url and JSON helpers shared by the key and token modules (private)."""

from __future__ import annotations

import base64
import binascii
import json
import re
from typing import Any, NoReturn

_B64URL = re.compile(r"[A-Za-z0-9_-]*")


def b64url_encode(data: bytes) -> str:
    """Encode without padding (RFC 7515 §2)."""
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def b64url_decode(text: str) -> bytes:
    """Decode unpadded base64url, accepting only its canonical form.

    Raises ValueError for padding, characters outside the alphabet, impossible
    lengths and non-zero trailing bits (which would let one value have many spellings).
    """
    if not _B64URL.fullmatch(text) or len(text) % 4 == 1:
        raise ValueError("not unpadded base64url")
    try:
        data = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except binascii.Error as exc:  # pragma: no cover - excluded by the checks above
        raise ValueError("not unpadded base64url") from exc
    if b64url_encode(data) != text:
        raise ValueError("non-canonical base64url")
    return data


def _reject_constant(name: str) -> NoReturn:
    raise ValueError(f"JSON constant {name} is not allowed")


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise ValueError(f"duplicate JSON member {key[:64]!r}")
        result[key] = value
    return result


def strict_json_object(data: bytes | str) -> dict[str, Any]:
    """Parse a JSON object, rejecting duplicate members, NaN/Infinity and deep nesting.

    Raises ValueError (including UnicodeDecodeError) for anything else.
    """
    try:
        value = json.loads(data, object_pairs_hook=_no_duplicates, parse_constant=_reject_constant)
    except RecursionError as exc:
        raise ValueError("JSON nested too deeply") from exc
    if not isinstance(value, dict):
        raise ValueError("not a JSON object")
    return value
