"""The deployment a drill runs against: its configuration (the running one's, or one of
the drill's own in a temporary data directory), how long its moves may take, the zone
modes the drill sets as a fallback, the room streams it accounts bids against, and how
the report describes it."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import httpx

from rideout import _http, routes
from rideout.auth.admin import load_or_create_admin_token
from rideout.cluster.runstate import EFFECTIVE_CONFIG, read_lock_pid
from rideout.config import FAILOVER_PROFILES, PROFILES, Config, load_config
from rideout.drill.analysis import StreamEntry, parse_stream_entry
from rideout.drill.options import DrillOptions
from rideout.realtime.zone import ZoneMode
from rideout.store.acl import RedisRole, credentials_for
from rideout.store.client import state_client
from rideout.store.keys import room_stream

__all__ = [
    "describe_deployment",
    "drill_config",
    "on_a_deployment",
    "own_config",
    "read_streams",
    "set_zone_mode",
    "timeouts",
]


def drill_config(options: DrillOptions) -> Config:
    """The configuration `options` name (their file, their environment)."""
    env = dict(options.env if options.env is not None else os.environ)
    config = load_config(options.config_path, env=env)
    return config


def own_config(config: Config, options: DrillOptions, data_dir: Path) -> Config:
    """`config` for a deployment of the drill's own in `data_dir`, with the options'
    replication and profile."""
    profile = options.profile or config.profile
    failover = dataclasses.replace(config.failover, replication=options.replication)
    if profile != config.profile:
        failover = dataclasses.replace(failover, **FAILOVER_PROFILES[profile])
    timing = PROFILES[profile] if profile != config.profile else config.timing
    return dataclasses.replace(
        config, data_dir=data_dir, profile=profile, timing=timing, failover=failover
    )


async def set_zone_mode(config: Config, region: str, mode: ZoneMode) -> None:
    """Ask every zone of `region` to serve in `mode` (best effort)."""
    token = load_or_create_admin_token(config.keys_dir)
    async with _http.async_client(timeout=5.0) as http:
        for zone in config.region(region).zones:
            with contextlib.suppress(httpx.HTTPError):
                await http.post(
                    routes.zone_url(config, zone.address, routes.ADMIN_MODE),
                    json={"mode": mode},
                    headers={"Authorization": f"Bearer {token}"},
                )


async def read_streams(config: Config, region: str, rooms: list[str]) -> list[StreamEntry]:
    """Every entry of the `rooms`' streams on `region`'s Redis."""
    redis = config.region(region).redis
    client = state_client(
        redis.address,
        redis.port,
        credentials=credentials_for(config, RedisRole.MONITOR),
        timeout=10.0,
    )
    entries: list[StreamEntry] = []
    try:
        for room in rooms:
            found: Any = await client.xrange(room_stream(room), "-", "+")
            for entry_id, fields in found or []:
                entry = parse_stream_entry(room, str(entry_id), dict(fields or {}))
                if entry is not None:
                    entries.append(entry)
    finally:
        await client.aclose()
    return entries


def timeouts(config: Config, options: DrillOptions) -> tuple[float, float]:
    """Seconds a pass waits for a move of the writer, and for the clients to follow."""
    t = config.timing
    failover = (t.failover_datapoints + 4) * t.canary_interval * 3 + t.dns_ttl + 20
    recovery = options.recovery_timeout or max(30.0, failover + 4 * t.backoff_cap)
    return failover, recovery


def describe_deployment(config: Config, *, own_cluster: bool) -> dict[str, Any]:
    """The report's ``deployment``."""
    return {
        "own_cluster": own_cluster,
        "profile": config.profile,
        "primary": config.primary.name,
        "secondary": config.secondary.name,
        "replication": config.failover.replication,
        "replica_down": config.failover.replica_down,
        "sync_timeout": config.failover.sync_timeout,
        "app_domain": config.app_domain,
    }


_T = TypeVar("_T")


async def on_a_deployment(
    options: DrillOptions,
    profile: str | None,
    say: Callable[[str], None],
    run: Callable[[Config], Awaitable[_T]],
    check: Callable[[Config], None] | None = None,
) -> tuple[_T, dict[str, Any]]:
    """``run`` against the deployment ``options`` name when one is running, else against
    one of the drill's own (``profile``, else the configuration's) in a temporary data
    directory, stopped and removed after; its result and how the report describes the
    deployment. ``check`` refuses the configuration before anything starts."""
    from rideout.cluster.supervisor import LocalCluster

    config = drill_config(options)
    running = read_lock_pid(config.run_dir)
    if running is not None and (config.run_dir / EFFECTIVE_CONFIG).exists():
        config = load_config(config.run_dir / EFFECTIVE_CONFIG, env={})
    if check is not None:
        check(config)
    cluster: LocalCluster | None = None
    tmp: Path | None = None
    try:
        if running is None:
            tmp = Path(tempfile.mkdtemp(prefix="rideout-drill-"))
            chosen = profile or config.profile
            config = dataclasses.replace(config, data_dir=tmp / "data", profile=chosen,
                                         timing=PROFILES[chosen])  # fmt: skip
            say(f"starting a local deployment ({chosen} profile)")
            cluster = LocalCluster(config)
            await cluster.start()
        described = {"own_cluster": running is None, "profile": config.profile,
                     "region": config.primary.name}  # fmt: skip
        return await run(config), described
    finally:
        if cluster is not None:
            say("stopping the local deployment")
            await cluster.stop()
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
