"""The OpenID adapter's client secrets: one per event's relying party, in
``KEYS_DIR/oidc-EVENT_ID.secret`` (mode 0600, 256 random bits, made once). The adapter
keeps only its SHA-256 in memory; the relying party's operator copies the file."""

from __future__ import annotations

from pathlib import Path

from rideout.auth import _keyfiles
from rideout.auth.errors import CredentialError

__all__ = ["OidcSecretError", "load_or_create_oidc_secret", "oidc_secret_path"]


class OidcSecretError(CredentialError, RuntimeError):
    """A client secret file exists but cannot be used."""


def _fail(path: Path, problem: str) -> OidcSecretError:
    return OidcSecretError(f"{path}: {problem}")


def oidc_secret_path(directory: Path, event_id: str) -> Path:
    """Where the secret of `event_id`'s relying party is kept."""
    return Path(directory) / f"oidc-{event_id}.secret"


def load_or_create_oidc_secret(directory: Path, event_id: str) -> str:
    """The client secret of `event_id`'s relying party, created (0600) on first use."""
    return _keyfiles.load_or_create(
        oidc_secret_path(directory, event_id), _keyfiles.parse_secret, _keyfiles.fresh_secret, _fail
    )
