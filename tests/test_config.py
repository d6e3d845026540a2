from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rideout.config import (
    ENV_NOT_KEYS,
    PROFILES,
    Config,
    ConfigError,
    Timing,
    config_to_dict,
    dump_toml,
    load_config,
    parse_config,
)


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "rideout.toml"
    path.write_text(text, encoding="utf-8")
    return path


def refused(data: dict[str, Any]) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        parse_config(data)
    return info.value


def two_regions(**region0: Any) -> list[dict[str, Any]]:
    regions = config_to_dict(Config())["regions"]
    regions[0].update(region0)
    return regions


# --------------------------------------------------------------------------- defaults


def test_defaults_are_the_design_topology() -> None:
    config = Config()
    assert config.app_domain == "auction.rideout.test"
    assert config.mode == "local"
    assert config.profile == "fast"
    assert config.timing == PROFILES["fast"]
    primary, secondary = config.regions
    assert (primary.name, primary.role) == ("us-east-1", "primary")
    assert [(z.name, z.address) for z in primary.zones] == [
        ("use1-az1", "127.0.1.1"),
        ("use1-az2", "127.0.1.2"),
    ]
    assert (secondary.name, secondary.role) == ("us-west-2", "secondary")
    assert [(z.name, z.address) for z in secondary.zones] == [
        ("usw2-az1", "127.0.2.1"),
        ("usw2-az2", "127.0.2.2"),
    ]
    assert config.primary is primary
    assert config.secondary is secondary


def test_no_file_and_no_env_gives_defaults(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert load_config(env={}) == Config()


def test_seed_profile_has_the_source_documents_values() -> None:
    seed = PROFILES["seed"]
    assert seed.canary_interval == 60
    assert seed.failover_datapoints == 2
    assert seed.failback_datapoints > 5
    assert seed.dns_ttl == 60
    assert (seed.heartbeat_interval, seed.heartbeat_timeout) == (30, 35)
    assert seed.heartbeat_failures == 2
    assert (seed.backoff_base, seed.backoff_cap) == (2, 20)


def test_fast_profile_is_the_scaled_down_loop() -> None:
    fast = PROFILES["fast"]
    assert fast.canary_interval < 1
    assert fast.dns_ttl == 1
    assert (fast.backoff_base, fast.backoff_cap) == (0.25, 2)
    # Same decision rules as the seed: only the clock is faster.
    assert fast.failover_datapoints == PROFILES["seed"].failover_datapoints
    assert fast.failback_datapoints == PROFILES["seed"].failback_datapoints


def test_lookup_of_regions_and_zones() -> None:
    config = Config()
    assert config.region("us-west-2").role == "secondary"
    assert config.zone("us-east-1", "use1-az2").address == "127.0.1.2"
    with pytest.raises(KeyError, match="known: us-east-1, us-west-2"):
        config.region("eu-west-1")
    with pytest.raises(KeyError, match="known: use1-az1, use1-az2"):
        config.zone("us-east-1", "use1-az9")


def test_derived_paths(tmp_path: Path) -> None:
    config = parse_config({"data_dir": str(tmp_path)})
    assert config.logs_dir == tmp_path / "logs"
    assert config.run_dir == tmp_path / "run"
    assert config.region_data_dir("us-east-1") == tmp_path / "data" / "us-east-1"


# --------------------------------------------------------------------------- precedence


def test_file_overrides_defaults_and_profile(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        app_domain = "Shop.Example.TEST."
        profile = "seed"
        app_port = 8100
        [timing]
        dns_ttl = 120
        """,
    )
    config = load_config(path, env={})
    assert config.app_domain == "shop.example.test"
    assert config.app_port == 8100
    assert config.profile == "seed"
    assert config.timing.dns_ttl == 120  # the file's value
    assert config.timing.canary_interval == 60  # the seed profile's value


def test_env_overrides_file(tmp_path: Path) -> None:
    path = write(tmp_path, "app_port = 8100\n[timing]\ndns_ttl = 120\n")
    env = {
        "RIDEOUT_APP_PORT": "8200",
        "RIDEOUT_TIMING__DNS_TTL": "5",
        "RIDEOUT_CONTROL_PLANE__PORT": "9100",
        "RIDEOUT_PROFILE": "seed",
        "UNRELATED": "x",
    }
    config = load_config(path, env=env)
    assert config.app_port == 8200
    assert config.timing.dns_ttl == 5
    assert config.timing.heartbeat_interval == 30  # from the env-chosen seed profile
    assert config.control_plane.port == 9100


def test_rideout_config_env_names_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, "app_port = 8300\n")
    assert load_config(env={"RIDEOUT_CONFIG": str(path)}).app_port == 8300


def test_dot_rideout_toml_in_cwd_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path, "app_port = 8400\n")
    monkeypatch.chdir(tmp_path)
    assert load_config(env={}).app_port == 8400


# --------------------------------------------------------------------------- refusals


def test_missing_explicit_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such config file"):
        load_config(tmp_path / "nope.toml", env={})
    with pytest.raises(ConfigError, match="no such config file"):
        load_config(env={"RIDEOUT_CONFIG": str(tmp_path / "nope.toml")})


def test_invalid_toml(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(write(tmp_path, "app_port = = 1"), env={})


@pytest.mark.parametrize(
    ("data", "key"),
    [
        ({"app_prot": 8000}, "app_prot"),
        ({"timing": {"dns_tl": 3}}, "timing.dns_tl"),
        ({"control_plane": {"adress": "127.0.0.1"}}, "control_plane.adress"),
        ({"regions": two_regions(colour="blue")}, "regions[0].colour"),
    ],
)
def test_unknown_keys_are_refused(data: dict[str, Any], key: str) -> None:
    error = refused(data)
    assert error.key == key
    assert error.problem == "unknown key"


def test_unknown_zone_key_is_refused() -> None:
    regions = two_regions()
    regions[1]["zones"][0]["weight"] = 3
    assert refused({"regions": regions}).key == "regions[1].zones[0].weight"


def test_unknown_env_key_names_the_variable() -> None:
    with pytest.raises(ConfigError) as info:
        load_config(env={"RIDEOUT_TIMING__DNS_TL": "3"})
    assert "RIDEOUT_TIMING__DNS_TL" in str(info.value)
    assert "unknown key" in str(info.value)


def test_the_dev_scripts_variables_are_no_config_keys() -> None:
    """./dev reads RIDEOUT_* variables of its own; set, they must not break every
    command's config (RIDEOUT_TEST_WORKERS=3 did: "test_workers: unknown key")."""
    root = Path(__file__).resolve().parents[1]
    script = (root / "dev").read_text() + (root / ".ci" / "run").read_text()
    names = set(re.findall(r"RIDEOUT_[A-Z_]+", script))
    assert names, "./dev reads no RIDEOUT_ variable any more: update this test"
    assert names <= ENV_NOT_KEYS, names - ENV_NOT_KEYS
    load_config(env=dict.fromkeys(names, "3"))


@pytest.mark.parametrize("name", ["RIDEOUT_A__B__C", "RIDEOUT_TIMING__", "RIDEOUT_REGIONS"])
def test_malformed_env_names(name: str) -> None:
    with pytest.raises(ConfigError, match=name):
        load_config(env={name: "1"})


def test_env_value_that_is_not_a_number() -> None:
    with pytest.raises(ConfigError) as info:
        load_config(env={"RIDEOUT_TIMING__DNS_TTL": "soon"})
    assert "timing.dns_ttl (from RIDEOUT_TIMING__DNS_TTL)" in str(info.value)
    assert "expected an integer" in str(info.value)


def test_duplicate_zone_addresses() -> None:
    regions = two_regions()
    regions[1]["zones"][1]["address"] = "127.0.1.1"
    error = refused({"regions": regions})
    assert error.key == "regions[1].zones[1].address"
    assert "127.0.1.1:8000 is already used by regions[0].zones[0].address" in error.problem


def test_redis_may_not_share_an_app_endpoint() -> None:
    regions = two_regions(redis={"address": "127.0.2.1", "port": 8000})
    assert "already used" in refused({"regions": regions}).problem


def test_duplicate_names() -> None:
    regions = two_regions()
    regions[1]["zones"][0]["name"] = "use1-az1"
    error = refused({"regions": regions})
    assert error.key == "regions[1].zones[0].name"
    assert "already used" in error.problem


def test_region_with_no_zones() -> None:
    error = refused({"regions": two_regions(zones=[])})
    assert error.key == "regions[0].zones"
    assert error.problem == "region 'us-east-1' has no zones"


def test_region_without_redis() -> None:
    regions = two_regions()
    del regions[0]["redis"]
    assert refused({"regions": regions}).key == "regions[0].redis"


def test_roles_must_be_one_primary_one_secondary() -> None:
    assert "exactly one primary" in refused({"regions": two_regions(role="secondary")}).problem
    assert refused({"regions": two_regions(role="leader")}).key == "regions[0].role"
    assert refused({"regions": []}).key == "regions"


def test_address_outside_loopback_in_local_mode() -> None:
    regions = two_regions()
    regions[0]["zones"][0]["address"] = "10.0.0.1"
    error = refused({"regions": regions})
    assert error.key == "regions[0].zones[0].address"
    assert "outside 127.0.0.0/8" in error.problem
    # External mode points at real infrastructure: the same address is fine there.
    assert parse_config({"regions": regions, "mode": "external"}).mode == "external"


def test_not_an_address() -> None:
    error = refused({"control_plane": {"address": "localhost"}})
    assert error.key == "control_plane.address"
    assert "not an IP address" in error.problem


@pytest.mark.parametrize("value", [0, -1, 0.0, -0.5, float("nan"), float("inf")])
@pytest.mark.parametrize("key", ["canary_interval", "heartbeat_interval", "backoff_base"])
def test_zero_negative_or_infinite_seconds(key: str, value: float) -> None:
    error = refused({"timing": {key: value}})
    assert error.key == f"timing.{key}"
    assert "positive number of seconds" in error.problem


@pytest.mark.parametrize("key", ["dns_ttl", "failover_datapoints", "failback_datapoints"])
@pytest.mark.parametrize("value", [0, -3])
def test_zero_or_negative_counts(key: str, value: int) -> None:
    error = refused({"timing": {key: value}})
    assert error.key == f"timing.{key}"
    assert "at least 1" in error.problem


@pytest.mark.parametrize(
    ("data", "key", "problem"),
    [
        ({"app_port": 70000}, "app_port", "at most 65535"),
        ({"app_port": "eighty"}, "app_port", "expected an integer"),
        ({"app_port": True}, "app_port", "expected an integer"),
        ({"app_port": 80.5}, "app_port", "expected an integer"),
        ({"timing": {"dns_ttl": 1.5}}, "timing.dns_ttl", "expected an integer"),
        ({"timing": {"canary_interval": "soon"}}, "timing.canary_interval", "expected seconds"),
        ({"timing": {"canary_interval": [1]}}, "timing.canary_interval", "expected seconds"),
        ({"app_domain": ""}, "app_domain", "non-empty string"),
        ({"app_domain": "localhost"}, "app_domain", "not a valid DNS name"),
        ({"app_domain": "bad_name.test"}, "app_domain", "not a valid DNS name"),
        ({"mode": "cloud"}, "mode", "must be 'local' or 'external'"),
        ({"profile": "turbo"}, "profile", "unknown profile 'turbo'"),
        ({"timing": 3}, "timing", "expected a table"),
        (
            {"timing": {"heartbeat_interval": 5, "heartbeat_timeout": 5}},
            "timing.heartbeat_timeout",
            "longer than heartbeat_interval",
        ),
        (
            {"timing": {"canary_timeout": 0.5}},
            "timing.canary_timeout",
            "shorter than canary_interval",
        ),
        (
            {"timing": {"canary_timeout": 0.4, "canary_busy_grace": 0.1}},
            "timing.canary_busy_grace",
            "canary_timeout + canary_busy_grace (0.4 + 0.1 s) must be shorter than "
            "canary_interval (0.5 s): a late answer must come before the next round",
        ),
        ({"timing": {"canary_busy_grace": -1}}, "timing.canary_busy_grace", "zero or more seconds"),
        ({"timing": {"backoff_cap": 0.1}}, "timing.backoff_cap", "at least backoff_base"),
        ({"timing": {"handshake_timeout": 0}}, "timing.handshake_timeout", "positive number"),
        (
            {"timing": {"handshake_timeout": 1.5}},
            "timing.handshake_timeout",
            "at least 2 s: it is also how long a server keeps an idle kept-alive connection",
        ),
        ({"realtime": {"max_connections": 0}}, "realtime.max_connections", "at least 1"),
        (
            {"realtime": {"max_connections_per_user": 0}},
            "realtime.max_connections_per_user",
            "at least 1",
        ),
        (
            {"realtime": {"max_connections_per_address": -1}},
            "realtime.max_connections_per_address",
            "at least 0",
        ),
        (
            {"realtime": {"max_connections": 64, "reserved_connections": 64}},
            "realtime.reserved_connections",
            "less than max_connections",
        ),
        ({"realtime": {"replay_rate": 0}}, "realtime.replay_rate", "positive number"),
        (
            {"failover": {"canary_placement": "beside"}},
            "failover.canary_placement",
            "must be 'outside' or 'in-region'",
        ),
    ],
)
def test_bad_values(data: dict[str, Any], key: str, problem: str) -> None:
    error = refused(data)
    assert error.key == key
    assert problem in error.problem
    assert str(error) == f"config: {key}: {error.problem}"


def test_connection_limits_and_their_profile_timeout() -> None:
    fast, seed = parse_config({}), parse_config({"profile": "seed"})
    assert (fast.timing.handshake_timeout, seed.timing.handshake_timeout) == (2.0, 10.0)
    realtime = parse_config(
        {"realtime": {"max_connections_per_address": 0, "reserved_connections": 0}}
    ).realtime
    assert (realtime.max_connections_per_address, realtime.reserved_connections) == (0, 0)
    env = {"RIDEOUT_REALTIME__MAX_CONNECTIONS_PER_USER": "3"}
    assert load_config(env=env).realtime.max_connections_per_user == 3


def test_bad_region_names() -> None:
    assert refused({"regions": two_regions(name="US East")}).key == "regions[0].name"
    regions = two_regions()
    regions[0]["zones"][0]["name"] = ""
    assert refused({"regions": regions}).key == "regions[0].zones[0].name"


def test_regions_must_be_a_list_of_tables() -> None:
    assert refused({"regions": "us-east-1"}).key == "regions"
    assert refused({"regions": ["us-east-1"]}).key == "regions[0]"


# --------------------------------------------------------------------------- output


def test_dump_toml_round_trips_the_defaults() -> None:
    config = Config()
    assert parse_config(tomllib.loads(dump_toml(config))) == config


timings = st.builds(
    Timing,
    canary_interval=st.floats(1.0, 1e4),
    canary_timeout=st.floats(0.01, 0.99),
    failover_datapoints=st.integers(1, 100),
    failback_datapoints=st.integers(1, 100),
    dns_ttl=st.integers(1, 86400),
    heartbeat_interval=st.floats(0.01, 100.0),
    heartbeat_timeout=st.floats(100.5, 1000.0),
    heartbeat_failures=st.integers(1, 10),
    backoff_base=st.floats(0.001, 1.0),
    backoff_cap=st.floats(1.0, 600.0),
    handshake_timeout=st.floats(2.0, 600.0),  # at least twice rideout._http.KEEPALIVE_EXPIRY
)


@given(timing=timings, port=st.integers(1, 65535), domain=st.sampled_from(["a.test", "x-y.b.c"]))
def test_dump_toml_round_trips_any_valid_config(timing: Timing, port: int, domain: str) -> None:
    data = config_to_dict(Config())
    data["timing"] = config_to_dict(Config(timing=timing))["timing"]
    data["app_port"] = port
    data["app_domain"] = domain
    data["control_plane"] = {"address": "127.0.0.1", "port": 1, "dns_port": 2}
    config = parse_config(data)
    assert parse_config(tomllib.loads(dump_toml(config))) == config


# --------------------------------------------------------------------------- issue #12 settings


def test_control_plane_and_demo_token_settings(tmp_path: Path) -> None:
    config = Config()
    assert config.control_plane.max_stream_readers == 32
    assert (config.control_plane.login_code_ttl, config.control_plane.session_ttl) == (
        300.0,
        28800.0,
    )
    assert config.control_plane.ingest_max_skew == 30.0
    env = {
        "RIDEOUT_CONTROL_PLANE__MAX_STREAM_READERS": "8",
        "RIDEOUT_CONTROL_PLANE__SESSION_TTL": "60",
        "RIDEOUT_AUTH__DEMO_TOKENS": "false",
    }
    loaded = load_config(write(tmp_path, ""), env=env)
    assert loaded.control_plane.max_stream_readers == 8
    assert loaded.control_plane.session_ttl == 60.0
    assert loaded.auth.demo_tokens is False
    assert parse_config(tomllib.loads(dump_toml(loaded))) == loaded
    # Demo tokens: on by default in local mode only.
    assert parse_config({}).auth.demo_tokens is True
    external = {"mode": "external"}
    assert parse_config(external).auth.demo_tokens is False
    assert parse_config({**external, "auth": {"demo_tokens": True}}).auth.demo_tokens is True
    assert "max_stream_readers" in refused({"control_plane": {"max_stream_readers": 0}}).key
    assert "login_code_ttl" in refused({"control_plane": {"login_code_ttl": 0}}).key
    assert "demo_tokens" in refused({"auth": {"demo_tokens": "maybe"}}).key


def test_token_lifetimes_and_the_revocation_interval() -> None:
    auth = Config().auth
    assert (auth.token_ttl, auth.max_token_ttl, auth.revocation_interval) == (3600, 86400, 1)
    assert (
        parse_config({"auth": {"max_token_ttl": 600, "token_ttl": 600}}).auth.max_token_ttl == 600
    )
    error = refused({"auth": {"max_token_ttl": 600}})  # the default token_ttl is an hour
    assert error.key == "auth.token_ttl"
    assert "max_token_ttl (600 s)" in error.problem
    assert refused({"auth": {"revocation_interval": 0}}).key == "auth.revocation_interval"


@pytest.mark.parametrize(
    ("room", "key"),
    [
        ({"inlet": "sometimes"}, "waitingroom.inlet"),
        ({"events": ["has space"]}, "waitingroom.events"),
        ({"inlet_alarm": ["a", "b"]}, "waitingroom.inlet_alarm"),
        ({"token_algorithm": "HS256"}, "waitingroom.token_algorithm"),
        ({"max_body": 100}, "waitingroom.max_body"),
        ({"validity": 0}, "waitingroom.validity"),
        ({"micro_cache_ttl": -1}, "waitingroom.micro_cache_ttl"),
        ({"surprise": 1}, "waitingroom.surprise"),
    ],
)
def test_bad_waitingroom_settings_are_refused(room: dict[str, Any], key: str) -> None:
    assert key in str(refused({"waitingroom": room}))


def test_waitingroom_defaults_and_overrides() -> None:
    assert parse_config({}).waitingroom.events == ("auction",)
    room = parse_config(
        {"waitingroom": {"inlet": "periodic", "abandon_after": 300, "events": []}}
    ).waitingroom
    assert (room.inlet, room.abandon_after, room.events) == ("periodic", 300.0, ())


def test_the_evacuate_section_scales_with_the_profile_and_round_trips() -> None:
    from rideout.config import EVACUATE_PROFILES, dump_toml

    fast, seed = parse_config({}), parse_config({"profile": "seed"})
    assert fast.evacuate.drain_seconds == EVACUATE_PROFILES["fast"]["drain_seconds"]
    assert seed.evacuate.autoshift_expiry == 3600.0
    assert fast.evacuate.autoshift
    off = parse_config({"evacuate": {"autoshift": False, "min_healthy_zones": 2, "pause": 0}})
    assert not off.evacuate.autoshift
    assert off.evacuate.min_healthy_zones == 2
    assert tomllib.loads(dump_toml(off))["evacuate"]["autoshift"] is False
    with pytest.raises(ConfigError, match=r"evacuate\.batch_size"):
        parse_config({"evacuate": {"batch_size": 0}})
    with pytest.raises(ConfigError, match=r"evacuate\.nope"):
        parse_config({"evacuate": {"nope": 1}})


def test_the_evacuate_aws_section_round_trips_and_refuses() -> None:
    from rideout.config import dump_toml

    assert parse_config({}).evacuate_aws.table == "rideout-evacuations"
    aws = {"region": "us-east-1", "vpc_ids": ["vpc-1"], "zonal_shift": True,
           "eks_cluster": "arn:aws:eks:us-east-1:1:cluster/c", "eks_server": "https://k:6443"}  # fmt: skip
    config = parse_config({"evacuate_aws": aws})
    assert parse_config(tomllib.loads(dump_toml(config))) == config
    assert parse_config(tomllib.loads(dump_toml(parse_config({})))) == parse_config({})
    for bad, key in [
        ({"zonal_shift_expires_in": "73h"}, "zonal_shift_expires_in"),
        ({"eks_cluster": "arn:x"}, "eks_server"),
        ({"endpoint_url": "http://10.1.2.3:4566"}, "endpoint_url"),
        ({"eks_cluster": "arn:x", "eks_server": "http://k8s.example"}, "eks_server"),
        ({"table": ""}, "table"),
        ({"max_attempts": 21}, "max_attempts"),
        ({"region": 1}, "region"),
    ]:
        with pytest.raises(ConfigError, match=rf"evacuate_aws\.{key}"):
            parse_config({"evacuate_aws": bad})


# --------------------------------------------------------------------------- [aws]

AWS_SECTION = {
    "deployment": "auction-prod",
    "hosted_zone_id": "Z0123456789ABCDEFGHIJ",
    "tags": {"team": "auctions"},
    "global_datastore": "auction",
    "regions": {
        "us-east-1": {"addresses": ["203.0.113.10"], "replication_group": "auction-use1"},
        "us-west-2": {
            "aws_region": "us-west-2",
            "addresses": ["198.51.100.20"],
            "replication_group": "auction-usw2",
            "alarm_name": "west-canary",
        },
    },
}


def test_aws_section_defaults_and_round_trip(tmp_path: Path) -> None:
    assert parse_config({}).aws.hosted_zone_id == ""  # nothing managed by default
    config = parse_config({"aws": AWS_SECTION})
    aws = config.aws
    assert aws.tags == (("team", "auctions"),)
    assert aws.region("us-east-1").aws_region == "us-east-1"
    assert aws.alarm_name("us-east-1") == "auction-prod-us-east-1-websocket-health"
    assert aws.alarm_name("us-west-2") == "west-canary"
    assert aws.insufficient_data_health == "Unhealthy"
    assert parse_config(tomllib.loads(dump_toml(config))) == config
    env = {"RIDEOUT_AWS__PUBLISH_METRICS": "true", "RIDEOUT_AWS__DEPLOYMENT": "other"}
    path = tmp_path / "rideout.toml"
    path.write_text(dump_toml(config))
    loaded = load_config(path, env=env)
    assert loaded.aws.publish_metrics
    assert loaded.aws.deployment == "other"


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ({"period": 45}, "aws.period: must be 10, 30 or a multiple of 60"),
        ({"record_type": "CNAME"}, "aws.record_type: must be 'A' or 'alias'"),
        ({"insufficient_data_health": "Maybe"}, "aws.insufficient_data_health"),
        ({"deployment": "Not A Name"}, "aws.deployment: expected a name"),
        ({"hosted_zone_id": "zone one"}, "is not a Route 53 hosted zone id"),
        ({"alarm_region": "mars"}, "aws.alarm_region: 'mars' is not an AWS region name"),
        ({"tags": {"aws:owner": "x"}}, "tag keys aws:* and rideout:* are reserved"),
        ({"regions": {"eu-west-9": {}}}, "aws.regions.eu-west-9: no such region"),
        ({"regions": {"us-east-1": {"addresses": ["nope"]}}}, "'nope' is not an IPv4 address"),
        (
            {"regions": {"us-east-1": {"colour": "red"}}},
            "aws.regions.us-east-1.colour: unknown key",
        ),
        (
            {"regions": {"us-east-1": {"addresses": []}}},
            "aws.regions.us-east-1.addresses: record_type 'A' needs the region's addresses",
        ),
        (
            {"record_type": "alias"},
            "record_type 'alias' needs alias_dns_name and alias_hosted_zone_id",
        ),
    ],
)
def test_bad_aws_settings_are_refused(override: dict[str, Any], message: str) -> None:
    section = {**AWS_SECTION, **override}
    if "regions" in override:
        section["regions"] = {**AWS_SECTION["regions"], **override["regions"]}  # type: ignore[dict-item]
    with pytest.raises(ConfigError, match=message.replace("*", r"\*").replace("(", r"\(")):
        parse_config({"aws": section})


def test_a_global_datastore_needs_every_regions_group() -> None:
    section = {**AWS_SECTION, "regions": {"us-east-1": {"addresses": ["203.0.113.1"]}}}
    section["hosted_zone_id"] = ""
    with pytest.raises(ConfigError, match="global_datastore needs each region's replication group"):
        parse_config({"aws": section})
