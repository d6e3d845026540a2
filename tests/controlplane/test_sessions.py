"""Operator sessions, pure, with an injected clock."""

from __future__ import annotations

import pytest

from rideout.controlplane.sessions import OperatorSessions
from rideout.errors import InvalidArgument
from tests.conftest import FakeClock


def test_a_code_opens_one_session_once_within_its_lifetime() -> None:
    clock = FakeClock(1_800_000_000.0)
    sessions = OperatorSessions(code_ttl=300, session_ttl=3600, clock=clock)
    code, expires = sessions.mint_code()
    assert expires == clock.now + 300
    clock.now += 299
    redeemed = sessions.redeem(code)
    assert redeemed is not None
    session_id, session = redeemed
    assert sessions.redeem(code) is None  # single use
    assert sessions.session(session_id) == session
    assert session.csrf_matches(session.csrf)
    assert not session.csrf_matches(None)
    assert not session.csrf_matches(session.csrf + "x")
    assert sessions.session(None) is None
    assert sessions.session(code) is None  # a code is not a session id
    clock.now += 3600
    assert sessions.session(session_id) is None  # expired


def test_expired_unknown_and_evicted_codes_fail() -> None:
    clock = FakeClock(1_800_000_000.0)
    sessions = OperatorSessions(code_ttl=300, clock=clock, max_codes=2, max_sessions=1)
    code, _ = sessions.mint_code()
    clock.now += 300
    assert sessions.redeem(code) is None  # expired at its deadline
    assert sessions.redeem("") is None
    first, _ = sessions.mint_code()
    second, _ = sessions.mint_code()
    third, _ = sessions.mint_code()
    assert sessions.redeem(first) is None  # evicted: at most two pending
    one = sessions.redeem(second)
    two = sessions.redeem(third)
    assert one is not None
    assert two is not None
    assert sessions.session(one[0]) is None  # at most one session: the oldest went
    assert sessions.session(two[0]) is not None
    sessions.end(two[0])
    assert sessions.session(two[0]) is None


def test_codes_and_sessions_are_kept_hashed() -> None:
    sessions = OperatorSessions()
    code, _ = sessions.mint_code()
    redeemed = sessions.redeem(sessions.mint_code()[0])
    assert redeemed is not None
    kept = repr(vars(sessions))
    assert code not in kept
    assert redeemed[0] not in kept


def test_settings_are_checked() -> None:
    with pytest.raises(InvalidArgument, match="code_ttl"):
        OperatorSessions(code_ttl=0)
    with pytest.raises(InvalidArgument, match="max_sessions"):
        OperatorSessions(max_sessions=0)
