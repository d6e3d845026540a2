"""The admin token: a random secret in the data directory, shared by a deployment's
servers, that guards the local-mode admin switches (degrade, drain)."""

from __future__ import annotations

import hmac
import secrets
from pathlib import Path

from rideout.auth import _keyfiles
from rideout.auth.errors import CredentialError

__all__ = [
    "ADMIN_TOKEN_FILENAME",
    "AdminTokenError",
    "check_admin_token",
    "load_admin_token",
    "load_or_create_admin_token",
]

ADMIN_TOKEN_FILENAME = "admin-token"


class AdminTokenError(CredentialError, RuntimeError):
    """The admin token file exists but cannot be used."""


def _parse(data: bytes) -> str:
    try:
        token = data.decode("ascii").strip()
    except UnicodeDecodeError as exc:
        raise ValueError(f"cannot read it: {exc}") from exc
    if len(token) < 32:
        raise ValueError("too short to be a secret; remove it to make a new one")
    return token


def _fail(path: Path, problem: str) -> AdminTokenError:
    return AdminTokenError(f"{path}: {problem}")


def _fresh() -> tuple[str, bytes]:
    token = secrets.token_urlsafe(32)
    return token, token.encode()


def load_or_create_admin_token(directory: Path) -> str:
    """Read ``directory/admin-token``, creating it (mode 0600, 256 random bits) once."""
    return _keyfiles.load_or_create(Path(directory) / ADMIN_TOKEN_FILENAME, _parse, _fresh, _fail)


def load_admin_token(directory: Path) -> str:
    """Read ``directory/admin-token``; AdminTokenError if there is none (never makes one:
    for commands that talk to a deployment that should have it)."""
    path = Path(directory) / ADMIN_TOKEN_FILENAME
    try:
        return _keyfiles.read(path, _parse, _fail)
    except FileNotFoundError:
        raise _fail(path, "there is none: is rideout up (with this data directory)?") from None


def check_admin_token(expected: str, authorization: str | None) -> bool:
    """Whether an ``Authorization: Bearer …`` header carries `expected` (constant time)."""
    if not authorization or not authorization.startswith("Bearer "):
        return False
    return hmac.compare_digest(authorization[len("Bearer ") :].strip().encode(), expected.encode())
