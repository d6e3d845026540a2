"""The canaries' per-region secrets: one random file per region in the keys directory.

``KEYS_DIR/canary-REGION.key`` (mode 0600, 256 random bits, created exclusively on first
use by whichever of the control plane and the region's canary starts first) keys the
HMAC the region's canary signs its datapoints with (:mod:`rideout.auth.request_signing`).
A region's key speaks for that region only.

Rotation: rename the file to ``canary-REGION.key.previous``; the next process to start
creates a new key. The control plane accepts both the current and the previous key
once restarted, so restart it first, then the canary (which signs with the new key),
then remove the ``.previous`` file and restart the control plane again.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Iterable
from pathlib import Path
from typing import Final

from rideout.auth import _keyfiles
from rideout.auth.errors import CredentialError
from rideout.errors import InvalidArgument

__all__ = [
    "PREVIOUS_SUFFIX",
    "CanaryKeyError",
    "canary_key_path",
    "load_canary_keys",
    "load_or_create_canary_key",
]

PREVIOUS_SUFFIX: Final = ".previous"
_MIN_LENGTH: Final = 32
_REGION: Final = re.compile(r"[a-z0-9][a-z0-9-]{0,62}")


class CanaryKeyError(CredentialError):
    """A canary key file exists but cannot be used (or cannot be created)."""


def canary_key_path(directory: Path, region: str) -> Path:
    """Where `region`'s canary key lives in the keys `directory`."""
    if not _REGION.fullmatch(region):
        raise InvalidArgument(f"region must be a region name, not {region!r}")
    return Path(directory) / f"canary-{region}.key"


def _parse(data: bytes) -> bytes:
    secret = data.strip()
    if len(secret) < _MIN_LENGTH:
        raise ValueError("too short to be a secret; remove it to make a new one")
    return secret


def _fail(path: Path, problem: str) -> CanaryKeyError:
    return CanaryKeyError(f"{path}: {problem}")


def _fresh() -> tuple[bytes, bytes]:
    secret = secrets.token_urlsafe(32).encode()
    return secret, secret


def _read(path: Path) -> bytes:
    try:
        return _keyfiles.read(path, _parse, _fail)
    except FileNotFoundError as exc:
        raise _fail(path, f"cannot read it: {_keyfiles.why(exc)}") from exc


def load_or_create_canary_key(directory: Path, region: str) -> bytes:
    """`region`'s current canary key, created (mode 0600) if there is none."""
    return _keyfiles.load_or_create(canary_key_path(directory, region), _parse, _fresh, _fail)


def load_canary_keys(directory: Path, regions: Iterable[str]) -> dict[str, tuple[bytes, ...]]:
    """Each region's accepted keys: the current one (created if missing), then the
    previous one while a rotation leaves it in place."""
    keys: dict[str, tuple[bytes, ...]] = {}
    for region in regions:
        accepted = [load_or_create_canary_key(directory, region)]
        previous = canary_key_path(directory, region).with_name(
            f"canary-{region}.key{PREVIOUS_SUFFIX}"
        )
        if previous.exists():
            accepted.append(_read(previous))
        keys[region] = tuple(accepted)
    return keys
