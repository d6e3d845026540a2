"""Revocations as data: what each kind refuses, for how long, and how it is stored."""

from __future__ import annotations

import json

import pytest

from rideout.auth.revocation import Revocation, RevocationList, revoke_subject, revoke_token
from tests.conftest import FakeClock

NOW = 1_700_000_000.0
DAY = 86400.0


def revocations(clock: FakeClock, *entries: Revocation, leeway: float = 5.0) -> RevocationList:
    held = RevocationList(leeway, clock=clock)
    held.replace(entries)
    return held


def test_a_subject_revocation_refuses_tokens_issued_before_it_and_no_later_one() -> None:
    clock = FakeClock(NOW + 10)
    entry = revoke_subject("alice", now=NOW, max_ttl=DAY, leeway=5)
    assert (entry.kind, entry.value, entry.until, entry.at) == ("sub", "alice", NOW, NOW)
    held = revocations(clock, entry)
    assert held.match("alice", "j1", NOW - 3600) is entry
    assert held.match("alice", "j2", NOW + 4) is entry  # within the issuers' clock skew
    assert held.match("alice", "j3", NOW + 5) is None  # issued after it: signed in again
    assert held.match("bob", "j1", NOW - 3600) is None


def test_a_subject_revocation_lasts_until_its_tokens_have_expired() -> None:
    entry = revoke_subject("alice", now=NOW, max_ttl=DAY, leeway=5)
    # A token issued just before the cut-off lives at most DAY, accepted `leeway` longer,
    # and its iat may be `leeway` ahead: kept DAY + 2 * leeway.
    assert entry.expires == NOW + DAY + 10
    clock = FakeClock(entry.expires - 0.001)
    assert revocations(clock, entry).match("alice", "j", NOW - 1) is entry
    clock.now = entry.expires
    assert revocations(clock, entry).match("alice", "j", NOW - 1) is None


def test_a_subject_locked_out_until_a_later_time() -> None:
    entry = revoke_subject("alice", now=NOW, max_ttl=DAY, leeway=0, until=NOW + 3600)
    held = revocations(FakeClock(NOW + 60), entry, leeway=0)
    assert held.match("alice", "j", NOW + 30) is entry  # issued after the command, still out
    assert held.match("alice", "j", NOW + 3600) is None
    assert entry.expires == NOW + 3600 + DAY


def test_a_token_revocation_refuses_that_token_only_for_as_long_as_it_can_live() -> None:
    entry = revoke_token("jti-1", now=NOW, max_ttl=DAY, leeway=5)
    assert entry.until == entry.expires == NOW + DAY + 10
    held = revocations(FakeClock(NOW + 1), entry)
    assert held.match("alice", "jti-1", NOW - 100) is entry
    assert held.match("alice", "jti-1", NOW + 100) is entry  # whatever its iat
    assert held.match("alice", "jti-2", NOW - 100) is None
    assert revocations(FakeClock(entry.until), entry).match("alice", "jti-1", NOW) is None
    short = revoke_token("jti-1", now=NOW, max_ttl=DAY, leeway=5, until=NOW + 60)
    assert revocations(FakeClock(NOW + 61), short).match("alice", "jti-1", NOW) is None


def test_the_latest_of_two_entries_for_one_name_holds() -> None:
    first = revoke_subject("alice", now=NOW, max_ttl=DAY, leeway=0)
    later = revoke_subject("alice", now=NOW + 100, max_ttl=DAY, leeway=0)
    held = revocations(FakeClock(NOW + 200), later, first, leeway=0)
    assert held.match("alice", "j", NOW + 50) is later
    assert len(held) == 1


def test_an_empty_list_refuses_nothing_and_replace_replaces() -> None:
    clock = FakeClock(NOW)
    held = RevocationList(clock=clock)
    assert held.match("alice", "j", NOW) is None
    held.replace([revoke_subject("alice", now=NOW + 1, max_ttl=DAY, leeway=5)])
    assert held.match("alice", "j", NOW) is not None
    held.replace([])
    assert (len(held), held.match("alice", "j", NOW)) == (0, None)


def test_an_entry_round_trips_through_its_stored_form() -> None:
    for entry in (
        revoke_subject("a:b c", now=NOW + 0.0004, max_ttl=DAY, leeway=5),
        revoke_token("jti-1", now=NOW, max_ttl=3600, leeway=0, until=NOW + 60.5),
    ):
        back = Revocation.parse(entry.field, json.dumps(entry.record()))
        assert (back.kind, back.value) == (entry.kind, entry.value)
        # Stored to the millisecond, rounded up: never refusing less than was asked.
        assert 0 <= back.until - entry.until < 0.001
        assert 0 <= back.expires - entry.expires < 0.001
    assert revoke_subject("a:b c", now=NOW, max_ttl=DAY, leeway=5).field == "sub:a:b c"


@pytest.mark.parametrize(
    ("field", "text"),
    [
        ("alice", '{"until":1,"expires":1,"at":1}'),
        ("who:alice", '{"until":1,"expires":1,"at":1}'),
        ("sub:", '{"until":1,"expires":1,"at":1}'),
        ("sub:alice", '{"until":1,"expires":1}'),
        ("sub:alice", '{"until":"1","expires":1,"at":1}'),
        ("sub:alice", '{"until":1.5,"expires":1,"at":1}'),
        ("sub:alice", '{"until":true,"expires":1,"at":1}'),
        ("sub:alice", '{"until":1,"until":2,"expires":1,"at":1}'),
        ("sub:alice", "[1]"),
        ("sub:alice", "nope"),
    ],
)
def test_what_rideout_did_not_write_is_refused(field: str, text: str) -> None:
    with pytest.raises(ValueError):  # noqa: PT011 - each case has its own message
        Revocation.parse(field, text)


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="sub must be"):
        revoke_subject("", now=NOW, max_ttl=DAY, leeway=5)
    with pytest.raises(ValueError, match="jti must be"):
        revoke_token("x" * 256, now=NOW, max_ttl=DAY, leeway=5)
    with pytest.raises(ValueError, match="until must be a time after now"):
        revoke_subject("alice", now=NOW, max_ttl=DAY, leeway=5, until=NOW - 1)
    with pytest.raises(ValueError, match="until must be a time after now"):
        revoke_token("j", now=NOW, max_ttl=DAY, leeway=5, until=float("nan"))
    with pytest.raises(ValueError, match="max_ttl"):
        revoke_token("j", now=NOW, max_ttl=0, leeway=5)
    with pytest.raises(ValueError, match="leeway"):
        RevocationList(leeway=-1)
