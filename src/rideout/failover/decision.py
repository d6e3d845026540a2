"""Where the writer should be: the failover controller's decision, pure (no I/O, no
clock): the regions' health and the holds in, a :class:`Decision` out. The reference
table of its cases is ``tests/failover/test_controller.py``'s ``test_decide``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

__all__ = ["Decision", "Held", "Move", "decide"]

Move = Literal["none", "fail-over", "fail-back", "promote-in-region"]
Held = Literal[
    "in-region-grace", "move-grace", "recovering", "strained", "damping", "both-unhealthy"
]
"""Which rule keeps the writer where the health checks alone would move it."""


@dataclass(frozen=True, slots=True)
class Decision:
    """What to do with the writer this tick, and why."""

    move: Move
    target: str | None
    reason: str
    urgent: bool = False  # the writer's region is failing: do not wait indefinitely
    held: Held | None = None  # the rule that keeps the writer from a move (move "none")


def decide(
    *,
    writer: str,
    primary: str,
    secondary: str,
    healthy: Mapping[str, bool],
    auto_failback: bool,
    failback_hold: float = 0.0,
    in_region_replica: Mapping[str, bool] | None = None,
    in_region_grace: bool = False,
    move_grace: bool = False,
    writer_reachable: bool = True,
    other_strained: bool = False,
    writer_recovering: bool = False,
) -> Decision:
    """Where the writer should be, given the regions' health (pure).

    - The writer's region unhealthy (its app servers, or its Redis: the canary's probe
      goes through the store) with an in-sync replica of its own in another zone
      (`in_region_replica`, region → ready; only when the writer's own Redis is lost):
      promote that one, in the region.
    - Within `in_region_grace` (just after such a promotion, while the alarm it raised
      clears on the promoted Redis) an unhealthy writer region stays: the region is
      given the time to recover before it is failed over.
    - Within `move_grace` (just after the writer moved to this region, either way,
      while the drain of the region it left sends the clients over) an unhealthy writer
      region whose Redis answers (`writer_reachable`) stays: the arriving clients are
      the likeliest cause, and another move would only send them back. A lost Redis is
      moved away from at once.
    - `writer_recovering` (the writer region's alarm is still in ALARM, but only by the
      recovery threshold: its newest datapoint is good, :attr:`Alarm.recovering`): an
      unhealthy writer region whose Redis answers stays. It fails no longer; its alarm
      waits for more good periods before it trusts the region with a *failback*, but
      leaving a region that serves again only moves its clients for nothing. The first
      bad datapoint ends it, and so does the alarm's OK.
    - `other_strained` (the other region failed its canary while it held the writer,
      its Redis answering, within the last damping half-life): an unhealthy writer
      region whose Redis answers stays too. Both regions have just shown they cannot
      take the clients; moving them back would only start the next failure.

    - The writer's region healthy: stay, except that a writer in the secondary moves
      back to a healthy primary when `auto_failback` is set and no `failback_hold`
      (seconds, from flap damping) remains.
    - The writer's region unhealthy and the other healthy: move there.
    - Both unhealthy: stay (moving to a region that is also failing gains nothing;
      DNS keeps answering the writer's region).
    """
    other = secondary if writer == primary else primary
    writer_ok, other_ok = healthy.get(writer, True), healthy.get(other, True)
    if not writer_ok and (in_region_replica or {}).get(writer):
        return Decision(
            "promote-in-region", writer,
            f"{writer} is unhealthy and has an in-sync replica in another zone",
            urgent=True,
        )  # fmt: skip
    if not writer_ok and in_region_grace:
        return Decision(
            "none",
            None,
            f"{writer} promoted in the region just now: its alarm is clearing",
            held="in-region-grace",
        )
    if not writer_ok and other_ok and writer_reachable:
        # Rules that keep a failing writer region whose Redis answers (a lost Redis is
        # left at once), in order.
        holds: tuple[tuple[bool, Held, str], ...] = (
            (move_grace, "move-grace",
             f"{writer} took the writer just now and its Redis answers: held while the "
             "clients sent to it arrive (the grace after a move)"),
            (writer_recovering, "recovering",
             f"{writer} passes its canary again and its Redis answers: it stays the writer "
             "while its alarm counts the good periods back to OK (recovering)"),
            (other_strained, "strained",
             f"{writer} is unhealthy but its Redis answers, and {other} failed while it "
             "held the writer just before: both are strained by the same clients, who "
             "stay (flap damping)"),
        )  # fmt: skip
        for applies, held, reason in holds:
            if applies:
                return Decision("none", None, reason, held=held)
    if not writer_ok and other_ok:
        move: Move = "fail-over" if other == secondary else "fail-back"
        return Decision(move, other, f"{writer} is unhealthy and {other} is healthy", urgent=True)
    if writer == secondary and other_ok and auto_failback and writer_ok:
        if failback_hold > 0:
            return Decision(
                "none", None,
                f"{primary} is healthy again; failback held {failback_hold:.1f} s more "
                "(flap damping)", held="damping",
            )  # fmt: skip
        return Decision("fail-back", primary, f"{primary} is healthy again")
    if not writer_ok:
        return Decision(
            "none", None, f"both regions are unhealthy: the writer stays in {writer}",
            held="both-unhealthy",
        )  # fmt: skip
    return Decision("none", None, f"{writer} is healthy")
