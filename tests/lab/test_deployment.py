"""The lab's deployment plan (pure): hosts, the config every host reads, each Redis's
config, each part's argv in start order, and the WAN links."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest

from rideout.config import load_config
from rideout.errors import InvalidArgument
from rideout.lab.deployment import (
    APP_PORT,
    REDIS_PORT,
    lab_groups,
    plan_deployment,
    where,
)
from rideout.lab.topology import INTERCEPT_TABLE, intercept_commands
from rideout.store.acl import RedisRole, password_file
from rideout.store.embedded import RedisServer
from rideout.store.tls_files import TlsFiles


def plan(tmp_path: Path, version: tuple[int, int, int] = (7, 0, 15)):  # type: ignore[no-untyped-def]
    server = RedisServer(Path("/opt/redis-server"), "redis", version)
    return plan_deployment("t1", tmp_path, redis_server=server, python="py")


def test_the_hosts_and_their_addresses(tmp_path: Path) -> None:
    d = plan(tmp_path)
    assert lab_groups() == {
        "us-east-1": ["redis-use1", "replica-use1", "use1-az1", "use1-az2", "canary-use1"],
        "us-west-2": ["redis-usw2", "replica-usw2", "usw2-az1", "usw2-az2", "canary-usw2"],
        "global": ["cp-1", "cp-2", "state-redis"],
    }
    assert d.address("redis-use1") == "127.100.1.1"
    assert d.address("usw2-az2") == "127.100.2.4"
    assert d.address("state-redis") == "127.100.3.3"
    for host in d.topology.hosts:
        assert ipaddress.ip_address(host.address) in ipaddress.ip_network("127.0.0.0/8")
    assert d.paths.work == tmp_path / "t1"
    # every host runs exactly one part, and `where` says what
    assert sorted(p.host for p in d.parts) == sorted(h.name for h in d.topology.hosts)
    rows = {host: what for _, host, _, what in where(d)}
    assert rows["redis-usw2"] == "redis-server :6380 (replica of 127.100.1.1)"
    assert rows["cp-2"] == "rideout control-plane :9000"


def test_the_config_is_external_mode_on_lab_addresses_and_loads(tmp_path: Path) -> None:
    d = plan(tmp_path)
    d.paths.work.mkdir()
    d.paths.config.write_text(d.config_text)
    config = load_config(d.paths.config, env={})
    assert config.mode == "external"
    assert config.profile == "fast"
    assert config.control_plane.urls == ("http://127.100.3.1:9000", "http://127.100.3.2:9000")
    assert config.control_plane.state_redis_url == "rediss://127.100.3.3:6380"
    assert config.keys_dir == d.paths.secrets
    east, west = config.regions
    assert (east.name, east.role, west.name, west.role) == (
        "us-east-1", "primary", "us-west-2", "secondary",
    )  # fmt: skip
    assert east.redis.url == f"rediss://127.100.1.1:{REDIS_PORT}"
    assert west.redis.url == f"rediss://127.100.2.1:{REDIS_PORT}"
    assert east.replica is not None
    assert east.replica.address == "127.100.1.2"
    assert west.replica is not None
    assert west.replica.address == "127.100.2.2"
    assert [(z.name, z.address) for z in west.zones] == [
        ("usw2-az1", "127.100.2.3"), ("usw2-az2", "127.100.2.4"),
    ]  # fmt: skip
    tls = TlsFiles.of(d.paths.secrets)
    assert east.redis.tls.ca_file == str(tls.ca[0])
    assert east.redis.tls.cert_file == str(tls.client[0])
    for role in (RedisRole.APP, RedisRole.CONTROLLER, RedisRole.MONITOR):
        assert str(password_file(d.paths.secrets, role)) in d.config_text


def test_each_redis_is_configured_as_external_md_step_3(tmp_path: Path) -> None:
    d = plan(tmp_path)
    writer = d.redis_configs["redis-use1"].splitlines()
    secrets = d.paths.secrets
    assert writer[:4] == [
        f"include {secrets}/redis/server.conf",
        f"aclfile {secrets}/redis/users-functions.acl",
        "port 0",
        f"tls-port {REDIS_PORT}",
    ]
    for line in ("bind 127.100.1.1", "bind-source-addr 127.100.1.1",
                 "replica-announce-ip 127.100.1.1", "tls-auth-clients yes",
                 "tls-replication yes", "appendonly yes", "appendfsync everysec",
                 f"tls-cert-file {secrets}/redis/tls/server-us-east-1.pem",
                 f"tls-ca-cert-file {secrets}/redis/tls/ca.pem",
                 f"dir {d.paths.redis_dir('redis-use1')}"):  # fmt: skip
        assert line in writer
    assert not [line for line in writer if line.startswith("replicaof")]
    follows = {
        host: [line for line in text.splitlines() if line.startswith("replicaof")]
        for host, text in d.redis_configs.items()
    }
    assert follows == {
        "redis-use1": [],
        "replica-use1": ["replicaof 127.100.1.1 6380"],
        "redis-usw2": ["replicaof 127.100.1.1 6380"],  # across the WAN link
        "replica-usw2": ["replicaof 127.100.2.1 6380"],
        "state-redis": [],
    }
    assert "server-us-west-2-replica.pem" in d.redis_configs["replica-usw2"]
    assert "server-control-plane-state.pem" in d.redis_configs["state-redis"]


def test_a_6_2_server_gets_its_acl_file_and_no_bind_source_addr(tmp_path: Path) -> None:
    text = plan(tmp_path, (6, 2, 14)).redis_configs["redis-use1"]
    assert "/redis/users.acl" in text
    assert "bind-source-addr" not in text
    with pytest.raises(InvalidArgument, match=r"6\.2 or newer"):
        plan(tmp_path, (6, 0, 9))


def test_the_parts_start_in_external_md_order(tmp_path: Path) -> None:
    d = plan(tmp_path)
    assert [(stage, [p.name for p in parts]) for stage, parts in d.stages] == [
        ("writer Redis", ["redis-use1"]),
        ("other Redis", ["replica-use1", "redis-usw2", "replica-usw2"]),
        ("state Redis", ["state-redis"]),
        ("control plane cp-1", ["cp-1"]),
        ("control plane cp-2", ["cp-2"]),
        ("app servers", ["use1-az1", "use1-az2", "usw2-az1", "usw2-az2"]),
        ("canaries", ["canary-use1", "canary-usw2"]),
    ]
    parts = {p.name: p for p in d.parts}
    config = str(d.paths.config)
    assert parts["redis-usw2"].argv == (
        "/opt/redis-server",
        str(d.paths.redis_config("redis-usw2")),
    )
    assert parts["cp-2"].argv == (
        "py", "-m", "rideout", "control-plane", "--config", config, "--instance", "cp-2",
        "--listen", "127.100.3.2:9000", "--dns-listen", "127.100.3.2:5300",
    )  # fmt: skip
    assert parts["usw2-az1"].argv[:10] == (
        "py", "-m", "rideout", "serve", "--config", config, "--region", "us-west-2",
        "--zone", "usw2-az1",
    )  # fmt: skip
    assert f"127.100.2.3:{APP_PORT}" in parts["usw2-az1"].argv
    assert parts["canary-use1"].argv[3:] == (
        "canary", "--config", config, "--region", "us-east-1", "--listen", "127.100.1.5:9100",
    )  # fmt: skip
    # readiness: Redis by PING; the acting control plane /ready, the standby /live
    assert {p.name: p.ready for p in d.parts if p.ready != "redis"} == {
        "cp-1": "/ready", "cp-2": "/live", "use1-az1": "/ready", "use1-az2": "/ready",
        "usw2-az1": "/ready", "usw2-az2": "/ready", "canary-use1": "/ready",
        "canary-usw2": "/ready",
    }  # fmt: skip
    assert d.secrets_init_argv("py") == [
        "py", "-m", "rideout", "secrets", "init", "--config", config,
        "--dir", str(d.paths.secrets),
    ]  # fmt: skip


def test_every_connection_between_regions_to_a_redis_crosses_a_link(tmp_path: Path) -> None:
    d = plan(tmp_path)
    assert [(link.source, link.host, link.port) for link in d.links] == [
        ("us-west-2", "redis-use1", 6380),
        ("us-west-2", "replica-use1", 6380),
        ("us-east-1", "redis-usw2", 6380),
        ("us-east-1", "replica-usw2", 6380),
    ]
    assert len({link.name for link in d.links}) == 4


def test_intercept_commands(tmp_path: Path) -> None:
    topology = plan(tmp_path).topology
    router = topology.router_netns
    assert intercept_commands(topology, "us-west-2", "redis-use1", 6380) == [
        ("ip", "-n", router, "route", "replace", "local", "127.100.1.1/32", "dev", "lo",
         "table", str(INTERCEPT_TABLE)),
        ("ip", "-n", router, "rule", "add", "pref", "200", "from", "127.100.2.0/24",
         "to", "127.100.1.1/32", "ipproto", "tcp", "dport", "6380",
         "lookup", str(INTERCEPT_TABLE)),
    ]  # fmt: skip
    with pytest.raises(InvalidArgument, match="its own traffic"):
        intercept_commands(topology, "us-east-1", "redis-use1", 6380)
    with pytest.raises(InvalidArgument, match="port"):
        intercept_commands(topology, "us-west-2", "redis-use1", 0)
    with pytest.raises(InvalidArgument, match="no host"):
        intercept_commands(topology, "us-west-2", "nope", 6380)


def test_sync_replication_is_written_and_loaded(tmp_path: Path) -> None:
    assert "[failover]" not in plan(tmp_path).config_text  # the default: async
    server = RedisServer(Path("/opt/redis-server"), "redis", (7, 0, 15))
    sync = plan_deployment("t1", tmp_path, redis_server=server, python="py", replication="sync")
    assert '[failover]\nreplication = "sync"' in sync.config_text
    sync.paths.work.mkdir(parents=True)
    sync.paths.config.write_text(sync.config_text)
    assert load_config(sync.paths.config, env={}).failover.replication == "sync"
    with pytest.raises(InvalidArgument, match="replication"):
        plan_deployment("t1", tmp_path, redis_server=server, python="py", replication="semi")
