"""Strict base64url and JSON helpers shared by the key and token modules (private)."""

from __future__ import annotations

import base64
import binascii
import re
from typing import Any

from rideout._json import decode_object

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


def strict_json_object(data: bytes | str) -> dict[str, Any]:
    """Parse a JSON object (UTF-8 when bytes), rejecting duplicate members, NaN/Infinity,
    out-of-range numbers and deep nesting (the decoder of :mod:`rideout._json`).

    Raises ValueError (including UnicodeDecodeError) for anything else.
    """
    return decode_object(data)
