"""The canary's metric: its namespace, name and dimensions (CloudWatch's terms).

A leaf with no imports, so the control plane, which reads these datapoints, does not
import the canary (WebSocket and HTTP clients, token signing) to know their names.
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "BUSY_METRIC_NAME",
    "CANARY_PROBE",
    "FULL_METRIC_NAME",
    "METRIC_NAME",
    "NAMESPACE",
    "PROBE_CLAIM",
    "REGION_DIMENSION",
    "ZONE_DIMENSION",
]

NAMESPACE: Final = "App"
METRIC_NAME: Final = "WebSocketHealth"
FULL_METRIC_NAME: Final = "ZoneFull"
"""1 while a zone's probed process is at its connection cap for ordinary users (healthy,
but full), else 0; sent only for a healthy probe. Not an alarm's metric: DNS prefers a
region's zones with room, and nothing fails over or evacuates for it."""
BUSY_METRIC_NAME: Final = "ZoneBusy"
"""1 while a zone's probed process says it is shedding load (its event loop runs late),
else 0; sent only for a healthy probe, which for a busy zone includes one answered
within ``timing.canary_busy_grace`` past the timeout. Not an alarm's metric: busy is not
down, and nothing fails over or evacuates for it."""
REGION_DIMENSION: Final = "ApiId"
"""The region a datapoint is about (the seed's API Gateway ``ApiId``)."""
ZONE_DIMENSION: Final = "Zone"

PROBE_CLAIM: Final = "rideout_probe"
"""The access-token claim that marks the canary's probes (value :data:`CANARY_PROBE`).
Only a holder of the deployment's signing key can mint it (no issuing route sets extra
claims): app servers keep connections in reserve for it, so a zone that attackers have
filled still answers its canary."""
CANARY_PROBE: Final = "canary"
