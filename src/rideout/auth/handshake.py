"""Find the bearer token in a WebSocket handshake (ASGI ``scope``).

Three places are accepted, in this order of precedence:

1. ``Authorization: Bearer <token>`` (non-browser clients);
2. the ``Sec-WebSocket-Protocol`` bearer convention: the client offers the subprotocol
   ``bearer`` immediately followed by the token as the next subprotocol, as in
   ``new WebSocket(url, ["bearer", token])``. The server must then accept the
   connection with subprotocol ``bearer`` (returned to the caller; the token itself is
   never echoed), or browsers fail the handshake;
3. the query parameter ``token=<token>`` (simplest, but query strings end up in logs).

A location that is present but empty counts as absent. Ambiguity within one location
(two bearer ``Authorization`` headers, two different ``token=`` parameters) is an error,
and so is a token longer than :data:`~rideout.auth.tokens.MAX_TOKEN_LENGTH` characters
(``token_too_long``, before anything else looks at it).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final, NamedTuple
from urllib.parse import parse_qsl

from rideout.auth.errors import AuthError
from rideout.auth.tokens import MAX_TOKEN_LENGTH

__all__ = ["BEARER_SUBPROTOCOL", "BearerToken", "extract_token"]

BEARER_SUBPROTOCOL: Final = "bearer"
"""The subprotocol that announces a token in ``Sec-WebSocket-Protocol``."""


class BearerToken(NamedTuple):
    """A token found in a handshake, and the subprotocol to accept with (or None)."""

    token: str
    subprotocol: str | None


def extract_token(query_string: bytes | str, headers: Iterable[tuple[bytes, bytes]]) -> BearerToken:
    """Find the token in an ASGI WebSocket handshake (see the module docstring).

    ``subprotocol`` is ``"bearer"`` whenever the client used the subprotocol convention
    (even if a higher-precedence location supplied the token), else None.
    Raises ``AuthError(401, "missing_token")`` when no location has a token,
    ``AuthError(401, "token_too_long")`` for one over ``MAX_TOKEN_LENGTH`` characters and
    ``AuthError(401, "malformed")`` for an ambiguous or broken one.
    """
    authorization: list[str] = []
    subprotocols: list[str] = []
    for name, value in headers:
        lowered = name.lower()
        if lowered == b"authorization":
            authorization.append(value.decode("latin-1"))
        elif lowered == b"sec-websocket-protocol":
            subprotocols.extend(item.strip() for item in value.decode("latin-1").split(","))

    from_subprotocol = _from_subprotocols(subprotocols)
    subprotocol = BEARER_SUBPROTOCOL if from_subprotocol else None
    for token in (
        _from_authorization(authorization),
        from_subprotocol,
        _from_query(query_string),
    ):
        if token:
            if len(token) > MAX_TOKEN_LENGTH:
                raise AuthError.of(
                    "token_too_long",
                    f"the access token is {len(token)} characters long; "
                    f"at most {MAX_TOKEN_LENGTH} are accepted",
                )
            return BearerToken(token, subprotocol)
    raise AuthError.of("missing_token", "no access token in the handshake")


def _from_authorization(values: list[str]) -> str | None:
    tokens: list[str] = []
    for value in values:
        scheme, _, credentials = value.strip().partition(" ")
        if scheme.lower() != "bearer":
            continue  # another scheme is not ours to judge
        credentials = credentials.strip()
        if credentials:
            if any(char.isspace() for char in credentials):
                raise AuthError.of("malformed", "the Authorization bearer token contains spaces")
            tokens.append(credentials)
    if len(tokens) > 1:
        raise AuthError.of("malformed", "more than one Authorization bearer token")
    return tokens[0] if tokens else None


def _from_subprotocols(subprotocols: list[str]) -> str | None:
    try:
        index = subprotocols.index(BEARER_SUBPROTOCOL)
    except ValueError:
        return None
    if index + 1 >= len(subprotocols) or not subprotocols[index + 1]:
        raise AuthError.of(
            "malformed", "the 'bearer' subprotocol must be followed by the token as a subprotocol"
        )
    return subprotocols[index + 1]


def _from_query(query_string: bytes | str) -> str | None:
    text = query_string.decode("latin-1") if isinstance(query_string, bytes) else query_string
    values = {value for name, value in parse_qsl(text, keep_blank_values=True) if name == "token"}
    values.discard("")
    if len(values) > 1:
        raise AuthError.of("malformed", "more than one token query parameter")
    return values.pop() if values else None
