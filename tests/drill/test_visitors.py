"""The surge drill's visitors, without a deployment (the whole drill runs in
tests/drill/test_surge_e2e.py)."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Any

from rideout.client.resolve import ResolutionError, ResolutionFailure, Resolved
from rideout.config import Config
from rideout.drill.visitors import _Origin
from tests.conftest import asgi_lifespan, free_port, serving


class FailsOnce:
    """A name server that times out once, then answers 127.0.0.1."""

    def __init__(self) -> None:
        self.asked = 0

    async def resolve(self, name: str) -> Resolved:
        self.asked += 1
        if self.asked == 1:
            raise ResolutionError(name, ResolutionFailure.TIMEOUT, "dns://127.0.0.1 after 2 s")
        return Resolved(("127.0.0.1",), 1.0, "test")


async def ok(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        return await asgi_lifespan(receive, send)
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"{}"})


async def test_a_name_server_that_times_out_is_retried_like_any_failed_request(
    make_config: Callable[..., Config],
) -> None:
    """Before, the ResolutionError escaped the retry loop and ended its visitor's whole
    visit (counted "unfinished" in a CI surge drill)."""
    port = free_port("127.0.0.1")
    config = make_config(app_port=port)
    origin = _Origin(config, random.Random(1))
    resolver = FailsOnce()
    origin.resolver = resolver  # type: ignore[assignment]
    try:
        async with serving(ok, "127.0.0.1", port):
            response, _ = await origin.request("GET", "/serving_num", until=time.time() + 10)
    finally:
        await origin.aclose()
    assert response.status_code == 200
    assert resolver.asked == 2
    assert origin.answers == {"/serving_num ResolutionError": 1, "/serving_num 200": 1}
