"""The lab's plan (pure): names, addresses, links and the commands that build it."""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rideout.errors import InvalidArgument
from rideout.lab.topology import (
    IFNAMSIZ,
    ROUTER,
    plan_topology,
    setup_commands,
    teardown_commands,
)
from tests.conftest import examples

DEPLOYMENT = {
    "us-east-1": ["redis-use1", "replica-use1", "use1-az1", "use1-az2", "canary-use1", "cp-1"],
    "us-west-2": ["redis-usw2", "replica-usw2", "usw2-az1", "usw2-az2", "canary-usw2", "cp-2"],
    "global": ["dns"],
}


def test_a_deployment_gets_a_namespace_and_address_per_host() -> None:
    topo = plan_topology("a1", DEPLOYMENT)
    assert topo.router_netns == "rdo-a1-router"
    assert topo.router_address == "127.100.0.1"
    assert topo.groups == (
        ("us-east-1", "127.100.1.0/24"),
        ("us-west-2", "127.100.2.0/24"),
        ("global", "127.100.3.0/24"),
    )
    redis = topo.host("redis-use1")
    assert (redis.netns, redis.address, redis.group) == (
        "rdo-a1-redis-use1",
        "127.100.1.1",
        "us-east-1",
    )
    assert topo.host("cp-2").address == "127.100.2.6"
    assert topo.host("dns").address == "127.100.3.1"
    assert len(topo.namespaces) == 14
    assert topo.namespaces[0] == topo.router_netns


def test_targets_are_hosts_or_groups() -> None:
    topo = plan_topology("a1", DEPLOYMENT)
    assert topo.target_prefix("us-west-2") == "127.100.2.0/24"
    assert topo.target_prefix("dns") == "127.100.3.1/32"
    assert topo.relay_address("us-west-2", 0) == "127.100.2.200"
    with pytest.raises(InvalidArgument, match="neither a host nor a region"):
        topo.target_prefix("eu-west-1")
    with pytest.raises(InvalidArgument, match="relay number"):
        topo.relay_address("us-west-2", 54)


@pytest.mark.parametrize(
    ("lab_id", "groups", "message"),
    [
        ("A1", {"g": ["h"]}, "lab id"),
        ("toolongid", {"g": ["h"]}, "lab id"),
        ("a1", {}, "at least one group"),
        ("a1", {"g": []}, "at least one host"),
        ("a1", {"g": ["h", "h"]}, "used twice"),
        ("a1", {"g": ["g"]}, "used twice"),
        ("a1", {"g": [ROUTER]}, "the lab's own"),
        ("a1", {"g": ["Bad_Name"]}, "a-z, 0-9"),
        ("a1", {"g": ["x" * 33]}, "1 to 32"),
        ("a1", {"g": "host"}, "not a string"),
    ],
)
def test_bad_plans_are_refused(lab_id: str, groups: dict[str, list[str]], message: str) -> None:
    with pytest.raises(InvalidArgument, match=message):
        plan_topology(lab_id, groups)


@pytest.mark.parametrize("network", ["10.0.0.0/16", "127.100.0.0/24", "127.0.0.0/8", "nope"])
def test_only_a_loopback_slash_16(network: str) -> None:
    with pytest.raises(InvalidArgument, match="network must be"):
        plan_topology("a1", {"g": ["h"]}, network=network)


def test_the_plan_builds_a_star_through_the_router() -> None:
    topo = plan_topology("a1", {"r1": ["a", "b"], "r2": ["c"]})
    commands = [" ".join(c) for c in setup_commands(topo)]
    # namespaces first, router first
    assert commands[:4] == [f"ip netns add {ns}" for ns in topo.namespaces]
    for host in topo.hosts:
        assert (
            f"ip link add {host.router_interface} netns rdo-a1-router type veth "
            f"peer name lab0 netns {host.netns}"
        ) in commands
        assert (
            f"ip -n {host.netns} route add 127.0.0.0/8 via 127.100.0.1 dev lab0 src {host.address}"
        ) in commands
        assert (
            f"ip -n rdo-a1-router route add {host.address}/32 dev {host.router_interface} src 127.100.0.1"
            in commands
        )
    # no veth links host to host: only to the router
    veths = [c for c in commands if " type veth " in c]
    assert len(veths) == 3
    assert all("netns rdo-a1-router type veth" in c for c in veths)
    # 127/8 is made routable everywhere, and forwarded by the router
    for ns in topo.namespaces:
        assert f"ip -n {ns} route del local 127.0.0.0/8 dev lo table local" in commands
        sysctl = next(c for c in commands if c.startswith(f"ip netns exec {ns} sysctl"))
        assert "net.ipv4.conf.all.route_localnet=1" in sysctl
        assert "net.ipv4.conf.default.rp_filter=0" in sysctl
    assert "ip netns exec rdo-a1-router sysctl -qw net.ipv4.ip_forward=1" in commands
    assert "ip -n rdo-a1-router rule add pref 32000 lookup local" in commands


def test_teardown_removes_the_router_last() -> None:
    assert teardown_commands(["r", "a", "b"]) == [
        ("ip", "netns", "del", "b"),
        ("ip", "netns", "del", "a"),
        ("ip", "netns", "del", "r"),
    ]


names = st.from_regex(r"[a-z0-9](?:[a-z0-9-]{0,30}[a-z0-9])?", fullmatch=True).filter(
    lambda n: n != ROUTER
)


@settings(max_examples=examples(200))
@given(
    lab_id=st.from_regex(r"[a-z0-9]{1,8}", fullmatch=True),
    groups=st.lists(st.lists(names, min_size=1, max_size=12), min_size=1, max_size=6).map(
        lambda gs: {f"g{i}": hs for i, hs in enumerate(gs)}
    ),
)
def test_names_and_addresses_are_unique_short_and_loopback(
    lab_id: str, groups: dict[str, list[str]]
) -> None:
    everything = [n for hs in groups.values() for n in hs]
    if len(set(everything)) != len(everything) or set(everything) & set(groups):
        with pytest.raises(InvalidArgument, match="used twice"):
            plan_topology(lab_id, groups)
        return
    topo = plan_topology(lab_id, groups)
    loopback = ipaddress.ip_network("127.0.0.0/8")
    addresses = [topo.router_address, *(h.address for h in topo.hosts)]
    assert len(set(addresses)) == len(addresses)
    assert all(ipaddress.ip_address(a) in loopback for a in addresses)
    assert len(set(topo.namespaces)) == len(topo.namespaces)
    assert all(ns.startswith(f"rdo-{lab_id}-") and len(ns) <= 64 for ns in topo.namespaces)
    interfaces = [h.router_interface for h in topo.hosts]
    assert len(set(interfaces)) == len(interfaces)
    assert all(len(i) <= IFNAMSIZ for h in topo.hosts for i in (h.router_interface, h.interface))
    for host in topo.hosts:  # each host inside its group's prefix, and no other
        inside = [
            g
            for g, p in topo.groups
            if ipaddress.ip_address(host.address) in ipaddress.ip_network(p)
        ]
        assert inside == [host.group]
        assert ipaddress.ip_network(topo.group_prefix(host.group)).subnet_of(loopback)
    for group, _ in topo.groups:
        relay = ipaddress.ip_address(topo.relay_address(group, 0))
        assert relay in ipaddress.ip_network(topo.group_prefix(group))
        assert str(relay) not in addresses
