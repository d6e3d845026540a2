"""DNS failover: pure answer selection (`records`), one question answered (`query`), the
authoritative server (`server`).

Only the pure records API is re-exported here; importing this package pulls in no DNS
library, sockets or event loop (the server lives in `rideout.dns.server`).
"""

from __future__ import annotations

from rideout.dns.errors import DnsError
from rideout.dns.records import (
    Answer,
    DnsZoneConfig,
    Endpoint,
    Record,
    RegionRecords,
    Resolution,
    bump_serial,
    failover_answer,
    resolve,
)

__all__ = [
    "Answer",
    "DnsError",
    "DnsZoneConfig",
    "Endpoint",
    "Record",
    "RegionRecords",
    "Resolution",
    "bump_serial",
    "failover_answer",
    "resolve",
]
