from __future__ import annotations

import pytest

from rideout.auth import (
    BEARER_SUBPROTOCOL,
    MAX_TOKEN_LENGTH,
    AuthError,
    BearerToken,
    TokenIssuer,
    TokenVerifier,
    extract_token,
)

TOKEN = "eyJhbGciOiJFZERTQSJ9.eyJzdWIiOiJ1In0.c2lnbmF0dXJl"
OTHER = "eyJhbGciOiJFZERTQSJ9.eyJzdWIiOiJ2In0.b3RoZXI"

Headers = list[tuple[bytes, bytes]]


def missing(query: bytes | str, headers: Headers) -> AuthError:
    with pytest.raises(AuthError) as caught:
        extract_token(query, headers)
    return caught.value


# --------------------------------------------------------------------------- query string


@pytest.mark.parametrize(
    "query",
    [
        f"token={TOKEN}".encode(),
        f"token={TOKEN}",
        f"room=r1&token={TOKEN}&x=1".encode(),
        f"token={TOKEN.replace('.', '%2E')}".encode(),
        f"token={TOKEN}&token={TOKEN}".encode(),  # the same value twice is not ambiguous
        f"token=&token={TOKEN}".encode(),
    ],
)
def test_query_token(query: bytes | str) -> None:
    assert extract_token(query, []) == BearerToken(TOKEN, None)


def test_query_with_two_different_tokens_is_malformed() -> None:
    error = missing(f"token={TOKEN}&token={OTHER}".encode(), [])
    assert (error.status, error.reason) == (401, "malformed")


@pytest.mark.parametrize(
    "query", [b"", b"token=", b"token", b"tokens=abc", b"Token=abc", b"room=r1"]
)
def test_query_without_a_token_is_missing(query: bytes) -> None:
    error = missing(query, [(b"host", b"example.test")])
    assert (error.status, error.reason) == (401, "missing_token")


# --------------------------------------------------------------------------- Authorization


@pytest.mark.parametrize(
    "header",
    [
        (b"authorization", f"Bearer {TOKEN}".encode()),
        (b"Authorization", f"bearer {TOKEN}".encode()),
        (b"AUTHORIZATION", f"  BEARER   {TOKEN}  ".encode()),
    ],
)
def test_authorization_bearer(header: tuple[bytes, bytes]) -> None:
    assert extract_token(b"", [(b"host", b"h"), header]) == BearerToken(TOKEN, None)


@pytest.mark.parametrize(
    "value", [b"Basic dXNlcjpwYXNz", b"Bearer", b"Bearer   ", b"Token abc", b""]
)
def test_authorization_without_a_bearer_token_is_missing(value: bytes) -> None:
    error = missing(b"", [(b"authorization", value)])
    assert error.reason == "missing_token"


@pytest.mark.parametrize(
    "headers",
    [
        [
            (b"authorization", f"Bearer {TOKEN}".encode()),
            (b"authorization", f"Bearer {OTHER}".encode()),
        ],
        [(b"authorization", f"Bearer {TOKEN} {OTHER}".encode())],
    ],
)
def test_ambiguous_authorization_is_malformed(headers: Headers) -> None:
    assert missing(b"", headers).reason == "malformed"


def test_non_bearer_authorization_does_not_hide_other_locations() -> None:
    headers = [(b"authorization", b"Basic dXNlcjpwYXNz")]
    assert extract_token(f"token={TOKEN}".encode(), headers) == BearerToken(TOKEN, None)


# --------------------------------------------------------------------------- Sec-WebSocket-Protocol


@pytest.mark.parametrize(
    "headers",
    [
        [(b"sec-websocket-protocol", f"bearer, {TOKEN}".encode())],
        [(b"sec-websocket-protocol", f"bearer,{TOKEN}".encode())],
        [(b"Sec-WebSocket-Protocol", b"bearer"), (b"sec-websocket-protocol", TOKEN.encode())],
        [(b"sec-websocket-protocol", f"rideout.v1, bearer, {TOKEN}".encode())],
    ],
)
def test_subprotocol_bearer(headers: Headers) -> None:
    assert extract_token(b"", headers) == BearerToken(TOKEN, BEARER_SUBPROTOCOL)
    assert BEARER_SUBPROTOCOL == "bearer"


@pytest.mark.parametrize("value", [b"bearer", b"bearer, ", b"rideout.v1, bearer"])
def test_subprotocol_bearer_without_token_is_malformed(value: bytes) -> None:
    assert missing(b"", [(b"sec-websocket-protocol", value)]).reason == "malformed"


def test_other_subprotocols_are_not_tokens() -> None:
    headers = [(b"sec-websocket-protocol", f"rideout.v1, {TOKEN}".encode())]
    assert missing(b"", headers).reason == "missing_token"
    assert extract_token(f"token={TOKEN}", headers) == BearerToken(TOKEN, None)


def test_bearer_dot_token_form_is_not_the_convention() -> None:
    headers = [(b"sec-websocket-protocol", f"bearer.{TOKEN}".encode())]
    assert missing(b"", headers).reason == "missing_token"


# --------------------------------------------------------------------------- precedence


def test_authorization_beats_subprotocol_beats_query() -> None:
    third = "eyJhbGciOiJFZERTQSJ9.eyJzdWIiOiJ3In0.dGhpcmQ"
    auth = (b"authorization", f"Bearer {TOKEN}".encode())
    proto = (b"sec-websocket-protocol", f"bearer, {OTHER}".encode())
    query = f"token={third}".encode()
    # The subprotocol must still be echoed whenever the client offered it.
    assert extract_token(query, [auth, proto]) == BearerToken(TOKEN, "bearer")
    assert extract_token(query, [proto, auth]) == BearerToken(TOKEN, "bearer")
    assert extract_token(query, [proto]) == BearerToken(OTHER, "bearer")
    assert extract_token(query, [auth]) == BearerToken(TOKEN, None)
    assert extract_token(query, []) == BearerToken(third, None)


def test_nothing_anywhere_is_missing_token() -> None:
    error = missing(b"", [])
    assert (error.status, error.reason) == (401, "missing_token")


def test_extracted_token_verifies(issuer: TokenIssuer, verifier: TokenVerifier) -> None:
    token = issuer.issue("user-7")
    for query, headers in (
        (f"token={token}".encode(), []),
        (b"", [(b"authorization", f"Bearer {token}".encode())]),
        (b"", [(b"sec-websocket-protocol", f"bearer, {token}".encode())]),
    ):
        found = extract_token(query, headers)
        assert verifier.verify(found.token).sub == "user-7"


# --------------------------------------------------------------------------- length


@pytest.mark.parametrize(
    ("query", "headers"),
    [
        (b"token=" + b"a" * (MAX_TOKEN_LENGTH + 1), []),
        (b"", [(b"authorization", b"Bearer " + b"a" * (MAX_TOKEN_LENGTH + 1))]),
        (b"", [(b"sec-websocket-protocol", b"bearer, " + b"a" * (MAX_TOKEN_LENGTH + 1))]),
    ],
    ids=["query", "authorization", "subprotocol"],
)
def test_a_token_over_the_maximum_length_is_refused_wherever_it_is(
    query: bytes, headers: Headers
) -> None:
    error = missing(query, headers)
    assert (error.status, error.reason) == (401, "token_too_long")
    assert str(MAX_TOKEN_LENGTH) in error.message
    assert "a" * 64 not in error.message


def test_a_token_of_the_maximum_length_is_extracted() -> None:
    token = "a" * MAX_TOKEN_LENGTH
    assert extract_token(b"token=" + token.encode(), []) == BearerToken(token, None)
