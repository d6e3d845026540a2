"""Every Redis key name: one prefix, hash tags per room and user, nothing escapes."""

from __future__ import annotations

import fnmatch
import re
from urllib.parse import unquote

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rideout.store import keys


def hash_tag(key: str) -> str:
    """The part of a key Redis Cluster hashes: the first ``{...}``."""
    match = re.search(r"\{([^}]*)\}", key)
    assert match is not None, key
    return match[1]


def test_the_fixed_names() -> None:
    assert keys.PREFIX == "rideout:"
    assert keys.EPOCH == "rideout:epoch"
    assert keys.room_state("lot-1") == "rideout:room:{lot-1}:state"
    assert keys.room_stream("lot-1") == "rideout:room:{lot-1}:stream"
    assert keys.room_session("lot-1", "alice") == "rideout:room:{lot-1}:user:alice:session"
    assert keys.bid_ack("alice", "lot-1", "r1") == "rideout:room:{lot-1}:bid:alice:r1:ack"
    assert keys.user_bid_ack("alice", "lot-1", "r1") == "rideout:user:{alice}:room:lot-1:bid:r1"
    assert keys.legacy_bid_ack("alice", "r1") == "rideout:user:{alice}:bid:r1"
    assert keys.idempotency("rest", "k1") == "rideout:idem:rest:-:k1"
    assert keys.idempotency("rest", "k1", "alice") == "rideout:idem:rest:u=alice:k1"


def test_every_key_a_bid_writes_is_in_its_rooms_slot() -> None:
    assert hash_tag(keys.room_state("lot")) == hash_tag(keys.room_stream("lot")) == "lot"
    assert hash_tag(keys.room_session("lot", "bob")) == hash_tag(keys.bid_ack("bob", "lot", "x"))
    assert hash_tag(keys.bid_ack("bob", "lot", "x")) == "lot"
    assert hash_tag(keys.user_bid_ack("bob", "lot", "x")) == "bob"  # read only (legacy)


@pytest.mark.parametrize("name", ["a:b", "{x}", "a}b{c", "50%", "sp ace", "é", "/", ""])
def test_separators_and_braces_are_escaped(name: str) -> None:
    for key in (
        keys.room_state(name),
        keys.room_session(name, name),
        keys.bid_ack(name, name, name),
    ):
        assert key.count("{") == key.count("}") == 1
        assert not set(hash_tag(key)) & set(":{} /")
        assert unquote(hash_tag(key)) == name


@given(st.text(), st.text())
def test_distinct_names_never_share_a_key(a: str, b: str) -> None:
    if a != b:
        assert keys.room_state(a) != keys.room_state(b)
        assert keys.bid_ack("u", "lot", a) != keys.bid_ack("u", "lot", b)
        assert keys.bid_ack("u", a, "r") != keys.bid_ack("u", b, "r")
        assert keys.idempotency("rest", a, a) != keys.idempotency("rest", b, b)
    # A room's key never reaches another room's space, nor one user's ack another's.
    assert keys.bid_ack(a, b, b).startswith(keys.room_state(b).removesuffix("state"))
    assert keys.room_session(b, a).startswith(keys.room_state(b).removesuffix("state"))
    if a != b:
        assert keys.bid_ack(a, "lot", "r") != keys.bid_ack(b, "lot", "r")
        assert keys.room_session("lot", a) != keys.room_session("lot", b)
    # No key of a room but its stream is taken for one (the controller's SCAN MATCH).
    for key in (keys.bid_ack(a, b, "stream"), keys.room_session(b, "stream")):
        assert not fnmatch.fnmatchcase(key, keys.ROOM_STREAMS)


def test_an_anonymous_key_never_collides_with_a_user_named_dash() -> None:
    assert keys.idempotency("rest", "k") != keys.idempotency("rest", "k", "-")
