"""Game days: measured drills against a local (or running) deployment.

``rideout drill region-outage`` (see :func:`run_region_outage`) breaks the primary
region under N resilient clients and reports detection, DNS, per-client recovery,
the reconnect herd and every acknowledged bid's fate.
"""

from __future__ import annotations

from rideout.drill.console import main_region_outage
from rideout.drill.report import render_markdown, write_report
from rideout.drill.runner import DrillError, DrillOptions, run_region_outage

__all__ = [
    "DrillError",
    "DrillOptions",
    "main_region_outage",
    "render_markdown",
    "run_region_outage",
    "write_report",
]
