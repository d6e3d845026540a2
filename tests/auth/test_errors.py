"""The auth package's exceptions: AuthError for rejections, CredentialError above all."""

from __future__ import annotations

import pickle
from typing import get_args

import pytest

from rideout.auth import REASON_STATUS, AuthError, AuthReason, CredentialError
from rideout.auth.admin import AdminTokenError
from rideout.auth.keys import JWKSError, KeyFileError
from rideout.errors import RideoutError


def test_auth_error_carries_status_reason_and_message() -> None:
    error = AuthError(401, "missing_token")
    assert (error.status, error.reason, error.message) == (401, "missing_token", "missing token")
    assert str(error) == "401 missing_token: missing token"
    copy = pickle.loads(pickle.dumps(AuthError(403, "token_revoked", "revoked at 12:00")))
    assert (copy.status, copy.reason, copy.message) == (403, "token_revoked", "revoked at 12:00")
    with pytest.raises(ValueError, match="401 or 403"):
        AuthError(500, "malformed")
    assert {reason for reason, status in REASON_STATUS.items() if status == 403} == {
        "wrong_audience",
        "not_access_token",
        "wrong_token_use",
        "token_revoked",
        "session_completed",
        "session_abandoned",
        "session_unknown",
    }
    assert AuthError.of("wrong_audience").status == 403


def test_every_reason_has_a_status() -> None:
    assert set(REASON_STATUS) == set(get_args(AuthReason))
    assert set(REASON_STATUS.values()) == {401, 403}
    for reason, status in REASON_STATUS.items():
        assert AuthError.of(reason).status == status
        assert AuthError.of(reason, "why").message == "why"


def test_one_base_and_rejections_apart_from_broken_key_material() -> None:
    assert issubclass(CredentialError, RideoutError)
    for error in (AuthError, KeyFileError, JWKSError, AdminTokenError):
        assert issubclass(error, CredentialError)
    # A handshake catches AuthError and answers with its status: none of these is one.
    for error in (KeyFileError, JWKSError, AdminTokenError):
        assert not issubclass(error, AuthError)
