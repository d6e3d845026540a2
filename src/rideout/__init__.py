"""rideout: keep live services up through regional outages, zone failures and traffic surges."""

from __future__ import annotations

from rideout.config import Config, ConfigError, load_config

__version__ = "0.1.0"

__all__ = ["Config", "ConfigError", "__version__", "load_config"]
