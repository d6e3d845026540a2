"""The partition drill's scenarios and what each must show (pure: data and checks on
the control plane's timeline and the servers' final views; the run is
:mod:`rideout.drill.partition`).

Each scenario is a set of both-ways partitions in the lab's router (hosts or groups of
:func:`rideout.lab.deployment.lab_groups`), held for some seconds under bidding clients
in both regions, then healed; or, for ``wan``, a kill of the writer region's parts on a
WAN with latency, and their restart (the heal of a kill). Beyond the checker's verdict
(:mod:`rideout.drill.partition_check`: no acknowledged bid lost, no split-brain window,
every server caught up), each says what the control plane must have done:

| scenario | cut | expected |
|---|---|---|
| ``replication-cut`` | ``us-east-1`` from ``us-west-2`` | no writer move, no zone evacuated, DNS on us-east-1 throughout |
| ``split-brain`` | ``us-east-1`` from ``global`` and from ``us-west-2`` | the writer moves to us-west-2; after the heal only one Redis is a master |
| ``zone-store-cut`` | ``use1-az1`` from ``redis-use1`` and ``replica-use1`` | ``use1-az1`` evacuated (autoshift), no writer move |
| ``control-plane-isolated`` | ``global`` from both regions | no writer move, DNS still answers us-east-1, no zone evacuated |
| ``one-way`` | what ``us-east-1`` sends to ``global`` (``global`` still reaches it) | the writer moves to us-west-2; after the heal only one Redis is a master |
| ``wan`` | none: 35 ms each way on the WAN link, then us-east-1's Redis servers and app servers killed (SIGKILL), started again after the fault | the writer moves to us-west-2; the restarted servers follow it; only one master |

``wan`` also measures (:func:`write_latency`) what a synchronous write costs across the
WAN: the bids' latency before the delay is set (the baseline) and with it, against the
round trip it adds.

A one-way cut drops one direction's packets (docs/lab.md, Partitions): UDP and the
replies of established connections go one way, and a new TCP connection either way
fails its handshake. In ``one-way`` the control planes do not hear the writer region
(its canary's pushes, its Redis's replies) while its app servers' requests to them are
lost too; replication to us-west-2 goes on until the controller promotes it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rideout.drill.analysis import summarize
from rideout.drill.partition_check import BidAttempt

__all__ = [
    "SCENARIOS",
    "Scenario",
    "at_rest",
    "events_seen",
    "expectations",
    "recovery",
    "reported_lost",
    "steady_row",
    "write_latency",
]  # fmt: skip

Row = Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Scenario:
    """One partition drill: what is cut, for how long, and what must follow."""

    name: str
    what: str
    cuts: tuple[tuple[str, str], ...]  # each partitioned both ways
    warmup: float  # seconds of bidding before the fault
    fault: float  # seconds the cuts hold
    after: float  # seconds of bidding after the heal
    failover: bool  # the writer must move to the secondary (else: must not move)
    evacuated: tuple[str, ...] = ()  # zones that must be evacuated (and no other)
    dns_kept: bool = False  # DNS must answer the primary throughout
    direction: str = "both"  # "both", or "a->b": only what each cut's first side sends
    latency: float = 0.0  # seconds each way on the WAN link, set after a first warm-up
    kill: tuple[str, ...] = ()  # parts SIGKILLed at the fault, started again at the heal

    def describe_fault(self) -> str:
        """The fault as the report and the drill's output say it."""
        if self.kill:
            return "kill " + ", ".join(self.kill)
        sep = " | " if self.direction == "both" else " -> "
        return "; ".join(sep.join(cut) for cut in self.cuts)


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario(
            "replication-cut",
            "only the inter-region link fails (us-east-1 from us-west-2, both ways); both "
            "regions stay healthy",
            (("us-east-1", "us-west-2"),),
            warmup=5.0, fault=10.0, after=6.0, failover=False, dns_kept=True,
        ),
        Scenario(
            "split-brain",
            "the writer region loses the control planes (global) and the other region, "
            "and keeps its own clients",
            (("us-east-1", "global"), ("us-east-1", "us-west-2")),
            warmup=5.0, fault=20.0, after=15.0, failover=True,
        ),
        Scenario(
            "zone-store-cut",
            "one zone host (use1-az1) cannot reach its region's Redis hosts",
            (("use1-az1", "redis-use1"), ("use1-az1", "replica-use1")),
            warmup=5.0, fault=15.0, after=6.0, failover=False, evacuated=("use1-az1",),
        ),
        Scenario(
            "control-plane-isolated",
            "both control planes (and the state Redis) lose both regions",
            (("global", "us-east-1"), ("global", "us-west-2")),
            warmup=5.0, fault=12.0, after=6.0, failover=False, dns_kept=True,
        ),
        Scenario(
            "one-way",
            "the control planes do not hear the writer region (what us-east-1 sends to "
            "global is dropped), the writer region still hears them",
            (("us-east-1", "global"),),
            warmup=5.0, fault=20.0, after=15.0, failover=True, direction="a->b",
        ),
        Scenario(
            "wan",
            "35 ms each way between the regions, then the writer region's Redis servers "
            "and app servers killed (SIGKILL), started again after the fault",
            (),
            warmup=6.0, fault=20.0, after=15.0, failover=True, latency=0.035,
            kill=("redis-use1", "replica-use1", "use1-az1", "use1-az2"),
        ),
    )
}  # fmt: skip


def _answered(rows: Sequence[Row]) -> list[Row]:
    """The answers of the acting control plane (the lease's holder): a standby's view of
    the writer is its own last reading, seconds stale after a move. Rows that do not say
    (``acting`` absent) count."""
    return [
        r
        for r in rows
        if r.get("status") == 200 and r.get("writer") is not None and r.get("acting") is not False
    ]


def steady_row(row: Row, primary: str) -> bool:
    """Whether one answer shows the deployment at rest: `primary` holds the writer and
    the DNS answer, every alarm OK."""
    alarms = row.get("alarms") or {}
    return (
        row.get("writer") == primary
        and row.get("dns") == primary
        and bool(alarms)
        and all(state == "OK" for state in alarms.values())
    )


def at_rest(rows: Sequence[Row], primary: str, *, hold: float = 3.0,
            after_move: float = 15.0) -> bool:  # fmt: skip
    """Whether the acting control plane's answers (`rows`, in order) show the deployment
    at rest: :func:`steady_row` for the last `hold` s, and, if the writer's epoch changed
    in them, not within the last `after_move` s. A move arms autoshift's hold-down
    (``[evacuate] autoshift_holddown``, 15 s): a zone cut then would be judged under it,
    not as the scenario means (seen: a move in a loaded start-up, then the zone's failure
    became a regional failover)."""
    if not rows or not steady_row(rows[-1], primary):
        return False
    last = float(rows[-1]["t"])
    bad = [r["t"] for r in rows if not steady_row(r, primary)]
    if last - max(bad, default=rows[0]["t"]) < hold:
        return False
    epoch = rows[-1].get("epoch")
    # An answer without an epoch (the controller not yet started) is no move.
    other = [r["t"] for r in rows if r.get("epoch") not in (epoch, None)]
    if other:
        since = min(float(r["t"]) for r in rows if r["t"] > max(other))
        return last - since >= after_move
    return True


def events_seen(rows: Sequence[Row]) -> list[str]:
    """The control planes' events, each once, in the order the polls first saw them
    (each answer carries its last few, oldest first): the order they happened in, give
    or take a standby's lag. Sorting them by text put ``demote`` before ``fail-over``."""
    return list(dict.fromkeys(e for r in rows for e in r.get("events") or []))


def write_latency(
    attempts: Sequence[BidAttempt], *, baseline: tuple[float, float], delayed: tuple[float, float],
    rtt: float,
) -> dict[str, Any]:  # fmt: skip
    """The acknowledged bids' latency (ack less send, seconds) sent and acknowledged
    within the `baseline` window (no delay) and within the `delayed` one (wall clock),
    p50 and p99 of each, the round trip the delay adds (`rtt`), and what the delay cost
    at p50 and p99 (delayed less baseline), in seconds. A bid in flight when a window
    ends is left out: the delayed window ends with the kill, and a bid sent before it
    but acknowledged after the failover measures the failover, not the WAN."""

    def window(bounds: tuple[float, float]) -> list[float]:
        return [a.acked - a.sent for a in attempts
                if a.accepted and a.acked is not None
                and bounds[0] <= a.sent and a.acked < bounds[1]]  # fmt: skip

    before, during = summarize(window(baseline)), summarize(window(delayed))
    cost: dict[str, float | None] = {}
    for q in ("p50", "p99"):
        b, d = before[q], during[q]
        cost[q] = None if b is None or d is None else d - b
    return {"rtt": rtt, "baseline": before, "delayed": during, "added": cost}


def recovery(
    attempts: Sequence[BidAttempt], restores: Sequence[Row], *, fault_at: float, region: str
) -> dict[str, Any]:
    """Per client, after a kill at `fault_at` (wall clock): seconds to its state restored
    in `region` (the first ``restored`` record there after the fault) and to its first
    bid acknowledged by `region` in an epoch newer than any acknowledged before the
    fault (write RTO: a write the new writer took; a bid sent before the kill and
    answered again after it, from the history, is not one), each as :func:`~rideout.drill.analysis.summarize` gives them
    over the clients that got there, and how many clients there were."""
    clients = sorted({a.client for a in attempts})
    before = max((a.epoch for a in attempts
                  if a.accepted and a.epoch is not None and a.acked is not None
                  and a.acked <= fault_at), default=0)  # fmt: skip
    restored: dict[str, float] = {}
    for r in restores:
        t = float(r["restored"])
        if r.get("region") == region and t > fault_at:
            restored[r["client"]] = min(restored.get(r["client"], t), t)
    wrote: dict[str, float] = {}
    for a in attempts:
        if (a.accepted and a.acked is not None and a.region == region and a.acked > fault_at
                and a.epoch is not None and a.epoch > before):  # fmt: skip
            wrote[a.client] = min(wrote.get(a.client, a.acked), a.acked)

    def figures(times: Mapping[str, float]) -> dict[str, Any]:
        return summarize([t - fault_at for t in times.values()])

    return {"clients": len(clients), "restored": figures(restored), "write_rto": figures(wrote)}


def reported_lost(rows: Sequence[Row]) -> int | None:
    """The ``lost_writes`` the control planes reported over the drill: the largest seen
    less the smallest seen at the start (None if no answer said). Each new acting
    control plane reads it from the shared state, so it never goes down."""
    seen = [int(r["lost_writes"]) for r in _answered(rows) if r.get("lost_writes") is not None]
    if not seen:
        return None
    return max(seen) - seen[0]


def expectations(
    scenario: Scenario,
    rows: Sequence[Row],
    servers: Mapping[str, Mapping[str, Any]],
    *,
    primary: str,
    secondary: str,
    fault: tuple[float, float],
) -> tuple[dict[str, Any], list[str]]:
    """What the control plane did (from its polled `rows`) and the `servers`' final views
    (name: role, error), against what `scenario` expects; (observed, problems).
    `fault`: when the cuts were made and healed (wall clock). A killed part's Redis that
    could not be read is a problem as any other: it was started again at the heal."""
    answered = _answered(rows)
    problems: list[str] = []
    if not answered:
        return {"answers": 0}, ["no control plane answered the drill's polls"]
    start, healed = fault
    during = [r for r in answered if start <= r["t"] <= healed]
    moves = [int(r["failovers"] or 0) for r in answered]
    failbacks = [int(r["failbacks"] or 0) for r in answered]
    writers = sorted({str(r["writer"]) for r in answered})
    dns = sorted({str(r["dns"]) for r in answered if r.get("dns")})
    evacuated = sorted({z for r in answered for z in r.get("evacuated") or []})
    first_move = next((r["t"] for r in answered if r["writer"] != primary), None)
    masters = sorted(k for k, v in servers.items() if v.get("role") == "master")
    unread = sorted(k for k, v in servers.items() if v.get("error"))
    observed: dict[str, Any] = {
        "answers": len(answered),
        "failovers": moves[-1] - moves[0],
        "failbacks": failbacks[-1] - failbacks[0],
        "writers_seen": writers,
        "writer_at_end": answered[-1]["writer"],
        "writer_moved_after": None if first_move is None else first_move - start,
        "dns_seen": dns,
        "evacuated_seen": evacuated,
        "masters_at_end": masters,
        "servers_unread": unread,
        "polls_during_fault": len(during),
    }
    if scenario.failover:
        if not any(r["writer"] == secondary for r in answered):
            problems.append(f"the writer never moved to {secondary}")
    elif writers != [primary] or observed["failovers"]:
        problems.append(
            f"the writer moved ({observed['failovers']} failovers; writers seen "
            f"{', '.join(writers)}): none was expected"
        )
    if scenario.dns_kept and dns != [primary]:
        problems.append(f"DNS answered {', '.join(dns)}: only {primary} was expected")
    unexpected = sorted(set(evacuated) - set(scenario.evacuated))
    if unexpected:
        problems.append(f"zones evacuated that should not have been: {', '.join(unexpected)}")
    for zone in scenario.evacuated:
        if zone not in evacuated:
            problems.append(f"{zone} was never evacuated (autoshift expected)")
    if len(masters) != 1:
        problems.append(
            f"{len(masters)} Redis servers are masters after the heal "
            f"({', '.join(masters) or 'none'}): exactly one was expected"
        )
    if unread:
        problems.append(f"servers not read after the heal: {', '.join(unread)}")
    return observed, problems
