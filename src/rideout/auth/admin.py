"""The admin token: a random secret in the data directory, shared by a deployment's
servers, that guards the local-mode admin switches (degrade, drain)."""

from __future__ import annotations

import hmac
import secrets
from pathlib import Path

from rideout._files import create_exclusively
from rideout.auth.errors import CredentialError

__all__ = [
    "ADMIN_TOKEN_FILENAME",
    "AdminTokenError",
    "check_admin_token",
    "load_or_create_admin_token",
]

ADMIN_TOKEN_FILENAME = "admin-token"


class AdminTokenError(CredentialError, RuntimeError):
    """The admin token file exists but cannot be used."""


def load_or_create_admin_token(directory: Path) -> str:
    """Read ``directory/admin-token``, creating it (mode 0600, 256 random bits) once."""
    path = Path(directory) / ADMIN_TOKEN_FILENAME
    if not path.exists():
        try:
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            create_exclusively(path, secrets.token_urlsafe(32).encode())
        except OSError as exc:
            raise AdminTokenError(f"{path}: cannot create it: {exc.strerror or exc}") from exc
    try:
        token = path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise AdminTokenError(f"{path}: cannot read it: {exc}") from exc
    if len(token) < 32:
        raise AdminTokenError(f"{path}: too short to be a secret; remove it to make a new one")
    return token


def check_admin_token(expected: str, authorization: str | None) -> bool:
    """Whether an ``Authorization: Bearer …`` header carries `expected` (constant time)."""
    if not authorization or not authorization.startswith("Bearer "):
        return False
    return hmac.compare_digest(authorization[len("Bearer ") :].strip().encode(), expected.encode())
