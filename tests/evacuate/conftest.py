"""The evacuation tests' fixtures: `rideout up` workdirs as tests/cluster/ makes them."""

from __future__ import annotations

from tests.cluster.conftest import make_workdir

__all__ = ["make_workdir"]
