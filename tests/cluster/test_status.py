"""`rideout status`'s Redis probes go in as the monitor user, and say why they cannot."""

from __future__ import annotations

from pathlib import Path

from rideout.cluster.status import collect_status
from rideout.config import parse_config
from rideout.store.acl import load_or_create_users
from tests.conftest import config_data, running_redis_pair


async def test_status_reads_redis_as_the_monitor(tmp_path: Path) -> None:
    config = parse_config(config_data(tmp_path / ".rideout"))
    async with running_redis_pair(config):
        view = await collect_status(config)
    primary, secondary = (region["redis"]["state"] for region in view["regions"])
    assert (primary["reachable"], primary["role"]) == (True, "master")
    assert (secondary["role"], secondary["link"]) == ("replica", "up")


async def test_without_credentials_status_names_the_missing_file(tmp_path: Path) -> None:
    config = parse_config(config_data(tmp_path / ".rideout"))  # no deployment ever started
    view = await collect_status(config)
    for region in view["regions"]:
        state = region["redis"]["state"]
        assert not state["reachable"]
        assert "monitor.password: no Redis password for rideout-monitor" in state["error"]
    # With credentials but no Redis: unreachable, as before.
    load_or_create_users(config.keys_dir)
    state = (await collect_status(config))["regions"][0]["redis"]["state"]
    assert not state["reachable"]
    assert "monitor.password" not in state["error"]
