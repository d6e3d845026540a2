"""What a running `rideout up` leaves on disk for `status`, `down` and a second `up`.

``run/up.lock`` is held with ``flock`` for as long as the supervisor lives (the kernel
drops it when the process dies, so a crash never leaves a stale lock) and holds its pid.
``run/up.json`` records which process serves what, how often each was restarted and
whether the supervisor still restarts it; ``run/control.sock`` is where the supervisor
takes chaos commands (see :mod:`rideout.cluster.chaos`); ``run/dns-view.json`` is the
DNS view the control plane publishes for ``rideout dns`` (see :mod:`rideout.dns.feed`).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

from rideout._process import pid_alive
from rideout.cluster.errors import ClusterError

__all__ = [
    "CONTROL_SOCKET",
    "DNS_VIEW",
    "PROCESS_STATES",
    "AlreadyRunning",
    "ProcessRecord",
    "RunLock",
    "RunState",
    "read_lock_pid",
]

LOCK_FILE = "up.lock"
STATE_FILE = "up.json"
EFFECTIVE_CONFIG = "effective.toml"
CONTROL_SOCKET = "control.sock"
DNS_VIEW = "dns-view.json"

PROCESS_STATES = ("starting", "running", "restarting", "gave-up", "stopped")
"""A supervised process's state: ``restarting`` waits out its backoff, ``gave-up`` is
crash-looping and left down, ``stopped`` was stopped on purpose (chaos) and is not
restarted until ``rideout chaos restore``."""


class AlreadyRunning(ClusterError):
    """Another `rideout up` holds this data directory."""

    def __init__(self, run_dir: Path, pid: int | None) -> None:
        self.pid = pid
        who = f"pid {pid}" if pid else "another process"
        super().__init__(
            f"rideout is already running from {run_dir.parent} ({who}); "
            "see it with `rideout status`, stop it with `rideout down`"
        )


class RunLock:
    """An exclusive, crash-safe claim on a data directory."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self._file: IO[str] | None = None

    @property
    def held(self) -> bool:
        return self._file is not None

    def acquire(self) -> None:
        """Take the lock or raise AlreadyRunning."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        f = (self.run_dir / LOCK_FILE).open("a+", encoding="ascii")
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.close()
            raise AlreadyRunning(self.run_dir, read_lock_pid(self.run_dir)) from None
        f.seek(0)
        f.truncate()
        f.write(f"{os.getpid()}\n")
        f.flush()
        self._file = f

    def release(self) -> None:
        if self._file is not None:
            with contextlib.suppress(OSError):
                self._file.seek(0)
                self._file.truncate()
            self._file.close()  # closing drops the flock
            self._file = None


def read_lock_pid(run_dir: Path) -> int | None:
    """The pid of the live supervisor holding `run_dir`, or None if nobody holds it."""
    path = run_dir / LOCK_FILE
    try:
        with path.open("r", encoding="ascii") as f:
            try:
                fcntl.flock(f, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                text = f.read().strip()
                pid = int(text) if text.isdigit() else None
                return pid if pid is not None and pid_alive(pid) else None
            fcntl.flock(f, fcntl.LOCK_UN)
            return None
    except FileNotFoundError:
        return None


@dataclass(frozen=True, slots=True)
class ProcessRecord:
    """One supervised process (`pid` 0 while it does not run)."""

    name: str
    kind: str  # "redis" | "app" | "canary" | "control-plane" | "dns"
    pid: int
    region: str | None = None
    zone: str | None = None
    address: str | None = None
    port: int | None = None
    log: str | None = None
    state: str = "running"  # one of PROCESS_STATES
    restarts: int = 0  # restarts by the supervisor since `up` started
    note: str | None = None  # why it is not running, in words


@dataclass(slots=True)
class RunState:
    """The contents of ``run/up.json``."""

    supervisor_pid: int
    started_at: float
    config_file: str
    processes: list[ProcessRecord] = field(default_factory=list)

    def write(self, run_dir: Path) -> None:
        """Write atomically (readers never see half a file)."""
        run_dir.mkdir(parents=True, exist_ok=True)
        tmp = run_dir / f".{STATE_FILE}.{os.getpid()}"
        tmp.write_text(json.dumps(asdict(self), indent=2) + "\n", encoding="utf-8")
        os.replace(tmp, run_dir / STATE_FILE)

    @classmethod
    def read(cls, run_dir: Path) -> RunState | None:
        """The recorded state, or None when there is none or it cannot be read."""
        try:
            data: dict[str, Any] = json.loads((run_dir / STATE_FILE).read_text(encoding="utf-8"))
            return cls(
                supervisor_pid=int(data["supervisor_pid"]),
                started_at=float(data["started_at"]),
                config_file=str(data["config_file"]),
                processes=[ProcessRecord(**p) for p in data.get("processes", [])],
            )
        except (OSError, ValueError, KeyError, TypeError):
            return None

    @staticmethod
    def remove(run_dir: Path) -> None:
        with contextlib.suppress(FileNotFoundError):
            (run_dir / STATE_FILE).unlink()
