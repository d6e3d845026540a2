"""External mode's settings: Redis URLs with TLS, ACL users from files, the control
plane's URLs and lease store, set by file and by environment."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rideout.config import (
    Config,
    ConfigError,
    RedisTLS,
    dump_toml,
    load_config,
    parse_config,
    region_env_name,
)
from rideout.store.acl import (
    CredentialsUnavailable,
    RedisRole,
    credentials_for,
    load_or_create_users,
)
from rideout.store.client import probe_client


def external(**overrides: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "mode": "external",
        "redis": {"ca_file": "/etc/rideout/ca.pem"},
        "regions": [
            {"name": "us-east-1", "role": "primary",
             "redis": {"url": "rediss://east.cache.example:6380"},
             "zones": [{"name": "use1-az1", "address": "10.0.1.10"}]},
            {"name": "us-west-2", "role": "secondary",
             "redis": {"url": "rediss://west.cache.example:6380", "ca_file": "/west-ca.pem",
                       "cert_file": "/c.pem", "key_file": "/c.key"},
             "zones": [{"name": "usw2-az1", "address": "10.1.1.10"}]},
        ],
    }  # fmt: skip
    data.update(overrides)
    return data


def test_rediss_urls_with_the_sections_tls_defaults_and_a_regions_own() -> None:
    config = parse_config(external())
    east, west = config.primary.redis, config.secondary.redis
    assert (east.address, east.port, east.url) == (
        "east.cache.example",
        6380,
        "rediss://east.cache.example:6380",
    )
    assert east.tls == RedisTLS(ca_file="/etc/rideout/ca.pem")
    assert west.tls == RedisTLS("/west-ca.pem", "/c.pem", "/c.key")
    plain = parse_config(external(regions=[
        {**external()["regions"][0], "redis": {"url": "redis://10.0.1.5"}},
        external()["regions"][1],
    ]))  # fmt: skip
    assert (plain.primary.redis.port, plain.primary.redis.tls) == (6379, None)


def test_the_effective_config_loads_back_the_same() -> None:
    config = parse_config(
        external(
            keys_dir="/run/secrets/rideout",
            control_plane={"urls": ["https://cp.example"], "address": "0.0.0.0",
                           "state_redis_url": "rediss://cp-state.example:6380"},
        )
    )  # fmt: skip
    assert parse_config(tomllib.loads(dump_toml(config))) == config
    assert config.keys_dir == Path("/run/secrets/rideout")
    assert config.origins()[-1] == "https://cp.example"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"url": "https://east:1"}, "expected redis://HOST:PORT or rediss://HOST:PORT"),
        ({"url": "rediss://user:secret@east:1"}, "no credentials in the URL"),
        ({"url": "rediss://east:1/3"}, "database 0"),
        ({"url": "rediss://east:99999"}, "not a URL"),
        ({"url": "redis://east:1", "ca_file": "/ca.pem"}, "use rediss://"),
        ({"url": "rediss://east:1", "cert_file": "/c.pem"}, "go together"),
        ({"address": "10.0.0.1", "ca_file": "/ca.pem"}, "TLS needs a rediss:// url"),
    ],
)
def test_bad_redis_settings_say_what_is_wrong(change: dict[str, str], message: str) -> None:
    data = external()
    data["regions"][0]["redis"] = change
    with pytest.raises(ConfigError, match=message) as caught:
        parse_config(data)
    assert caught.value.key.startswith("regions[0].redis")


def test_urls_are_for_external_mode_and_a_wildcard_listener_needs_urls() -> None:
    with pytest.raises(ConfigError, match="external mode"):
        parse_config(external(mode="local"))
    with pytest.raises(ConfigError, match="set the URLs"):
        parse_config(external(control_plane={"address": "0.0.0.0"}))
    with pytest.raises(ConfigError, match="not a URL like"):
        parse_config(external(control_plane={"urls": ["cp.example:9000"]}))
    with pytest.raises(ConfigError, match="external mode only"):
        parse_config({"control_plane": {"state_redis_url": "redis://10.0.0.1"}})


def test_environment_sets_a_regions_redis_and_the_sections_keys(tmp_path: Path) -> None:
    file = tmp_path / "rideout.toml"
    file.write_text('mode = "external"\n')
    env = {
        region_env_name("us-west-2"): "rediss://10.9.9.9:7000",
        region_env_name("us-west-2", "CA_FILE"): "/mnt/ca.pem",
        "RIDEOUT_REDIS__PASSWORD_FILE": "/run/secrets/redis",
        "RIDEOUT_CONTROL_PLANE__URLS": "http://10.0.0.2:9000,http://10.0.0.3:9000",
        "RIDEOUT_KEYS_DIR": "/run/secrets/rideout",
        "RIDEOUT_LOG_FORMAT": "json",  # for the processes, not a config key
    }
    config = load_config(file, env=env)
    west = config.region("us-west-2").redis
    assert (west.url, west.address, west.port) == ("rediss://10.9.9.9:7000", "10.9.9.9", 7000)
    assert west.tls == RedisTLS(ca_file="/mnt/ca.pem")
    assert config.region("us-east-1").redis.url == ""  # the default, untouched
    assert config.redis.password_file == "/run/secrets/redis"
    assert config.control_plane_urls() == ("http://10.0.0.2:9000", "http://10.0.0.3:9000")
    assert config.keys_dir == Path("/run/secrets/rideout")


def test_an_env_region_that_does_not_exist_and_a_bad_value_name_the_variable(
    tmp_path: Path,
) -> None:
    file = tmp_path / "rideout.toml"
    file.write_text('mode = "external"\n')
    with pytest.raises(ConfigError, match="no region named like 'EU_CENTRAL_1'"):
        load_config(file, env={"RIDEOUT_REDIS_EU_CENTRAL_1_URL": "rediss://x:1"})
    with pytest.raises(ConfigError) as caught:
        load_config(file, env={region_env_name("us-east-1"): "http://x:1"})
    assert "RIDEOUT_REDIS_US_EAST_1_URL" in str(caught.value)


@given(st.from_regex(r"[a-z][a-z0-9]{0,8}(-[a-z0-9]{1,8}){0,3}", fullmatch=True))
def test_every_region_name_has_its_variable(name: str) -> None:
    data = external()
    data["regions"][0]["name"] = name if name != "us-west-2" else "x"
    data["regions"][0]["redis"] = {"url": "rediss://h:1"}
    config = parse_config(data)
    region = config.primary.name
    # A file's regions, one of them moved by its variable.
    variable = region_env_name(region)
    from rideout.config._load import _apply_region_env  # the env step of load_config

    moved = parse_config(_apply_region_env(data, {variable: "rediss://moved:2"}, {}))
    assert moved.primary.redis.url == "rediss://moved:2"
    assert moved.secondary.redis == config.secondary.redis


def _with_passwords(tmp_path: Path, **redis: str) -> Config:
    return parse_config(
        external(redis={"ca_file": "/ca.pem", **redis}, keys_dir=str(tmp_path / "keys"))
    )


def test_credentials_come_from_the_roles_file_else_the_shared_one(tmp_path: Path) -> None:
    own, shared = tmp_path / "controller.pw", tmp_path / "shared.pw"
    own.write_text("controller-secret\n")
    shared.write_text("shared-secret\n")
    config = _with_passwords(
        tmp_path, controller_password_file=str(own), password_file=str(shared),
        app_user="svc-app",
    )  # fmt: skip
    controller = credentials_for(config, RedisRole.CONTROLLER)
    assert (controller.username, controller.password) == ("rideout-controller", "controller-secret")
    app = credentials_for(config, RedisRole.APP)
    assert (app.username, app.password) == ("svc-app", "shared-secret")
    assert "shared.pw" in app.source
    assert "secret" not in repr(app)
    with pytest.raises(CredentialsUnavailable, match="masterauth"):
        credentials_for(config, RedisRole.REPLICATION)


def test_without_password_files_the_secrets_directory_has_them(tmp_path: Path) -> None:
    config = parse_config(external(keys_dir=str(tmp_path)))
    load_or_create_users(tmp_path)
    found = credentials_for(config, RedisRole.APP)
    assert found.username == "rideout-app"
    assert found.source == str(tmp_path / "redis" / "app.password")


def test_missing_credentials_and_tls_files_say_which(tmp_path: Path) -> None:
    config = _with_passwords(tmp_path)
    with pytest.raises(CredentialsUnavailable, match=r"set \[redis\] monitor_password_file"):
        credentials_for(config, RedisRole.MONITOR)
    config = _with_passwords(tmp_path, monitor_password_file=str(tmp_path / "absent"))
    with pytest.raises(CredentialsUnavailable, match="monitor_password_file"):
        credentials_for(config, RedisRole.MONITOR)
    (tmp_path / "pw").write_text("x" * 40)
    config = _with_passwords(tmp_path, password_file=str(tmp_path / "pw"))
    redis = config.primary.redis
    with pytest.raises(CredentialsUnavailable, match=r"TLS CA file /ca\.pem does not exist"):
        probe_client(redis.address, redis.port, tls=redis.tls,
                     credentials=credentials_for(config, RedisRole.MONITOR))  # fmt: skip
