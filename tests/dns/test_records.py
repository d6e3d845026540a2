"""Failover answer selection and name resolution (pure), and what the server makes of it."""

from __future__ import annotations

from collections.abc import Mapping

import pytest
from dnslib import QTYPE, DNSRecord
from hypothesis import given, settings
from hypothesis import strategies as st

from rideout.config import Config
from rideout.dns.records import (
    Answer,
    DnsZoneConfig,
    Endpoint,
    Record,
    RegionRecords,
    bump_serial,
    failover_answer,
    resolve,
)
from tests.conftest import examples

APP = "auction.rideout.test"
EAST = ("127.0.1.1", "127.0.1.2")
WEST = ("127.0.2.1", "127.0.2.2")
ALL_HEALTHY = {"hc-east": True, "hc-west": True}


def zone(
    primary_check: str | None = "hc-east",
    secondary_check: str | None = "hc-west",
    *,
    ttl: int = 60,
    nameserver: str | None = "127.0.0.1",
) -> DnsZoneConfig:
    return DnsZoneConfig(
        app_domain=APP,
        ttl=ttl,
        regions=(
            RegionRecords(
                "us-east-1",
                "primary",
                (Endpoint(EAST[0], "use1-az1"), Endpoint(EAST[1], "use1-az2")),
                primary_check,
            ),
            RegionRecords(
                "us-west-2",
                "secondary",
                (Endpoint(WEST[0], "usw2-az1"), Endpoint(WEST[1], "usw2-az2")),
                secondary_check,
            ),
        ),
        nameserver_address=nameserver,
    )


def health(east: bool, west: bool) -> dict[str, bool]:
    return {"hc-east": east, "hc-west": west}


# ------------------------------------------------------------------ failover_answer


@pytest.mark.parametrize(
    ("east", "west", "region", "addresses", "reason"),
    [
        (True, True, "us-east-1", EAST, "primary-healthy"),
        (True, False, "us-east-1", EAST, "primary-healthy"),
        (False, True, "us-west-2", WEST, "primary-unhealthy"),
        (False, False, "us-east-1", EAST, "all-unhealthy"),  # no healthy record: primary
    ],
)
def test_route53_failover(
    east: bool, west: bool, region: str, addresses: tuple[str, ...], reason: str
) -> None:
    answer = failover_answer(zone(), health(east, west))
    assert answer == Answer(region, addresses, 60, reason)  # type: ignore[arg-type]
    assert answer.text == f"region={region} reason={reason}"


def test_record_without_health_check_is_always_healthy() -> None:
    # a secondary without a check is returned whenever the primary is unhealthy
    no_secondary_check = zone(secondary_check=None)
    answer = failover_answer(no_secondary_check, {"hc-east": False})
    assert (answer.region, answer.reason) == ("us-west-2", "primary-unhealthy")
    # a primary without a check is always returned
    no_primary_check = zone(primary_check=None)
    assert failover_answer(no_primary_check, {"hc-west": True}).region == "us-east-1"
    assert failover_answer(zone(None, None), {}).region == "us-east-1"


def test_missing_health_status_is_an_error() -> None:
    with pytest.raises(ValueError, match="hc-east"):
        failover_answer(zone(), {"us-east-1": True, "us-west-2": True})


@pytest.mark.parametrize(
    ("east", "west", "evacuated", "region", "addresses", "reason"),
    [
        # one zone out: the rest of the region serves
        (True, True, {"use1-az2"}, "us-east-1", EAST[:1], "primary-healthy"),
        (False, True, {"usw2-az1"}, "us-west-2", WEST[1:], "primary-unhealthy"),
        # the whole primary out: the secondary, healthy or not
        (True, True, {"use1-az1", "use1-az2"}, "us-west-2", WEST, "primary-evacuated"),
        (True, False, {"use1-az1", "use1-az2"}, "us-west-2", WEST, "primary-evacuated"),
        # the primary unhealthy and the secondary gone: the primary, no record is healthy
        (False, True, {"usw2-az1", "usw2-az2"}, "us-east-1", EAST, "all-unhealthy"),
        # nothing left anywhere: the primary's full list rather than no answer
        (True, True, {"use1-az1", "use1-az2", "usw2-az1", "usw2-az2"}, "us-east-1", EAST,
         "all-evacuated"),
        # unknown zones change nothing
        (True, True, {"nowhere"}, "us-east-1", EAST, "primary-healthy"),
    ],
)  # fmt: skip
def test_evacuation(
    east: bool,
    west: bool,
    evacuated: set[str],
    region: str,
    addresses: tuple[str, ...],
    reason: str,
) -> None:
    answer = failover_answer(zone(), health(east, west), frozenset(evacuated))
    assert (answer.region, answer.addresses, answer.reason) == (region, addresses, reason)


@pytest.mark.parametrize(
    ("east", "west", "evacuated", "full", "region", "addresses"),
    [
        # a full zone leaves its region's answer while another zone there has room
        (True, True, set(), {"use1-az1"}, "us-east-1", (EAST[1],)),
        (True, True, set(), {"use1-az2", "usw2-az1"}, "us-east-1", (EAST[0],)),
        # every zone of the region full: all of them, as without fullness
        (True, True, set(), {"use1-az1", "use1-az2"}, "us-east-1", EAST),
        # full never moves the answer to the other region, nor keeps it from moving
        (True, True, set(), {"use1-az1", "use1-az2", "usw2-az1"}, "us-east-1", EAST),
        (False, True, set(), {"usw2-az2"}, "us-west-2", (WEST[0],)),
        # evacuated and full: the one zone left is full, and serves
        (True, True, {"use1-az1"}, {"use1-az2"}, "us-east-1", (EAST[1],)),
    ],
)  # fmt: skip
def test_the_answer_prefers_the_regions_zones_with_room(
    east: bool,
    west: bool,
    evacuated: set[str],
    full: set[str],
    region: str,
    addresses: tuple[str, ...],
) -> None:
    answer = failover_answer(zone(), health(east, west), frozenset(evacuated), frozenset(full))
    assert (answer.region, answer.addresses) == (region, addresses)
    without = failover_answer(zone(), health(east, west), frozenset(evacuated))
    assert answer.reason == without.reason  # fullness never changes the routing decision


def test_a_regions_name_prefers_its_zones_with_room_too() -> None:
    full = frozenset({"usw2-az1"})
    west = resolve(zone(), f"us-west-2.{APP}", "A", ALL_HEALTHY, full=full)
    assert [r.value for r in west.answers] == [WEST[1]]
    zonal = resolve(zone(), f"usw2-az1.us-west-2.{APP}", "A", ALL_HEALTHY, full=full)
    assert [r.value for r in zonal.answers] == [WEST[0]]  # a zone's own name: always


# ------------------------------------------------------------------ configuration


def test_validation() -> None:
    east = RegionRecords("us-east-1", "primary", (Endpoint("127.0.1.1", "a"),))
    west = RegionRecords("us-west-2", "secondary", (Endpoint("127.0.2.1", "b"),))
    with pytest.raises(ValueError, match="one primary and one secondary"):
        DnsZoneConfig(APP, 60, (east,))
    with pytest.raises(ValueError, match="one primary and one secondary"):
        DnsZoneConfig(APP, 60, (east, RegionRecords("x", "primary", ())))
    with pytest.raises(ValueError, match="unique across regions"):
        DnsZoneConfig(APP, 60, (east, RegionRecords("w", "secondary", (Endpoint("1.2.3.4", "a"),))))
    with pytest.raises(ValueError, match="same name"):
        DnsZoneConfig(APP, 60, (east, RegionRecords("us-east-1", "secondary", ())))
    with pytest.raises(ValueError, match="ttl"):
        DnsZoneConfig(APP, -1, (east, west))
    with pytest.raises(ValueError, match="ttl"):
        DnsZoneConfig(APP, 1.5, (east, west))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="app_domain"):
        DnsZoneConfig("bad..domain", 60, (east, west))
    with pytest.raises(ValueError, match="IPv4"):
        Endpoint("::1", "a")
    with pytest.raises(ValueError, match="zone name"):
        Endpoint("127.0.0.1", "Bad_Zone")
    with pytest.raises(ValueError, match="name server"):
        RegionRecords("ns", "primary", ())
    with pytest.raises(ValueError, match="role"):
        RegionRecords("r", "tertiary", ())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="twice"):
        RegionRecords("r", "primary", (Endpoint("127.0.0.1", "a"), Endpoint("127.0.0.2", "a")))
    normalized = DnsZoneConfig("Auction.Rideout.TEST.", 60, (east, west))
    assert normalized.app_domain == APP
    assert normalized.nameserver == f"ns.{APP}."


def test_from_config() -> None:
    config = Config()
    z = DnsZoneConfig.from_config(config)
    assert z.app_domain == config.app_domain
    assert z.ttl == config.timing.dns_ttl
    assert z.primary.region == config.primary.name
    assert z.primary.health_check_id == config.primary.name
    assert z.secondary.addresses() == tuple(zn.address for zn in config.secondary.zones)
    assert z.nameserver_address == config.control_plane.address
    z = DnsZoneConfig.from_config(config, health_check_ids={config.secondary.name: None})
    assert z.secondary.health_check_id is None
    assert z.region(config.primary.name) is z.primary
    with pytest.raises(KeyError):
        z.region("nowhere")


def test_bump_serial() -> None:
    a = Answer("us-east-1", EAST, 60, "primary-healthy")
    b = Answer("us-west-2", WEST, 60, "primary-unhealthy")
    assert bump_serial(1, None, a) == 2
    assert bump_serial(2, a, a) == 2
    assert bump_serial(2, a, Answer("us-east-1", EAST, 60, "all-unhealthy")) == 2
    assert bump_serial(2, a, b) == 3
    assert bump_serial(0xFFFFFFFF, a, b) == 1


# ------------------------------------------------------------------ resolve


def ask(
    qname: str,
    qtype: str = "A",
    healthy: Mapping[str, bool] = ALL_HEALTHY,
    evacuated: frozenset[str] = frozenset(),
    z: DnsZoneConfig | None = None,
) -> tuple[str, list[tuple[str, str, int, str]], list[str]]:
    r = resolve(z or zone(), qname, qtype, healthy, evacuated, serial=7)
    return r.rcode, [tuple(a) for a in r.answers], [a.type for a in r.authority]  # type: ignore[misc]


@pytest.mark.parametrize("qname", [APP, APP + ".", "AUCTION.Rideout.Test", "Auction.rideout.test."])
def test_app_domain_a(qname: str) -> None:
    rcode, answers, authority = ask(qname)
    assert rcode == "NOERROR"
    assert answers == [(APP, "A", 60, EAST[0]), (APP, "A", 60, EAST[1])]
    assert authority == []


def test_app_domain_follows_health() -> None:
    assert [a[3] for a in ask(APP, healthy=health(False, True))[1]] == list(WEST)
    r = resolve(zone(), APP, "A", health(False, True))
    assert r.answer is not None
    assert r.answer.reason == "primary-unhealthy"
    assert r.authoritative


def test_app_domain_txt() -> None:
    assert ask(APP, "TXT", health(False, True))[1] == [
        (APP, "TXT", 60, "region=us-west-2 reason=primary-unhealthy")
    ]
    assert ask(APP, "txt")[1] == [(APP, "TXT", 60, "region=us-east-1 reason=primary-healthy")]


def test_any_is_the_a_records() -> None:
    rcode, answers, _ = ask(APP, "ANY")
    assert rcode == "NOERROR"
    assert {a[1] for a in answers} == {"A"}
    assert len(answers) == 2


@pytest.mark.parametrize("qtype", ["AAAA", "MX", "CNAME", "HTTPS", "TYPE65280"])
def test_other_types_are_nodata(qtype: str) -> None:
    assert ask(APP, qtype) == ("NOERROR", [], ["SOA"])
    assert ask(f"us-east-1.{APP}", qtype) == ("NOERROR", [], ["SOA"])
    assert ask(f"use1-az1.us-east-1.{APP}", qtype) == ("NOERROR", [], ["SOA"])


def test_soa_and_ns_carry_route53s_ttls_not_the_failover_ttl() -> None:
    """SOA 900 s with minimum 86,400 s, NS (and the name server's A) 172,800 s."""
    assert ask(APP, "SOA")[1] == [
        (APP, "SOA", 900, f"ns.{APP}. hostmaster.{APP}. 7 3600 600 86400 86400"),
    ]
    assert ask(APP, "NS")[1] == [(APP, "NS", 172800, f"ns.{APP}.")]
    assert ask(f"ns.{APP}")[1] == [(f"ns.{APP}", "A", 172800, "127.0.0.1")]
    # only what health and evacuation change keeps the zone's short TTL
    assert {r[2] for r in ask(APP, "A")[1] + ask(APP, "TXT")[1]} == {60}
    assert {r[2] for r in ask(f"us-east-1.{APP}")[1] + ask(f"us-east-1.{APP}", "TXT")[1]} == {60}
    assert [r.ttl for r in resolve(zone(), f"nope.{APP}", "A", ALL_HEALTHY).authority] == [900]
    assert ask(f"ns.{APP}", z=zone(nameserver=None)) == ("NOERROR", [], ["SOA"])
    assert ask(f"ns.{APP}", "TXT") == ("NOERROR", [], ["SOA"])


def test_region_names() -> None:
    evacuated = frozenset({"use1-az1"})
    # a region's own name answers its addresses, whatever its health
    assert [a[3] for a in ask(f"us-west-2.{APP}", healthy=health(True, False))[1]] == list(WEST)
    assert [a[3] for a in ask(f"US-EAST-1.{APP}.", evacuated=evacuated)[1]] == [EAST[1]]
    assert ask(f"us-east-1.{APP}", evacuated=frozenset({"use1-az1", "use1-az2"})) == (
        "NOERROR",
        [],
        ["SOA"],
    )
    txt = ask(f"us-east-1.{APP}", "TXT", health(False, True), evacuated)[1]
    assert txt == [
        (
            f"us-east-1.{APP}",
            "TXT",
            60,
            "region=us-east-1 role=primary healthy=false evacuated=use1-az1",
        )
    ]


def test_zone_names() -> None:
    name = f"use1-az2.us-east-1.{APP}"
    assert ask(name)[1] == [(name, "A", 60, EAST[1])]
    # evacuated zones keep their own name (for testing them directly)
    assert ask(name, evacuated=frozenset({"use1-az2"}))[1] == [(name, "A", 60, EAST[1])]
    assert ask(name, "TXT", evacuated=frozenset({"use1-az2"}))[1] == [
        (name, "TXT", 60, "zone=use1-az2 region=us-east-1 evacuated=true")
    ]
    assert ask(name, "ANY")[1] == [(name, "A", 60, EAST[1])]


@pytest.mark.parametrize(
    "qname",
    [
        f"www.{APP}",
        f"use1-az1.{APP}",  # a zone without its region
        f"use1-az1.us-west-2.{APP}",  # a zone under the wrong region
        f"x.use1-az1.us-east-1.{APP}",
        f"x.us-east-1.{APP}",
        f"a..{APP}",
        f".{APP}",
    ],
)
def test_unknown_names_are_nxdomain(qname: str) -> None:
    r = resolve(zone(), qname, "A", ALL_HEALTHY)
    assert (r.rcode, r.answers) == ("NXDOMAIN", ())
    assert [a.type for a in r.authority] == ["SOA"]
    assert r.authority[0].name == APP
    assert r.authoritative


@pytest.mark.parametrize(
    "qname", ["rideout.test", "example.com", "xauction.rideout.test", ".", "", f"{APP}.evil"]
)
def test_outside_names_are_refused(qname: str) -> None:
    r = resolve(zone(), qname, "A", ALL_HEALTHY)
    assert (r.rcode, r.answers, r.authority) == ("REFUSED", (), ())
    assert not r.authoritative


def test_record_to_zone() -> None:
    assert Record(APP, "A", 60, "127.0.1.1").to_zone() == f"{APP}. 60 IN A 127.0.1.1"
    assert Record(APP, "TXT", 5, 'say "hi"').to_zone() == f'{APP}. 5 IN TXT "say \\"hi\\""'


def test_the_server_encodes_every_record() -> None:
    """The real server (dnslib) turns each kind of resolution into a packet."""
    from rideout.dns.server import DnsServer

    state = {"healthy": health(False, True)}
    server = DnsServer(lambda qname, qtype: resolve(zone(), qname, qtype, state["healthy"]))
    for qname, qtype, rcode, count in [
        (APP, "A", "NOERROR", 2),
        (APP, "TXT", "NOERROR", 1),
        (APP, "SOA", "NOERROR", 1),
        (APP, "NS", "NOERROR", 1),
        (APP, "AAAA", "NOERROR", 0),
        (f"nope.{APP}", "A", "NXDOMAIN", 0),
        ("example.com", "A", "REFUSED", 0),
    ]:
        packet = server.handle(DNSRecord.question(qname, qtype).pack(), "udp")
        assert packet is not None
        reply = DNSRecord.parse(packet)
        assert reply.header.rcode == {"NOERROR": 0, "NXDOMAIN": 3, "REFUSED": 5}[rcode]
        assert len(reply.rr) == count, (qname, qtype)
        if qtype == "A" and count:
            assert [str(rr.rdata) for rr in reply.rr] == list(WEST)
            assert all(rr.rtype == QTYPE.A and rr.ttl == 60 for rr in reply.rr)
        if qtype == "TXT":
            assert str(reply.rr[0].rdata) == '"region=us-west-2 reason=primary-unhealthy"'


# ------------------------------------------------------------------ properties

ZONES = ("use1-az1", "use1-az2", "usw2-az1", "usw2-az2")


@st.composite
def zone_configs(draw: st.DrawFn) -> DnsZoneConfig:
    def region(name: str, role: str, zones: tuple[str, ...], prefix: str) -> RegionRecords:
        chosen = draw(st.lists(st.sampled_from(zones), unique=True, max_size=2))
        endpoints = tuple(Endpoint(f"{prefix}.{i + 1}", z) for i, z in enumerate(chosen))
        check = draw(st.sampled_from([None, f"hc-{name}"]))
        return RegionRecords(name, role, endpoints, check)  # type: ignore[arg-type]

    return DnsZoneConfig(
        APP,
        60,
        (
            region("east", "primary", ZONES[:2], "127.0.1"),
            region("west", "secondary", ZONES[2:], "127.0.2"),
        ),
    )


@settings(max_examples=examples(300), deadline=None)
@given(
    zone_configs(),
    st.booleans(),
    st.booleans(),
    st.frozensets(st.sampled_from((*ZONES, "other"))),
)
def test_failover_answer_is_never_empty(
    z: DnsZoneConfig, east: bool, west: bool, evacuated: frozenset[str]
) -> None:
    answer = failover_answer(z, {"hc-east": east, "hc-west": west}, evacuated)
    region = z.region(answer.region)
    if any(r.endpoints for r in z.regions):
        assert answer.addresses
    assert set(answer.addresses) <= set(region.addresses())
    if answer.reason != "all-evacuated":
        assert set(answer.addresses) <= set(region.addresses(evacuated))
    healthy_with_addresses = [
        r
        for r in z.regions
        if r.addresses(evacuated) and r.is_healthy({"hc-east": east, "hc-west": west})
    ]
    if z.primary in healthy_with_addresses:
        assert answer.region == z.primary.region
    elif healthy_with_addresses:
        assert answer.region == z.secondary.region
    # the resolver agrees with the selection
    r = resolve(z, APP, "A", {"hc-east": east, "hc-west": west}, evacuated)
    assert tuple(a.value for a in r.answers) == answer.addresses
