"""Loading: the file, the `RIDEOUT_*` environment, then parsing and validating the whole."""

from __future__ import annotations

import dataclasses
import ipaddress
import os
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rideout.config._config import Config
from rideout.config._output import config_to_dict
from rideout.config._reader import ConfigError, _choices, _Reader
from rideout.config._sections import (
    PROFILES,
    _parse_auth,
    _parse_control_plane,
    _parse_evacuate,
    _parse_failover,
    _parse_realtime,
    _parse_timing,
    _parse_waitingroom,
)
from rideout.config._services import (
    _REGION_REDIS_ENV,
    _parse_aws,
    _parse_evacuate_aws,
    _parse_redis_access,
    _region_env,
    _validate_aws,
)
from rideout.config._topology import _parse_regions

__all__ = ["DEFAULT_CONFIG_FILE", "ENV_NOT_KEYS", "ENV_PREFIX", "load_config", "parse_config"]

DEFAULT_CONFIG_FILE = "rideout.toml"
ENV_PREFIX = "RIDEOUT_"
# Environment variables that are not configuration keys but belong to rideout (the
# last four are ./dev's and the suite's: a user who set them saw every command refuse
# its config).
ENV_NOT_KEYS = frozenset(
    {
        "RIDEOUT_CONFIG",
        "RIDEOUT_LOG_FORMAT",
        "RIDEOUT_TEST_WORKERS",
        "RIDEOUT_VENV",
        "RIDEOUT_TEST_REDIS",
        "RIDEOUT_TEST_MATRIX",
        "RIDEOUT_TEST_EXAMPLES",
    }
)
_LOOPBACK = ipaddress.ip_network("127.0.0.0/8")
_DNS_LABEL = re.compile(r"^(?!-)[a-z0-9-]{1,63}(?<!-)$")


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
        redis_server=root.text("redis_server", defaults.redis_server, empty_ok=True),
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
        config = dataclasses.replace(
            config, regions=_parse_regions(root, config.redis, config.mode)
        )
    root.done()
    _validate(config)
    return config


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
    _validate_aws(config.aws, tuple(r.name for r in config.regions))
