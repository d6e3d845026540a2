"""The global control plane: ingest, the evaluation loop, its HTTP API.

Its errors derive from :class:`ControlPlaneError`; what a host injects is in
:mod:`rideout.controlplane.ports`.
"""

from __future__ import annotations

from rideout.controlplane.errors import (
    ChaosFailed,
    ControlPlaneError,
    IngestError,
    IngestForbidden,
)

__all__ = ["ChaosFailed", "ControlPlaneError", "IngestError", "IngestForbidden"]
