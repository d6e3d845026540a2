"""Failback damping: an unstable primary does not get the writer back at once.

In the spirit of BGP route flap damping (RFC 2439), with the writer's moves as the
flaps. Every move (failover or failback) adds :attr:`DampingPolicy.penalty` to a
*figure of merit* that decays exponentially with :attr:`DampingPolicy.half_life`.
A move that leaves the figure above :attr:`DampingPolicy.suppress` *suppresses*
failback: the controller then keeps the writer where it is until the figure has
decayed below :attr:`DampingPolicy.reuse`. The figure never exceeds the
:attr:`DampingPolicy.ceiling` (RFC 2439's, from the maximum hold-down), so a hold never
lasts longer than :attr:`DampingPolicy.max_hold` after the last move. A figure that has
decayed below half of ``reuse`` is forgotten (reset to 0, as RFC 2439 frees its history).

Only failback is damped: a failed region is always left at once.

:class:`DampingPolicy` is immutable data; :class:`DampingState` is an immutable value
whose transitions take the time as an argument (no clock, no I/O), so the controller owns
the clock and the state survives a restart as plain data (:meth:`DampingState.to_dict`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from rideout import _validate
from rideout.errors import InvalidArgument

__all__ = ["DampingPolicy", "DampingState"]

_MAX_REMEMBERED_MOVES = 64  # move times kept for the "N moves in W s" view


@dataclass(frozen=True, slots=True)
class DampingPolicy:
    """How much a move costs, how fast that is forgiven, and the bounds.

    ``penalty``, ``suppress`` and ``reuse`` are in the same unit (the default penalty of
    1 makes the figure of merit read as "recent moves"); ``half_life`` and ``max_hold``
    are seconds. ``suppress`` must be at least ``reuse`` (the gap is the hysteresis).
    """

    half_life: float
    max_hold: float
    suppress: float = 1.5
    reuse: float = 0.75
    penalty: float = 1.0

    def __post_init__(self) -> None:
        _validate.seconds("half_life", self.half_life)
        _validate.seconds("max_hold", self.max_hold)
        for name in ("suppress", "reuse", "penalty"):
            if _validate.number(name, getattr(self, name)) <= 0:
                raise InvalidArgument(f"{name} must be > 0, not {getattr(self, name)!r}")
        if self.suppress < self.reuse:
            raise InvalidArgument(f"suppress ({self.suppress!r}) must be >= reuse ({self.reuse!r})")
        if self.ceiling <= self.suppress:
            shortest = self.half_life * math.log2(self.suppress / self.reuse)
            raise InvalidArgument(
                f"max_hold ({self.max_hold!r}) is too short to ever hold a failback: the "
                f"ceiling it sets ({self.ceiling:.3g}) must be above suppress "
                f"({self.suppress!r}); make it longer than {shortest:.3g} s"
            )

    @property
    def ceiling(self) -> float:
        """The highest the figure of merit goes: the one that decays to ``reuse`` in
        exactly ``max_hold`` seconds (RFC 2439's ceiling)."""
        return self.reuse * math.exp2(self.max_hold / self.half_life)

    def decayed(self, merit: float, elapsed: float) -> float:
        """``merit`` after ``elapsed`` seconds without a move (no time passes backwards)."""
        return merit * math.exp2(-max(0.0, elapsed) / self.half_life)

    def time_to_reuse(self, merit: float) -> float:
        """Seconds until ``merit`` has decayed below ``reuse`` (0 if it already has)."""
        if merit <= self.reuse:
            return 0.0
        return min(self.max_hold, self.half_life * math.log2(merit / self.reuse))


@dataclass(frozen=True, slots=True)
class DampingState:
    """The figure of merit as of ``updated_at``, whether failback is suppressed, and
    the times of the recent moves. Immutable: every transition returns a new state."""

    merit: float = 0.0
    updated_at: float = 0.0
    suppressed: bool = False
    moves: tuple[float, ...] = field(default=())

    # ------------------------------------------------------------------ transitions

    def at(self, policy: DampingPolicy, now: float) -> DampingState:
        """The state decayed to ``now``: released once below ``reuse``, forgotten below
        half of it. Moves older than ``max_hold`` leave the view."""
        now = max(now, self.updated_at)
        merit = min(policy.ceiling, policy.decayed(self.merit, now - self.updated_at))
        suppressed = self.suppressed and now < self.release_at(policy)
        if merit < policy.reuse / 2:
            merit = 0.0
        moves = tuple(t for t in self.moves if t > now - policy.max_hold)
        return DampingState(merit, now, suppressed, moves)

    def record_move(self, policy: DampingPolicy, now: float) -> DampingState:
        """A move of the writer at ``now``: the penalty is added (up to the ceiling) and
        failback is suppressed if the figure is now above ``suppress``."""
        current = self.at(policy, now)
        merit = min(policy.ceiling, current.merit + policy.penalty)
        moves = (*current.moves, current.updated_at)[-_MAX_REMEMBERED_MOVES:]
        suppressed = current.suppressed or merit > policy.suppress
        return DampingState(merit, current.updated_at, suppressed, moves)

    # ------------------------------------------------------------------ views

    def release_at(self, policy: DampingPolicy) -> float:
        """When a suppressed failback is allowed again (the figure reaches ``reuse``);
        the same instant whenever it is asked, until the next move."""
        return self.updated_at + policy.time_to_reuse(self.merit)

    def hold(self, policy: DampingPolicy, now: float) -> float:
        """Seconds a failback is still held at ``now``: 0 unless suppressed."""
        current = self.at(policy, now)
        if not current.suppressed:
            return 0.0
        return max(0.0, current.release_at(policy) - current.updated_at)

    def view(self, policy: DampingPolicy, now: float) -> dict[str, Any]:
        """What ``status`` shows: the figure, the hold, the recent moves, the policy."""
        current = self.at(policy, now)
        return {
            "penalty": round(current.merit, 3),
            "suppressed": current.suppressed,
            "hold_seconds": round(current.hold(policy, now), 3),
            "moves": len(current.moves),
            "window": policy.max_hold,
            "half_life": policy.half_life,
            "suppress": policy.suppress,
            "reuse": policy.reuse,
            "max_hold": policy.max_hold,
        }

    # ------------------------------------------------------------------ persistence

    def to_dict(self) -> dict[str, Any]:
        return {
            "merit": self.merit,
            "updated_at": self.updated_at,
            "suppressed": self.suppressed,
            "moves": list(self.moves),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> DampingState:
        """The state :meth:`to_dict` saved; ValueError/TypeError/KeyError if damaged."""
        merit = _validate.number("merit", data["merit"])
        updated_at = _validate.number("updated_at", data["updated_at"])
        suppressed = data["suppressed"]
        if not isinstance(suppressed, bool) or merit < 0:
            raise InvalidArgument(f"damaged damping state: {dict(data)!r}")
        moves = tuple(_validate.number("moves[]", t) for t in data.get("moves", ()))
        return cls(merit, updated_at, suppressed, moves[-_MAX_REMEMBERED_MOVES:])
