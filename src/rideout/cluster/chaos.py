"""`rideout chaos`: ask a running supervisor to break (or mend) a region.

The supervisor owns the processes, so fault injection goes through it: one JSON line
over ``run/control.sock``, one JSON line back.

| op | what happens to the region |
|---|---|
| ``kill`` | SIGKILL of every process, Redis included: the region is gone |
| ``kill-redis`` | SIGKILL of its Redis only |
| ``freeze`` | SIGSTOP of every process: connections hang, like a network blackhole |
| ``throttle`` | app servers answer every message with error/unavailable, sockets stay open |
| ``restore`` | undo all of the above: resume, restart what died, serve normally |

``kill``, ``freeze`` and ``throttle`` take a zone too: only that zone's app servers (a
zone outage, which zonal autoshift answers by evacuating the zone).

:class:`LocalChaos` is the control plane's chaos port (the dashboard's buttons) in local
mode.
"""

from __future__ import annotations

import asyncio
import json
import socket
from pathlib import Path
from typing import Any

from rideout.cluster.errors import ClusterError
from rideout.cluster.runstate import CONTROL_SOCKET
from rideout.controlplane.errors import ChaosFailed

__all__ = ["OPS", "ChaosError", "LocalChaos", "send_command"]

OPS = ("kill", "kill-redis", "freeze", "throttle", "restore")


class ChaosError(ClusterError):
    """The supervisor could not be reached or refused the command."""


def send_command(
    run_dir: Path, op: str, region: str, *, zone: str | None = None, timeout: float = 60.0
) -> str:
    """Run `op` on `region` (only its `zone`, if given) through the supervisor of
    `run_dir`; its report."""
    path = run_dir / CONTROL_SOCKET
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout)
            sock.connect(str(path))
            command = {"op": op, "region": region, **({"zone": zone} if zone else {})}
            sock.sendall(json.dumps(command).encode() + b"\n")
            reply = sock.makefile("rb").readline()
    except FileNotFoundError:
        raise ChaosError(f"rideout is not running from {run_dir.parent} (no {path})") from None
    except OSError as exc:
        raise ChaosError(f"cannot reach the supervisor at {path}: {exc}") from None
    try:
        answer: dict[str, Any] = json.loads(reply)
    except ValueError:
        raise ChaosError(f"the supervisor gave no answer to {op} {region}") from None
    if not answer.get("ok"):
        raise ChaosError(str(answer.get("error", "refused")))
    return str(answer["message"])


class LocalChaos:
    """The control plane's :class:`~rideout.controlplane.ports.ChaosPort` for the
    supervisor of ``run_dir``."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir

    async def run(self, op: str, region: str) -> str:
        try:
            return await asyncio.to_thread(send_command, self.run_dir, op, region)
        except ChaosError as exc:
            raise ChaosFailed(str(exc)) from exc
