"""The effective configuration written out: TOML-shaped data and a `rideout.toml`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from typing import Any

from rideout.config._config import Config
from rideout.config._services import AwsConfig, RedisConfig

__all__ = ["config_to_dict", "dump_toml"]


def config_to_dict(config: Config) -> dict[str, Any]:
    """The config as TOML-shaped data; `parse_config` of it gives the same Config."""
    return {
        "app_domain": config.app_domain,
        "mode": config.mode,
        "data_dir": str(config.data_dir),
        "app_port": config.app_port,
        "profile": config.profile,
        "redis_server": config.redis_server,
        "control_plane": _section(config.control_plane),
        "timing": _section(config.timing),
        "auth": _section(config.auth),
        "realtime": _section(config.realtime),
        "failover": _section(config.failover),
        "waitingroom": _section(config.waitingroom),
        "evacuate": _section(config.evacuate),
        "evacuate_aws": _section(config.evacuate_aws),
        "aws": _aws_section(config.aws),
        "redis": _section(config.redis),
        **({"keys_dir": str(config.secrets_dir)} if config.secrets_dir is not None else {}),
        "regions": [
            {
                "name": r.name,
                "role": r.role,
                "redis": {
                    **_region_redis(r.redis),
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


def _aws_section(aws: AwsConfig) -> dict[str, Any]:
    data = {f.name: getattr(aws, f.name) for f in fields(aws) if f.name not in ("tags", "regions")}
    data["tags"] = dict(aws.tags)
    data["regions"] = {
        r.name: {
            f.name: list(v) if isinstance(v := getattr(r, f.name), tuple) else v
            for f in fields(r)
            if f.name != "name"
        }
        for r in aws.regions
    }
    return data


def _region_redis(redis: RedisConfig) -> dict[str, Any]:
    if not redis.url:
        return {"address": redis.address, "port": redis.port}
    out: dict[str, Any] = {"url": redis.url}
    if redis.tls is not None:
        out.update(ca_file=redis.tls.ca_file, cert_file=redis.tls.cert_file,
                   key_file=redis.tls.key_file)  # fmt: skip
    return out


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
    sections = ("control_plane", "timing", "auth", "realtime", "failover", "waitingroom")
    for section in (*sections, "evacuate", "evacuate_aws", "redis"):
        lines.append(f"\n[{section}]")
        lines.extend(f"{k} = {_toml_value(v)}" for k, v in data[section].items())
    aws = data["aws"]
    lines.append("\n[aws]")
    lines.extend(f"{k} = {_toml_value(v)}" for k, v in aws.items() if k not in ("tags", "regions"))
    lines.append(f"tags = {_toml_value(aws['tags'])}")
    for name, region in aws["regions"].items():
        lines.append(f"\n[aws.regions.{name}]")
        lines.extend(f"{k} = {_toml_value(v)}" for k, v in region.items())
    for region in data["regions"]:
        lines.append("\n[[regions]]")
        lines.append(f"name = {_toml_value(region['name'])}")
        lines.append(f"role = {_toml_value(region['role'])}")
        lines.append(f"redis = {_toml_value(region['redis'])}")
        lines.append("zones = [")
        lines.extend(f"  {_toml_value(z)}," for z in region["zones"])
        lines.append("]")
    return "\n".join(lines) + "\n"
