"""What runs where, and is it healthy: one view for `rideout status` and the control plane.

Each process's entry has its ``pid`` (None while it does not run), whether it is
``alive``, its ``restarts`` by the supervisor, its ``supervision`` state (see
:data:`rideout.cluster.runstate.PROCESS_STATES`) and a ``note`` saying why it is not
running, if it is not.

:class:`LocalInventory` hands that view to the control plane's ``GET /status`` in local
mode (its :class:`~rideout.controlplane.ports.Inventory` port).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx

from rideout import _http, routes
from rideout._process import pid_alive
from rideout.client.resolve import NameserverResolver, ResolutionError
from rideout.cluster.runstate import ProcessRecord, RunState, read_lock_pid
from rideout.config import Config
from rideout.routes import control_plane_url, dns_metrics_url, zone_url
from rideout.store.acl import CredentialsUnavailable, RedisRole, credentials_for
from rideout.store.client import probe_client
from rideout.store.replication import ReplicationStatus, read_epoch, replication_status

__all__ = ["DEFAULT_PROBE_TIMEOUT", "LEFTOVER_PROBE_TIMEOUT", "LocalInventory", "collect_status"]

#: How long each of `rideout status`'s probes waits for its answer, in seconds.
DEFAULT_PROBE_TIMEOUT = 1.0
#: ... when no supervisor runs: the probes look for leftovers, which answer at once on
#: loopback, so `status` need not wait out a name server that is not there.
LEFTOVER_PROBE_TIMEOUT = 0.25


async def _probe_http(client: httpx.AsyncClient, url: str) -> dict[str, Any]:
    try:
        response = await client.get(url)
        body = response.json()
        return {
            "up": response.status_code == 200,
            "status_code": response.status_code,
            "body": body,
        }
    except (httpx.HTTPError, ValueError) as exc:
        return {
            "up": False,
            "error": f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__,
        }


async def _probe_redis(address: str, port: int, config: Config, timeout: float) -> dict[str, Any]:
    try:
        credentials = credentials_for(config, RedisRole.MONITOR)
    except CredentialsUnavailable as exc:
        status = ReplicationStatus(False, "unknown", "n/a", None, None, 0, str(exc))
        return {**status.to_dict(), "epoch": None}
    client = probe_client(address, port, credentials=credentials, timeout=timeout)
    try:
        status = await replication_status(client)
        epoch = await read_epoch(client) if status.reachable else None
        return {**status.to_dict(), "epoch": epoch}
    finally:
        await client.aclose()


async def _probe_dns(config: Config, timeout: float) -> dict[str, Any]:
    cp = config.control_plane
    try:
        resolved = await NameserverResolver(cp.address, cp.dns_port, timeout=timeout).resolve(
            config.app_domain
        )
    except ResolutionError as exc:
        return {"up": False, "error": str(exc)}
    addresses = sorted(resolved.addresses)
    # A region with an evacuated zone answers only some of its addresses.
    region = next(
        (r.name for r in config.regions if set(addresses) <= {z.address for z in r.zones}),
        None,
    )
    return {"up": True, "addresses": list(resolved.addresses), "region": region}


async def collect_status(
    config: Config, *, probe: bool = True, timeout: float | None = None
) -> dict[str, Any]:
    """The deployment as the run files record it, plus live probes when `probe` is set.

    Each probe (Redis, DNS; HTTP half a second more) waits `timeout` seconds for its
    answer (None: :data:`DEFAULT_PROBE_TIMEOUT` while a supervisor runs, else
    :data:`LEFTOVER_PROBE_TIMEOUT`); one that does not come in time is reported with its
    error, as is one refused.
    """
    run = RunState.read(config.run_dir)
    supervisor = read_lock_pid(config.run_dir)
    records: dict[str, ProcessRecord] = (
        {p.name: p for p in run.processes} if run and supervisor else {}
    )

    def pid_of(name: str) -> dict[str, Any]:
        record = records.get(name)
        pid = (record.pid or None) if record else None
        return {
            "pid": pid,
            "alive": bool(pid and pid_alive(pid)),
            "restarts": record.restarts if record else 0,
            "supervision": record.state if record else None,
            "note": record.note if record else None,
        }

    view: dict[str, Any] = {
        "app_domain": config.app_domain,
        "profile": config.profile,
        "data_dir": str(config.data_dir),
        "running": supervisor is not None,
        "supervisor_pid": supervisor,
        "started_at": run.started_at if run and supervisor else None,
        "collected_at": time.time(),
        "control_plane": {
            "name": "control-plane",
            "url": control_plane_url(config),
            **pid_of("control-plane"),
        },
        "dns": {
            "name": "dns",
            "address": f"{config.control_plane.address}:{config.control_plane.dns_port}",
            "metrics": dns_metrics_url(config, routes.METRICS),
            **pid_of("dns"),
        },
        "regions": [],
    }
    for region in config.regions:
        redis_name = f"redis-{region.name}"
        replica: dict[str, Any] = {}
        if region.replica is not None:
            replica["replica"] = {
                "name": f"{redis_name}-replica",
                "address": f"{region.replica.address}:{region.replica.port}",
                **pid_of(f"{redis_name}-replica"),
            }
        view["regions"].append(
            {
                "name": region.name,
                "role": region.role,
                "redis": {
                    "name": redis_name,
                    "address": f"{region.redis.address}:{region.redis.port}",
                    **pid_of(redis_name),
                },
                **replica,
                "canary": {
                    "name": f"canary-{region.name}",
                    "placement": config.failover.canary_placement,
                    **pid_of(f"canary-{region.name}"),
                },
                "zones": [
                    {
                        "name": zone.name,
                        "url": zone_url(config, zone.address),
                        **pid_of(f"app-{zone.name}"),
                    }
                    for zone in region.zones
                ],
            }
        )
    if probe:
        if timeout is None:
            timeout = DEFAULT_PROBE_TIMEOUT if supervisor is not None else LEFTOVER_PROBE_TIMEOUT
        await _add_probes(config, view, timeout=timeout)
    return view


class LocalInventory:
    """The control plane's inventory from the run files of `rideout up` (with probes)."""

    def __init__(self, config: Config) -> None:
        self.config = config

    async def collect(self) -> dict[str, Any]:
        return await collect_status(self.config)


async def _add_probes(config: Config, view: dict[str, Any], *, timeout: float) -> None:
    async with _http.async_client(timeout=timeout + 0.5) as client:
        cp_url = view["control_plane"]["url"]
        jobs: list[tuple[dict[str, Any], str, Any]] = [
            (view["control_plane"], "health", _probe_http(client, cp_url + routes.HEALTH)),
            (view["control_plane"], "summary", _probe_http(client, cp_url + routes.SUMMARY)),
            (view["dns"], "answer", _probe_dns(config, timeout)),
            (view["dns"], "health", _probe_http(client, dns_metrics_url(config, routes.HEALTH))),
        ]
        for region_view, region in zip(view["regions"], config.regions, strict=True):
            jobs.append(
                (
                    region_view["redis"],
                    "state",
                    _probe_redis(region.redis.address, region.redis.port, config, timeout),
                )
            )
            if region.replica is not None:
                jobs.append(
                    (
                        region_view["replica"],
                        "state",
                        _probe_redis(region.replica.address, region.replica.port, config, timeout),
                    )
                )
            for zone_view in region_view["zones"]:
                jobs.append(
                    (zone_view, "health", _probe_http(client, zone_view["url"] + routes.HEALTH))
                )
        results = await asyncio.gather(*(job for _, _, job in jobs))
        for (target, key, _), result in zip(jobs, results, strict=True):
            target[key] = result
    _add_evacuations(view)


def _add_evacuations(view: dict[str, Any]) -> None:
    """Each zone's evacuation (None: it serves), from the control plane's summary."""
    summary = view["control_plane"].get("summary") or {}
    body = summary.get("body") if summary.get("up") else None
    zones = body.get("zones") if isinstance(body, dict) else None
    if not isinstance(zones, list):
        return
    evacuations = {z.get("zone"): z.get("evacuation") for z in zones if isinstance(z, dict)}
    for region_view in view["regions"]:
        for zone_view in region_view["zones"]:
            zone_view["evacuation"] = evacuations.get(zone_view["name"])
