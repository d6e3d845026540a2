"""Starting the local deployment's Redis servers: their users and ACL file, the server
binary, each server's role, and the first writer's epoch.

Only a first start on no data takes its configured role at once. A restart, or a start
on data kept from before, comes back **fenced** (a read-only replica of itself, which no
replica can sync from): what it holds may be less than the others hold, and which Redis
is the writer is the failover controller's to choose, after comparing what each holds.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path

from redis.exceptions import RedisError

from rideout._process import LineSink
from rideout.cluster.children import RedisChild
from rideout.cluster.errors import ClusterError
from rideout.config import Config, RegionConfig
from rideout.store.acl import (
    RedisRole,
    ServerAuth,
    StoreAuthError,
    credentials_for,
    prepare_server_auth,
)
from rideout.store.client import probe_client
from rideout.store.embedded import (
    EmbeddedRedis,
    EmbeddedRedisError,
    RedisSpec,
    find_redis_server,
    server_info,
)
from rideout.store.functions import ensure_library
from rideout.store.replication import ensure_epoch

__all__ = ["RedisLauncher"]


class RedisLauncher:
    """Starts a :class:`RedisChild`'s server for the deployment of `config`; `say` tells
    the supervisor's log what it does, `sink` takes the servers' own output."""

    def __init__(
        self, config: Config, *, say: Callable[[str], None], sink: LineSink | None = None
    ) -> None:
        self.config = config
        self._say = say
        self._sink = sink
        self._auth: ServerAuth | None = None
        self._binary: Path | None = None

    def prepare(self) -> None:
        """Make the Redis users' credentials (once), their ACL file and masterauth, and
        find the server binary; ClusterError if either cannot be done."""
        try:
            self._auth = prepare_server_auth(self.config.keys_dir)
            self._binary = find_redis_server(self.config.redis_server)
        except (StoreAuthError, EmbeddedRedisError) as exc:
            raise ClusterError(str(exc)) from exc
        self._say(f"redis servers: {server_info(self._binary).label} ({self._binary})")

    async def start(
        self,
        child: RedisChild,
        *,
        started: bool,
        timeout: float,
        after_start: Callable[[str], Awaitable[None]] | None = None,
    ) -> str | None:
        """Start `child`'s server and wait until it answers (within `timeout` seconds);
        `started`: the deployment is up, so the controller owns roles and epochs.
        `after_start` is awaited with the region's name once a main Redis restarted.
        What restore should report, if anything."""
        region = child.region
        assert region is not None
        primary = self.config.primary
        node = child.node
        replica_of = None if region is primary else (primary.redis.address, primary.redis.port)
        data_dir = self.config.region_data_dir(region.name)
        if child.in_region:
            # It follows its region's main Redis (chained when that one is a replica
            # itself); the controller re-points it when the writer moves elsewhere.
            replica_of = (region.redis.address, region.redis.port)
            data_dir = data_dir / "replica"
        assert self._auth is not None, "prepare() makes the Redis credentials"
        spec = RedisSpec(
            name=child.name,
            address=node.address,
            port=node.port,
            data_dir=data_dir,
            log_file=self.config.logs_dir / f"{child.name}.log",
            replica_of=replica_of,
            auth=self._auth,
        )
        # Only a first start on no data takes its configured role at once. A restart, or
        # a start on data kept from before, comes back fenced: what it holds may be less
        # than the others hold (a lost or truncated AOF, fsync's last second), and as a
        # writer it would be their source of a full sync. The controller compares the
        # datasets and chooses (failover.controller, "restarted Redis").
        fenced = started or spec.has_data
        server = EmbeddedRedis(replace(spec, fenced=fenced), sink=self._sink, binary=self._binary)
        child.server = server
        self._say(
            f"starting {child.name} on {node.address}:{node.port}"
            + (" (fenced until the controller chooses its role)" if fenced else "")
        )
        await server.start(timeout=timeout)
        if started and after_start is not None and not child.in_region:
            await after_start(region.name)
        if fenced:
            return None  # its epoch is in its data, or it is the controller's to give
        return await self._first_epoch(region, started) if replica_of is None else None

    async def _first_epoch(self, region: RegionConfig, started: bool) -> str | None:
        """Give a new writer epoch 1 (SET NX: an existing epoch is kept).

        At start, before any controller runs, a failure stops ``up``. Later (a restart,
        ``chaos restore``) the controller owns roles and epochs and may have demoted this
        Redis already, or be syncing it: the step is best effort, and what it could not
        do is returned for ``restore`` to report, never raised.
        """
        controller = credentials_for(self.config, RedisRole.CONTROLLER)
        client = probe_client(region.redis.address, region.redis.port, credentials=controller)
        try:
            if await ensure_epoch(client) is None:
                return "epoch left to the controller (a replica by now)"
            await ensure_library(client)  # the app's functions (7.0+), before any app server
        except (RedisError, OSError, ValueError) as exc:
            if not started:
                raise ClusterError(
                    f"cannot set the first epoch on redis-{region.name}: {exc}"
                ) from exc
            return f"epoch left to the controller ({type(exc).__name__}: {exc})"
        finally:
            await client.aclose()
        return None
