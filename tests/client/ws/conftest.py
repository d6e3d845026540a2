"""Every async test of the WebSocket client runs on asyncio's own loop and on uvloop,
which rideout's servers and the drill's fleet run: their handles differ (uvloop's
``call_at`` for a time already past returns a plain Handle, with no ``when()``). With
``RIDEOUT_TEST_MATRIX=default`` (``./dev test --quick``) on asyncio's alone, the loop a
user of the library gets by default; the full suite, which CI runs, runs both."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable

import pytest
import uvloop


def pytest_asyncio_loop_factories(
    config: pytest.Config, item: pytest.Item
) -> dict[str, Callable[[], asyncio.AbstractEventLoop]]:
    """The loops, for the tests in this directory (pytest-asyncio parametrizes them)."""
    if os.environ.get("RIDEOUT_TEST_MATRIX") == "default":
        return {"asyncio": asyncio.new_event_loop}
    return {"asyncio": asyncio.new_event_loop, "uvloop": uvloop.new_event_loop}
