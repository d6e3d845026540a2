"""The deployment's own settings: timing, control plane, auth, realtime, failover,
waiting room and evacuation, each a frozen dataclass with its parser."""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from rideout._http import KEEPALIVE_EXPIRY
from rideout.config._reader import ConfigError, _address, _Reader, _scalars
from rideout.config._services import _redis_url

__all__ = [
    "CANARY_PLACEMENTS",
    "EVACUATE_PROFILES",
    "FAILOVER_PROFILES",
    "PROFILES",
    "AuthConfig",
    "ControlPlaneConfig",
    "EvacuateConfig",
    "FailoverConfig",
    "RealtimeConfig",
    "Timing",
    "WaitingRoomConfig",
]


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
    # Busy is not down: a probe answered after canary_timeout but within this much more,
    # by a zone that says it is shedding load, counts as healthy (and busy). 0: off.
    # canary_timeout + canary_busy_grace must end before the next round.
    canary_busy_grace: float = field(default=0.0, metadata={"zero_ok": True})


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
        canary_busy_grace=20.0,
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
        # What is left of the round once the probe's timeout is out and its datapoint
        # must still be pushed: seed's 20 s of 50 here is 0.05 s of 0.1.
        canary_busy_grace=0.05,
    ),
}


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
    # Demo identities (names claimed through the demo sign-in) at once, per region: in all,
    # and per client address (0: no per-address cap, behind a proxy). A new name past
    # either gets 429 with Retry-After; names already held are renewed.
    max_demo_identities: int = 1000
    max_demo_identities_per_address: int = field(default=16, metadata={"zero_ok": True})
    # The waiting-room events whose access tokens /ws accepts besides its own (empty:
    # none; rideout.waitingroom.authorizer, docs/waiting-room.md).
    room_events: tuple[str, ...] = ("auction",)
    # Seconds /ws trusts a session status it read from the room's store (bounded staleness).
    room_session_ttl: float = field(default=1.0, metadata={"zero_ok": True})
    # Seconds a resumption ticket lives (rideout.auth.resume): each app server hands its
    # connections one on request, a reconnect presents it instead of the access token
    # (an HMAC checked in microseconds instead of an Ed25519 signature). Never past the
    # token's own exp. 0: no tickets are issued or accepted.
    resume_ttl: float = field(default=300.0, metadata={"zero_ok": True})


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
    # WebSockets of demo identities (tokens of the demo sign-in), per process: their
    # share, which ordinary users always keep apart from theirs (503 demo_full past it);
    # at most half of max_connections - reserved_connections.
    max_demo_connections: int = 256
    # Cost budget per user (`sub`), shared by that user's connections in the worker: a
    # getState costs 1 plus the updates it replays.
    replay_rate: float = 200.0  # per second, sustained
    replay_burst: int = 1000  # at once (one full replay of history_size updates)
    max_rooms_per_connection: int = 64  # rooms one connection may watch (the hub follows each)
    # Admission control for replays (a getState the server can replay from), per process:
    # at most `max_replays` run at once, `replay_queue` more wait in order for up to
    # `replay_wait` seconds, the rest get error/throttled with a retry hint at once
    # (realtime.admission): a zone's replays cannot starve its canary, whoever asks.
    max_replays: int = 1
    replay_queue: int = field(default=32, metadata={"zero_ok": True})
    replay_wait: float = field(default=1.0, metadata={"zero_ok": True})
    # Refuse part of the new WebSockets (503 overloaded; never the canary's) and of the
    # bids (error/unavailable) while the process's event loop runs late: from a quarter
    # of timing.canary_timeout, all of them from half of it (realtime.limits.LoadShedder).
    shed_load: bool = True
    # getState's identical concurrent reads (a room, from one position) share one Redis
    # read, and a replay that waits for one needs no place of `max_replays`
    # (rideout._singleflight; docs/realtime-api.md, "Admission").
    coalesce_reads: bool = True
    history_size: int = 1000  # updates kept per room for replay
    history_ttl: float = 3600.0  # seconds of updates kept per room for replay
    min_bid: int = 1
    max_bid: int = 1_000_000_000
    min_increment: int = 1


CANARY_PLACEMENTS: Final = ("outside", "in-region")
"""Where a region's canary runs: outside the region it probes, or in it (the seed's)."""


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
    # Where each region's canary runs. "outside": not in the region it probes (beside the
    # control plane here; elsewhere, in another region), so a region that dies fails its
    # probes and alarms after `failover_datapoints` periods. "in-region": beside the
    # region's servers, as the seed's canary Lambda, so it dies with them and a dead
    # region alarms only by silence, after N + 2 periods (CloudWatch's missing data).
    canary_placement: str = "outside"
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
    # For this long after the writer moves between regions, autoshift evacuates no zone:
    # the clients are arriving as one herd, and a zone it slows is not a failed zone
    # (evacuating it would move the herd onto the region's other zone, and back).
    autoshift_holddown: float = field(default=15.0, metadata={"zero_ok": True})


# The [evacuate] settings that scale with the timing profile.
EVACUATE_PROFILES: Mapping[str, Mapping[str, Any]] = {
    "seed": {
        "drain_seconds": 60.0,
        "autoshift_expiry": 3600.0,
        "autoshift_recover_after": 600.0,
        "autoshift_holddown": 300.0,
    },
    "fast": {
        "drain_seconds": 2.0,
        "autoshift_expiry": 30.0,
        "autoshift_recover_after": 5.0,
        "autoshift_holddown": 15.0,
    },
}


def _parse_timing(t: _Reader, base: Timing) -> Timing:
    timing = Timing(**_scalars(t, base))
    if timing.heartbeat_timeout <= timing.heartbeat_interval:
        raise ConfigError(t.key("heartbeat_timeout"), "must be longer than heartbeat_interval")
    if timing.canary_timeout >= timing.canary_interval:
        raise ConfigError(t.key("canary_timeout"), "must be shorter than canary_interval")
    if timing.canary_timeout + timing.canary_busy_grace >= timing.canary_interval:
        raise ConfigError(
            t.key("canary_busy_grace"),
            f"canary_timeout + canary_busy_grace ({timing.canary_timeout:g} + "
            f"{timing.canary_busy_grace:g} s) must be shorter than canary_interval "
            f"({timing.canary_interval:g} s): a late answer must come before the next round",
        )
    if timing.backoff_cap < timing.backoff_base:
        raise ConfigError(t.key("backoff_cap"), "must be at least backoff_base")
    if timing.handshake_timeout < 2 * KEEPALIVE_EXPIRY:
        raise ConfigError(
            t.key("handshake_timeout"),
            f"must be at least {2 * KEEPALIVE_EXPIRY:g} s: it is also how long a server keeps "
            f"an idle kept-alive connection, and rideout's own clients reuse one for up to "
            f"{KEEPALIVE_EXPIRY:g} s (a server that closes it sooner races their next request)",
        )
    return timing


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
    if failover.canary_placement not in CANARY_PLACEMENTS:
        raise ConfigError(
            t.key("canary_placement"),
            f"must be 'outside' or 'in-region', got {failover.canary_placement!r}",
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
