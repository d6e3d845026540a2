"""How busy the machine's cores were while a drill ran, and how fast one of them is.

A drill on one machine shares its cores with its own clients: a figure measured on
saturated cores says as much about the machine as about the deployment, and the report
says which it was. Read from Linux's ``/proc/stat`` (the first line: every core's time
since boot, in clock ticks); elsewhere there is nothing to read and the report says so.

Busy cores do not say how fast they are: the same drill met its goals in 3 of 20 runs
on one machine and in every run on one whose core signed 40% more tokens a second. So
the report also carries a core's speed (:func:`core_speed`), measured as ``bench.tokens``
measures its ``issue`` row, and figures from two machines can be set side by side.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "PROC_STAT",
    "CpuTimes",
    "busy_share",
    "core_speed",
    "cpu_rate",
    "read_cpu_times",
    "usage",
]

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


def cpu_rate(
    work: Callable[[], object],
    seconds: float,
    *,
    clock: Callable[[], float] = time.process_time,
) -> float:
    """Calls of `work` per second of this process's CPU time, over about `seconds` of it:
    a core's speed at `work`, however busy the machine is (the clock is CPU time, so time
    spent waiting for a core does not count)."""
    if not seconds > 0:
        raise ValueError(f"seconds must be positive, not {seconds!r}")
    done, start = 0, clock()
    while (elapsed := clock() - start) < seconds:
        for _ in range(100):
            work()
        done += 100
    return done / elapsed


def core_speed(seconds: float = 0.5) -> dict[str, Any]:
    """A report's view of one core's speed: Ed25519 access tokens issued per second of
    CPU by rideout's issuer, with a key of its own (``bench.tokens``' ``issue`` row)."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from rideout.auth.keys import SigningKey
    from rideout.auth.tokens import TokenIssuer

    issuer = TokenIssuer(
        SigningKey(Ed25519PrivateKey.generate()), "https://auth.rideout.test", "rideout", 3600
    )
    rate = cpu_rate(lambda: issuer.issue("visitor-123456"), seconds)
    return {"token_issues_per_second": round(rate)}
