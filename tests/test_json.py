"""Tests for rideout._json: the strict decoder of client messages and tokens."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rideout._json import MAX_INT_LITERAL, StrictJSONError, decode, decode_object
from tests.conftest import examples

FUZZ = settings(
    max_examples=examples(400), deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


@dataclass(frozen=True)
class Obj:
    """A JSON object as written: its members in order, a key possibly more than once."""

    members: tuple[tuple[str, Node, bool], ...]  # key, value, spell the key with \\u escapes


@dataclass(frozen=True)
class Arr:
    items: tuple[Node, ...]


Node = None | bool | int | float | str | Obj | Arr


def render(node: Node) -> str:
    if isinstance(node, Obj):
        return "{" + ",".join(f"{spell(k, esc)}:{render(v)}" for k, v, esc in node.members) + "}"
    if isinstance(node, Arr):
        return "[" + ",".join(render(item) for item in node.items) + "]"
    return json.dumps(node)


def spell(key: str, escaped: bool) -> str:
    """The key as JSON text; escaped, every character as \\uXXXX (the same key to a parser)."""
    if not escaped:
        return json.dumps(key)
    return '"' + "".join(f"\\u{ord(c):04x}" for c in key) + '"'


def has_duplicate(node: Node) -> bool:
    if isinstance(node, Obj):
        keys = [k for k, _, _ in node.members]
        return len(set(keys)) != len(keys) or any(has_duplicate(v) for _, v, _ in node.members)
    if isinstance(node, Arr):
        return any(has_duplicate(item) for item in node.items)
    return False


# Few, short keys, so that duplicates are common; values the strict rules accept.
keys = st.text(alphabet="ab\u00e9\u20ac", max_size=2)
scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(10**30), 10**30)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=6)
)


def containers(children: st.SearchStrategy[Node]) -> st.SearchStrategy[Node]:
    members = st.lists(st.tuples(keys, children, st.booleans()), max_size=4).map(tuple)
    return members.map(Obj) | st.lists(children, max_size=4).map(lambda xs: Arr(tuple(xs)))


nodes = st.recursive(scalars, containers, max_leaves=16)
objects = st.lists(st.tuples(keys, nodes, st.booleans()), max_size=5).map(
    lambda members: Obj(tuple(members))
)


@FUZZ
@given(objects)
def test_a_duplicated_key_anywhere_is_refused_and_anything_else_parses_as_json_loads(
    document: Obj,
) -> None:
    text = render(document)
    if has_duplicate(document):
        with pytest.raises(StrictJSONError, match="duplicate key"):
            decode(text)
        with pytest.raises(StrictJSONError, match="duplicate key"):
            decode_object(text.encode())
    else:
        assert decode(text) == json.loads(text)
        assert decode_object(text.encode()) == json.loads(text)


@pytest.mark.parametrize(
    "text",
    [
        '{"a":1,"a":1}',
        '{"a":1,"\\u0061":2}',  # the same key, spelled with an escape
        '{"x":{"a":1,"b":2,"a":3}}',
        '[1,{"a":[{"b":1,"b":1}]}]',
        '{"":1,"":2}',
    ],
)
def test_duplicates_are_refused_at_any_depth_however_spelled(text: str) -> None:
    with pytest.raises(StrictJSONError, match="duplicate key"):
        decode(text)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ('{"x":NaN}', "NaN is not a JSON number"),
        ('{"x":-Infinity}', "-Infinity is not a JSON number"),
        ('{"x":1e999}', "number too large"),
        ('{"x":' + "9" * (MAX_INT_LITERAL + 1) + "}", "number too large"),
    ],
)
def test_non_json_numbers_are_refused(text: str, fragment: str) -> None:
    with pytest.raises(StrictJSONError, match=fragment):
        decode(text)
    assert decode('{"x":' + "9" * MAX_INT_LITERAL + "}") == {"x": int("9" * MAX_INT_LITERAL)}


@pytest.mark.parametrize(
    ("data", "error"),
    [
        (b"[1]", StrictJSONError),
        (b'"x"', StrictJSONError),
        (b"[" * 100_000, StrictJSONError),
        (b"\xff\xfe{}", UnicodeDecodeError),
        ("\ufeff{}", json.JSONDecodeError),
        ("{", json.JSONDecodeError),
    ],
)
def test_decode_object_raises_only_value_errors(data: bytes | str, error: type[Exception]) -> None:
    with pytest.raises(error):
        decode_object(data)
    assert issubclass(error, ValueError)
