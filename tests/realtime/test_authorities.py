"""/ws asks other authorities about tokens its own verifier refuses (HandshakeAuthority).

The authorities here are small stand-ins written for the test (the waiting room's real
one is tested in tests/waitingroom/test_authorizer.py); the servers, sockets and Redis
are real.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from types import MappingProxyType
from typing import Any

from websockets.asyncio.client import connect

from rideout.auth import AuthError, AuthUnavailable, Claims
from rideout.config import Config
from tests.realtime.conftest import recv_type, rejected, running_deployment, send

GUEST = "guest-token"


class Guests:
    """Accepts the one token GUEST as user `guest`; refuses `banned`; cannot tell `later`."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    async def authorize(self, token: str) -> Claims | None:
        self.asked.append(token)
        if token == GUEST:
            now = time.time()
            return Claims("guest", now + 60, now, "guest-jti", MappingProxyType({}))
        if token == "banned":
            raise AuthError.of("session_completed", "that session is over")
        if token == "later":
            raise AuthUnavailable("the store does not answer", retry_after=2.0)
        return None


async def test_authorities_are_asked_only_about_tokens_the_auction_refuses(
    make_config: Callable[..., Config],
) -> None:
    guests = Guests()

    def options() -> dict[str, Any]:
        return {"authorities": [guests]}

    async with running_deployment(make_config(), options) as deployment:
        url = deployment.urls["a1"]
        async with deployment.connect("a1", sub="alice") as ws:  # the auction's own token
            await send(ws, action="getState", room="r1")
            await recv_type(ws, "state")
        assert guests.asked == []
        async with connect(f"{url}/ws?token={GUEST}", open_timeout=5) as ws:
            await send(ws, action="getState", room="r1")
            await recv_type(ws, "state")
        assert await rejected(f"{url}/ws?token=banned") == (
            403,
            {"error": "session_completed", "message": "that session is over"},
        )
        status, body = await rejected(f"{url}/ws?token=later")
        assert (status, body["error"], body["retry_after"]) == (503, "auth_unavailable", 2.0)
        # Nobody's token: the auction verifier's own refusal is the answer.
        status, body = await rejected(f"{url}/ws?token=a.b.c")
        assert (status, body["error"]) == (401, "malformed")
        assert guests.asked == [GUEST, "banned", "later", "a.b.c"]
