"""`Config`: the effective configuration of one deployment, every section in one value."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from rideout.config._sections import (
    PROFILES,
    AuthConfig,
    ControlPlaneConfig,
    EvacuateConfig,
    FailoverConfig,
    RealtimeConfig,
    Timing,
    WaitingRoomConfig,
)
from rideout.config._services import AwsConfig, EvacuateAwsConfig, RedisAccessConfig
from rideout.config._topology import RegionConfig, ZoneConfig, _default_regions

__all__ = ["Config"]

Mode = Literal["local", "external"]


@dataclass(frozen=True, slots=True)
class Config:
    """The effective configuration of one deployment."""

    app_domain: str = "auction.rideout.test"
    mode: Mode = "local"
    data_dir: Path = Path(".rideout")
    app_port: int = 8000
    profile: str = "fast"
    regions: tuple[RegionConfig, ...] = field(default_factory=_default_regions)
    control_plane: ControlPlaneConfig = field(default_factory=ControlPlaneConfig)
    timing: Timing = PROFILES["fast"]
    auth: AuthConfig = field(default_factory=AuthConfig)
    realtime: RealtimeConfig = field(default_factory=RealtimeConfig)
    failover: FailoverConfig = field(default_factory=FailoverConfig)
    waitingroom: WaitingRoomConfig = field(default_factory=WaitingRoomConfig)
    evacuate: EvacuateConfig = field(default_factory=EvacuateConfig)
    evacuate_aws: EvacuateAwsConfig = field(default_factory=EvacuateAwsConfig)
    aws: AwsConfig = field(default_factory=AwsConfig)
    redis: RedisAccessConfig = field(default_factory=RedisAccessConfig)
    # The redis-server or valkey-server binary local mode runs: a path or a name on PATH;
    # empty: the bundled one (rideout.store.embedded.find_redis_server, docs/redis.md).
    redis_server: str = ""
    # Where the deployment's secrets are read from (default: DATA_DIR/keys); in external
    # mode, a directory every host mounts (see docs/external.md).
    secrets_dir: Path | None = None

    @property
    def keys_dir(self) -> Path:
        """The signing key and the admin token, shared by every region's servers."""
        return self.secrets_dir if self.secrets_dir is not None else self.data_dir / "keys"

    def control_plane_urls(self) -> tuple[str, ...]:
        """The control plane's base URLs: ``[control_plane] urls``, else its address."""
        cp = self.control_plane
        return cp.urls or (f"http://{cp.address}:{cp.port}",)

    def origins(self) -> tuple[str, ...]:
        """Browser origins allowed to connect (see AuthConfig.allowed_origins)."""
        if self.auth.allowed_origins:
            return self.auth.allowed_origins
        port = self.app_port
        own = [f"http://{self.app_domain}:{port}"]
        own += [f"http://{z.address}:{port}" for r in self.regions for z in r.zones]
        own += [url.rstrip("/") for url in self.control_plane_urls()]
        return tuple(own)

    @property
    def primary(self) -> RegionConfig:
        """The region that serves while it is healthy."""
        return next(r for r in self.regions if r.role == "primary")

    @property
    def secondary(self) -> RegionConfig:
        """The region that takes over when the primary fails."""
        return next(r for r in self.regions if r.role == "secondary")

    def region(self, name: str) -> RegionConfig:
        """The region called `name`; KeyError naming the known ones otherwise."""
        for region in self.regions:
            if region.name == name:
                return region
        known = ", ".join(r.name for r in self.regions)
        raise KeyError(f"no region {name!r} (known: {known})")

    def zone(self, region: str, name: str) -> ZoneConfig:
        """Zone `name` of `region`; KeyError naming the known ones otherwise."""
        for zone in self.region(region).zones:
            if zone.name == name:
                return zone
        known = ", ".join(z.name for z in self.region(region).zones)
        raise KeyError(f"no zone {name!r} in region {region!r} (known: {known})")

    @property
    def logs_dir(self) -> Path:
        return self.data_dir / "logs"

    @property
    def run_dir(self) -> Path:
        return self.data_dir / "run"

    def region_data_dir(self, region: str) -> Path:
        """Where a region's Redis keeps its append-only file."""
        return self.data_dir / "data" / region
