from __future__ import annotations

from rideout.controlplane import ChaosFailed, ControlPlaneError, IngestError
from rideout.controlplane.runtime import IngestError as RuntimeIngestError
from rideout.errors import RideoutError


def test_every_control_plane_error_has_one_base() -> None:
    assert issubclass(ControlPlaneError, RideoutError)
    assert issubclass(IngestError, ControlPlaneError)
    assert issubclass(IngestError, ValueError)  # bad input, as the ingest handler treats it
    assert issubclass(ChaosFailed, ControlPlaneError)
    assert RuntimeIngestError is IngestError
