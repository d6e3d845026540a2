"""The lab's network as data: names, addresses, links, and the ``ip`` commands that build
it (pure: nothing here runs a command or touches the machine).

A lab is a **star**: one router namespace and one namespace per host, each host joined to
the router by a veth pair of its own, so every packet between two hosts is forwarded by
the router, where :mod:`rideout.lab.faults` drops it. Hosts are grouped (a region, or a
group such as ``global`` for what belongs to none); each group has a /24 of its own, so a
rule can cut a group as well as a host.

Addresses (every one in 127.0.0.0/8, the only range rideout uses), for the default
network ``127.100.0.0/16``:

| what | address |
|---|---|
| the router, on every one of its links | ``127.100.0.1`` |
| group number G (1, 2, ... in the order given) | ``127.100.G.0/24`` |
| host number H of group G (1 to 199, in the order given) | ``127.100.G.H`` |
| relay listener number N of group G (see :mod:`rideout.lab.relay`) | ``127.100.G.(200 + N)``, on the router |

Linux treats 127/8 off the loopback interface as martian. What it takes, in every
namespace of the lab (found by experiment on this kernel, see docs/lab.md):

- ``net.ipv4.conf.{all,default,IF}.route_localnet = 1``: 127/8 may be routed, answered
  by ARP and accepted on a non-loopback interface;
- ``rp_filter = 0`` (all, default, IF): no reverse-path check on a /32 link;
- the local table's ``local 127.0.0.0/8 dev lo`` route replaced by ``local 127.0.0.1``:
  otherwise every 127.x address counts as this host's own and nothing leaves it;
- on a host, routes with ``src`` set to its address (without it the kernel picks
  127.0.0.1, which the router rejects as its own address): ``127.100.0.1/32 dev IF`` and
  ``127.0.0.0/8 via 127.100.0.1``;
- on the router, ``net.ipv4.ip_forward = 1``, a ``/32`` route per host, and the rule that
  looks up the local table moved after the fault rules (priority 0 to 32000), so a fault
  also drops what is addressed to the router itself (a relay's listener).

Names: a namespace is ``rdo-<lab id>-<host>`` (the router's ``rdo-<lab id>-router``),
so two labs, or what a killed one left, never collide. Veth ends are created inside their
namespaces (never in the caller's): ``lab0`` in a host, ``h<N>`` in the router, both well
under the 15 characters Linux allows an interface name.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from rideout.errors import InvalidArgument

__all__ = [
    "DEFAULT_NETWORK",
    "HOST_INTERFACE",
    "IFNAMSIZ",
    "INTERCEPT_RULE_PRIORITY",
    "INTERCEPT_TABLE",
    "MAX_HOSTS_PER_GROUP",
    "MAX_RELAYS_PER_GROUP",
    "NETNS_PREFIX",
    "ROUTER",
    "Host",
    "Topology",
    "intercept_commands",
    "netns_prefix",
    "plan_topology",
    "setup_commands",
    "teardown_commands",
]

NETNS_PREFIX = "rdo-"
"""Every lab namespace starts with this, then the lab id and a dash."""
ROUTER = "router"
DEFAULT_NETWORK = "127.100.0.0/16"
HOST_INTERFACE = "lab0"
IFNAMSIZ = 15  # the longest interface name Linux accepts (IFNAMSIZ - 1)
MAX_HOSTS_PER_GROUP = 199
MAX_RELAYS_PER_GROUP = 54  # .200 to .253
_RELAY_BASE = 200
_MAX_GROUPS = 254

_LAB_ID = re.compile(r"[a-z0-9]{1,8}")
_NAME = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,30}[a-z0-9])?")

Command = tuple[str, ...]


def netns_prefix(lab_id: str) -> str:
    """What every namespace of lab `lab_id` starts with (``rdo-<id>-``)."""
    if not _LAB_ID.fullmatch(lab_id):
        raise InvalidArgument(f"lab id must be 1 to 8 of a-z and 0-9, not {lab_id!r}")
    return f"{NETNS_PREFIX}{lab_id}-"


@dataclass(frozen=True)
class Host:
    """One host of the lab: its namespace, address and the veth pair to the router."""

    name: str
    group: str
    netns: str
    address: str
    router_interface: str  # the veth end in the router's namespace
    interface: str = HOST_INTERFACE  # the veth end in the host's namespace


@dataclass(frozen=True)
class Topology:
    """A planned lab (see the module docstring); :func:`plan_topology` makes one."""

    lab_id: str
    network: str
    router_netns: str
    router_address: str
    hosts: tuple[Host, ...]
    groups: tuple[tuple[str, str], ...]  # (name, prefix), in address order

    @property
    def namespaces(self) -> tuple[str, ...]:
        """Every namespace of the lab, the router's first."""
        return (self.router_netns, *(h.netns for h in self.hosts))

    def host(self, name: str) -> Host:
        for host in self.hosts:
            if host.name == name:
                return host
        raise InvalidArgument(f"no host {name!r} in lab {self.lab_id} (hosts: {self._names()})")

    def group_prefix(self, name: str) -> str:
        for group, prefix in self.groups:
            if group == name:
                return prefix
        raise InvalidArgument(
            f"no region or group {name!r} in lab {self.lab_id} "
            f"(groups: {', '.join(g for g, _ in self.groups)})"
        )

    def target_prefix(self, name: str) -> str:
        """The prefix a fault on `name` covers: a host's ``/32``, a group's ``/24``."""
        if any(h.name == name for h in self.hosts):
            return self.host(name).address + "/32"
        if any(g == name for g, _ in self.groups):
            return self.group_prefix(name)
        raise InvalidArgument(
            f"{name!r} is neither a host nor a region of lab {self.lab_id} "
            f"(hosts: {self._names()}; groups: {', '.join(g for g, _ in self.groups)})"
        )

    def relay_address(self, group: str, number: int) -> str:
        """Relay listener `number` (0-based) of `group`: an address in the group's prefix,
        held by the router, so a fault on the group covers what is relayed to it."""
        if not 0 <= number < MAX_RELAYS_PER_GROUP:
            raise InvalidArgument(
                f"relay number must be from 0 to {MAX_RELAYS_PER_GROUP - 1}, not {number}"
            )
        network = ipaddress.ip_network(self.group_prefix(group))
        return str(network.network_address + _RELAY_BASE + number)

    def _names(self) -> str:
        return ", ".join(h.name for h in self.hosts)


def plan_topology(
    lab_id: str, groups: Mapping[str, Sequence[str]], *, network: str = DEFAULT_NETWORK
) -> Topology:
    """The lab `lab_id` of the hosts in `groups` (group name to host names, in order).

    Names are 1 to 32 of a-z, 0-9 and inner dashes; host names are unique across groups,
    and no host or group is called ``router``. `network` is a /16 inside 127.0.0.0/8.
    """
    prefix = netns_prefix(lab_id)
    try:
        net = ipaddress.IPv4Network(network)
    except ValueError as exc:
        raise InvalidArgument(f"network must be an IPv4 /16, not {network!r}: {exc}") from None
    if net.prefixlen != 16 or not net.subnet_of(ipaddress.IPv4Network("127.0.0.0/8")):
        raise InvalidArgument(f"network must be a /16 inside 127.0.0.0/8, not {network}")
    if not groups:
        raise InvalidArgument("a lab needs at least one group of hosts")
    if len(groups) > _MAX_GROUPS:
        raise InvalidArgument(f"a lab has at most {_MAX_GROUPS} groups, not {len(groups)}")
    seen: set[str] = set()
    hosts: list[Host] = []
    prefixes: list[tuple[str, str]] = []
    base = int(net.network_address)
    for g, (group, names) in enumerate(groups.items(), start=1):
        _check_name("group", group, seen)
        if isinstance(names, str):
            raise InvalidArgument(f"group {group!r}: hosts must be a list of names, not a string")
        if len(names) > MAX_HOSTS_PER_GROUP:
            raise InvalidArgument(
                f"group {group!r} has {len(names)} hosts; at most {MAX_HOSTS_PER_GROUP}"
            )
        prefixes.append((group, f"{ipaddress.IPv4Address(base + (g << 8))}/24"))
        for h, name in enumerate(names, start=1):
            _check_name("host", name, seen)
            hosts.append(
                Host(
                    name=name,
                    group=group,
                    netns=prefix + name,
                    address=str(ipaddress.IPv4Address(base + (g << 8) + h)),
                    router_interface=f"h{len(hosts)}",
                )
            )
    if not hosts:
        raise InvalidArgument("a lab needs at least one host")
    return Topology(
        lab_id=lab_id,
        network=str(net),
        router_netns=prefix + ROUTER,
        router_address=str(ipaddress.IPv4Address(base + 1)),
        hosts=tuple(hosts),
        groups=tuple(prefixes),
    )


def _check_name(kind: str, name: object, seen: set[str]) -> None:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise InvalidArgument(
            f"{kind} name must be 1 to 32 of a-z, 0-9 and inner dashes, not {name!r}"
        )
    if name == ROUTER:
        raise InvalidArgument(f"{kind} name {ROUTER!r} is the lab's own")
    if name in seen:
        raise InvalidArgument(f"{kind} name {name!r} is used twice")
    seen.add(name)


# --------------------------------------------------------------------------- commands

_LOCALNET = ("route_localnet", "1")
_NO_RP_FILTER = ("rp_filter", "0")
LOCAL_RULE_PRIORITY = 32000  # the router's local-table rule, after every fault rule
INTERCEPT_RULE_PRIORITY = 200  # after the fault rules (100): a partition still cuts first
INTERCEPT_TABLE = 200  # the router's table of intercepted addresses (each a local route)


def _sysctl(netns: str, *settings: str) -> Command:
    return ("ip", "netns", "exec", netns, "sysctl", "-qw", *settings)


def _conf(interface: str) -> list[str]:
    return [f"net.ipv4.conf.{interface}.{key}={value}" for key, value in (_LOCALNET, _NO_RP_FILTER)]


def setup_commands(topology: Topology) -> list[Command]:
    """Every command that builds `topology`, in order (each namespace is created before
    anything goes into it; a failed command leaves only namespaces, which teardown
    removes)."""
    router = topology.router_netns
    commands: list[Command] = [("ip", "netns", "add", ns) for ns in topology.namespaces]
    for ns in topology.namespaces:
        commands += [
            ("ip", "-n", ns, "link", "set", "lo", "up"),
            _sysctl(ns, *_conf("all"), *_conf("default")),
            ("ip", "-n", ns, "route", "replace", "local", "127.0.0.1/32", "dev", "lo",
             "table", "local"),
            ("ip", "-n", ns, "route", "del", "local", "127.0.0.0/8", "dev", "lo",
             "table", "local"),
        ]  # fmt: skip
    commands += [
        _sysctl(router, "net.ipv4.ip_forward=1"),
        ("ip", "-n", router, "rule", "add", "pref", str(LOCAL_RULE_PRIORITY), "lookup", "local"),
        ("ip", "-n", router, "rule", "del", "pref", "0", "lookup", "local"),
    ]
    for host in topology.hosts:
        commands += [
            ("ip", "link", "add", host.router_interface, "netns", router, "type", "veth",
             "peer", "name", host.interface, "netns", host.netns),
            _sysctl(router, *_conf(host.router_interface)),
            _sysctl(host.netns, *_conf(host.interface)),
            ("ip", "-n", router, "addr", "add", topology.router_address + "/32",
             "dev", host.router_interface),
            ("ip", "-n", host.netns, "addr", "add", host.address + "/32", "dev", host.interface),
            ("ip", "-n", router, "link", "set", host.router_interface, "up"),
            ("ip", "-n", host.netns, "link", "set", host.interface, "up"),
            ("ip", "-n", router, "route", "add", host.address + "/32",
             "dev", host.router_interface, "src", topology.router_address),
            ("ip", "-n", host.netns, "route", "add", topology.router_address + "/32",
             "dev", host.interface, "src", host.address),
            ("ip", "-n", host.netns, "route", "add", "127.0.0.0/8", "via", topology.router_address,
             "dev", host.interface, "src", host.address),
        ]  # fmt: skip
    return commands


def teardown_commands(namespaces: Sequence[str]) -> list[Command]:
    """The commands that remove `namespaces` (hosts first, then the router); each veth
    pair goes with the namespace that holds either end, every route and rule with it."""
    return [("ip", "netns", "del", ns) for ns in reversed(namespaces)]


def intercept_commands(topology: Topology, source: str, host: str, port: int) -> list[Command]:
    """The router commands that deliver TCP from `source` (a host or group) to `host`'s
    `port` to the router itself, for a transparent :class:`~rideout.lab.relay.Link`
    listening there on `host`'s own address (``Link(..., transparent=True)``).

    Nobody is given another address: a rule (after the fault rules, so a partition still
    cuts first) sends what `source` addresses to ``HOST:PORT`` to a table in which that
    address is local to the router; everything else, `host`'s own region included, is
    forwarded as before. The relay's own connection to the host is not caught: the
    router's source address is in no host's prefix. They go with the router's namespace.
    """
    target = topology.host(host)
    src = topology.target_prefix(source)
    if ipaddress.ip_address(target.address) in ipaddress.ip_network(src):
        raise InvalidArgument(f"{host!r} is in {source!r}: its own traffic is not intercepted")
    if not 0 < port < 65536:
        raise InvalidArgument(f"port must be from 1 to 65535, not {port}")
    router = topology.router_netns
    return [
        ("ip", "-n", router, "route", "replace", "local", target.address + "/32", "dev", "lo",
         "table", str(INTERCEPT_TABLE)),
        ("ip", "-n", router, "rule", "add", "pref", str(INTERCEPT_RULE_PRIORITY),
         "from", src, "to", target.address + "/32", "ipproto", "tcp", "dport", str(port),
         "lookup", str(INTERCEPT_TABLE)),
    ]  # fmt: skip
