"""The local multi-region deployment: supervisor, run state, status, chaos.

Its errors derive from :class:`ClusterError`. It provides the control plane's local ports
(:class:`~rideout.cluster.chaos.LocalChaos`, :class:`~rideout.cluster.status.LocalInventory`).
"""

from __future__ import annotations

from rideout.cluster.errors import ClusterError

__all__ = ["ClusterError"]
