"""Game days: measured drills against a local (or running) deployment.

``rideout drill region-outage`` (see :func:`run_region_outage`) breaks the primary
region under N resilient clients and reports detection, DNS, per-client recovery,
the reconnect herd and every acknowledged bid's fate. ``rideout drill surge`` (see
:func:`run_surge`) sends N visitors through the waiting room guarding the auction and
proves the room holds the site to its capacity, loses no position, and fails over.
"""

from __future__ import annotations

from rideout.drill.console import main_region_outage, main_surge
from rideout.drill.errors import DrillError
from rideout.drill.options import DrillOptions
from rideout.drill.report import render_markdown, write_report
from rideout.drill.runner import run_region_outage
from rideout.drill.surge import SurgeOptions, run_surge

__all__ = [
    "DrillError",
    "DrillOptions",
    "SurgeOptions",
    "main_region_outage",
    "main_surge",
    "render_markdown",
    "run_region_outage",
    "run_surge",
    "write_report",
]
