"""Take a share of every core away from everything else, to drill on a busier machine.

    .venv/bin/python -m bench.steal --share 0.5 [--period 0.01] [--seconds 600]

One process per core, pinned to it, at nice -5 (so it gets the core when it wants it):
it spins for ``share × period`` seconds, then sleeps the rest of the period, until
``--seconds`` have passed or it is stopped (Ctrl-C, SIGTERM). The workers die with this
process. Started beside ``rideout drill``, the deployment and its clients get the rest of
each core: `--share 0.5` leaves them half the machine, in gaps of ``period`` (the default
10 ms is a noisy neighbour; 0.1 s a VM descheduled for 50 ms at a time). It emulates a
slower or busier machine, not a slower core: the drill's core-speed line still reads
the core's own speed. docs/drill.md (2026-12-06) has what the issue #11 gate did under it.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import signal
import sys
import time

_PR_SET_PDEATHSIG = 1


def _spin(cpu: int, share: float, period: float, until: float) -> None:
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        os.sched_setaffinity(0, {cpu})
    on = share * period
    while (now := time.monotonic()) < until:
        while time.monotonic() - now < on:
            pass
        time.sleep(max(0.0, period - on))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--share", type=float, required=True, help="of each core, 0 to 1")
    parser.add_argument("--period", type=float, default=0.01, help="seconds (default 0.01)")
    parser.add_argument("--seconds", type=float, default=600.0, help="then stop (default 600)")
    args = parser.parse_args()
    if not 0 < args.share < 1 or not args.period > 0 or not args.seconds > 0:
        parser.error("--share must be between 0 and 1, --period and --seconds positive")
    with contextlib.suppress(PermissionError):
        os.nice(-5)  # as root; otherwise at the same priority as the drill
    until = time.monotonic() + args.seconds
    workers = []
    for cpu in range(os.cpu_count() or 1):
        pid = os.fork()
        if pid == 0:
            try:
                _spin(cpu, args.share, args.period, until)
            finally:
                os._exit(0)
        workers.append(pid)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    print(f"taking {args.share:.0%} of {len(workers)} cores in periods of {args.period:g} s "
          f"for up to {args.seconds:g} s (Ctrl-C stops it)", flush=True)  # fmt: skip
    try:
        for pid in workers:
            os.waitpid(pid, 0)
    except KeyboardInterrupt:
        pass
    finally:
        for pid in workers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)


if __name__ == "__main__":
    main()
