"""Fixtures shared with the realtime tests."""

from tests.realtime.conftest import deployment

__all__ = ["deployment"]
