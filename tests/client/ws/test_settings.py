"""The WebSocket client's settings: the profiles' values and the checks."""

from __future__ import annotations

import pytest

from rideout.backoff import FullJitter
from rideout.client.ws import DEFAULT_OPEN_TIMEOUT, AuctionClient, ClientSettings
from rideout.config import PROFILES, Config, parse_config


def test_settings_from_the_config_and_their_checks() -> None:
    config = parse_config({"profile": "seed"})
    seed = ClientSettings.from_config(config)
    assert (seed.heartbeat_interval, seed.heartbeat_timeout, seed.heartbeat_failures) == (30, 35, 2)
    assert seed.backoff == FullJitter(2.0, 20.0)
    assert seed.compression is None
    fast = ClientSettings.from_config(parse_config({}), max_attempts=5)
    assert (fast.heartbeat_interval, fast.heartbeat_timeout, fast.backoff) == (
        1.0, 2.0, FullJitter(0.25, 2.0)
    )  # fmt: skip
    assert fast.max_attempts == 5
    with pytest.raises(ValueError, match="longer than heartbeat_interval"):
        ClientSettings(heartbeat_interval=5, heartbeat_timeout=5)
    with pytest.raises(ValueError, match="heartbeat_failures"):
        ClientSettings(heartbeat_failures=0)
    with pytest.raises(TypeError, match="delay policy"):
        ClientSettings(backoff=2.0)  # type: ignore[arg-type]


def test_the_opening_handshake_gets_at_most_the_heartbeat_timeout() -> None:
    """A frozen server's kernel still completes the TCP handshake; the WebSocket one
    then never finishes. Waiting for it longer than the heartbeat timeout helps nobody."""
    assert ClientSettings.from_config(Config(timing=PROFILES["fast"])).open_timeout == 2.0
    assert (
        ClientSettings.from_config(Config(timing=PROFILES["seed"])).open_timeout
        == DEFAULT_OPEN_TIMEOUT
    )


def test_from_config_builds_a_client_for_the_deployment() -> None:
    config = parse_config({"profile": "seed"})
    client = AuctionClient.from_config(config, token="t")
    assert (client.name, client.port) == (config.app_domain, config.app_port)
    assert client.settings == ClientSettings.from_config(config)
