"""Every async test of the WebSocket client runs on asyncio's own loop and on uvloop,
which rideout's servers and the drill's fleet run: their handles differ (uvloop's
``call_at`` for a time already past returns a plain Handle, with no ``when()``)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
import uvloop


def pytest_asyncio_loop_factories(
    config: pytest.Config, item: pytest.Item
) -> dict[str, Callable[[], asyncio.AbstractEventLoop]]:
    """Both loops, for the tests in this directory (pytest-asyncio parametrizes them)."""
    return {"asyncio": asyncio.new_event_loop, "uvloop": uvloop.new_event_loop}
