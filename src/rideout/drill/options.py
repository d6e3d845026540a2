"""What a drill is asked to do: `rideout drill region-outage`'s options, the checks every
client drill makes of its flags, and the first keys of a drill's report."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rideout.config import PROFILES
from rideout.drill.errors import DrillError

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

__all__ = [
    "FAULTS",
    "DrillOptions",
    "Progress",
    "check_at_least_one",
    "check_choice",
    "check_options",
    "check_profile",
    "report_head",
    "report_tail",
]

FAULTS = ("kill", "freeze", "throttle")
Progress = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class DrillOptions:
    """What `rideout drill region-outage` was asked to do."""

    clients: int = 100
    fault: str = "kill"
    replication: str = "sync"
    profile: str | None = None
    failback: bool = False
    compare_jitter: bool = False
    max_rto: float | None = None
    max_write_rto: float | None = None
    # The failback's own limits: its figures count from the restore, and six good canary
    # periods, the damping hold and the drain are in them by design.
    max_failback_rto: float | None = None
    max_failback_write_rto: float | None = None
    max_lost: int | None = None
    report_dir: Path | None = None
    config_path: Path | None = None
    rooms: int | None = None
    """Rooms the clients spread over (default: one per 20 clients)."""
    bid_interval: float | None = None
    """Mean seconds between one client's bids (default: 1 s, longer for large N)."""
    clients_per_process: int = 400
    processes: bool | None = None
    """Spawn worker processes for the clients (default: when N > clients_per_process, or
    with a client_nice)."""
    client_nice: int = 0
    """How much lower the client workers' scheduling priority is than the drill's (0 to
    19, os.nice): on one machine, the fleet then yields the cores to the deployment, as
    clients on other hosts would. Needs worker processes."""
    warmup: float = 3.0
    settle: float = 2.0
    recovery_timeout: float | None = None
    env: dict[str, str] | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        check_options(self.clients, self.fault, self.profile)
        if self.replication not in ("sync", "async"):
            raise DrillError(f"--replication must be sync or async, not {self.replication!r}")
        if self.rooms is not None and not 1 <= self.rooms <= self.clients:
            raise DrillError(f"--rooms must be between 1 and --clients ({self.clients})")
        check_nice(self.client_nice)
        if self.client_nice and self.processes is False:
            raise DrillError("--client-nice needs the clients in worker processes")
        if not self.failback:
            for flag, value in (
                ("--failback-rto", self.max_failback_rto),
                ("--failback-write-rto", self.max_failback_write_rto),
            ):
                if value is not None:
                    raise DrillError(f"{flag} needs --failback")


def check_options(clients: int, fault: str, profile: str | None) -> None:
    """The checks the client drills make of their options (DrillError naming the flag)."""
    check_at_least_one("--clients", clients)
    check_choice("--fault", fault, FAULTS)
    check_profile(profile)


def check_at_least_one(flag: str, value: int) -> None:
    """DrillError unless ``value`` (given as ``flag``) is 1 or more."""
    if value < 1:
        raise DrillError(f"{flag} must be at least 1")


def check_nice(nice: int) -> None:
    """DrillError unless ``nice`` (``--client-nice``) is one ``os.nice`` takes: 0-19."""
    if not 0 <= nice <= 19:
        raise DrillError("--client-nice must be between 0 and 19")


def check_choice(flag: str, value: object, choices: tuple[str, ...]) -> None:
    """DrillError unless ``value`` (given as ``flag``) is one of ``choices``."""
    if value not in choices:
        raise DrillError(f"{flag} must be one of {', '.join(choices)}, not {value!r}")


def check_profile(profile: str | None) -> None:
    """DrillError unless ``profile`` is None (the deployment's own) or a known profile."""
    if profile is not None and profile not in PROFILES:
        raise DrillError(f"--profile must be one of {', '.join(PROFILES)}")


def report_head(drill: str, options: DataclassInstance) -> dict[str, Any]:
    """A drill report's first keys: the drill, when it started, its options (JSON-able:
    paths as text, the environment left out)."""
    return {
        "drill": drill,
        "started_at": time.time(),
        "options": {
            k: (str(v) if isinstance(v, Path) else v)
            for k, v in dataclasses.asdict(options).items()
            if k != "env"
        },
    }


def report_tail(
    report: dict[str, Any], result: dict[str, Any], objectives: list[dict[str, Any]]
) -> dict[str, Any]:
    """``report`` with its pass, the time it finished, its objectives and whether they
    all held (``ok``)."""
    report["pass"] = result
    report["finished_at"] = time.time()
    report["objectives"] = objectives
    report["ok"] = all(o["ok"] for o in objectives)
    return report
