from __future__ import annotations

import pytest

from rideout.cluster import ClusterError
from rideout.cluster.chaos import ChaosError
from rideout.cluster.preflight import PortInUse
from rideout.cluster.runstate import AlreadyRunning
from rideout.errors import RideoutError


@pytest.mark.parametrize("error", [PortInUse, ChaosError, AlreadyRunning])
def test_every_cluster_error_has_one_base(error: type[Exception]) -> None:
    assert issubclass(error, ClusterError)
    assert issubclass(error, RideoutError)
    assert issubclass(error, RuntimeError)  # what callers caught before the base existed
