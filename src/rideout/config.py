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

from rideout.errors import InvalidArgument

__all__ = [
    "DEFAULT_CONFIG_FILE",
    "FAILOVER_PROFILES",
    "PROFILES",
    "AuthConfig",
    "Config",
    "ConfigError",
    "ControlPlaneConfig",
    "FailoverConfig",
    "RealtimeConfig",
    "RedisConfig",
    "RegionConfig",
    "Timing",
    "ZoneConfig",
    "dump_toml",
    "load_config",
]

DEFAULT_CONFIG_FILE = "rideout.toml"
ENV_PREFIX = "RIDEOUT_"
# Environment variables that are not configuration keys but belong to rideout.
ENV_NOT_KEYS = frozenset({"RIDEOUT_CONFIG"})

Mode = Literal["local", "external"]
Role = Literal["primary", "secondary"]
_LOOPBACK = ipaddress.ip_network("127.0.0.0/8")
_DNS_LABEL = re.compile(r"^(?!-)[a-z0-9-]{1,63}(?<!-)$")
_NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")


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
class RedisConfig:
    """Where a region's Redis listens (spawned locally in ``local`` mode)."""

    address: str
    port: int


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


# The [failover] settings that scale with the timing profile, as Timing does.
FAILOVER_PROFILES: Mapping[str, Mapping[str, Any]] = {
    "seed": {
        "damping_half_life": 900.0,
        "damping_max_hold": 3600.0,
        "failback_drain_seconds": 60.0,
    },
    "fast": {"damping_half_life": 15.0, "damping_max_hold": 60.0, "failback_drain_seconds": 5.0},
}


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

    @property
    def keys_dir(self) -> Path:
        """The signing key and the admin token, shared by every region's servers."""
        return self.data_dir / "keys"

    def origins(self) -> tuple[str, ...]:
        """Browser origins allowed to connect (see AuthConfig.allowed_origins)."""
        if self.auth.allowed_origins:
            return self.auth.allowed_origins
        port = self.app_port
        own = [f"http://{self.app_domain}:{port}"]
        own += [f"http://{z.address}:{port}" for r in self.regions for z in r.zones]
        cp = self.control_plane
        own.append(f"http://{cp.address}:{cp.port}")
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

    def raw(self, name: str) -> Any:
        return self._table.pop(name)

    def text(self, name: str, default: str) -> str:
        if name not in self._table:
            return default
        value = self._table.pop(name)
        if not isinstance(value, str) or not value:
            raise ConfigError(self.key(name), f"expected a non-empty string, got {_kind(value)}")
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


def _env_overrides(env: Mapping[str, str]) -> tuple[dict[str, Any], dict[str, str]]:
    """Turn RIDEOUT_* variables into a nested dict of strings, and remember their origin."""
    data: dict[str, Any] = {}
    origins: dict[str, str] = {}
    for name, value in env.items():
        if not name.startswith(ENV_PREFIX) or name in ENV_NOT_KEYS:
            continue
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
    return parse_config(_merge(raw, overrides), origins=origins)


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
        regions=_parse_regions(root) if root.has("regions") else defaults.regions,
        control_plane=_parse_control_plane(root.table("control_plane")),
        timing=_parse_timing(root.table("timing"), PROFILES[profile]),
        auth=_parse_auth(root.table("auth"), mode),
        realtime=_parse_realtime(root.table("realtime")),
        failover=_parse_failover(root.table("failover"), profile),
    )
    root.done()
    _validate(config)
    return config


def _parse_control_plane(t: _Reader) -> ControlPlaneConfig:
    d = ControlPlaneConfig()
    cp = ControlPlaneConfig(
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
            values[f.name] = t.text(f.name, default)
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


def _parse_regions(root: _Reader) -> tuple[RegionConfig, ...]:
    items = root.raw("regions")
    if not isinstance(items, list) or not items:
        raise ConfigError("regions", "expected a non-empty list of [[regions]] tables")
    regions = []
    for i, item in enumerate(items):
        t = _Reader(item, f"regions[{i}]", {})
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
        redis = RedisConfig(
            address=_address(r, "address", ""), port=r.integer("port", 6379, maximum=65535)
        )
        replica = None
        if r.has("replica"):
            rr = r.table("replica")
            replica = RedisConfig(
                address=_address(rr, "address", ""),
                port=rr.integer("port", redis.port, maximum=65535),
            )
            rr.done()
        r.done()
        zone_items = t.raw("zones") if t.has("zones") else []
        if not isinstance(zone_items, list) or not zone_items:
            raise ConfigError(t.key("zones"), f"region {name!r} has no zones")
        zones = []
        for j, zone_item in enumerate(zone_items):
            z = _Reader(zone_item, f"regions[{i}].zones[{j}]", {})
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
        "regions": [
            {
                "name": r.name,
                "role": r.role,
                "redis": {
                    "address": r.redis.address,
                    "port": r.redis.port,
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
    for section in ("control_plane", "timing", "auth", "realtime", "failover"):
        lines.append(f"\n[{section}]")
        lines.extend(f"{k} = {_toml_value(v)}" for k, v in data[section].items())
    for region in data["regions"]:
        lines.append("\n[[regions]]")
        lines.append(f"name = {_toml_value(region['name'])}")
        lines.append(f"role = {_toml_value(region['role'])}")
        lines.append(f"redis = {_toml_value(region['redis'])}")
        lines.append("zones = [")
        lines.extend(f"  {_toml_value(z)}," for z in region["zones"])
        lines.append("]")
    return "\n".join(lines) + "\n"
