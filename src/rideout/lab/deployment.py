"""What ``rideout lab up`` runs where: a two-region external deployment laid out on a
lab's hosts (pure: it writes no file and starts nothing; :mod:`rideout.lab.run` does).

The hosts, one lab namespace each (docs/lab.md has the table with addresses):

| group | hosts |
|---|---|
| ``us-east-1`` (primary) | ``redis-use1``, ``replica-use1``, ``use1-az1``, ``use1-az2``, ``canary-use1`` |
| ``us-west-2`` (secondary) | ``redis-usw2``, ``replica-usw2``, ``usw2-az1``, ``usw2-az2``, ``canary-usw2`` |
| ``global`` | ``cp-1``, ``cp-2`` (control planes, each serving DNS), ``state-redis`` |

It is docs/external.md's path, every part a process on a host of its own: one
``rideout.toml`` for every host (``mode = "external"``, TLS and ACL users, two control
planes sharing a lease in the state Redis), the Redis servers configured as that page's
step 3 says, and the parts started in its order (writer Redis; the other Redis; the state
Redis; control planes; app servers; canaries).

**The WAN link.** The only traffic between the two regions is Redis replication (an app
server talks to its own region's Redis and to the control planes; a canary to its own
region's zones and to the control planes). Every TCP connection from one region to a
Redis of the other crosses a :class:`~rideout.lab.relay.Link` in the router: one
transparent link per Redis host (:meth:`Lab.intercept
<rideout.lab.netns.Lab.intercept>`), so nobody is given a relay address and the failover
controller's ``REPLICAOF`` and ``FAILOVER TO``, which name each server by its own
address, keep crossing it after any failover. Traffic between ``global`` and a region
(the controller's probes, the canaries' pushes, the app servers' reads of the writer)
crosses the router directly: partitions cut it, the link's latency and loss do not.

Because a replica that connects through the link reaches its master from the router's
address, every server announces its own (``replica-announce-ip``): ``FAILOVER TO`` names
the replica by that address.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from rideout.errors import InvalidArgument
from rideout.lab.topology import Topology, plan_topology
from rideout.store.acl import RedisRole, password_file
from rideout.store.embedded import RedisServer
from rideout.store.server_config import redis_config
from rideout.store.tls_files import TlsFiles

__all__ = [
    "APP_PORT",
    "CANARY_PORT",
    "CONTROL_PLANE_PORT",
    "DNS_PORT",
    "GLOBAL",
    "REDIS_PORT",
    "REGIONS",
    "LabDeployment",
    "LabPart",
    "LabPaths",
    "WanLink",
    "lab_groups",
    "plan_deployment",
    "where",
]

REGIONS = ("us-east-1", "us-west-2")  # primary, secondary
GLOBAL = "global"
_SHORT = {"us-east-1": "use1", "us-west-2": "usw2"}
REDIS_PORT = 6380
APP_PORT = 8000
CONTROL_PLANE_PORT = 9000
DNS_PORT = 5300
CANARY_PORT = 9100
APP_DOMAIN = "auction.lab.rideout.test"
STATE_REDIS = "state-redis"
CONTROL_PLANES = ("cp-1", "cp-2")


def _zones(region: str) -> list[str]:
    return [f"{_SHORT[region]}-az1", f"{_SHORT[region]}-az2"]


def _redis(region: str) -> str:
    return f"redis-{_SHORT[region]}"


def _replica(region: str) -> str:
    return f"replica-{_SHORT[region]}"


def _canary(region: str) -> str:
    return f"canary-{_SHORT[region]}"


def lab_groups() -> dict[str, list[str]]:
    """The lab's hosts by group, in address order (see the module docstring)."""
    groups = {
        region: [_redis(region), _replica(region), *_zones(region), _canary(region)]
        for region in REGIONS
    }
    groups[GLOBAL] = [*CONTROL_PLANES, STATE_REDIS]
    return groups


@dataclass(frozen=True)
class LabPaths:
    """Where a lab's files go: everything under ``STATE_DIR/<lab id>/``."""

    work: Path

    @property
    def config(self) -> Path:
        return self.work / "rideout.toml"

    @property
    def secrets(self) -> Path:
        return self.work / "secrets"

    @property
    def data(self) -> Path:
        return self.work / "data"

    @property
    def redis(self) -> Path:
        return self.work / "redis"

    @property
    def logs(self) -> Path:
        return self.work / "logs"

    @property
    def control_socket(self) -> Path:
        return self.work / "control.sock"

    def redis_dir(self, host: str) -> Path:
        return self.redis / host

    def redis_config(self, host: str) -> Path:
        return self.redis_dir(host) / "redis.conf"


@dataclass(frozen=True)
class LabPart:
    """One process of the deployment: its name, host and argv, and how it is known to
    be ready: ``redis`` (a PING over TLS as the monitor user) or an HTTP path that must
    answer 200 (``/ready``; ``/live`` for a standby control plane, not ready by design)."""

    name: str
    host: str
    stage: str
    argv: tuple[str, ...]
    ready: str  # "redis" or an HTTP path
    port: int

    @property
    def command(self) -> str:
        return shlex.join(self.argv)


@dataclass(frozen=True)
class WanLink:
    """A transparent link in the router: TCP from `source` to `host`:`port` crosses it."""

    name: str
    source: str  # a group
    host: str
    port: int


@dataclass(frozen=True)
class LabDeployment:
    """The whole plan: the lab, the files to write, the processes in start order, the
    WAN links."""

    topology: Topology
    paths: LabPaths
    config_text: str
    redis_configs: dict[str, str]  # host: its redis.conf
    parts: tuple[LabPart, ...]
    links: tuple[WanLink, ...]

    @property
    def stages(self) -> list[tuple[str, list[LabPart]]]:
        """The parts by stage, in start order: a stage is started whole, then waited for."""
        out: list[tuple[str, list[LabPart]]] = []
        for part in self.parts:
            if not out or out[-1][0] != part.stage:
                out.append((part.stage, []))
            out[-1][1].append(part)
        return out

    def address(self, host: str) -> str:
        return self.topology.host(host).address

    def secrets_init_argv(self, python: str) -> list[str]:
        """``rideout secrets init`` as a newcomer runs it: its Redis hosts come from the
        config's ``rediss://`` URLs (each region's Redis and replica, the state Redis),
        whose addresses are the hosts' own (the WAN link is transparent)."""
        return [
            python, "-m", "rideout", "secrets", "init",
            "--config", str(self.paths.config), "--dir", str(self.paths.secrets),
        ]  # fmt: skip


def _redis_hosts(topology: Topology) -> list[tuple[str, str, str | None]]:
    """Each Redis host: (host, its certificate's name in the secrets, host it follows),
    in start order (the writer first, the state Redis last)."""
    primary, secondary = REGIONS
    return [
        (_redis(primary), primary, None),
        (_replica(primary), f"{primary}-replica", _redis(primary)),
        (_redis(secondary), secondary, _redis(primary)),  # across the WAN link
        (_replica(secondary), f"{secondary}-replica", _redis(secondary)),
        (STATE_REDIS, "control-plane-state", None),
    ]


def _config_text(topology: Topology, paths: LabPaths, replication: str = "async") -> str:
    def addr(host: str) -> str:
        return topology.host(host).address

    tls = TlsFiles.of(paths.secrets)
    cp_urls = ", ".join(f'"http://{addr(cp)}:{CONTROL_PLANE_PORT}"' for cp in CONTROL_PLANES)
    passwords = "\n".join(
        f'{role.value}_password_file = "{password_file(paths.secrets, role)}"'
        for role in (RedisRole.APP, RedisRole.CONTROLLER, RedisRole.MONITOR)
    )
    regions = []
    for n, region in enumerate(REGIONS):
        zones = ", ".join(f'{{ name = "{z}", address = "{addr(z)}" }}' for z in _zones(region))
        regions.append(
            f"""[[regions]]
name = "{region}"
role = "{"primary" if n == 0 else "secondary"}"
redis = {{ url = "rediss://{addr(_redis(region))}:{REDIS_PORT}", \
replica = {{ address = "{addr(_replica(region))}" }} }}
zones = [{zones}]
"""
        )
    return f'''# rideout lab {topology.lab_id}: written by `rideout lab up` (docs/lab.md); every host reads it.
mode = "external"
profile = "fast"
app_domain = "{APP_DOMAIN}"
app_port = {APP_PORT}
data_dir = "{paths.data}"
keys_dir = "{paths.secrets}"

[control_plane]
address = "{addr(CONTROL_PLANES[0])}"
port = {CONTROL_PLANE_PORT}
dns_port = {DNS_PORT}
urls = [{cp_urls}]
state_redis_url = "rediss://{addr(STATE_REDIS)}:{REDIS_PORT}"
lease_ttl = 3.0

{_failover(replication)}[redis]
ca_file = "{tls.ca[0]}"
cert_file = "{tls.client[0]}"
key_file = "{tls.client[1]}"
{passwords}

''' + "\n".join(regions)


def _failover(replication: str) -> str:
    """The ``[failover]`` table: none for async (the default), else the mode."""
    if replication not in ("async", "sync"):
        raise InvalidArgument(f"replication must be 'async' or 'sync', not {replication!r}")
    return "" if replication == "async" else f'[failover]\nreplication = "{replication}"\n\n'


def plan_deployment(
    lab_id: str,
    state_dir: Path,
    *,
    redis_server: RedisServer,
    python: str,
    drain_timeout: float = 2.0,
    replication: str = "async",
) -> LabDeployment:
    """The deployment of lab `lab_id` whose record is in `state_dir` (its files in
    ``state_dir/<lab id>/``): `redis_server` (a TLS-capable server) runs every Redis, `python` every ``rideout`` part.
    `replication`: ``async`` (the default) or ``sync`` (``[failover] replication``: each
    bid waits for a replica, as docs/configuration.md says)."""
    _failover(replication)  # checked before anything is planned
    if redis_server.version[:2] < (6, 2):
        raise InvalidArgument(
            f"the lab needs a redis-server 6.2 or newer, not {redis_server.label}"
        )
    topology = plan_topology(lab_id, lab_groups())
    paths = LabPaths(state_dir / lab_id)
    config = str(paths.config)

    def addr(host: str) -> str:
        return topology.host(host).address

    rideout = (python, "-m", "rideout")
    parts: list[LabPart] = []
    redis_configs: dict[str, str] = {}
    for host, certificate, follows in _redis_hosts(topology):
        redis_configs[host] = redis_config(
            server=redis_server, address=addr(host), port=REDIS_PORT, certificate_name=certificate,
            secrets=paths.secrets, directory=paths.redis_dir(host),
            replica_of=(addr(follows), REDIS_PORT) if follows else None,
        )  # fmt: skip
        stage = (
            "writer Redis"
            if follows is None and host != STATE_REDIS
            else ("state Redis" if host == STATE_REDIS else "other Redis")
        )
        argv: tuple[str, ...] = (str(redis_server.path), str(paths.redis_config(host)))
        parts.append(LabPart(host, host, stage, argv, "redis", REDIS_PORT))
    for n, cp in enumerate(CONTROL_PLANES):
        argv = (
            *rideout, "control-plane", "--config", config, "--instance", cp,
            "--listen", f"{addr(cp)}:{CONTROL_PLANE_PORT}",
            "--dns-listen", f"{addr(cp)}:{DNS_PORT}",
        )  # fmt: skip
        # The first takes the lease and acts (/ready 200); the second stands by (503).
        ready = "/ready" if n == 0 else "/live"
        parts.append(LabPart(cp, cp, f"control plane {cp}", argv, ready, CONTROL_PLANE_PORT))
    for region in REGIONS:
        for zone in _zones(region):
            argv = (
                *rideout, "serve", "--config", config, "--region", region, "--zone", zone,
                "--listen", f"{addr(zone)}:{APP_PORT}", "--drain-timeout", f"{drain_timeout:g}",
            )  # fmt: skip
            parts.append(LabPart(zone, zone, "app servers", argv, "/ready", APP_PORT))
    for region in REGIONS:
        host = _canary(region)
        argv = (
            *rideout, "canary", "--config", config, "--region", region,
            "--listen", f"{addr(host)}:{CANARY_PORT}",
        )  # fmt: skip
        parts.append(LabPart(host, host, "canaries", argv, "/ready", CANARY_PORT))
    links = []
    for n, region in enumerate(REGIONS):
        other = REGIONS[1 - n]
        for host in (_redis(region), _replica(region)):
            links.append(WanLink(f"{other}->{host}", other, host, REDIS_PORT))
    return LabDeployment(
        topology=topology,
        paths=paths,
        config_text=_config_text(topology, paths, replication),
        redis_configs=redis_configs,
        parts=tuple(parts),
        links=tuple(links),
    )


def where(deployment: LabDeployment) -> list[tuple[str, str, str, str]]:
    """What runs where, one row per host: (group, host, address, what), for ``up`` to
    print."""
    by_host: dict[str, list[str]] = {}
    for part in deployment.parts:
        by_host.setdefault(part.host, []).append(_what(part, deployment))
    rows = []
    for host in deployment.topology.hosts:
        rows.append((host.group, host.name, host.address, "; ".join(by_host.get(host.name, []))))
    return rows


def _what(part: LabPart, deployment: LabDeployment) -> str:
    args: Sequence[str] = part.argv
    if part.ready == "redis":
        conf = deployment.redis_configs[part.host]
        follows = [line.split()[1] for line in conf.splitlines() if line.startswith("replicaof ")]
        return f"redis-server :{part.port}" + (f" (replica of {follows[0]})" if follows else "")
    command = args[3] if len(args) > 3 else args[0]
    return f"rideout {command} :{part.port}"
