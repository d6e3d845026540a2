"""Checks for numbers, counts and choices given as arguments or settings.

One convention everywhere: a value of the wrong type raises
:class:`~rideout.errors.InvalidArgumentType` (a :class:`TypeError` and a
:class:`ValueError`), a value out of range :class:`~rideout.errors.InvalidArgument` (a
:class:`ValueError`). ``bool`` is never a number here. Each message starts with the
argument's name.
"""

from __future__ import annotations

import ipaddress
import math
from collections.abc import Iterable
from urllib.parse import urlsplit

from rideout.errors import InvalidArgument, InvalidArgumentType

__all__ = ["choice", "count", "number", "seconds", "secure_url", "text"]


def number(name: str, value: object, *, what: str = "a number") -> float:
    """``value`` as a finite float."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidArgumentType(f"{name} must be {what}, not {value!r}")
    if not math.isfinite(value):
        raise InvalidArgument(f"{name} must be finite, not {value!r}")
    return float(value)


def seconds(name: str, value: object, *, zero_ok: bool = False, minimum: float = 0.0) -> float:
    """``value`` as a finite, non-negative number of seconds: > 0 unless ``zero_ok``,
    and at least ``minimum``."""
    result = number(name, value, what="a number of seconds")
    if result < 0 or (result == 0 and not zero_ok):
        raise InvalidArgument(f"{name} must be {'>= 0' if zero_ok else '> 0'}, not {value!r}")
    if result < minimum:
        raise InvalidArgument(f"{name} must be >= {minimum:g} seconds, not {value!r}")
    return result


def count(name: str, value: object, *, low: int = 0, high: int | None = None) -> int:
    """``value`` as an int from ``low`` to ``high`` (inclusive; no upper bound if None)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgumentType(f"{name} must be an integer, not {value!r}")
    if value < low or (high is not None and value > high):
        bound = f">= {low}" if high is None else f"from {low} to {high}"
        raise InvalidArgument(f"{name} must be {bound}, not {value}")
    return value


def choice(name: str, value: object, options: Iterable[str]) -> str:
    """``value`` if it is one of ``options``."""
    allowed = tuple(options)
    if value not in allowed:
        raise InvalidArgument(f"{name} must be one of {', '.join(allowed)}; got {value!r}")
    assert isinstance(value, str)
    return value


def text(name: str, value: object) -> str:
    """``value`` as non-empty text that encodes as UTF-8 (no lone surrogates)."""
    if not isinstance(value, str):
        raise InvalidArgumentType(f"{name} must be a non-empty string, not {value!r}")
    if not value:
        raise InvalidArgument(f"{name} must be a non-empty string, not {value!r}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidArgument(f"{name} must be valid Unicode text (no lone surrogates)") from None
    return value


def secure_url(name: str, value: object) -> str:
    """``value`` as a URL credentials may be sent to: https://, or http:// to a loopback
    host (never in clear text off the machine)."""
    url = text(name, value)
    parts = urlsplit(url)
    if parts.scheme == "https" and parts.hostname:
        return url
    if parts.scheme == "http" and parts.hostname:
        if parts.hostname == "localhost":
            return url
        try:
            if ipaddress.ip_address(parts.hostname).is_loopback:
                return url
        except ValueError:
            pass
    raise InvalidArgument(
        f"{name} must be an https:// URL (http:// only to a loopback address), not {url!r}"
    )
