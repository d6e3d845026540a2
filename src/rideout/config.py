"""Topology and settings: one `rideout.toml`, defaults for everything, `RIDEOUT_*` overrides.

Precedence, lowest first: built-in defaults (DESIGN.md's local two-region topology), the
timing profile named by ``profile``, the TOML file, then environment variables. Every
problem is reported as a :class:`ConfigError` naming the key and what is wrong with it.

Environment variables: ``RIDEOUT_<KEY>`` sets a top-level key and
``RIDEOUT_<SECTION>__<KEY>`` a key of a section (``RIDEOUT_TIMING__DNS_TTL=2``,
``RIDEOUT_CONTROL_PLANE__PORT=9100``). Regions and zones are structured and come from the
file only. ``RIDEOUT_CONFIG`` names the file when no path is given explicitly.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import math
import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from rideout._validate import secure_url
from rideout.errors import InvalidArgument

__all__ = [
    "DEFAULT_CONFIG_FILE",
    "EVACUATE_PROFILES",
    "FAILOVER_PROFILES",
    "PROFILES",
    "AuthConfig",
    "AwsConfig",
    "AwsRegionConfig",
    "Config",
    "ConfigError",
    "ControlPlaneConfig",
    "EvacuateAwsConfig",
    "EvacuateConfig",
    "FailoverConfig",
    "RealtimeConfig",
    "RedisAccessConfig",
    "RedisConfig",
    "RedisTLS",
    "RegionConfig",
    "Timing",
    "WaitingRoomConfig",
    "ZoneConfig",
    "dump_toml",
    "load_config",
    "region_env_name",
]

DEFAULT_CONFIG_FILE = "rideout.toml"
ENV_PREFIX = "RIDEOUT_"
# Environment variables that are not configuration keys but belong to rideout.
ENV_NOT_KEYS = frozenset({"RIDEOUT_CONFIG", "RIDEOUT_LOG_FORMAT"})

Mode = Literal["local", "external"]
Role = Literal["primary", "secondary"]
_LOOPBACK = ipaddress.ip_network("127.0.0.0/8")
_DNS_LABEL = re.compile(r"^(?!-)[a-z0-9-]{1,63}(?<!-)$")
_NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")
_AWS_REGION = re.compile(r"^[a-z]{2}(-[a-z]+)+-[0-9]{1,2}$")
_AWS_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9-]{0,39}$")


class ConfigError(InvalidArgument):
    """The configuration is invalid; the message names the key and the problem."""

    def __init__(self, key: str, problem: str) -> None:
        self.key = key
        self.problem = problem
        super().__init__(f"config: {key}: {problem}")


@dataclass(frozen=True, slots=True)
class Timing:
    """Every interval of the failover loop, in seconds unless the name says otherwise."""

    canary_interval: float
    canary_timeout: float
    failover_datapoints: int  # consecutive bad datapoints that raise the alarm
    failback_datapoints: int  # good datapoints that clear it (the seed: "more than five")
    dns_ttl: int
    heartbeat_interval: float
    heartbeat_timeout: float
    heartbeat_failures: int  # consecutive non-pong replies that force a reconnect
    backoff_base: float
    backoff_cap: float
    # A new connection must send its whole request head (and a WebSocket complete its
    # upgrade) within this, or it is closed: silent and slow-loris sockets hold a file
    # descriptor each, and a process has only so many.
    handshake_timeout: float


# The seed documents' values (000/002), and the same loop scaled down for a local demo.
PROFILES: Mapping[str, Timing] = {
    "seed": Timing(
        canary_interval=60.0,
        canary_timeout=10.0,
        failover_datapoints=2,
        failback_datapoints=6,
        dns_ttl=60,
        heartbeat_interval=30.0,
        heartbeat_timeout=35.0,
        heartbeat_failures=2,
        backoff_base=2.0,
        backoff_cap=20.0,
        handshake_timeout=10.0,
    ),
    "fast": Timing(
        canary_interval=0.5,
        canary_timeout=0.4,
        failover_datapoints=2,
        failback_datapoints=6,
        dns_ttl=1,
        # Heartbeats are not scaled as far as the canary: a shared 2-core machine
        # stalls event loops for hundreds of milliseconds under load.
        heartbeat_interval=1.0,
        heartbeat_timeout=2.0,
        heartbeat_failures=2,
        backoff_base=0.25,
        backoff_cap=2.0,
        handshake_timeout=2.0,
    ),
}


@dataclass(frozen=True, slots=True)
class ZoneConfig:
    """One availability zone: an app server endpoint."""

    name: str
    address: str


@dataclass(frozen=True, slots=True)
class RedisTLS:
    """How a client reaches a ``rediss://`` server: whom to trust, what to present.

    Empty ``ca_file``: the system's trust store (managed Redis with a public CA).
    ``cert_file`` and ``key_file`` together: mutual TLS.
    """

    ca_file: str = ""
    cert_file: str = ""
    key_file: str = ""
    check_hostname: bool = True


@dataclass(frozen=True, slots=True)
class RedisConfig:
    """Where a region's Redis listens (spawned locally in ``local`` mode).

    In ``external`` mode ``url`` (``redis://HOST:PORT`` or ``rediss://HOST:PORT``) may
    name it instead of an IP address; ``address`` is then the URL's host, and ``tls``
    is set for ``rediss://``.
    """

    address: str
    port: int
    url: str = ""
    tls: RedisTLS | None = None


@dataclass(frozen=True, slots=True)
class RedisAccessConfig:
    """External mode: the ACL users rideout's parts reach Redis as, and TLS defaults.

    Each role's password comes from its ``*_password_file`` (a mounted secret), else
    from ``password_file``. The TLS files apply to every ``rediss://`` URL that does not
    set its own. Local mode ignores this section: `rideout up` makes its own users.
    """

    ca_file: str = ""
    cert_file: str = ""
    key_file: str = ""
    check_hostname: bool = True
    password_file: str = ""
    app_user: str = "rideout-app"
    app_password_file: str = ""
    controller_user: str = "rideout-controller"
    controller_password_file: str = ""
    monitor_user: str = "rideout-monitor"
    monitor_password_file: str = ""


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


@dataclass(frozen=True, slots=True)
class ControlPlaneConfig:
    """The global control plane's HTTP API and DNS server."""

    address: str = "127.0.0.1"
    port: int = 9000
    dns_port: int = 5300
    # `rideout dns`'s HTTP port on `address`: /metrics and /health of the DNS process.
    dns_metrics_port: int = 9153
    max_stream_readers: int = 32  # dashboard feeds (/v1/stream) at once; more get 503
    login_code_ttl: float = 300.0  # seconds a dashboard login link can be used (once)
    session_ttl: float = 28800.0  # seconds an operator's dashboard session lasts
    ingest_max_skew: float = 30.0  # seconds a canary's signed timestamp may be off
    # External mode. The URLs canaries push to (each of them) and app servers read the
    # writer epoch from (the first that answers); empty: http://address:port.
    urls: tuple[str, ...] = ()
    # The Redis that holds the control plane's lease and state (alarms, health checks,
    # the controller); required with more than one control plane, or to survive a host.
    state_redis_url: str = ""
    # How long a lease lasts unless renewed; the holder renews it every third of this,
    # and stops acting once less than a third of it is left.
    lease_ttl: float = 6.0


@dataclass(frozen=True, slots=True)
class AuthConfig:
    """Access tokens: who issues them, for whom, and which browser origins may connect."""

    issuer: str = "https://auth.rideout.test"
    audience: str = "rideout"
    token_ttl: float = 3600.0
    # The longest lifetime (exp - iat) issued or accepted: a stolen token, and a
    # revocation's record, live at most this long.
    max_token_ttl: float = 86400.0
    leeway: float = field(default=5.0, metadata={"zero_ok": True})  # clock skew tolerated
    # How often each app server reads the revocation list (seconds): a revoked token's
    # connections close, and its handshakes are refused, within about this long.
    revocation_interval: float = 1.0
    # Browser origins allowed to open a WebSocket. Empty: the deployment's own origins
    # (every zone, the app domain, the control plane). Clients that send no Origin
    # header (non-browser clients) are always allowed: Origin protects browsers only.
    allowed_origins: tuple[str, ...] = ()
    # POST /auth/demo-token on the app servers: a token for a bidder name of the
    # browser's choosing, for the demo page. When not set: on in local mode (the default
    # mode, hence True here), off in external mode.
    demo_tokens: bool = True
    # The waiting-room events whose access tokens /ws accepts besides its own (empty:
    # none; rideout.waitingroom.authorizer, docs/waiting-room.md).
    room_events: tuple[str, ...] = ("auction",)
    # Seconds /ws trusts a session status it read from the room's store (bounded staleness).
    room_session_ttl: float = field(default=1.0, metadata={"zero_ok": True})


@dataclass(frozen=True, slots=True)
class RealtimeConfig:
    """The WebSocket API's limits and the auction's rules."""

    workers: int = 1  # app server processes per zone (they share the port: SO_REUSEPORT)
    max_message_size: int = 4096  # bytes; larger frames close the connection with 1009
    rate_limit: float = 20.0  # messages per second per connection, sustained
    rate_burst: int = 40  # messages a connection may send at once
    send_queue: int = 256  # queued outgoing messages before a consumer counts as slow
    # Connection caps, per app server process (worker). `max_connections` counts every
    # open TCP connection, HTTP and WebSocket, and is lowered to fit the process's
    # open-file limit; `reserved_connections` of them only the canary (and HTTP, such as
    # /health) may use. 0 turns the per-address cap off (behind a proxy, say).
    max_connections: int = 16384
    reserved_connections: int = field(default=64, metadata={"zero_ok": True})
    max_connections_per_user: int = 16
    max_connections_per_address: int = field(default=4096, metadata={"zero_ok": True})
    # Cost budget per user (`sub`), shared by that user's connections in the worker: a
    # getState costs 1 plus the updates it replays.
    replay_rate: float = 200.0  # per second, sustained
    replay_burst: int = 1000  # at once (one full replay of history_size updates)
    max_rooms_per_connection: int = 64  # rooms one connection may watch (the hub follows each)
    history_size: int = 1000  # updates kept per room for replay
    history_ttl: float = 3600.0  # seconds of updates kept per room for replay
    min_bid: int = 1
    max_bid: int = 1_000_000_000
    min_increment: int = 1


@dataclass(frozen=True, slots=True)
class FailoverConfig:
    """How the writer moves between regions and what an acknowledgement promises."""

    # async: the seed's behaviour, a bid is acknowledged once the writer has it (writes
    # just before a failure may be lost, and are counted). sync: acknowledged only once
    # the other region's replica has it too (Redis WAIT).
    replication: str = "async"
    sync_timeout: float = 0.5  # seconds WAIT waits for the replica
    # sync mode with the replica down or slow: "reject" the bid (error/unavailable, the
    # client retries) or "degrade" to async for that bid (counted, shown in status).
    replica_down: str = "reject"
    auto_failback: bool = True  # move back to the primary once it is healthy again
    # Failback damping (RFC 2439's route flap damping, the writer's moves as the flaps):
    # each move adds 1 to a penalty that halves every `damping_half_life` seconds; a
    # move that leaves it above `damping_suppress` holds failback until it is below
    # `damping_reuse`, never longer than `damping_max_hold` after the last move.
    flap_damping: bool = True
    damping_half_life: float = 15.0  # fast profile; see FAILOVER_PROFILES
    damping_max_hold: float = 60.0
    damping_suppress: float = field(default=1.5, metadata={"unitless": True})
    damping_reuse: float = field(default=0.75, metadata={"unitless": True})
    # After a failback, the old writer's zones close their connections (1012) spread
    # over this many seconds, so the returning clients do not arrive as one herd.
    failback_drain_seconds: float = field(default=5.0, metadata={"zero_ok": True})


@dataclass(frozen=True, slots=True)
class WaitingRoomConfig:
    """The waiting room on every app server (rideout.waitingroom; docs/waiting-room.md)."""

    enabled: bool = True  # mount the room's public and private API on every zone
    # Events created at start when missing (with the settings below); more can be
    # added, changed and deleted at runtime through the private API.
    events: tuple[str, ...] = ("auction",)
    validity: float = 3600.0  # seconds a room token lives
    expiry: float = field(default=900.0, metadata={"zero_ok": True})  # 0: positions never expire
    incr_on_expiry: bool = False  # move the serving counter past expired positions
    # Seconds without a poll after which a waiting position is abandoned (0: off, as
    # AWS: its sample client polls serving_num only, without its request id).
    abandon_after: float = field(default=0.0, metadata={"zero_ok": True})
    inlet: str = "max_size"  # none | max_size | periodic
    inlet_period: float = 5.0  # seconds between an inlet's steps
    inlet_max_size: int = 1000  # max_size: sessions the site holds at once
    inlet_increment_by: int = 10  # periodic: positions admitted per period
    # periodic: hold back while this rideout alarm is in ALARM (at most one name; a
    # region's alarm is named after the region, e.g. ["us-east-1"])
    inlet_alarm: tuple[str, ...] = ()
    tick_interval: float = 1.0  # seconds between the scheduler's looks at each event
    metrics_interval: float = 60.0  # seconds between waiting_room_metrics events
    # Seconds each process keeps serving_num / waiting_num before asking Redis again
    # (0: off): a surge of polls costs Redis one read per event per interval.
    micro_cache_ttl: float = field(default=0.5, metadata={"zero_ok": True})
    # Numbered positions each process keeps for queue_num (their answer never changes;
    # about 400 bytes each; 0: every poll reads Redis).
    position_cache_size: int = field(default=100_000, metadata={"zero_ok": True})
    max_body: int = 4096  # bytes a request body may have
    stream_length: int = 10000  # events kept per event's stream (about)
    # The first key of the room's key ring (KEYS_DIR/room-keys.pem): EdDSA | ES256 |
    # RS256 (for verifiers that need it). Once the file exists, it decides.
    token_algorithm: str = "EdDSA"
    # The OpenID adapter's relying parties (rideout.waitingroom.oidc; docs/oidc.md), one
    # per event: "EVENT_ID REDIRECT_URI [REDIRECT_URI ...]" (URIs matched exactly). The
    # client id is the event id; its secret is KEYS_DIR/oidc-EVENT_ID.secret (mode 0600,
    # made at start) unless the event is also in oidc_public_clients (PKCE alone).
    oidc_clients: tuple[str, ...] = ()
    oidc_public_clients: tuple[str, ...] = ()

    def oidc_registrations(self) -> dict[str, tuple[str, ...]]:
        """Each OpenID client's event id and its redirect URIs."""
        return {e.split()[0]: tuple(e.split()[1:]) for e in self.oidc_clients}


# The [failover] settings that scale with the timing profile, as Timing does.
FAILOVER_PROFILES: Mapping[str, Mapping[str, Any]] = {
    "seed": {
        "damping_half_life": 900.0,
        "damping_max_hold": 3600.0,
        "failback_drain_seconds": 60.0,
    },
    "fast": {"damping_half_life": 15.0, "damping_max_hold": 60.0, "failback_drain_seconds": 5.0},
}


@dataclass(frozen=True, slots=True)
class EvacuateConfig:
    """Zone evacuation (``rideout evacuate``/``recover``) and zonal autoshift."""

    min_healthy_zones: int = 1  # zones a resource must keep (never fewer than one)
    batch_size: int = 10  # resources changed per batch
    pause: float = field(default=0.0, metadata={"zero_ok": True})  # seconds between batches
    lock_ttl: float = 300.0  # seconds a zone's lock in the ledger lasts unless renewed
    # An evacuated zone's clients are closed (1012) spread over this many seconds, once
    # DNS has stopped answering its address for a TTL.
    drain_seconds: float = field(default=2.0, metadata={"zero_ok": True})
    # Zonal autoshift: a zone failing its canary while another zone of its region is
    # healthy is evacuated automatically (recorded in the ledger as "autoshift"), for
    # `autoshift_expiry` seconds at a time (re-evaluated then, like a zonal shift's
    # expiresIn), and recovered once its canary has been healthy this long.
    autoshift: bool = True
    autoshift_expiry: float = 30.0
    autoshift_recover_after: float = 5.0


# The [evacuate] settings that scale with the timing profile.
EVACUATE_PROFILES: Mapping[str, Mapping[str, Any]] = {
    "seed": {"drain_seconds": 60.0, "autoshift_expiry": 3600.0, "autoshift_recover_after": 600.0},
    "fast": {"drain_seconds": 2.0, "autoshift_expiry": 30.0, "autoshift_recover_after": 5.0},
}


@dataclass(frozen=True, slots=True)
class EvacuateAwsConfig:
    """``rideout evacuate|recover --provider aws``: where the resources and the ledger are.

    An empty string means "not set": the region and endpoint then come from boto3's own
    resolution (``AWS_REGION``/``AWS_DEFAULT_REGION``, the profile, ``AWS_ENDPOINT_URL``).
    The EKS bearer token is made from the AWS credentials (as ``aws eks get-token``
    does) or read from ``eks_token_file`` when the command runs; it is never part of the
    configuration (``config show`` prints the path only).
    """

    region: str = ""
    profile: str = ""
    endpoint_url: str = ""
    table: str = "rideout-evacuations"  # the DynamoDB ledger (created if missing)
    vpc_ids: tuple[str, ...] = ()  # limit subnet lookups to these VPCs (default: all)
    max_attempts: int = 5  # per AWS call, throttling included (botocore standard retries)
    zonal_shift: bool = False  # also shift ARC-managed load balancers away (type arc-zonal-shift)
    zonal_shift_resources: tuple[str, ...] = ()  # their ARNs (default: every managed one)
    zonal_shift_expires_in: str = "12h"  # a shift's expiry: minutes or hours, at most 72h
    eks_cluster: str = ""  # the EKS cluster's ARN (type eks; empty: no eks)
    eks_server: str = ""  # its Kubernetes API endpoint (https://...)
    eks_ca_file: str = ""  # its CA bundle (default: the system's)
    eks_token_file: str = ""  # a file holding a bearer token ("": made from AWS credentials)


@dataclass(frozen=True, slots=True)
class AwsRegionConfig:
    """How one rideout region maps onto AWS (``[aws.regions.<region>]``)."""

    name: str  # the rideout region
    aws_region: str  # the AWS region it runs in (default: the same name)
    # The app domain's record for this region: A records with these addresses, or
    # (record_type = "alias") an alias to a load balancer's or API's DNS name.
    addresses: tuple[str, ...] = ()
    alias_dns_name: str = ""
    alias_hosted_zone_id: str = ""
    alarm_name: str = ""  # the region's canary alarm (default: see AwsConfig.alarm_name)
    replication_group: str = ""  # the region's ElastiCache replication group id
    cache_subnet_group: str = ""  # where apply creates the secondary's replication group


@dataclass(frozen=True, slots=True)
class AwsConfig:
    """`rideout aws plan|apply|destroy`, the canary's PutMetricData, ``--provider aws``."""

    deployment: str = "rideout"  # tagged rideout:deployment=<this> on what rideout creates
    hosted_zone_id: str = ""  # the app domain's Route 53 hosted zone; empty: not managed
    record_type: str = "A"  # A | alias
    # Where the canary alarms live and the canaries publish: default the secondary's AWS
    # region, so failing over never depends on the region that failed.
    alarm_region: str = ""
    period: int = 60  # seconds per CloudWatch datapoint: 10, 30 or a multiple of 60
    insufficient_data_health: str = "Unhealthy"  # Healthy | Unhealthy | LastKnownStatus
    publish_metrics: bool = False  # the canary also calls PutMetricData (besides ingest)
    global_datastore: str = ""  # ElastiCache Global Datastore id suffix; empty: not managed
    tags: tuple[tuple[str, str], ...] = ()  # added to everything rideout creates
    regions: tuple[AwsRegionConfig, ...] = ()

    def region(self, name: str) -> AwsRegionConfig:
        """The AWS settings of rideout region `name` (defaults when it has none)."""
        for region in self.regions:
            if region.name == name:
                return region
        return AwsRegionConfig(name=name, aws_region=name)

    def alarm_name(self, region: str) -> str:
        """The canary alarm of rideout region `region`."""
        return self.region(region).alarm_name or f"{self.deployment}-{region}-websocket-health"


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


# --------------------------------------------------------------------------- loading


class _Reader:
    """Takes typed values out of one table, remembering the key path for messages."""

    def __init__(self, table: Mapping[str, Any], path: str, origins: Mapping[str, str]) -> None:
        if not isinstance(table, Mapping):
            raise ConfigError(path or "<root>", f"expected a table, got {_kind(table)}")
        self._table = dict(table)
        self._path = path
        self._origins = origins

    def key(self, name: str) -> str:
        full = f"{self._path}.{name}" if self._path else name
        origin = self._origins.get(full)
        return f"{full} (from {origin})" if origin else full

    def has(self, name: str) -> bool:
        return name in self._table

    def names(self) -> list[str]:
        """The keys not consumed yet (for tables keyed by name)."""
        return list(self._table)

    def raw(self, name: str) -> Any:
        return self._table.pop(name)

    def text(self, name: str, default: str, *, empty_ok: bool = False) -> str:
        if name not in self._table:
            return default
        value = self._table.pop(name)
        if isinstance(value, str) and empty_ok:
            return value
        if not isinstance(value, str) or not value:
            raise ConfigError(self.key(name), f"expected a non-empty string, got {_kind(value)}")
        return value

    def optional_text(self, name: str) -> str:
        """A string that may be empty (empty: not set)."""
        if name not in self._table:
            return ""
        value = self._table.pop(name)
        if not isinstance(value, str):
            raise ConfigError(self.key(name), f"expected a string, got {_kind(value)}")
        return value

    def integer(
        self, name: str, default: int, *, minimum: int = 1, maximum: int | None = None
    ) -> int:
        if name not in self._table:
            return default
        value = self._table.pop(name)
        if isinstance(value, str):
            try:
                value = int(value.strip())
            except ValueError:
                raise ConfigError(self.key(name), f"expected an integer, got {value!r}") from None
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(self.key(name), f"expected an integer, got {_kind(value)}")
        if value < minimum:
            raise ConfigError(self.key(name), f"must be at least {minimum}, got {value}")
        if maximum is not None and value > maximum:
            raise ConfigError(self.key(name), f"must be at most {maximum}, got {value}")
        return value

    def _float(self, name: str, what: str) -> float:
        """Take `name` (present) as a float; `what` is the kind the messages expect."""
        value = self._table.pop(name)
        if isinstance(value, str):
            try:
                value = float(value.strip())
            except ValueError:
                raise ConfigError(self.key(name), f"expected {what}, got {value!r}") from None
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(self.key(name), f"expected {what}, got {_kind(value)}")
        return float(value)

    def positive(self, name: str, default: float) -> float:
        """A number greater than zero (not a duration: a threshold, a ratio)."""
        if name not in self._table:
            return default
        value = self._float(name, "a number")
        if not math.isfinite(value) or value <= 0:
            raise ConfigError(self.key(name), f"must be a number above zero, got {value}")
        return value

    def seconds(self, name: str, default: float, *, zero_ok: bool = False) -> float:
        if name not in self._table:
            return default
        value = self._float(name, "seconds")
        if not math.isfinite(value) or value < 0 or (value == 0 and not zero_ok):
            what = "zero or more" if zero_ok else "a positive number of"
            raise ConfigError(self.key(name), f"must be {what} seconds, got {value}")
        return float(value)

    def flag(self, name: str, default: bool) -> bool:
        if name not in self._table:
            return default
        value = self._table.pop(name)
        if isinstance(value, str):  # from the environment
            words = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}
            if value.strip().lower() not in words:
                raise ConfigError(self.key(name), f"expected true or false, got {value!r}")
            return words[value.strip().lower()]
        if not isinstance(value, bool):
            raise ConfigError(self.key(name), f"expected true or false, got {_kind(value)}")
        return value

    def strings(self, name: str, default: tuple[str, ...]) -> tuple[str, ...]:
        if name not in self._table:
            return default
        value = self._table.pop(name)
        if isinstance(value, str):  # from the environment: comma-separated
            value = [v.strip() for v in value.split(",") if v.strip()]
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise ConfigError(self.key(name), f"expected a list of strings, got {_kind(value)}")
        return tuple(value)

    def table(self, name: str) -> _Reader:
        value = self._table.pop(name, {})
        full = f"{self._path}.{name}" if self._path else name
        return _Reader(value, full, self._origins)

    def done(self) -> None:
        """Refuse whatever was not consumed: unknown keys are mistakes, not extensions."""
        for name in self._table:
            raise ConfigError(self.key(name), "unknown key")


def _kind(value: object) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, Mapping):
        return "a table"
    if isinstance(value, list):
        return "a list"
    return f"{type(value).__name__} {value!r}"


def _choices(options: Mapping[str, object] | tuple[str, ...]) -> str:
    return ", ".join(repr(o) for o in options)


# RIDEOUT_REDIS_<REGION>_<FIELD>: one region's Redis, as a container platform sets it.
_REGION_REDIS_ENV = re.compile(
    r"RIDEOUT_REDIS_([A-Z0-9][A-Z0-9_]*?)_(URL|CA_FILE|CERT_FILE|KEY_FILE)"
)
_REGION_REDIS_FIELDS = {"URL": "url", "CA_FILE": "ca_file", "CERT_FILE": "cert_file",
                        "KEY_FILE": "key_file"}  # fmt: skip


def region_env_name(region: str, what: str = "URL") -> str:
    """The variable that sets `region`'s Redis `what` (``RIDEOUT_REDIS_US_EAST_1_URL``)."""
    return f"RIDEOUT_REDIS_{region.upper().replace('-', '_')}_{what}"


def _region_env(env: Mapping[str, str]) -> dict[str, dict[str, tuple[str, str]]]:
    """RIDEOUT_REDIS_<REGION>_<FIELD> variables: {REGION: {field: (value, variable)}}."""
    found: dict[str, dict[str, tuple[str, str]]] = {}
    for name, value in env.items():
        match = _REGION_REDIS_ENV.fullmatch(name)
        if match:
            found.setdefault(match[1], {})[_REGION_REDIS_FIELDS[match[2]]] = (value, name)
    return found


def _apply_region_env(
    data: dict[str, Any], env: Mapping[str, str], origins: dict[str, str]
) -> dict[str, Any]:
    """Set the regions' Redis from RIDEOUT_REDIS_<REGION>_* (on the file's regions, or
    the default ones), noting each variable in `origins`."""
    found = _region_env(env)
    if not found:
        return data
    regions = data.get("regions")
    if not isinstance(regions, list):
        regions = config_to_dict(Config())["regions"]
    by_key = {
        str(r.get("name", "")).upper().replace("-", "_"): r
        for r in regions
        if isinstance(r, Mapping)
    }
    out = []
    for key, fields_ in found.items():
        if key not in by_key:
            variable = next(iter(fields_.values()))[1]
            known = ", ".join(sorted(by_key))
            raise ConfigError(variable, f"no region named like {key!r} (known: {known})")
    for i, region in enumerate(regions):
        region = dict(region) if isinstance(region, Mapping) else region
        if isinstance(region, dict):
            key = str(region.get("name", "")).upper().replace("-", "_")
            if key in found:
                for f, (_, variable) in found[key].items():
                    origins[f"regions[{i}].redis.{f}"] = variable
                redis = region.get("redis")
                redis = dict(redis) if isinstance(redis, Mapping) else {}
                if "url" in found[key]:
                    redis.pop("address", None)
                    redis.pop("port", None)
                redis.update({f: v for f, (v, _) in found[key].items()})
                region["redis"] = redis
        out.append(region)
    return {**data, "regions": out}


def _env_overrides(env: Mapping[str, str]) -> tuple[dict[str, Any], dict[str, str]]:
    """Turn RIDEOUT_* variables into a nested dict of strings, and remember their origin."""
    data: dict[str, Any] = {}
    origins: dict[str, str] = {}
    for name, value in env.items():
        if not name.startswith(ENV_PREFIX) or name in ENV_NOT_KEYS:
            continue
        if _REGION_REDIS_ENV.fullmatch(name):
            continue  # see _apply_region_env
        parts = name[len(ENV_PREFIX) :].lower().split("__")
        if len(parts) > 2 or not all(parts):
            raise ConfigError(name, "expected RIDEOUT_<KEY> or RIDEOUT_<SECTION>__<KEY>")
        if parts[0] == "regions":
            raise ConfigError(name, "regions can only be set in the config file")
        target = data
        if len(parts) == 2:
            section = data.setdefault(parts[0], {})
            if not isinstance(section, dict):
                raise ConfigError(name, f"{parts[0]} is not a section")
            target = section
        target[parts[-1]] = value
        origins[".".join(parts)] = name
    return data, origins


def _merge(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = _merge(dict(merged[key]), value)
        else:
            merged[key] = value
    return merged


def load_config(
    path: str | os.PathLike[str] | None = None,
    *,
    env: Mapping[str, str] | None = None,
) -> Config:
    """Load the effective configuration.

    `path` is the TOML file; without it ``RIDEOUT_CONFIG`` names one, else
    ``./rideout.toml`` is read when it exists, else the defaults stand alone.
    `env` defaults to ``os.environ``; pass ``{}`` to ignore the environment.
    """
    env = os.environ if env is None else env
    explicit = path is not None or "RIDEOUT_CONFIG" in env
    file = Path(path if path is not None else env.get("RIDEOUT_CONFIG", DEFAULT_CONFIG_FILE))
    raw: dict[str, Any] = {}
    if file.exists():
        try:
            raw = tomllib.loads(file.read_text(encoding="utf-8"))
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(str(file), f"not valid TOML: {exc}") from None
        except OSError as exc:
            raise ConfigError(str(file), f"cannot be read: {exc.strerror}") from None
    elif explicit:
        raise ConfigError(str(file), "no such config file")
    overrides, origins = _env_overrides(env)
    merged = _apply_region_env(_merge(raw, overrides), env, origins)
    return parse_config(merged, origins=origins)


def parse_config(data: Mapping[str, Any], *, origins: Mapping[str, str] | None = None) -> Config:
    """Build and validate a Config from a TOML-shaped mapping."""
    defaults = Config()
    root = _Reader(data, "", origins or {})
    profile = root.text("profile", defaults.profile)
    if profile not in PROFILES:
        raise ConfigError(
            root.key("profile"), f"unknown profile {profile!r}; choose {_choices(PROFILES)}"
        )
    mode = root.text("mode", defaults.mode)
    if mode not in ("local", "external"):
        raise ConfigError(root.key("mode"), f"must be 'local' or 'external', got {mode!r}")
    app_domain = root.text("app_domain", defaults.app_domain).lower().rstrip(".")
    labels = app_domain.split(".")
    if len(app_domain) > 253 or len(labels) < 2 or not all(_DNS_LABEL.match(x) for x in labels):
        raise ConfigError(root.key("app_domain"), f"{app_domain!r} is not a valid DNS name")
    config = Config(
        app_domain=app_domain,
        mode=mode,  # type: ignore[arg-type]  # checked just above
        data_dir=Path(root.text("data_dir", str(defaults.data_dir))),
        app_port=root.integer("app_port", defaults.app_port, maximum=65535),
        profile=profile,
        secrets_dir=Path(root.text("keys_dir", "")) if root.has("keys_dir") else None,
        regions=defaults.regions,
        control_plane=_parse_control_plane(root.table("control_plane"), mode),
        timing=_parse_timing(root.table("timing"), PROFILES[profile]),
        auth=_parse_auth(root.table("auth"), mode),
        realtime=_parse_realtime(root.table("realtime")),
        failover=_parse_failover(root.table("failover"), profile),
        waitingroom=_parse_waitingroom(root.table("waitingroom")),
        evacuate=_parse_evacuate(root.table("evacuate"), profile),
        evacuate_aws=_parse_evacuate_aws(root.table("evacuate_aws")),
        aws=_parse_aws(root.table("aws")),
        redis=_parse_redis_access(root.table("redis")),
    )
    if root.has("regions"):
        config = dataclasses.replace(config, regions=_parse_regions(root, config))
    root.done()
    _validate(config)
    return config


def _parse_control_plane(t: _Reader, mode: str) -> ControlPlaneConfig:
    d = ControlPlaneConfig()
    urls = t.strings("urls", d.urls)
    for url in urls:
        if not re.fullmatch(r"https?://[^/\s]+/?", url):
            raise ConfigError(t.key("urls"), f"{url!r} is not a URL like 'https://cp.example:9000'")
    state_url = t.text("state_redis_url", "", empty_ok=True)
    if state_url:
        _redis_url(t, "state_redis_url", state_url)
        if mode != "external":
            raise ConfigError(t.key("state_redis_url"), "is for external mode only")
    cp = ControlPlaneConfig(
        urls=tuple(u.rstrip("/") for u in urls),
        state_redis_url=state_url,
        lease_ttl=t.seconds("lease_ttl", d.lease_ttl),
        address=_address(t, "address", d.address),
        port=t.integer("port", d.port, maximum=65535),
        dns_port=t.integer("dns_port", d.dns_port, maximum=65535),
        dns_metrics_port=t.integer("dns_metrics_port", d.dns_metrics_port, maximum=65535),
        max_stream_readers=t.integer("max_stream_readers", d.max_stream_readers, maximum=10_000),
        login_code_ttl=t.seconds("login_code_ttl", d.login_code_ttl),
        session_ttl=t.seconds("session_ttl", d.session_ttl),
        ingest_max_skew=t.seconds("ingest_max_skew", d.ingest_max_skew),
    )
    t.done()
    return cp


def _parse_redis_access(t: _Reader) -> RedisAccessConfig:
    access = RedisAccessConfig(**_scalars(t, RedisAccessConfig()))
    if bool(access.cert_file) != bool(access.key_file):
        raise ConfigError(t.key("cert_file"), "cert_file and key_file go together (mutual TLS)")
    return access


def _redis_url(t: _Reader, name: str, url: str) -> tuple[str, int, bool]:
    """(host, port, tls) of a ``redis://`` or ``rediss://`` URL; ConfigError otherwise."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise ConfigError(t.key(name), f"{url!r} is not a URL: {exc}") from None
    if parts.scheme not in ("redis", "rediss") or not parts.hostname:
        raise ConfigError(t.key(name), f"{url!r}: expected redis://HOST:PORT or rediss://HOST:PORT")
    if parts.username or parts.password:
        raise ConfigError(
            t.key(name),
            "no credentials in the URL (it shows in `config show` and logs): set "
            "[redis] *_user and *_password_file",
        )
    if parts.path not in ("", "/", "/0") or parts.query:
        raise ConfigError(t.key(name), f"{url!r}: rideout uses database 0 and no options")
    return parts.hostname, port or 6379, parts.scheme == "rediss"


def _parse_region_redis(r: _Reader, access: RedisAccessConfig, mode: str) -> RedisConfig:
    if not r.has("url"):
        redis = RedisConfig(
            address=_address(r, "address", ""), port=r.integer("port", 6379, maximum=65535)
        )
        for name in ("ca_file", "cert_file", "key_file"):
            if r.has(name):
                raise ConfigError(r.key(name), "TLS needs a rediss:// url")
        r.done()
        return redis
    if mode != "external":
        raise ConfigError(r.key("url"), 'is for external mode (mode = "external") only')
    url = r.text("url", "")
    host, port, tls = _redis_url(r, "url", url)
    names = ("ca_file", "cert_file", "key_file")
    own = [name for name in names if r.has(name)]
    files = {name: r.text(name, getattr(access, name), empty_ok=True) for name in names}
    if not tls and any(files[name] for name in own):
        raise ConfigError(r.key(own[0]), "TLS files are set but the URL is redis://: use rediss://")
    if bool(files["cert_file"]) != bool(files["key_file"]):
        raise ConfigError(r.key("cert_file"), "cert_file and key_file go together (mutual TLS)")
    r.done()
    return RedisConfig(
        address=host, port=port, url=url,
        tls=RedisTLS(check_hostname=access.check_hostname, **files) if tls else None,
    )  # fmt: skip


def _scalars(t: _Reader, base: Any) -> dict[str, Any]:
    """Read every field of the dataclass `base` by the type of its value in `base`."""
    values: dict[str, Any] = {}
    for f in fields(base):
        default = getattr(base, f.name)
        if isinstance(default, bool):
            values[f.name] = t.flag(f.name, default)
        elif isinstance(default, int):
            minimum = 0 if f.metadata.get("zero_ok", False) else 1
            values[f.name] = t.integer(f.name, default, minimum=minimum)
        elif isinstance(default, float) and f.metadata.get("unitless"):
            values[f.name] = t.positive(f.name, default)
        elif isinstance(default, float):
            values[f.name] = t.seconds(f.name, default, zero_ok=f.metadata.get("zero_ok", False))
        elif isinstance(default, str):
            values[f.name] = t.text(f.name, default, empty_ok=default == "")
        else:
            values[f.name] = t.strings(f.name, default)
    t.done()
    return values


def _parse_auth(t: _Reader, mode: str) -> AuthConfig:
    # Demo tokens are for `rideout up`'s local demo: on by default there only.
    auth = AuthConfig(**_scalars(t, AuthConfig(demo_tokens=mode == "local")))
    if auth.token_ttl > auth.max_token_ttl:
        raise ConfigError(
            t.key("token_ttl"), f"must be at most max_token_ttl ({auth.max_token_ttl:g} s)"
        )
    for origin in auth.allowed_origins:
        if not re.fullmatch(r"https?://[^/\s]+", origin) and origin != "*":
            raise ConfigError(
                t.key("allowed_origins"),
                f"{origin!r} is not an origin like 'https://shop.example:443' (or '*')",
            )
    return auth


def _parse_realtime(t: _Reader) -> RealtimeConfig:
    realtime = RealtimeConfig(**_scalars(t, RealtimeConfig()))
    if realtime.max_message_size < 64:
        raise ConfigError(t.key("max_message_size"), "must be at least 64 bytes")
    if realtime.max_bid < realtime.min_bid:
        raise ConfigError(t.key("max_bid"), "must be at least min_bid")
    if realtime.workers > 64:
        raise ConfigError(t.key("workers"), "at most 64 workers per zone")
    if realtime.reserved_connections >= realtime.max_connections:
        raise ConfigError(t.key("reserved_connections"), "must be less than max_connections")
    return realtime


def _parse_waitingroom(t: _Reader) -> WaitingRoomConfig:
    room = WaitingRoomConfig(**_scalars(t, WaitingRoomConfig()))
    if room.inlet not in ("none", "max_size", "periodic"):
        raise ConfigError(
            t.key("inlet"), f"must be 'none', 'max_size' or 'periodic', got {room.inlet!r}"
        )
    for event_id in room.events:
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}", event_id):
            raise ConfigError(
                t.key("events"), f"{event_id!r} is not an event id (1 to 64 letters, digits, _ . -)"
            )
    if room.token_algorithm not in ("EdDSA", "ES256", "RS256"):
        raise ConfigError(
            t.key("token_algorithm"), f"must be EdDSA, ES256 or RS256, got {room.token_algorithm!r}"
        )
    for entry in room.oidc_clients:
        parts = entry.split()
        if len(parts) < 2 or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}", parts[0]):
            raise ConfigError(
                t.key("oidc_clients"), f"{entry!r} is not 'EVENT_ID REDIRECT_URI [URI ...]'"
            )
        for uri in parts[1:]:
            if not re.fullmatch(r"https?://[^/\s#]+(/[^\s#]*)?", uri):
                raise ConfigError(
                    t.key("oidc_clients"), f"{uri!r} is not an absolute http(s) URI without '#'"
                )
    registered = room.oidc_registrations()
    if len(registered) != len(room.oidc_clients):
        raise ConfigError(t.key("oidc_clients"), "one entry per event")
    for event_id in room.oidc_public_clients:
        if event_id not in registered:
            raise ConfigError(t.key("oidc_public_clients"), f"{event_id!r} is not in oidc_clients")
    if room.max_body < 256:
        raise ConfigError(t.key("max_body"), "must be at least 256 bytes")
    if len(room.inlet_alarm) > 1 or not all(
        re.fullmatch(r"[A-Za-z0-9_.:/-]{1,255}", name) for name in room.inlet_alarm
    ):
        raise ConfigError(t.key("inlet_alarm"), "at most one alarm name (letters, digits, _.:/-)")
    return room


def _parse_failover(t: _Reader, profile: str) -> FailoverConfig:
    base = dataclasses.replace(FailoverConfig(), **FAILOVER_PROFILES[profile])
    failover = FailoverConfig(**_scalars(t, base))
    if failover.replication not in ("async", "sync"):
        raise ConfigError(
            t.key("replication"), f"must be 'async' or 'sync', got {failover.replication!r}"
        )
    if failover.replica_down not in ("reject", "degrade"):
        raise ConfigError(
            t.key("replica_down"), f"must be 'reject' or 'degrade', got {failover.replica_down!r}"
        )
    if failover.damping_suppress < failover.damping_reuse:
        raise ConfigError(t.key("damping_suppress"), "must be at least damping_reuse")
    # The hold is bounded by the ceiling reuse * 2^(max_hold / half_life): below
    # suppress, no move could ever hold a failback.
    shortest = failover.damping_half_life * math.log2(
        failover.damping_suppress / failover.damping_reuse
    )
    if failover.flap_damping and failover.damping_max_hold <= shortest:
        raise ConfigError(
            t.key("damping_max_hold"),
            f"must be longer than {shortest:g} s (damping_half_life * "
            "log2(damping_suppress / damping_reuse)), or no failback is ever held",
        )
    return failover


def _parse_evacuate(t: _Reader, profile: str) -> EvacuateConfig:
    base = dataclasses.replace(EvacuateConfig(), **EVACUATE_PROFILES[profile])
    return EvacuateConfig(**_scalars(t, base))


_EXPIRES_IN = re.compile(r"([1-9][0-9]*)(m|h)")


def _parse_evacuate_aws(t: _Reader) -> EvacuateAwsConfig:
    # Its strings may be "" ("not set", as `config show` writes them): read before the rest.
    texts: dict[str, str] = {}
    for f in fields(EvacuateAwsConfig):
        if isinstance(f.default, str) and t.has(f.name):
            value = t.raw(f.name)
            if not isinstance(value, str):
                raise ConfigError(t.key(f.name), f"expected a string, got {_kind(value)}")
            texts[f.name] = value.strip()
    aws = EvacuateAwsConfig(**{**_scalars(t, EvacuateAwsConfig()), **texts})
    if aws.max_attempts > 20:
        raise ConfigError(t.key("max_attempts"), f"must be at most 20, got {aws.max_attempts}")
    if not aws.table:
        raise ConfigError(t.key("table"), "expected a DynamoDB table name")
    found = _EXPIRES_IN.fullmatch(aws.zonal_shift_expires_in)
    if not found or int(found[1]) * (60 if found[2] == "h" else 1) > 72 * 60:
        raise ConfigError(
            t.key("zonal_shift_expires_in"),
            f"expected minutes or hours up to 72h (30m, 12h), got {aws.zonal_shift_expires_in!r}",
        )
    if bool(aws.eks_cluster) != bool(aws.eks_server):
        raise ConfigError(t.key("eks_server"), "eks_cluster and eks_server go together")
    for name in ("endpoint_url", "eks_server"):
        url = getattr(aws, name)
        if url and not re.fullmatch(r"https?://[^/\s]+(/\S*)?", url):
            raise ConfigError(t.key(name), f"expected an http(s):// URL, got {url!r}")
        if url:
            try:
                secure_url(name, url)
            except InvalidArgument as exc:
                raise ConfigError(t.key(name), str(exc).removeprefix(f"{name} ")) from None
    return aws


def _parse_aws(t: _Reader) -> AwsConfig:
    d = AwsConfig()
    regions_table = t.table("regions")
    tags_table = t.table("tags")
    aws = AwsConfig(
        deployment=t.text("deployment", d.deployment),
        hosted_zone_id=t.optional_text("hosted_zone_id"),
        record_type=t.text("record_type", d.record_type),
        alarm_region=t.optional_text("alarm_region"),
        period=t.integer("period", d.period, maximum=86400),
        insufficient_data_health=t.text("insufficient_data_health", d.insufficient_data_health),
        publish_metrics=t.flag("publish_metrics", d.publish_metrics),
        global_datastore=t.optional_text("global_datastore"),
        tags=tuple((k, tags_table.text(k, "")) for k in tags_table.names()),
        regions=tuple(
            _parse_aws_region(regions_table.table(name), name) for name in regions_table.names()
        ),
    )
    t.done()
    if not _NAME.match(aws.deployment):
        raise ConfigError(
            t.key("deployment"), f"expected a name like 'auction-prod', got {aws.deployment!r}"
        )
    if aws.hosted_zone_id and not re.fullmatch(
        r"(/hostedzone/)?[A-Z0-9]{1,32}", aws.hosted_zone_id
    ):
        raise ConfigError(
            t.key("hosted_zone_id"), f"{aws.hosted_zone_id!r} is not a Route 53 hosted zone id"
        )
    if aws.record_type not in ("A", "alias"):
        raise ConfigError(t.key("record_type"), f"must be 'A' or 'alias', got {aws.record_type!r}")
    if aws.alarm_region and not _AWS_REGION.match(aws.alarm_region):
        raise ConfigError(t.key("alarm_region"), f"{aws.alarm_region!r} is not an AWS region name")
    if aws.period not in (10, 30) and aws.period % 60:
        raise ConfigError(
            t.key("period"), f"must be 10, 30 or a multiple of 60 (CloudWatch), got {aws.period}"
        )
    if aws.insufficient_data_health not in ("Healthy", "Unhealthy", "LastKnownStatus"):
        raise ConfigError(
            t.key("insufficient_data_health"),
            f"must be 'Healthy', 'Unhealthy' or 'LastKnownStatus', got {aws.insufficient_data_health!r}",
        )
    if aws.global_datastore and not _AWS_ID.match(aws.global_datastore):
        raise ConfigError(
            t.key("global_datastore"), f"{aws.global_datastore!r} is not an ElastiCache id"
        )
    for key, _ in aws.tags:
        if key.startswith(("aws:", "rideout:")):
            raise ConfigError(f"{t.key('tags')}.{key}", "tag keys aws:* and rideout:* are reserved")
    return aws


def _parse_aws_region(t: _Reader, name: str) -> AwsRegionConfig:
    region = AwsRegionConfig(
        name=name,
        aws_region=t.text("aws_region", name),
        addresses=t.strings("addresses", ()),
        **{
            key: t.optional_text(key)
            for key in (
                "alias_dns_name",
                "alias_hosted_zone_id",
                "alarm_name",
                "replication_group",
                "cache_subnet_group",
            )
        },
    )
    t.done()
    if not _AWS_REGION.match(region.aws_region):
        raise ConfigError(t.key("aws_region"), f"{region.aws_region!r} is not an AWS region name")
    for address in region.addresses:
        try:
            ipaddress.IPv4Address(address)
        except ValueError:
            raise ConfigError(t.key("addresses"), f"{address!r} is not an IPv4 address") from None
    for key in ("replication_group", "cache_subnet_group"):
        value = getattr(region, key)
        if value and not _AWS_ID.match(value):
            raise ConfigError(t.key(key), f"{value!r} is not an ElastiCache id")
    return region


def _validate_aws(config: Config) -> None:
    aws = config.aws
    known = {r.name for r in config.regions}
    for region in aws.regions:
        if region.name not in known:
            raise ConfigError(
                f"aws.regions.{region.name}", f"no such region (known: {', '.join(sorted(known))})"
            )
    if aws.hosted_zone_id:
        for r in config.regions:
            mapped = aws.region(r.name)
            key = f"aws.regions.{r.name}"
            if aws.record_type == "A" and not mapped.addresses:
                raise ConfigError(
                    f"{key}.addresses", "record_type 'A' needs the region's addresses"
                )
            if aws.record_type == "alias" and not (
                mapped.alias_dns_name and mapped.alias_hosted_zone_id
            ):
                raise ConfigError(
                    f"{key}.alias_dns_name",
                    "record_type 'alias' needs alias_dns_name and alias_hosted_zone_id",
                )
    if aws.global_datastore:
        for r in config.regions:
            if not aws.region(r.name).replication_group:
                raise ConfigError(
                    f"aws.regions.{r.name}.replication_group",
                    "global_datastore needs each region's replication group id",
                )


def _parse_timing(t: _Reader, base: Timing) -> Timing:
    timing = Timing(**_scalars(t, base))
    if timing.heartbeat_timeout <= timing.heartbeat_interval:
        raise ConfigError(t.key("heartbeat_timeout"), "must be longer than heartbeat_interval")
    if timing.canary_timeout >= timing.canary_interval:
        raise ConfigError(t.key("canary_timeout"), "must be shorter than canary_interval")
    if timing.backoff_cap < timing.backoff_base:
        raise ConfigError(t.key("backoff_cap"), "must be at least backoff_base")
    return timing


def _address(t: _Reader, name: str, default: str) -> str:
    value = t.text(name, default)
    try:
        ipaddress.ip_address(value)
    except ValueError:
        raise ConfigError(t.key(name), f"{value!r} is not an IP address") from None
    return value


def _parse_regions(root: _Reader, config: Config) -> tuple[RegionConfig, ...]:
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
        redis = _parse_region_redis(r, config.redis, config.mode)
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


def _validate(config: Config) -> None:
    roles = [r.role for r in config.regions]
    if roles.count("primary") != 1 or roles.count("secondary") != 1 or len(roles) != 2:
        raise ConfigError(
            "regions", f"need exactly one primary and one secondary region, got {roles}"
        )
    names: dict[str, str] = {}
    endpoints: dict[tuple[str, int], str] = {}

    def claim_name(name: str, key: str) -> None:
        if name in names:
            raise ConfigError(key, f"name {name!r} is already used by {names[name]}")
        names[name] = key

    def claim(address: str, port: int, key: str) -> None:
        if config.mode == "local" and ipaddress.ip_address(address) not in _LOOPBACK:
            raise ConfigError(key, f"{address} is outside 127.0.0.0/8, which local mode requires")
        if (address, port) in endpoints:
            raise ConfigError(
                key, f"{address}:{port} is already used by {endpoints[(address, port)]}"
            )
        endpoints[(address, port)] = key

    cp = config.control_plane
    if (
        config.mode == "external"
        and not cp.urls
        and ipaddress.ip_address(cp.address).is_unspecified
    ):
        raise ConfigError(
            "control_plane.urls",
            f"the control plane listens on {cp.address}: set the URLs canaries and app "
            "servers reach it at",
        )
    claim(cp.address, cp.port, "control_plane.address")
    claim(cp.address, cp.dns_port, "control_plane.dns_port")
    claim(cp.address, cp.dns_metrics_port, "control_plane.dns_metrics_port")
    for i, region in enumerate(config.regions):
        claim_name(region.name, f"regions[{i}].name")
        claim(region.redis.address, region.redis.port, f"regions[{i}].redis.address")
        if region.replica is not None:
            claim(
                region.replica.address,
                region.replica.port,
                f"regions[{i}].redis.replica.address",
            )
        for j, zone in enumerate(region.zones):
            claim_name(zone.name, f"regions[{i}].zones[{j}].name")
            claim(zone.address, config.app_port, f"regions[{i}].zones[{j}].address")
    _validate_aws(config)


# --------------------------------------------------------------------------- output


def config_to_dict(config: Config) -> dict[str, Any]:
    """The config as TOML-shaped data; `parse_config` of it gives the same Config."""
    return {
        "app_domain": config.app_domain,
        "mode": config.mode,
        "data_dir": str(config.data_dir),
        "app_port": config.app_port,
        "profile": config.profile,
        "control_plane": _section(config.control_plane),
        "timing": _section(config.timing),
        "auth": _section(config.auth),
        "realtime": _section(config.realtime),
        "failover": _section(config.failover),
        "waitingroom": _section(config.waitingroom),
        "evacuate": _section(config.evacuate),
        "evacuate_aws": _section(config.evacuate_aws),
        "aws": _aws_section(config.aws),
        "redis": _section(config.redis),
        **({"keys_dir": str(config.secrets_dir)} if config.secrets_dir is not None else {}),
        "regions": [
            {
                "name": r.name,
                "role": r.role,
                "redis": {
                    **_region_redis(r.redis),
                    **(
                        {"replica": {"address": r.replica.address, "port": r.replica.port}}
                        if r.replica is not None
                        else {}
                    ),
                },
                "zones": [{"name": z.name, "address": z.address} for z in r.zones],
            }
            for r in config.regions
        ],
    }


def _aws_section(aws: AwsConfig) -> dict[str, Any]:
    data = {f.name: getattr(aws, f.name) for f in fields(aws) if f.name not in ("tags", "regions")}
    data["tags"] = dict(aws.tags)
    data["regions"] = {
        r.name: {
            f.name: list(v) if isinstance(v := getattr(r, f.name), tuple) else v
            for f in fields(r)
            if f.name != "name"
        }
        for r in aws.regions
    }
    return data


def _region_redis(redis: RedisConfig) -> dict[str, Any]:
    if not redis.url:
        return {"address": redis.address, "port": redis.port}
    out: dict[str, Any] = {"url": redis.url}
    if redis.tls is not None:
        out.update(ca_file=redis.tls.ca_file, cert_file=redis.tls.cert_file,
                   key_file=redis.tls.key_file)  # fmt: skip
    return out


def _section(value: Any) -> dict[str, Any]:
    return {
        f.name: list(v) if isinstance(v := getattr(value, f.name), tuple) else v
        for f in fields(value)
    }


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        escaped = value.replace("\\", "\\\\").replace('"', '\\"')
        return f'"{escaped}"'
    if isinstance(value, Mapping):
        return "{ " + ", ".join(f"{k} = {_toml_value(v)}" for k, v in value.items()) + " }"
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"cannot write {type(value).__name__} as TOML")


def dump_toml(config: Config) -> str:
    """The effective config as a `rideout.toml` that loads back to the same Config."""
    data = config_to_dict(config)
    lines = []
    for key, value in data.items():
        if not isinstance(value, dict | list):
            lines.append(f"{key} = {_toml_value(value)}")
    sections = ("control_plane", "timing", "auth", "realtime", "failover", "waitingroom")
    for section in (*sections, "evacuate", "evacuate_aws", "redis"):
        lines.append(f"\n[{section}]")
        lines.extend(f"{k} = {_toml_value(v)}" for k, v in data[section].items())
    aws = data["aws"]
    lines.append("\n[aws]")
    lines.extend(f"{k} = {_toml_value(v)}" for k, v in aws.items() if k not in ("tags", "regions"))
    lines.append(f"tags = {_toml_value(aws['tags'])}")
    for name, region in aws["regions"].items():
        lines.append(f"\n[aws.regions.{name}]")
        lines.extend(f"{k} = {_toml_value(v)}" for k, v in region.items())
    for region in data["regions"]:
        lines.append("\n[[regions]]")
        lines.append(f"name = {_toml_value(region['name'])}")
        lines.append(f"role = {_toml_value(region['role'])}")
        lines.append(f"redis = {_toml_value(region['redis'])}")
        lines.append("zones = [")
        lines.extend(f"  {_toml_value(z)}," for z in region["zones"])
        lines.append("]")
    return "\n".join(lines) + "\n"
