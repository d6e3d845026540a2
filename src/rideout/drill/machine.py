"""How busy the machine's cores were while a drill ran.

A drill on one machine shares its cores with its own clients: a figure measured on
saturated cores says as much about the machine as about the deployment, and the report
says which it was. Read from Linux's ``/proc/stat`` (the first line: every core's time
since boot, in clock ticks); elsewhere there is nothing to read and the report says so.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["PROC_STAT", "CpuTimes", "busy_share", "read_cpu_times", "usage"]

PROC_STAT = Path("/proc/stat")

# /proc/stat's "cpu" fields: user nice system idle iowait irq softirq steal (guest and
# guest_nice are already counted in user and nice).
_BUSY = (0, 1, 2, 5, 6, 7)
_IDLE = (3, 4)


@dataclass(frozen=True, slots=True)
class CpuTimes:
    """Clock ticks all cores spent busy, and in all, since boot."""

    busy: int
    total: int

    @classmethod
    def parse(cls, text: str) -> CpuTimes:
        """From ``/proc/stat``'s text; ValueError when its first line is not the ``cpu``
        total with at least eight counters."""
        first = text.split("\n", 1)[0].split()
        if not first or first[0] != "cpu" or len(first) < 9:
            raise ValueError(f"not /proc/stat's cpu line: {text[:80]!r}")
        try:
            ticks = [int(field) for field in first[1:9]]
        except ValueError:
            raise ValueError(f"the cpu line's counters are not integers: {first[:9]}") from None
        if any(tick < 0 for tick in ticks):
            raise ValueError(f"negative cpu ticks: {first[:9]}")
        busy = sum(ticks[i] for i in _BUSY)
        return cls(busy, busy + sum(ticks[i] for i in _IDLE))


def busy_share(start: CpuTimes, end: CpuTimes) -> float | None:
    """The share (0 to 1) of all cores' time that was busy from `start` to `end`; None
    when no tick passed between them."""
    total = end.total - start.total
    if total <= 0:
        return None
    return min(1.0, max(0.0, (end.busy - start.busy) / total))


def read_cpu_times(path: Path = PROC_STAT) -> CpuTimes | None:
    """The machine's cpu times now; None where they cannot be read (not Linux)."""
    try:
        return CpuTimes.parse(path.read_text())
    except (OSError, ValueError):
        return None


def usage(start: CpuTimes | None, end: CpuTimes | None) -> dict[str, Any] | None:
    """A report's view of the span from `start` to `end`: the busy share and the cores;
    None when either reading is missing."""
    if start is None or end is None:
        return None
    share = busy_share(start, end)
    if share is None:
        return None
    return {"busy": round(share, 3), "cores": os.cpu_count() or 1}
