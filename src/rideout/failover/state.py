"""What the failover controller remembers across restarts (the control plane saves it):
the writer, its epoch, the counters, the recent events and the damping state."""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from rideout.failover.damping import DampingState

__all__ = ["ControllerState", "FailoverEvent", "repeats_note"]


@dataclass(frozen=True, slots=True)
class FailoverEvent:
    """One step the controller took (or could not take)."""

    at: float
    kind: str  # fail-over, fail-back, promote, demote, epoch, error, wait, start
    message: str
    writer: str
    epoch: int
    repeats: int = 0  # the same step, failing the same way in later rounds
    last_at: float | None = None  # the latest of those


@dataclass
class ControllerState:
    """What the controller must remember across restarts."""

    writer: str
    epoch: int
    lost_writes: int = 0
    # Restarted Redis servers that came back without their data or behind another
    # (never trusted: see FailoverController._writer_came_back).
    datasets_lost: int = 0
    failovers: int = 0
    failbacks: int = 0
    events: deque[FailoverEvent] = field(default_factory=lambda: deque(maxlen=100))
    damping: DampingState = field(default_factory=DampingState)
    # The writer's Redis (a node key of failover.topology): None is the region's main one.
    writer_node: str | None = None
    in_region_promotions: int = 0
    promoted_in_region_at: float | None = None
    moved_at: float | None = None  # the writer's latest move to another region

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["events"] = [asdict(e) for e in self.events]
        data["damping"] = self.damping.to_dict()
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ControllerState:
        state = cls(
            writer=str(data["writer"]),
            epoch=int(data["epoch"]),
            lost_writes=int(data.get("lost_writes", 0)),
            datasets_lost=int(data.get("datasets_lost", 0)),
            failovers=int(data.get("failovers", 0)),
            failbacks=int(data.get("failbacks", 0)),
            writer_node=str(data["writer_node"]) if data.get("writer_node") else None,
            in_region_promotions=int(data.get("in_region_promotions", 0)),
            promoted_in_region_at=_optional_float(data.get("promoted_in_region_at")),
            # `failed_back_at`: a state saved before every move had a grace (2026-12-02)
            moved_at=_optional_float(data.get("moved_at", data.get("failed_back_at"))),
            damping=DampingState.from_dict(data["damping"])
            if "damping" in data
            else DampingState(),
        )
        for e in data.get("events", []):
            state.events.append(FailoverEvent(**e))
        return state


def repeats_note(event: Mapping[str, Any]) -> str:
    """' (again 4 times over 2.0 s)' for an event (as a dict) that repeated, else ''."""
    repeats = event.get("repeats") or 0
    if not repeats:
        return ""
    over = (event.get("last_at") or event["at"]) - event["at"]
    return f" (again {repeats} time{'' if repeats == 1 else 's'} over {over:.1f} s)"


def _optional_float(value: Any) -> float | None:
    return None if value is None else float(value)
