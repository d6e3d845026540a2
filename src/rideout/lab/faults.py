"""Partitions as data, and the router's rules that make them (pure).

A fault is one-way: :class:`Cut` ``(src, dst)`` drops every packet the router forwards
from `src` to `dst` (and every packet from `src` to a relay listener in `dst`'s prefix,
see :mod:`rideout.lab.topology`), each a host or a group (a region). It is an
``ip rule ... blackhole`` in the router's namespace: the kernel discards the packet
without an ICMP error, so a cut looks like silence, as a real partition does (a
``prohibit`` or ``unreachable`` rule would answer with ICMP, which a client sees as a
refusal, and TCP would give up at once instead of timing out).

``partition(a, b, "both")`` is two cuts; ``"a->b"`` only drops what `a` sends to `b`
(`b`'s packets still reach `a`: a UDP datagram arrives, a TCP connection cannot be made
either way, since the handshake needs both directions).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass

from rideout._validate import choice
from rideout.errors import InvalidArgument
from rideout.lab.topology import Topology

__all__ = [
    "DIRECTIONS",
    "FAULT_RULE_PRIORITY",
    "Cut",
    "cuts_for",
    "describe",
    "rule_command",
]

DIRECTIONS = ("both", "a->b", "b->a")
FAULT_RULE_PRIORITY = 100  # before the router's local table (moved to 32000)


@dataclass(frozen=True, order=True)
class Cut:
    """Packets from `src` to `dst` (host or group names) are dropped by the router."""

    src: str
    dst: str

    def __str__(self) -> str:
        return f"{self.src} -> {self.dst}"


def cuts_for(topology: Topology, a: str, b: str, direction: str = "both") -> list[Cut]:
    """The cuts of partitioning `a` from `b` in `direction` (``both``, ``a->b``,
    ``b->a``); each name checked against `topology`."""
    choice("direction", direction, DIRECTIONS)
    prefix_a, prefix_b = topology.target_prefix(a), topology.target_prefix(b)
    if a == b:
        raise InvalidArgument(f"cannot partition {a!r} from itself")
    if _overlap(prefix_a, prefix_b):
        raise InvalidArgument(f"{a!r} and {b!r} overlap (a host and its own group)")
    cuts = []
    if direction in ("both", "a->b"):
        cuts.append(Cut(a, b))
    if direction in ("both", "b->a"):
        cuts.append(Cut(b, a))
    return cuts


def _overlap(p: str, q: str) -> bool:
    return ipaddress.ip_network(p).overlaps(ipaddress.ip_network(q))


def rule_command(topology: Topology, cut: Cut, action: str) -> tuple[str, ...]:
    """The ``ip rule`` command in the router that adds or deletes `cut` (`action`:
    ``add`` or ``del``)."""
    choice("action", action, ("add", "del"))
    return (
        "ip", "-n", topology.router_netns, "rule", action,
        "from", topology.target_prefix(cut.src), "to", topology.target_prefix(cut.dst),
        "pref", str(FAULT_RULE_PRIORITY), "blackhole",
    )  # fmt: skip


def describe(cuts: Iterable[Cut]) -> list[str]:
    """One line per cut, sorted: what ``status`` shows."""
    return [str(c) for c in sorted(set(cuts))]
