"""The canary's metric: its namespace, name and dimensions (CloudWatch's terms).

A leaf with no imports, so the control plane, which reads these datapoints, does not
import the canary (WebSocket and HTTP clients, token signing) to know their names.
"""

from __future__ import annotations

from typing import Final

__all__ = ["METRIC_NAME", "NAMESPACE", "REGION_DIMENSION", "ZONE_DIMENSION"]

NAMESPACE: Final = "App"
METRIC_NAME: Final = "WebSocketHealth"
REGION_DIMENSION: Final = "ApiId"
"""The region a datapoint is about (the seed's API Gateway ``ApiId``)."""
ZONE_DIMENSION: Final = "Zone"
