"""`rideout status`'s probes: Redis as the monitor user (and why they cannot), and what
is left listening when nothing runs."""

from __future__ import annotations

from pathlib import Path

from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

from rideout import routes
from rideout.cluster.status import collect_status
from rideout.config import parse_config
from rideout.store.acl import load_or_create_users
from tests.conftest import config_data, running_redis_pair, serving


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


async def test_with_nothing_running_status_still_finds_what_was_left_listening(
    tmp_path: Path,
) -> None:
    """No supervisor: the probes look briefly (a name server that is not there is not
    waited out for a second), but a server left behind still shows up."""
    config = parse_config(config_data(tmp_path / ".rideout"))
    zone = config.regions[0].zones[0]
    left = Starlette(routes=[Route(routes.HEALTH, lambda _: JSONResponse({"ok": True}))])
    async with serving(left, zone.address, config.app_port):
        view = await collect_status(config)
    assert view["running"] is False
    zones = {z["name"]: z for r in view["regions"] for z in r["zones"]}
    assert zones[zone.name]["health"]["up"] is True
    assert not any(z["health"]["up"] for name, z in zones.items() if name != zone.name)
    assert view["dns"]["answer"]["up"] is False
