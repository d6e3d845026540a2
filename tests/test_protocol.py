"""Tests for rideout.protocol: the sans-I/O realtime wire protocol."""

from __future__ import annotations

import contextlib
import email.utils
import json
import math
import pickle
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rideout.protocol import (
    MAX_AMOUNT,
    MAX_EPOCH,
    MAX_RETRY_HINT,
    MESSAGE_TOO_BIG,
    PONG,
    Ack,
    Bid,
    ClientMessage,
    CloseCode,
    ErrorCode,
    ErrorMsg,
    GetState,
    Heartbeat,
    Pong,
    Position,
    Probe,
    ProbeMsg,
    ProtocolError,
    ServerMessage,
    StateMsg,
    TicketMsg,
    TicketRequest,
    Update,
    encode_ack,
    encode_client_message,
    encode_error,
    encode_server_message,
    encode_state,
    encode_update,
    is_valid_name,
    is_valid_offset,
    is_valid_request_id,
    offset_key,
    overloaded_reason,
    parse_client_message,
    parse_retry_after,
    parse_retry_hint,
    parse_server_message,
)
from tests.conftest import examples, json_containers_4_8

MAX = 4096
FUZZ = settings(
    max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


def parse(data: str | bytes, max_size: int = MAX) -> ClientMessage:
    return parse_client_message(data, max_size=max_size)


def dumps(obj: object) -> str:
    return json.dumps(obj, separators=(",", ":"))


def bad(data: str | bytes, *, max_size: int = MAX) -> ProtocolError:
    with pytest.raises(ProtocolError) as info:
        parse_client_message(data, max_size=max_size)
    return info.value


def bid(**fields: object) -> str:
    body: dict[str, object] = {"action": "bid", "room": "lot-1", "amount": 10, "id": "req-1"}
    body.update(fields)
    return dumps({k: v for k, v in body.items() if v is not _DROP})


def get_state(**fields: object) -> str:
    body: dict[str, object] = {"action": "getState", "room": "lot-1"}
    body.update(fields)
    return dumps({k: v for k, v in body.items() if v is not _DROP})


_DROP = object()


# ----------------------------------------------------------------- client messages


@pytest.mark.parametrize(
    ("message", "wire"),
    [
        (Heartbeat(), '{"action":"heartbeat"}'),
        (Probe(), '{"action":"probe"}'),
        (TicketRequest(), '{"action":"ticket"}'),
        (GetState("lot-1"), '{"action":"getState","room":"lot-1"}'),
        (
            GetState("a.b:c_D-9", Position(3, "1700000000000-0")),
            '{"action":"getState","room":"a.b:c_D-9",'
            '"since":{"epoch":3,"offset":"1700000000000-0"}}',
        ),
        (Bid("lot-1", 125, "b7f3"), '{"action":"bid","room":"lot-1","amount":125,"id":"b7f3"}'),
        (Bid("x" * 64, MAX_AMOUNT, "i" * 64), None),
        (GetState("r", Position(MAX_EPOCH, f"{2**64 - 1}-{2**64 - 1}")), None),
        (GetState("r", Position(0, "0-0")), None),
    ],
)
def test_client_messages_round_trip(message: ClientMessage, wire: str | None) -> None:
    encoded = encode_client_message(message)
    if wire is not None:
        assert encoded == wire
    assert parse(encoded) == message
    assert parse(encoded.encode()) == message


def test_seed_heartbeat_and_bytes_like_inputs() -> None:
    # The seed client sends JSON.stringify({ action: 'heartbeat' }).
    assert parse('{"action": "heartbeat"}') == Heartbeat()
    assert parse(bytearray(b'{"action":"heartbeat"}')) == Heartbeat()  # type: ignore[arg-type]
    assert parse(memoryview(b'{"action":"heartbeat"}')) == Heartbeat()  # type: ignore[arg-type]


def test_unknown_keys_are_ignored() -> None:
    assert parse('{"action":"heartbeat","extra":[1,{"x":null}]}') == Heartbeat()
    assert parse('{"action":"getState","room":"a","since":null}') == GetState("a")


@pytest.mark.parametrize(
    "data",
    [
        '{"action":"bid","room":"a","amount":1,"amount":7,"id":"q"}',
        '{"action":"bid","room":"a","amount":1,"id":"q","\\u0061mount":7}',
        '{"action":"getState","room":"a","since":{"epoch":1,"epoch":2,"offset":"1-0"}}',
        '{"action":"heartbeat","action":"bid"}',
        '{"action":"heartbeat","extra":[{"x":1,"x":1}]}',
    ],
)
def test_a_key_named_twice_is_a_bad_request(data: str) -> None:
    """A filter in front that keeps the first value must not read another message than the
    server, which would keep the last: neither is kept."""
    for raw in (data, data.encode()):
        error = bad(raw)
        assert error.code == ErrorCode.BAD_REQUEST
        assert "duplicate key" in error.message


def test_a_server_message_with_a_key_named_twice_is_refused() -> None:
    ack = encode_ack(request_id="q", accepted=False, position=Position(1, "1-0"), region="r")
    with pytest.raises(ProtocolError, match="duplicate key"):
        parse_server_message(ack[:-1] + ',"accepted":true}')


@FUZZ
@given(
    st.sampled_from(
        [Heartbeat(), GetState("lot-1", Position(3, "17-2")), Bid("lot-1", 10, "req-1")]
    ),
    st.data(),
)
def test_any_client_message_with_a_repeated_key_is_a_bad_request(
    message: ClientMessage, data: st.DataObject
) -> None:
    members = list(json.loads(encode_client_message(message)).items())
    key, _ = data.draw(st.sampled_from(members))
    value = data.draw(state_values)
    members.insert(data.draw(st.integers(0, len(members))), (key, value))
    text = "{" + ",".join(f"{json.dumps(k)}:{json.dumps(v)}" for k, v in members) + "}"
    error = bad(text, max_size=10**6)
    assert error.code == ErrorCode.BAD_REQUEST
    assert error.message == f"message is not valid: duplicate key {key!r}"


def test_oversize_is_message_too_big() -> None:
    body = dumps({"action": "heartbeat", "pad": "x" * 100})
    assert parse(body, max_size=len(body)) == Heartbeat()  # exactly the limit is fine
    for data in (body, body.encode()):
        error = bad(data, max_size=len(body) - 1)
        assert error.code == MESSAGE_TOO_BIG
        assert error.close_code is CloseCode.MESSAGE_TOO_BIG
        assert error.request_id is None


def test_oversize_counts_utf8_bytes_of_text() -> None:
    body = dumps({"action": "heartbeat", "pad": "é" * 10}).replace("\\u00e9", "é")
    assert len(body) < len(body.encode()) == len(body) + 10
    assert parse(body, max_size=len(body) + 10) == Heartbeat()
    assert bad(body, max_size=len(body) + 9).code == MESSAGE_TOO_BIG
    # A lone surrogate cannot be encoded strictly; it is still measured, not raised.
    assert bad('{"action":"x","p":"\ud800"}', max_size=20).code == MESSAGE_TOO_BIG


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        (b"\xff\xfe", "UTF-8"),
        (b'{"action":"heartbeat","x":"\xc3"}', "UTF-8"),
        ("", "not valid JSON"),
        ("{", "not valid JSON"),
        ("{'action':'heartbeat'}", "not valid JSON"),
        ('\ufeff{"action":"heartbeat"}', "not valid JSON"),
        ('{"action":"heartbeat"} x', "not valid JSON"),
        ("[]", "JSON object"),
        ('"heartbeat"', "JSON object"),
        ("1", "JSON object"),
        ("null", "JSON object"),
        ('{"action":"heartbeat","x":NaN}', "NaN"),
        ('{"action":"heartbeat","x":Infinity}', "Infinity"),
        ('{"action":"heartbeat","x":-Infinity}', "-Infinity"),
        ('{"action":"heartbeat","x":1e999}', "too large"),
        ('{"action":"heartbeat","x":-1e999}', "too large"),
        ('{"action":"heartbeat","x":' + "9" * 33 + "}", "too large"),
        ('{"action":"heartbeat","x":' + "9" * 5000 + "}", "too large"),
        ("[" * 50_000, "nests too deeply"),
        ("{}", "'action' is required"),
        ('{"action":null}', "'action' must be a string"),
        ('{"action":1}', "'action' must be a string"),
        ('{"action":"Heartbeat"}', "unknown action 'Heartbeat'"),
        ('{"action":"' + "z" * 500 + '"}', "unknown action 'zzz"),
    ],
)
def test_malformed_messages_are_bad_requests(data: str | bytes, fragment: str) -> None:
    error = bad(data, max_size=10**6)
    assert error.code == ErrorCode.BAD_REQUEST
    assert fragment in error.message
    assert error.close_code is None
    assert len(error.message) < 200


def test_non_text_input_is_a_protocol_error() -> None:
    error = bad(12345)  # type: ignore[arg-type]
    assert error.code == ErrorCode.BAD_REQUEST


@pytest.mark.parametrize(
    "room",
    [_DROP, None, 1, True, [], {}, "", "x" * 65, "a b", "é", "a\n", "a/b", "a*", "lot\x00"],
)
def test_bad_room(room: object) -> None:
    for data in (bid(room=room), get_state(room=room)):
        error = bad(data)
        assert error.code == ErrorCode.BAD_REQUEST
        assert "'room'" in error.message


@pytest.mark.parametrize(
    "amount",
    [_DROP, None, True, False, 0, -1, 1.0, 10.5, "10", [10], {"v": 10}, MAX_AMOUNT + 1, 10**30],
)
def test_bad_amount_carries_the_bid_id(amount: object) -> None:
    error = bad(bid(amount=amount))
    assert error.code == ErrorCode.BAD_REQUEST
    assert "'amount'" in error.message
    assert error.request_id == "req-1"


@pytest.mark.parametrize(
    "request_id", [_DROP, None, 7, True, "", "x" * 65, "a\nb", "a\x00", "\u200e", "\ud800"]
)
def test_bad_request_id_is_not_echoed(request_id: object) -> None:
    error = bad(bid(id=request_id))
    assert error.code == ErrorCode.BAD_REQUEST
    assert "'id'" in error.message
    assert error.request_id is None


def test_readable_id_is_carried_on_every_later_error() -> None:
    assert bad(bid(room="bad room")).request_id == "req-1"
    assert bad(bid(room="bad room", amount=1.5)).request_id == "req-1"
    assert bad('{"action":"nope","id":"q-9"}').request_id == "q-9"
    assert bad('{"id":"q-9"}').request_id == "q-9"
    assert bad('{"action":"getState","id":"q-9"}').request_id == "q-9"
    # An id is readable as soon as it is valid: printable, 1-64 characters.
    assert bad(bid(id="ünïcödé ok", amount=0)).request_id == "ünïcödé ok"


@pytest.mark.parametrize(
    "since",
    [
        1,
        "1-0",
        [],
        {},
        {"epoch": 1},
        {"offset": "1-0"},
        {"epoch": True, "offset": "1-0"},
        {"epoch": -1, "offset": "1-0"},
        {"epoch": 1.0, "offset": "1-0"},
        {"epoch": "1", "offset": "1-0"},
        {"epoch": MAX_EPOCH + 1, "offset": "1-0"},
        {"epoch": 1, "offset": 10},
        {"epoch": 1, "offset": "1"},
        {"epoch": 1, "offset": "1-"},
        {"epoch": 1, "offset": "-1"},
        {"epoch": 1, "offset": "a-b"},
        {"epoch": 1, "offset": "1-2-3"},
        {"epoch": 1, "offset": "1-0\n"},
        {"epoch": 1, "offset": " 1-0"},
        {"epoch": 1, "offset": "١-٠"},  # Arabic-Indic digits are not stream ids
        {"epoch": 1, "offset": "*"},
        {"epoch": 1, "offset": f"{2**64}-0"},
        {"epoch": 1, "offset": f"0-{2**64}"},
        {"epoch": 1, "offset": "1" * 21 + "-0"},
    ],
)
def test_bad_since(since: object) -> None:
    error = bad(get_state(since=since))
    assert error.code == ErrorCode.BAD_REQUEST
    assert "'since" in error.message


def test_validators() -> None:
    assert is_valid_name("us-east-1")
    assert not is_valid_name(b"x")
    assert not is_valid_name("")
    assert is_valid_request_id("a b")
    assert not is_valid_request_id(None)
    assert is_valid_offset("1-0")
    assert not is_valid_offset(None)
    assert not is_valid_offset("1-0-")


# ------------------------------------------------------------------------- fuzzing

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()  # NaN and infinities too: json.dumps writes them as NaN/Infinity
    | st.text(max_size=20)
)


def json_containers_3_5(children: st.SearchStrategy[object]) -> st.SearchStrategy[object]:
    # A named function: Hypothesis cannot see that a parenthesised multi-line lambda uses
    # its argument, and warns (an error here) that it cannot recurse.
    return st.lists(children, max_size=3) | st.dictionaries(
        st.text(max_size=5), children, max_size=3
    )


json_values = st.recursive(
    json_scalars,
    json_containers_4_8,
    max_leaves=12,
)
plausible_fields = st.fixed_dictionaries(
    {},
    optional={
        "action": st.sampled_from(["heartbeat", "getState", "bid", "Bid", ""]) | json_values,
        "room": st.sampled_from(["lot-1", "", "a b"]) | json_values,
        "amount": st.integers(-2, 2**54) | json_values,
        "id": st.sampled_from(["req-1", "", "\x00"]) | json_values,
        "since": st.fixed_dictionaries(
            {},
            optional={
                "epoch": st.integers(-1, 2**64) | json_values,
                "offset": st.sampled_from(["1-0", "1-", "18446744073709551616-0"]) | json_values,
            },
        )
        | json_values,
        "type": st.sampled_from(["state", "ack", "update", "error"]) | json_values,
    },
)


def only_protocol_errors(data: Any, max_size: int = MAX) -> None:
    error: ProtocolError | None = None
    try:
        message = parse_client_message(data, max_size=max_size)
    except ProtocolError as exc:
        error = exc
    if error is None:
        assert parse(encode_client_message(message), max_size=10**6) == message
    else:
        assert isinstance(error.code, str)
        assert isinstance(error.message, str)
        assert error.request_id is None or is_valid_request_id(error.request_id)
    with contextlib.suppress(ProtocolError):
        parse_server_message(data)


@FUZZ
@given(st.binary(max_size=200))
def test_arbitrary_bytes_only_raise_protocol_error(data: bytes) -> None:
    only_protocol_errors(data)
    only_protocol_errors(data, max_size=8)


@FUZZ
@given(st.text(alphabet=st.characters(exclude_categories=()), max_size=200))
def test_arbitrary_text_only_raises_protocol_error(data: str) -> None:
    only_protocol_errors(data)
    only_protocol_errors(data, max_size=8)


@FUZZ
@given(json_values)
def test_arbitrary_json_only_raises_protocol_error(value: object) -> None:
    only_protocol_errors(json.dumps(value))


@FUZZ
@given(plausible_fields)
def test_plausible_objects_only_raise_protocol_error(value: dict[str, object]) -> None:
    only_protocol_errors(json.dumps(value))
    only_protocol_errors(json.dumps(value).encode())


# ----------------------------------------------------------------- server messages

POS = Position(2, "1700000000000-3")


def test_encoders_golden() -> None:
    assert PONG == "pong"
    assert encode_update(room="lot-1", state={"top": 10}, position=POS, region="us-east-1") == (
        '{"type":"update","room":"lot-1","state":{"top":10},'
        '"position":{"epoch":2,"offset":"1700000000000-3"},"region":"us-east-1"}'
    )
    assert encode_ack(request_id="b1", accepted=True, position=POS, region="us-west-2") == (
        '{"type":"ack","id":"b1","accepted":true,'
        '"position":{"epoch":2,"offset":"1700000000000-3"},"region":"us-west-2"}'
    )
    assert encode_ack(
        request_id="b1", room="lot-1", accepted=True, position=POS, region="us-west-2"
    ) == (
        '{"type":"ack","id":"b1","room":"lot-1","accepted":true,'
        '"position":{"epoch":2,"offset":"1700000000000-3"},"region":"us-west-2"}'
    )
    assert json.loads(
        encode_ack(request_id="b1", accepted=False, reason="too_low", position=POS, region="r")
    ) == {
        "type": "ack",
        "id": "b1",
        "accepted": False,
        "reason": "too_low",
        "position": {"epoch": 2, "offset": "1700000000000-3"},
        "region": "r",
    }
    assert encode_ack(
        request_id="b1", accepted=False, reason="too_low", position=POS, region="r",
        state={"bid": 12},
    ).endswith(',"region":"r","state":{"bid":12}}')  # fmt: skip
    assert encode_error(ErrorCode.THROTTLED, "slow down") == (
        '{"type":"error","code":"throttled","message":"slow down"}'
    )
    assert encode_error("bad_request", "no", "b1") == (
        '{"type":"error","code":"bad_request","message":"no","id":"b1"}'
    )
    state = encode_state(
        region="us-east-1",
        room="lot-1",
        state={"top": 10},
        user={"sub": "u1", "best": 10},
        position=POS,
        recovered=False,
    )
    assert json.loads(state) == {
        "type": "state",
        "region": "us-east-1",
        "room": "lot-1",
        "state": {"top": 10},
        "user": {"sub": "u1", "best": 10},
        "position": {"epoch": 2, "offset": "1700000000000-3"},
        "recovered": False,
        "missed": [],
    }
    assert " " not in state


def test_encoders_refuse_bad_values() -> None:
    with pytest.raises(ValueError, match="not_a_code"):
        encode_error("not_a_code", "x")
    with pytest.raises(ValueError, match="JSON"):
        encode_update(room="r", state={"x": math.nan}, position=POS, region="r")


def test_encoders_output_is_ascii() -> None:
    text = encode_update(room="r", state={"name": "café \ud800"}, position=POS, region="r")
    assert text.isascii()
    message = parse_server_message(text)
    assert isinstance(message, Update)
    assert message.state == {"name": "café \ud800"}


def test_error_codes_and_close_codes() -> None:
    assert [c.value for c in ErrorCode] == [
        "bad_request",
        "unauthorized",
        "forbidden",
        "throttled",
        "unavailable",
        "internal",
    ]
    assert {c.name: int(c) for c in CloseCode} == {
        "NORMAL": 1000,
        "POLICY": 1008,
        "MESSAGE_TOO_BIG": 1009,
        "INTERNAL": 1011,
        "DRAINING": 1012,
        "OVERLOADED": 1013,
    }


def test_protocol_error_is_a_value_error_and_pickles() -> None:
    error = ProtocolError("bad_request", "'amount' must be...", "b1")
    assert isinstance(error, ValueError)
    assert str(error) == "bad_request: 'amount' must be..."
    clone = pickle.loads(pickle.dumps(error))
    assert (clone.code, clone.message, clone.request_id) == ("bad_request", error.message, "b1")


names = st.from_regex(r"[A-Za-z0-9_.:-]{1,64}", fullmatch=True)
request_ids = st.text(
    alphabet=st.characters(exclude_categories=("C", "Z")) | st.just(" "), min_size=1, max_size=64
)
positions = st.builds(
    Position,
    st.integers(0, MAX_EPOCH),
    st.builds("{}-{}".format, st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1)),
)
# Integers the decoder accepts (literals of at most 32 characters) and finite floats.
state_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=10),
    json_containers_3_5,
    max_leaves=8,
)
updates = st.builds(Update, names, state_values, positions, names)
server_messages: st.SearchStrategy[ServerMessage] = st.one_of(
    st.just(Pong()),
    updates,
    st.builds(
        Ack,
        request_ids,
        st.booleans(),
        positions,
        names,
        st.none() | st.text(max_size=20),
        st.none() | names,
        st.none() | state_values,
    ),
    st.builds(
        StateMsg,
        names,
        names,
        state_values,
        state_values,
        positions,
        st.booleans(),
        st.lists(updates, max_size=3).map(tuple),
    ),
    st.builds(
        ErrorMsg, st.sampled_from(list(ErrorCode)), st.text(max_size=30), st.none() | request_ids
    ),
    st.builds(
        ProbeMsg,
        names,
        names,
        st.sampled_from(["writer", "replica"]),
        st.integers(0, MAX_EPOCH),
        st.none() | st.integers(0, 16),
        st.booleans(),  # full
        st.booleans(),  # busy
    ),
    st.builds(
        TicketMsg,
        st.from_regex(r"rt1\.[A-Za-z0-9_.-]{1,200}", fullmatch=True),
        st.integers(0, 3_600_000).map(lambda ms: ms / 1000),
        st.integers(0, 2**40),
    ),
)


def test_a_ticket_reply_is_checked() -> None:
    good = {"type": "ticket", "ticket": "rt1.a.b.c", "ttl": 300, "expires": 1_700_000_300}
    assert parse_server_message(json.dumps(good)) == TicketMsg("rt1.a.b.c", 300.0, 1_700_000_300)
    for bad, fragment in (
        ({"ticket": ""}, "'ticket' must be"),
        ({"ticket": "rt1.\u00e9"}, "'ticket' must be"),
        ({"ticket": "x" * 1025}, "'ticket' must be"),
        ({"ttl": -1}, "'ttl' must be"),
        ({"ttl": True}, "'ttl' must be"),
        ({"expires": 1.5}, "'expires' must be"),
    ):
        with pytest.raises(ProtocolError, match=fragment):
            parse_server_message(json.dumps(good | bad))


def test_a_probe_answer_without_full_or_busy_is_from_an_older_server_and_neither() -> None:
    old = '{"type":"probe","region":"r","zone":"z","role":"writer","epoch":1,"replicas":null}'
    assert parse_server_message(old) == ProbeMsg("r", "z", "writer", 1, None, full=False)
    assert parse_server_message(old).busy is False
    with pytest.raises(ProtocolError, match="'full' must be a boolean"):
        parse_server_message(old[:-1] + ',"full":1}')
    with pytest.raises(ProtocolError, match="'busy' must be a boolean"):
        parse_server_message(old[:-1] + ',"busy":"yes"}')
    busy = parse_server_message(old[:-1] + ',"busy":true}')
    assert busy == ProbeMsg("r", "z", "writer", 1, None, busy=True)
    assert parse_server_message(encode_server_message(busy)) == busy


@FUZZ
@given(server_messages)
def test_server_messages_round_trip(message: ServerMessage) -> None:
    text = encode_server_message(message)
    assert parse_server_message(text) == message
    assert parse_server_message(text.encode()) == message


@FUZZ
@given(st.builds(Bid, names, st.integers(1, MAX_AMOUNT), request_ids))
def test_bids_round_trip(message: Bid) -> None:
    assert parse(encode_client_message(message)) == message


@FUZZ
@given(st.builds(GetState, names, st.none() | positions))
def test_get_state_round_trips(message: GetState) -> None:
    assert parse(encode_client_message(message)) == message


def test_pong_is_bare_text() -> None:
    assert parse_server_message("pong") == Pong()
    assert parse_server_message(b"pong") == Pong()
    assert encode_server_message(Pong()) == PONG


def server_bad(data: str | bytes) -> ProtocolError:
    with pytest.raises(ProtocolError) as info:
        parse_server_message(data)
    assert info.value.code == ErrorCode.BAD_REQUEST
    return info.value


POS_JSON = {"epoch": 1, "offset": "1-0"}
UPDATE = {"type": "update", "room": "r", "state": {}, "position": POS_JSON, "region": "g"}
ACK = {"type": "ack", "id": "b1", "accepted": True, "position": POS_JSON, "region": "g"}
STATE = {
    "type": "state",
    "region": "g",
    "room": "r",
    "state": None,
    "user": None,
    "position": POS_JSON,
    "recovered": True,
    "missed": [UPDATE],
}
ERROR = {"type": "error", "code": "internal", "message": "boom"}


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        ("Pong", "not valid JSON"),
        (" pong", "not valid JSON"),
        ('"pong"', "JSON object"),
        (b"\x80", "UTF-8"),
        ("{}", "'type' is required"),
        ('{"type":1}', "'type' must be a string"),
        ('{"type":"pong"}', "unknown type 'pong'"),
        ('{"type":"state","x":NaN}', "NaN"),
        (dumps({**UPDATE, "region": ""}), "'region'"),
        (dumps({**UPDATE, "position": {"epoch": 1}}), "'position.offset'"),
        (dumps({k: v for k, v in UPDATE.items() if k != "state"}), "'state' is required"),
        (dumps({k: v for k, v in ACK.items() if k != "id"}), "'id' is required"),
        (dumps({**ACK, "accepted": 1}), "'accepted' must be true or false"),
        (dumps({**ACK, "reason": 5}), "'reason' must be a string"),
        (dumps({**STATE, "missed": None}), "'missed'"),
        (dumps({**STATE, "missed": [1]}), "'missed'"),
        (dumps({**STATE, "missed": [{**UPDATE, "room": "a b"}]}), "'room'"),
        (dumps({k: v for k, v in STATE.items() if k != "user"}), "'user' is required"),
        (dumps({**ERROR, "code": None}), "'code' must be a string"),
        (dumps({**ERROR, "id": ""}), "'id'"),
    ],
)
def test_malformed_server_messages(data: str | bytes, fragment: str) -> None:
    assert fragment in server_bad(data).message


def test_server_message_errors_carry_a_readable_id() -> None:
    assert server_bad(dumps({**ACK, "accepted": "yes"})).request_id == "b1"
    assert server_bad(123).request_id is None  # type: ignore[arg-type]


def test_server_messages_tolerate_extra_keys_and_null_optionals() -> None:
    assert parse_server_message(dumps({**ACK, "reason": None, "new": 1})) == Ack(
        "b1", True, Position(1, "1-0"), "g"
    )
    # `room` is optional (servers before it did not send one), and checked when present.
    assert parse_server_message(dumps({**ACK, "room": "lot-1"})) == Ack(
        "b1", True, Position(1, "1-0"), "g", room="lot-1"
    )
    assert "'room'" in server_bad(dumps({**ACK, "room": "a b"})).message
    # `state` too (the room's state the decision was made against), kept as sent.
    assert parse_server_message(dumps({**ACK, "state": {"bid": 7}})) == Ack(
        "b1", True, Position(1, "1-0"), "g", state={"bid": 7}
    )
    assert parse_server_message(dumps({**ERROR, "id": None})) == ErrorMsg("internal", "boom")
    message = parse_server_message(dumps(STATE))
    assert isinstance(message, StateMsg)
    assert message.missed == (Update("r", {}, Position(1, "1-0"), "g"),)
    assert parse_server_message(dumps({**ERROR, "code": "future_code"})) == ErrorMsg(
        "future_code", "boom"
    )


# ---------------------------------------------------------------------- retry hints


def test_overloaded_reason_format() -> None:
    assert overloaded_reason(2.5) == "overloaded; retry-after=2.5"
    assert overloaded_reason(2) == "overloaded; retry-after=2"
    assert overloaded_reason(0) == "overloaded; retry-after=0"
    assert overloaded_reason(10) == "overloaded; retry-after=10"
    assert overloaded_reason(1.1) == "overloaded; retry-after=1.1"
    assert overloaded_reason(0.0001) == "overloaded; retry-after=0.001"  # rounded up
    assert overloaded_reason(1e300) == f"overloaded; retry-after={MAX_RETRY_HINT:g}"
    assert len(overloaded_reason(MAX_RETRY_HINT - 0.0005).encode()) <= 123


@pytest.mark.parametrize(
    ("value", "error"),
    [(-1, ValueError), (math.nan, ValueError), (math.inf, ValueError), (True, TypeError)],
)
def test_overloaded_reason_refuses_bad_values(value: Any, error: type[Exception]) -> None:
    with pytest.raises(error, match="retry_after"):
        overloaded_reason(value)
    with pytest.raises(TypeError):
        overloaded_reason("2")  # type: ignore[arg-type]


@FUZZ
@given(st.floats(0, MAX_RETRY_HINT))
def test_retry_hint_round_trip(seconds: float) -> None:
    hint = parse_retry_hint(overloaded_reason(seconds))
    assert hint is not None
    # Rounded up to the millisecond (sub-microsecond float noise aside).
    assert seconds - 1e-6 <= hint <= seconds + 0.001


@pytest.mark.parametrize(
    ("reason", "hint"),
    [
        ("overloaded; retry-after=2.5", 2.5),
        ("retry-after=3", 3.0),
        ("overloaded ;  Retry-After = 7 ; more", 7.0),
        ("foo=1; RETRY-AFTER=0.25", 0.25),
        ("retry-after=x; retry-after=4", 4.0),
        (None, None),
        ("", None),
        ("overloaded", None),
        ("overloaded; retry-after", None),
        ("overloaded; retry-after=", None),
        ("overloaded; retry-after=abc", None),
        ("overloaded; retry-after=-1", None),
        ("overloaded; retry-after=1e5", None),
        ("overloaded; retry-after=inf", None),
        ("overloaded; retry-after=nan", None),
        ("overloaded; retry-after=2=3", None),
        ("overloaded; retry-after=1.", None),
        ("overloaded; retry-after=٣", None),
        ("overloaded; retry-after=" + "9" * 400, None),
        ("overloaded; retry-after-ms=5", None),
    ],
)
def test_parse_retry_hint(reason: str | None, hint: float | None) -> None:
    assert parse_retry_hint(reason) == hint


@FUZZ
@given(st.text(max_size=130) | st.none() | st.integers() | st.binary(max_size=20))
def test_parse_retry_hint_tolerates_garbage(reason: Any) -> None:
    hint = parse_retry_hint(reason)
    assert hint is None or (math.isfinite(hint) and hint >= 0)


def test_offset_key_orders_numerically() -> None:
    assert offset_key("10-2") > offset_key("9-10")
    assert offset_key("7") == (7, 0)


@pytest.mark.parametrize(
    ("wire", "problem"),
    [
        ('{"type":"probe","region":"r","zone":"z","role":"boss","epoch":1}', "'role'"),
        ('{"type":"probe","region":"r","zone":"z","role":"writer","epoch":-1}', "'epoch'"),
        ('{"type":"probe","region":"r","zone":"z","role":"writer"}', "'epoch' is required"),
        (
            '{"type":"probe","region":"r","zone":"z","role":"writer","epoch":1,"replicas":-2}',
            "'replicas'",
        ),
    ],
)
def test_a_malformed_probe_reply_is_refused(wire: str, problem: str) -> None:
    with pytest.raises(ProtocolError, match=problem):
        parse_server_message(wire)


def test_parse_retry_after() -> None:
    """The Retry-After header's value (the HTTP client and the WebSocket client's refused
    upgrades both read it)."""
    assert parse_retry_after(None) is None
    assert parse_retry_after("120") == 120.0
    assert parse_retry_after(" 0 ") == 0.0
    assert parse_retry_after("-5") is None
    assert parse_retry_after("1.5") is None
    assert parse_retry_after("soon") is None
    now = 1_700_000_000.0
    date = email.utils.formatdate(now + 42, usegmt=True)
    assert parse_retry_after(date, now=now) == pytest.approx(42)
    past = email.utils.formatdate(now - 42, usegmt=True)
    assert parse_retry_after(past, now=now) == 0.0
    # A hostile server's absurd value is "forever" (then capped by max_retry_after),
    # not an OverflowError or int()'s digit limit escaping from the client.
    assert parse_retry_after("9" * 400) == math.inf
    assert parse_retry_after("9" * 5000) == math.inf
    from rideout.client.http import parse_retry_after as for_http

    assert for_http is parse_retry_after  # one function, re-exported where it was


@given(st.text(max_size=60))
def test_parse_retry_after_never_raises(value: str) -> None:
    seconds = parse_retry_after(value, now=1_700_000_000.0)
    assert seconds is None or seconds >= 0
