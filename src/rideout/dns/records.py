"""Failover DNS answers, given health: pure, no DNS library (the server encodes them).

**Failover routing** (:func:`failover_answer`, Route 53's rules): the PRIMARY record
when it is healthy; the SECONDARY when the PRIMARY is unhealthy and the SECONDARY is
healthy; the PRIMARY when both are unhealthy ("if no record is healthy, all are treated
as healthy"). A record without a health check is always healthy. ``healthy`` maps
health check ids to their status; a record whose health check has no entry is an
error (ValueError), not silently healthy: a misnamed check would otherwise disable
failover.

**Zone evacuation** (seed 003) removes the evacuated zones' addresses from the answers.
A region left with no address is no record at all for selection (as if its record
were deleted), so the other region answers even when its health check fails. If
evacuation leaves neither region an address, the answer is the primary's full list,
evacuated zones included (reason ``all-evacuated``): an empty answer would make every
client fail, whereas the evacuated zones may still serve; evacuating everything is an
operator's mistake the evacuation engine should refuse, and DNS does not make it fatal.

**Full zones** (issue #29) are zones at their connection cap: healthy, but a new user
there gets 503 ``zone_full``. A region's answer prefers its zones with room: the full
ones leave it while another zone of the region has room; when every zone left is full,
the answer is all of them, as before (a full zone still serves its users, and clients
try each address). Fullness never moves the answer to the other region, and nothing
evacuates a zone for it.

**Names** (:func:`resolve`), under the app domain (case-insensitive, one trailing dot
tolerated):

============================  ===========================================================
``<app_domain>``              A: the failover answer. TXT: ``region=<r> reason=<why>``.
                              SOA, NS: ``ns.<app_domain>``. ANY: the A records only
                              (RFC 8482 allows a minimal answer to ANY).
``<region>.<app_domain>``     A: the region's non-evacuated addresses (those with room
                              first, as above), whatever its health.
                              TXT: ``region=<r> role=<role> healthy=<bool> evacuated=<zones>``.
``<zone>.<region>.<app>``     A: the zone's address, evacuated or not (like a load
                              balancer's zonal name under a zonal shift: for testing a zone
                              directly). TXT: ``zone=<z> region=<r> evacuated=<bool>``.
``ns.<app_domain>``           A: ``nameserver_address`` when the config has one.
============================  ===========================================================

Any other type for a known name (AAAA included) is NOERROR without answers (NODATA),
and an unknown name under the app domain is NXDOMAIN; both carry the SOA in the
authority section for negative caching (RFC 2308: cached for the smaller of the SOA's
TTL and minimum, 900 s). A name outside the app domain is REFUSED: the server is not authoritative for it.

Records are :class:`Record` ``(name, type, ttl, value)`` tuples: owner names lowercase
without the trailing dot; values in presentation form except TXT, which is the raw text
(unquoted): A ``"127.0.1.1"``, NS ``"ns.auction.rideout.test."``, SOA ``"mname rname
serial refresh retry expire minimum"``. :meth:`Record.to_zone` gives a zone-file line.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Literal, NamedTuple

if TYPE_CHECKING:
    from rideout.config import Config

__all__ = [
    "NS_TTL",
    "REASONS",
    "SOA_MINIMUM",
    "SOA_TTL",
    "Answer",
    "DnsZoneConfig",
    "Endpoint",
    "Rcode",
    "Reason",
    "Record",
    "RegionRecords",
    "Resolution",
    "Role",
    "bump_serial",
    "failover_answer",
    "resolve",
]

Role = Literal["primary", "secondary"]
Rcode = Literal["NOERROR", "NXDOMAIN", "REFUSED"]
Reason = Literal[
    "primary-healthy",  # the primary serves, healthy
    "primary-unhealthy",  # the secondary serves: the primary's check fails
    "primary-evacuated",  # the secondary serves: every primary zone is evacuated
    "all-unhealthy",  # no record is healthy: the primary serves (Route 53's rule)
    "all-evacuated",  # no address left anywhere: the primary's full list
]
REASONS: Final[tuple[Reason, ...]] = (
    "primary-healthy",
    "primary-unhealthy",
    "primary-evacuated",
    "all-unhealthy",
    "all-evacuated",
)

_LABEL: Final = re.compile(r"^(?!-)[a-z0-9-]{1,63}(?<!-)$")
_MAX_TTL: Final = 0x7FFFFFFF
_SERIAL_MAX: Final = 0xFFFFFFFF
# SOA timers: nothing transfers this zone, so refresh/retry/expire are conventional values.
_SOA_REFRESH, _SOA_RETRY, _SOA_EXPIRE = 3600, 600, 86400
# Route 53's: the SOA record lives 900 s with a minimum of 86,400 s (so negative answers
# are cached min(900, 86400) = 900 s, RFC 2308), NS records 172,800 s. Only what health
# or evacuation can change keeps the zone's short `ttl`.
SOA_TTL: Final = 900
SOA_MINIMUM: Final = 86400
NS_TTL: Final = 172800
_NS_LABEL: Final = "ns"


def _label(what: str, value: object) -> str:
    if not isinstance(value, str) or not _LABEL.match(value):
        raise ValueError(
            f"{what} must be a DNS label (1-63 of a-z, 0-9, '-', not at either end): {value!r}"
        )
    return value


def _domain(value: object) -> str:
    if not isinstance(value, str):
        raise ValueError(f"app_domain must be a string, not {value!r}")
    name = value.lower()
    name = name.removesuffix(".")
    if not name or len(name) > 253:
        raise ValueError(f"app_domain must be 1 to 253 characters: {value!r}")
    for label in name.split("."):
        _label(f"label {label!r} of app_domain", label)
    return name


def _ipv4(what: str, value: object) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{what} must be an IPv4 address string, not {value!r}")
    try:
        return str(ipaddress.IPv4Address(value))
    except ValueError:
        raise ValueError(f"{what} must be an IPv4 address, not {value!r}") from None


# ---------------------------------------------------------------------- configuration


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One zone's endpoint in a region's record: an IPv4 address (A record)."""

    address: str
    zone: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "address", _ipv4("endpoint address", self.address))
        _label("zone name", self.zone)


@dataclass(frozen=True, slots=True)
class RegionRecords:
    """A region's failover record: its role, endpoints and health check (None: always healthy)."""

    region: str
    role: Role
    endpoints: tuple[Endpoint, ...]
    health_check_id: str | None = None

    def __post_init__(self) -> None:
        _label("region name", self.region)
        if self.region == _NS_LABEL:
            raise ValueError(f"region name {_NS_LABEL!r} is taken by the name server")
        if self.role not in ("primary", "secondary"):
            raise ValueError(f"role must be 'primary' or 'secondary', not {self.role!r}")
        endpoints = tuple(self.endpoints)
        for endpoint in endpoints:
            if not isinstance(endpoint, Endpoint):
                raise ValueError(f"endpoints must be Endpoint objects, not {endpoint!r}")
        zones = [e.zone for e in endpoints]
        if len(set(zones)) != len(zones):
            raise ValueError(f"region {self.region!r} lists a zone twice: {zones}")
        object.__setattr__(self, "endpoints", endpoints)
        check = self.health_check_id
        if check is not None and (not isinstance(check, str) or not check):
            raise ValueError(f"health_check_id must be a non-empty string or None: {check!r}")

    def addresses(
        self,
        evacuated_zones: frozenset[str] = frozenset(),
        full_zones: frozenset[str] = frozenset(),
    ) -> tuple[str, ...]:
        """The addresses of the zones not in `evacuated_zones`, in configuration order:
        only those not in `full_zones` when there is one, else all of them."""
        serving = [e for e in self.endpoints if e.zone not in evacuated_zones]
        room = tuple(e.address for e in serving if e.zone not in full_zones)
        return room or tuple(e.address for e in serving)

    def is_healthy(self, healthy: Mapping[str, bool]) -> bool:
        """The record's health: its check's status, or True without a check."""
        if self.health_check_id is None:
            return True
        try:
            return bool(healthy[self.health_check_id])
        except KeyError:
            raise ValueError(
                f"no status for health check {self.health_check_id!r} "
                f"(region {self.region}); known: {sorted(healthy)}"
            ) from None


@dataclass(frozen=True, slots=True)
class DnsZoneConfig:
    """The app domain's failover records: exactly one primary and one secondary region."""

    app_domain: str
    ttl: int
    regions: tuple[RegionRecords, ...]
    nameserver_address: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "app_domain", _domain(self.app_domain))
        if isinstance(self.ttl, bool) or not isinstance(self.ttl, int):
            raise ValueError(f"ttl must be an integer number of seconds, not {self.ttl!r}")
        if not 0 <= self.ttl <= _MAX_TTL:
            raise ValueError(f"ttl must be between 0 and {_MAX_TTL}, not {self.ttl}")
        regions = tuple(self.regions)
        for region in regions:
            if not isinstance(region, RegionRecords):
                raise ValueError(f"regions must be RegionRecords objects, not {region!r}")
        roles = sorted(r.role for r in regions)
        if roles != ["primary", "secondary"]:
            raise ValueError(f"need exactly one primary and one secondary region, got {roles}")
        if regions[0].region == regions[1].region:
            raise ValueError(f"the two regions have the same name {regions[0].region!r}")
        zones = [e.zone for r in regions for e in r.endpoints]
        if len(set(zones)) != len(zones):
            raise ValueError(f"zone names must be unique across regions: {zones}")
        object.__setattr__(self, "regions", regions)
        if self.nameserver_address is not None:
            address = _ipv4("nameserver_address", self.nameserver_address)
            object.__setattr__(self, "nameserver_address", address)

    @property
    def primary(self) -> RegionRecords:
        """The PRIMARY failover record."""
        return next(r for r in self.regions if r.role == "primary")

    @property
    def secondary(self) -> RegionRecords:
        """The SECONDARY failover record."""
        return next(r for r in self.regions if r.role == "secondary")

    @property
    def nameserver(self) -> str:
        """The zone's name server name, absolute: ``ns.<app_domain>.``."""
        return f"{_NS_LABEL}.{self.app_domain}."

    def questions(self) -> tuple[tuple[str, str], ...]:
        """The ``(name, type)`` questions clients ask most, worth precomputing per view."""
        names = [self.app_domain, f"{_NS_LABEL}.{self.app_domain}"]
        for region in self.regions:
            names.append(f"{region.region}.{self.app_domain}")
            names.extend(f"{e.zone}.{region.region}.{self.app_domain}" for e in region.endpoints)
        apex = [(self.app_domain, t) for t in ("SOA", "NS", "HTTPS")]
        return (*((name, t) for name in names for t in ("A", "AAAA", "TXT")), *apex)

    def region(self, name: str) -> RegionRecords:
        """The record of region `name`; KeyError otherwise."""
        for region in self.regions:
            if region.region == name:
                return region
        raise KeyError(f"no region {name!r} in the zone")

    @classmethod
    def from_config(
        cls,
        config: Config,
        *,
        health_check_ids: Mapping[str, str | None] | None = None,
        nameserver_address: str | None = None,
    ) -> DnsZoneConfig:
        """The records of a rideout :class:`~rideout.config.Config`.

        Each region's health check id is the region's name unless `health_check_ids`
        maps it (to None for a record without a check). The name server address is the
        control plane's unless given.
        """
        ids = health_check_ids or {}
        return cls(
            app_domain=config.app_domain,
            ttl=config.timing.dns_ttl,
            regions=tuple(
                RegionRecords(
                    region=r.name,
                    role=r.role,
                    endpoints=tuple(Endpoint(z.address, z.name) for z in r.zones),
                    health_check_id=ids.get(r.name, r.name),
                )
                for r in config.regions
            ),
            nameserver_address=nameserver_address or config.control_plane.address,
        )


# ---------------------------------------------------------------------- failover


@dataclass(frozen=True, slots=True)
class Answer:
    """Which region the app domain resolves to, its addresses, the TTL, and why."""

    region: str
    addresses: tuple[str, ...]
    ttl: int
    reason: Reason

    @property
    def text(self) -> str:
        """The TXT explanation: ``region=<region> reason=<reason>``."""
        return f"region={self.region} reason={self.reason}"


def failover_answer(
    zone_config: DnsZoneConfig,
    healthy: Mapping[str, bool],
    evacuated_zones: frozenset[str] = frozenset(),
    full_zones: frozenset[str] = frozenset(),
) -> Answer:
    """Route 53 failover selection, minus evacuated zones, preferring each region's zones
    that are not full (see the module docstring)."""
    primary, secondary = zone_config.primary, zone_config.secondary
    ttl = zone_config.ttl
    p_healthy, s_healthy = primary.is_healthy(healthy), secondary.is_healthy(healthy)
    p_addresses = primary.addresses(evacuated_zones, full_zones)
    s_addresses = secondary.addresses(evacuated_zones, full_zones)
    if p_addresses and p_healthy:
        return Answer(primary.region, p_addresses, ttl, "primary-healthy")
    if s_addresses and (s_healthy or not p_addresses):
        reason: Reason = "primary-unhealthy" if p_addresses else "primary-evacuated"
        return Answer(secondary.region, s_addresses, ttl, reason)
    if p_addresses:
        return Answer(primary.region, p_addresses, ttl, "all-unhealthy")
    if primary.endpoints or not secondary.endpoints:
        return Answer(primary.region, primary.addresses(), ttl, "all-evacuated")
    return Answer(secondary.region, secondary.addresses(), ttl, "all-evacuated")


def bump_serial(serial: int, old: Answer | None, new: Answer) -> int:
    """The SOA serial after `new` replaced `old`: one more when the answer changed.

    Serials stay in 1..2**32-1 and wrap around from the top (RFC 1982 arithmetic).
    """
    if old is not None and (old.region, old.addresses) == (new.region, new.addresses):
        return serial
    return serial % _SERIAL_MAX + 1


# ---------------------------------------------------------------------- resolution


class Record(NamedTuple):
    """One resource record: ``(name, type, ttl, value)`` (see the module docstring)."""

    name: str
    type: str
    ttl: int
    value: str

    def to_zone(self) -> str:
        """A zone-file line (TXT quoted and escaped), e.g. for dnslib's ``RR.fromZone``."""
        value = self.value
        if self.type == "TXT":
            value = '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
        return f"{self.name}. {self.ttl} IN {self.type} {value}"


@dataclass(frozen=True, slots=True)
class Resolution:
    """What to answer to one question (the DNS server turns it into a packet)."""

    rcode: Rcode
    answers: tuple[Record, ...] = ()
    authority: tuple[Record, ...] = ()
    answer: Answer | None = None  # the failover decision, when the question needed it

    @property
    def authoritative(self) -> bool:
        """AA: set for NOERROR and NXDOMAIN, not for REFUSED."""
        return self.rcode != "REFUSED"


def _relative(apex: str, qname: str) -> tuple[str, ...] | None:
    """The labels of `qname` below `apex` (``()`` for the apex), None outside it."""
    if not isinstance(qname, str):
        raise ValueError(f"qname must be a string, not {qname!r}")
    name = qname.lower().removesuffix(".")
    if name == apex:
        return ()
    if name.endswith("." + apex):
        return tuple(name[: -len(apex) - 1].split("."))
    return None


def resolve(
    zone_config: DnsZoneConfig,
    qname: str,
    qtype: str,
    healthy: Mapping[str, bool],
    evacuated: frozenset[str] = frozenset(),
    *,
    serial: int = 1,
    full: frozenset[str] = frozenset(),
) -> Resolution:
    """The answer to `qname`/`qtype` (type by name: ``"A"``, ``"TXT"``, …).

    `healthy`, `evacuated` and `full` are as for :func:`failover_answer`; `serial` is
    the SOA serial (see :func:`bump_serial`).
    """
    apex = zone_config.app_domain
    ttl = zone_config.ttl
    rtype = str(qtype).upper()
    labels = _relative(apex, qname)
    if labels is None:
        return Resolution("REFUSED")
    owner = ".".join((*labels, apex))
    soa = Record(
        apex,
        "SOA",
        SOA_TTL,
        f"{zone_config.nameserver} hostmaster.{apex}. {serial} "
        f"{_SOA_REFRESH} {_SOA_RETRY} {_SOA_EXPIRE} {SOA_MINIMUM}",
    )

    def answer(records: list[Record], decision: Answer | None = None) -> Resolution:
        if not records:  # NODATA
            return Resolution("NOERROR", (), (soa,), decision)
        return Resolution("NOERROR", tuple(records), (), decision)

    def a_records(addresses: tuple[str, ...], ttl: int = ttl) -> list[Record]:
        return [Record(owner, "A", ttl, address) for address in addresses]

    def txt(text: str) -> list[Record]:
        return [Record(owner, "TXT", ttl, text)]

    wants_a = rtype in ("A", "ANY")
    if labels == ():
        decision = failover_answer(zone_config, healthy, evacuated, full)
        if wants_a:
            return answer(a_records(decision.addresses), decision)
        if rtype == "TXT":
            return answer(txt(decision.text), decision)
        if rtype == "SOA":
            return answer([soa])
        if rtype == "NS":
            return answer([Record(apex, "NS", NS_TTL, zone_config.nameserver)])
        return answer([])
    if labels == (_NS_LABEL,):
        address = zone_config.nameserver_address
        return answer(a_records((address,), NS_TTL) if wants_a and address else [])
    regions = {r.region: r for r in zone_config.regions}
    if len(labels) == 1 and labels[0] in regions:
        region = regions[labels[0]]
        if wants_a:
            return answer(a_records(region.addresses(evacuated, full)))
        if rtype == "TXT":
            gone = sorted(e.zone for e in region.endpoints if e.zone in evacuated)
            return answer(
                txt(
                    f"region={region.region} role={region.role} "
                    f"healthy={str(region.is_healthy(healthy)).lower()} "
                    f"evacuated={','.join(gone) or 'none'}"
                )
            )
        return answer([])
    if len(labels) == 2 and labels[1] in regions:
        region = regions[labels[1]]
        for endpoint in region.endpoints:
            if endpoint.zone == labels[0]:
                if wants_a:
                    return answer(a_records((endpoint.address,)))
                if rtype == "TXT":
                    return answer(
                        txt(
                            f"zone={endpoint.zone} region={region.region} "
                            f"evacuated={str(endpoint.zone in evacuated).lower()}"
                        )
                    )
                return answer([])
    return Resolution("NXDOMAIN", (), (soa,))
