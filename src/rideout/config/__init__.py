"""Topology and settings: one `rideout.toml`, defaults for everything, `RIDEOUT_*` overrides.

Precedence, lowest first: built-in defaults (the local two-region topology of ARCHITECTURE.md, "The picture"), the
timing profile named by ``profile``, the TOML file, then environment variables. Every
problem is reported as a :class:`ConfigError` naming the key and what is wrong with it.

Environment variables: ``RIDEOUT_<KEY>`` sets a top-level key and
``RIDEOUT_<SECTION>__<KEY>`` a key of a section (``RIDEOUT_TIMING__DNS_TTL=2``,
``RIDEOUT_CONTROL_PLANE__PORT=9100``). Regions and zones are structured and come from the
file only. ``RIDEOUT_CONFIG`` names the file when no path is given explicitly.

The package, each module importing only those before it: ``_reader`` (typed reads of one
table, :class:`ConfigError`), ``_services`` (Redis and AWS), ``_sections`` (the
deployment's own settings), ``_topology`` (regions and zones), ``_config``
(:class:`Config`), ``_output`` (``config_to_dict``, ``dump_toml``) and ``_load`` (the file
and the environment, ``parse_config``, ``load_config``). Import from here.
"""

from __future__ import annotations

from rideout.config._config import Config
from rideout.config._load import DEFAULT_CONFIG_FILE, load_config
from rideout.config._load import ENV_NOT_KEYS as ENV_NOT_KEYS
from rideout.config._load import ENV_PREFIX as ENV_PREFIX
from rideout.config._load import parse_config as parse_config
from rideout.config._output import config_to_dict as config_to_dict
from rideout.config._output import dump_toml
from rideout.config._reader import ConfigError
from rideout.config._sections import (
    EVACUATE_PROFILES,
    FAILOVER_PROFILES,
    PROFILES,
    AuthConfig,
    ControlPlaneConfig,
    EvacuateConfig,
    FailoverConfig,
    RealtimeConfig,
    Timing,
    WaitingRoomConfig,
)
from rideout.config._services import (
    AwsConfig,
    AwsRegionConfig,
    EvacuateAwsConfig,
    RedisAccessConfig,
    RedisConfig,
    RedisTLS,
    region_env_name,
)
from rideout.config._topology import RegionConfig, ZoneConfig

__all__ = [
    "DEFAULT_CONFIG_FILE",
    "EVACUATE_PROFILES",
    "FAILOVER_PROFILES",
    "PROFILES",
    "AuthConfig",
    "AwsConfig",
    "AwsRegionConfig",
    "Config",
    "ConfigError",
    "ControlPlaneConfig",
    "EvacuateAwsConfig",
    "EvacuateConfig",
    "FailoverConfig",
    "RealtimeConfig",
    "RedisAccessConfig",
    "RedisConfig",
    "RedisTLS",
    "RegionConfig",
    "Timing",
    "WaitingRoomConfig",
    "ZoneConfig",
    "dump_toml",
    "load_config",
    "region_env_name",
]
