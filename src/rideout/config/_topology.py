"""The regions and their zones: roles, app server addresses, each region's Redis."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from rideout.config._reader import _NAME, ConfigError, _address, _Reader
from rideout.config._services import RedisAccessConfig, RedisConfig, _parse_region_redis

__all__ = ["RegionConfig", "ZoneConfig"]

Role = Literal["primary", "secondary"]


@dataclass(frozen=True, slots=True)
class ZoneConfig:
    """One availability zone: an app server endpoint."""

    name: str
    address: str


@dataclass(frozen=True, slots=True)
class RegionConfig:
    """One region: its role in failover routing, its zones and its Redis.

    `redis` is the region's writer-side Redis, in its first zone; `replica`, when set, a
    second Redis in the region's other zone that follows it (as managed Redis does with
    Multi-AZ): after a failover to this region, sync-mode writes are acknowledged once
    that replica has them (docs/control-plane.md, "What is guaranteed in each state").
    """

    name: str
    role: Role
    zones: tuple[ZoneConfig, ...]
    redis: RedisConfig
    replica: RedisConfig | None = None

    @property
    def redis_nodes(self) -> tuple[RedisConfig, ...]:
        """The region's Redis servers: its main one, then its in-region replica if any."""
        return (self.redis,) if self.replica is None else (self.redis, self.replica)


def _default_regions() -> tuple[RegionConfig, ...]:
    return (
        RegionConfig(
            name="us-east-1",
            role="primary",
            zones=(ZoneConfig("use1-az1", "127.0.1.1"), ZoneConfig("use1-az2", "127.0.1.2")),
            redis=RedisConfig("127.0.1.100", 6390),
            replica=RedisConfig("127.0.1.101", 6390),
        ),
        RegionConfig(
            name="us-west-2",
            role="secondary",
            zones=(ZoneConfig("usw2-az1", "127.0.2.1"), ZoneConfig("usw2-az2", "127.0.2.2")),
            redis=RedisConfig("127.0.2.100", 6390),
            replica=RedisConfig("127.0.2.101", 6390),
        ),
    )


def _parse_regions(root: _Reader, access: RedisAccessConfig, mode: str) -> tuple[RegionConfig, ...]:
    """The [[regions]] list; `access` holds [redis]'s TLS defaults for ``rediss://`` URLs."""
    items = root.raw("regions")
    if not isinstance(items, list) or not items:
        raise ConfigError("regions", "expected a non-empty list of [[regions]] tables")
    regions = []
    for i, item in enumerate(items):
        t = _Reader(item, f"regions[{i}]", root._origins)
        name = t.text("name", "")
        if not _NAME.match(name):
            raise ConfigError(t.key("name"), f"expected a name like 'us-east-1', got {name!r}")
        role = t.text("role", "")
        if role not in ("primary", "secondary"):
            raise ConfigError(t.key("role"), f"must be 'primary' or 'secondary', got {role!r}")
        if not t.has("redis"):
            raise ConfigError(
                t.key("redis"), "missing: every region needs its Redis address and port"
            )
        r = t.table("redis")
        replica_table = r.table("replica") if r.has("replica") else None
        redis = _parse_region_redis(r, access, mode)
        replica = None
        if replica_table is not None:  # the region's Redis in its other zone
            replica = RedisConfig(
                address=_address(replica_table, "address", ""),
                port=replica_table.integer("port", redis.port, maximum=65535),
                tls=redis.tls,
            )
            replica_table.done()
        zone_items = t.raw("zones") if t.has("zones") else []
        if not isinstance(zone_items, list) or not zone_items:
            raise ConfigError(t.key("zones"), f"region {name!r} has no zones")
        zones = []
        for j, zone_item in enumerate(zone_items):
            z = _Reader(zone_item, f"regions[{i}].zones[{j}]", root._origins)
            zone_name = z.text("name", "")
            if not _NAME.match(zone_name):
                raise ConfigError(
                    z.key("name"), f"expected a name like 'use1-az1', got {zone_name!r}"
                )
            zones.append(ZoneConfig(name=zone_name, address=_address(z, "address", "")))
            z.done()
        t.done()
        if replica is not None and len(zones) < 2:
            raise ConfigError(
                r.key("replica"), "an in-region replica needs a second zone to live in"
            )
        regions.append(
            RegionConfig(name=name, role=role, zones=tuple(zones), redis=redis, replica=replica)  # type: ignore[arg-type]
        )
    return tuple(regions)
