"""Reading one TOML-shaped table: typed values, the key path in every message."""

from __future__ import annotations

import ipaddress
import math
import re
from collections.abc import Mapping
from dataclasses import fields
from typing import Any

from rideout.errors import InvalidArgument

__all__ = ["ConfigError"]

# A region's, a zone's or a deployment's name (a DNS label, lowercase).
_NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")


class ConfigError(InvalidArgument):
    """The configuration is invalid; the message names the key and the problem."""

    def __init__(self, key: str, problem: str) -> None:
        self.key = key
        self.problem = problem
        super().__init__(f"config: {key}: {problem}")


class _Reader:
    """Takes typed values out of one table, remembering the key path for messages."""

    def __init__(self, table: Mapping[str, Any], path: str, origins: Mapping[str, str]) -> None:
        if not isinstance(table, Mapping):
            raise ConfigError(path or "<root>", f"expected a table, got {_kind(table)}")
        self._table = dict(table)
        self._path = path
        self._origins = origins

    def key(self, name: str) -> str:
        full = f"{self._path}.{name}" if self._path else name
        origin = self._origins.get(full)
        return f"{full} (from {origin})" if origin else full

    def has(self, name: str) -> bool:
        return name in self._table

    def names(self) -> list[str]:
        """The keys not consumed yet (for tables keyed by name)."""
        return list(self._table)

    def raw(self, name: str) -> Any:
        return self._table.pop(name)

    def text(self, name: str, default: str, *, empty_ok: bool = False) -> str:
        if name not in self._table:
            return default
        value = self._table.pop(name)
        if isinstance(value, str) and empty_ok:
            return value
        if not isinstance(value, str) or not value:
            raise ConfigError(self.key(name), f"expected a non-empty string, got {_kind(value)}")
        return value

    def optional_text(self, name: str) -> str:
        """A string that may be empty (empty: not set)."""
        if name not in self._table:
            return ""
        value = self._table.pop(name)
        if not isinstance(value, str):
            raise ConfigError(self.key(name), f"expected a string, got {_kind(value)}")
        return value

    def integer(
        self, name: str, default: int, *, minimum: int = 1, maximum: int | None = None
    ) -> int:
        if name not in self._table:
            return default
        value = self._table.pop(name)
        if isinstance(value, str):
            try:
                value = int(value.strip())
            except ValueError:
                raise ConfigError(self.key(name), f"expected an integer, got {value!r}") from None
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(self.key(name), f"expected an integer, got {_kind(value)}")
        if value < minimum:
            raise ConfigError(self.key(name), f"must be at least {minimum}, got {value}")
        if maximum is not None and value > maximum:
            raise ConfigError(self.key(name), f"must be at most {maximum}, got {value}")
        return value

    def _float(self, name: str, what: str) -> float:
        """Take `name` (present) as a float; `what` is the kind the messages expect."""
        value = self._table.pop(name)
        if isinstance(value, str):
            try:
                value = float(value.strip())
            except ValueError:
                raise ConfigError(self.key(name), f"expected {what}, got {value!r}") from None
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(self.key(name), f"expected {what}, got {_kind(value)}")
        return float(value)

    def positive(self, name: str, default: float) -> float:
        """A number greater than zero (not a duration: a threshold, a ratio)."""
        if name not in self._table:
            return default
        value = self._float(name, "a number")
        if not math.isfinite(value) or value <= 0:
            raise ConfigError(self.key(name), f"must be a number above zero, got {value}")
        return value

    def seconds(self, name: str, default: float, *, zero_ok: bool = False) -> float:
        if name not in self._table:
            return default
        value = self._float(name, "seconds")
        if not math.isfinite(value) or value < 0 or (value == 0 and not zero_ok):
            what = "zero or more" if zero_ok else "a positive number of"
            raise ConfigError(self.key(name), f"must be {what} seconds, got {value}")
        return float(value)

    def flag(self, name: str, default: bool) -> bool:
        if name not in self._table:
            return default
        value = self._table.pop(name)
        if isinstance(value, str):  # from the environment
            words = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}
            if value.strip().lower() not in words:
                raise ConfigError(self.key(name), f"expected true or false, got {value!r}")
            return words[value.strip().lower()]
        if not isinstance(value, bool):
            raise ConfigError(self.key(name), f"expected true or false, got {_kind(value)}")
        return value

    def strings(self, name: str, default: tuple[str, ...]) -> tuple[str, ...]:
        if name not in self._table:
            return default
        value = self._table.pop(name)
        if isinstance(value, str):  # from the environment: comma-separated
            value = [v.strip() for v in value.split(",") if v.strip()]
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise ConfigError(self.key(name), f"expected a list of strings, got {_kind(value)}")
        return tuple(value)

    def table(self, name: str) -> _Reader:
        value = self._table.pop(name, {})
        full = f"{self._path}.{name}" if self._path else name
        return _Reader(value, full, self._origins)

    def done(self) -> None:
        """Refuse whatever was not consumed: unknown keys are mistakes, not extensions."""
        for name in self._table:
            raise ConfigError(self.key(name), "unknown key")


def _kind(value: object) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, Mapping):
        return "a table"
    if isinstance(value, list):
        return "a list"
    return f"{type(value).__name__} {value!r}"


def _choices(options: Mapping[str, object] | tuple[str, ...]) -> str:
    return ", ".join(repr(o) for o in options)


def _scalars(t: _Reader, base: Any) -> dict[str, Any]:
    """Read every field of the dataclass `base` by the type of its value in `base`."""
    values: dict[str, Any] = {}
    for f in fields(base):
        default = getattr(base, f.name)
        if isinstance(default, bool):
            values[f.name] = t.flag(f.name, default)
        elif isinstance(default, int):
            minimum = 0 if f.metadata.get("zero_ok", False) else 1
            values[f.name] = t.integer(f.name, default, minimum=minimum)
        elif isinstance(default, float) and f.metadata.get("unitless"):
            values[f.name] = t.positive(f.name, default)
        elif isinstance(default, float):
            values[f.name] = t.seconds(f.name, default, zero_ok=f.metadata.get("zero_ok", False))
        elif isinstance(default, str):
            values[f.name] = t.text(f.name, default, empty_ok=default == "")
        else:
            values[f.name] = t.strings(f.name, default)
    t.done()
    return values


def _address(t: _Reader, name: str, default: str) -> str:
    value = t.text(name, default)
    try:
        ipaddress.ip_address(value)
    except ValueError:
        raise ConfigError(t.key(name), f"{value!r} is not an IP address") from None
    return value
