"""Evacuating a zone of `rideout up`, end to end: the CLI, the control plane, DNS packets,
resilient clients moving to the region's other zone with no acknowledged bid lost; and
zonal autoshift answering a zone outage without a regional failover."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from rideout.auth import SigningKey, TokenIssuer
from rideout.config import Config, parse_config
from tests.cluster.conftest import rideout, started
from tests.conftest import control_plane_summary as summary
from tests.conftest import until
from tests.evacuate.helpers import (
    AZ1,
    AZ2,
    answers,
    assert_no_acked_bid_lost,
    cli,
    resolve,
    start_bidders,
    stop_bidders,
    wide_status,
)

pytestmark = pytest.mark.slow


def effective_config(workdir: Path) -> Config:
    shown = rideout("config", "show", "--json", "-c", "rideout.toml", cwd=workdir)
    return parse_config(json.loads(shown.stdout))


def token_issuer(config: Config) -> TokenIssuer:
    key = SigningKey.load_or_create(config.keys_dir)
    return TokenIssuer(key, config.auth.issuer, config.auth.audience, 3600)


async def test_evacuate_a_zone_and_recover_it(make_workdir: Callable[..., Path]) -> None:
    workdir = make_workdir()
    config = effective_config(workdir)
    issuer = token_issuer(config)
    token = issuer.issue("checker")
    with started(workdir) as up:
        up.wait_ready()
        assert await resolve(config) == [AZ1, AZ2]
        bidders, tasks = await start_bidders(config, issuer, "evac")
        try:
            # A dry run plans the change and makes none.
            code, plan = cli(workdir, "evacuate", "--zone-id", "use1-az1", "--dry-run", "--json")
            assert code == 0
            assert [
                (s["resource"], s["after"]) for s in plan["plan"] if s["action"] == "remove"
            ] == [("us-east-1", ["use1-az2"])]
            assert await resolve(config) == [AZ1, AZ2]

            code, outcome = cli(workdir, "evacuate", "--zone-id", "use1-az1", "--json")
            assert code == 0, outcome
            assert [s["resource"] for s in outcome["changed"]] == ["us-east-1"]
            # DNS (the `rideout dns` process, real packets) no longer answers the zone.
            await until(lambda: answers(config, [AZ2]), 10)
            assert await resolve(config, f"us-east-1.{config.app_domain}") == [AZ2]
            # The zone's clients are drained (1012) and reconnect to the other zone.
            await until(lambda: all(b.address == AZ2 for b in bidders), 60, message="moved")
            counts = {id(b): b.accepted for b in bidders}
            await until(lambda: all(b.accepted > counts[id(b)] + 2 for b in bidders), 60)

            # The region's last zone is refused, and changes nothing.
            code, refused = cli(workdir, "evacuate", "--zone-id", "use1-az2", "--json")
            assert code == 2
            assert "no subnet" in refused["refused"]
            assert await resolve(config) == [AZ2]

            # `rideout status` probes the control plane within 1.5 s: on a loaded machine a
            # view may lack its summary (and so the evacuations); wait for a full one.
            status: dict[str, Any] = {}

            def full_status() -> bool:
                shown = rideout("status", "--json", "-c", "rideout.toml", cwd=workdir).stdout
                status.update(json.loads(shown))
                return bool(status["control_plane"].get("summary", {}).get("up"))

            await until(lambda: asyncio.to_thread(full_status), 30, interval=0.5)
            zones = {z["name"]: z for r in status["regions"] for z in r["zones"]}
            assert zones["use1-az1"]["evacuation"]["reason"] == "manual"
            assert zones["use1-az2"]["evacuation"] is None
            assert status["dns"]["answer"]["region"] == "us-east-1"
            await until(
                lambda: asyncio.to_thread(lambda: "evacuated (manual" in wide_status(workdir)),
                30,
                interval=0.5,
            )
            code, ledger = cli(workdir, "evacuate", "list", "--json")
            assert [(r["zone_id"], r["resource"], r["removed"]) for r in ledger] == [
                ("use1-az1", "us-east-1", ["use1-az1"])
            ]

            code, back = cli(workdir, "recover", "--zone-id", "use1-az1", "--json")
            assert code == 0, back
            await until(lambda: answers(config, [AZ1, AZ2]), 10)
            assert cli(workdir, "evacuate", "list", "--json")[1] == []
            counts = {id(b): b.accepted for b in bidders}
            await until(lambda: all(b.accepted > counts[id(b)] for b in bidders), 60)

            # A practice shift runs its course and leaves nothing behind.
            practice = rideout("evacuate", "practice", "--zone-id", "use1-az2", "--duration", "2",
                               "-c", "rideout.toml", cwd=workdir, timeout=60)  # fmt: skip
            # The region's alarm (the outcome alarm) may fire on a loaded machine: the
            # practice is then interrupted, as it should be; either way nothing is left.
            outcome = practice.stdout + practice.stderr
            assert (practice.returncode, "practice succeeded" in outcome) == (0, True) or (
                practice.returncode == 1 and "practice interrupted" in outcome
            ), outcome
            assert cli(workdir, "evacuate", "list", "--json")[1] == []
            assert await resolve(config) == [AZ1, AZ2]
        finally:
            await stop_bidders(bidders, tasks)
        await assert_no_acked_bid_lost(config, token, bidders, AZ1)


async def test_autoshift_evacuates_a_failing_zone_and_the_region_stays(
    make_workdir: Callable[..., Path],
) -> None:
    """One zone's app servers killed: autoshift takes it out of DNS (recorded in the
    ledger), its clients move to the other zone, the region does not fail over; the zone
    restored and healthy for a while, autoshift brings it back."""
    workdir = make_workdir()
    config = effective_config(workdir)
    timing = config.timing
    issuer = token_issuer(config)
    token = issuer.issue("checker")
    with started(workdir) as up:
        up.wait_ready()
        await until(lambda: _alarms_ok(config), 30, interval=0.1)
        bidders, tasks = await start_bidders(config, issuer, "auto")
        try:
            # The clients spread over both zones (the answer rotates, and they shuffle
            # it): the zone killed is the first client's, the other keeps serving.
            assert {b.address for b in bidders} <= {AZ1, AZ2}
            zone, other = ("use1-az1", AZ2) if bidders[0].address == AZ1 else ("use1-az2", AZ1)
            out = rideout("chaos", "kill", "us-east-1", "--zone", zone, "-c", "rideout.toml",
                          cwd=workdir)  # fmt: skip
            assert f"killed zone {zone}" in out.stdout, out.stdout + out.stderr
            shifted = await until(lambda: answers(config, [other]), 30, interval=0.1)
            # About failover_datapoints periods of failed probes, then one round; if not,
            # the control plane's own account says why (its log has every decision).
            assert shifted < (timing.failover_datapoints + 4) * timing.canary_interval + 10, (
                shifted,
                await _account(config),
            )
            state = await summary(config)
            assert [z["evacuation"]["reason"] for z in state["zones"] if z["evacuated"]] == [
                "autoshift"
            ]
            _, ledger = cli(workdir, "evacuate", "list", "--json")
            assert [(r["zone_id"], r["operator"]) for r in ledger] == [(zone, "autoshift")]
            await until(lambda: all(b.address == other for b in bidders), 60, message="moved")
            counts = {id(b): b.accepted for b in bidders}
            await until(lambda: all(b.accepted > counts[id(b)] + 2 for b in bidders), 60)
            state = await summary(config)
            assert state["failover"]["writer"] == "us-east-1"
            assert state["failover"]["failovers"] == 0, await _account(config)
            assert state["alarms"]["us-east-1"]["state"] == "OK"

            rideout("chaos", "restore", "us-east-1", "-c", "rideout.toml", cwd=workdir)
            back = config.evacuate.autoshift_recover_after + 30
            await until(lambda: answers(config, [AZ1, AZ2]), back, interval=0.2)
            assert cli(workdir, "evacuate", "list", "--json")[1] == []
            state = await summary(config)
            assert state["failover"]["failovers"] == 0
            # The operator reads both decisions in the control plane's log, with their time.
            log = (await _account(config))["log"]
            for action in ("evacuate", "recover"):
                assert any(f"INFO: autoshift {action} {zone} (" in line for line in log), log
        finally:
            await stop_bidders(bidders, tasks)
        await assert_no_acked_bid_lost(config, token, bidders, other)


async def _account(config: Config) -> dict[str, Any]:
    """What the control plane did and why: its autoshift and failover events, each
    region's alarm history, and its log's lines other than requests."""
    state = await summary(config)
    log = (config.logs_dir / "control-plane.log").read_text(errors="replace").splitlines()
    return {
        "autoshift": state["autoshift"]["events"],
        "failover": state["failover"].get("events"),
        "alarms": {r: a["history"] for r, a in state["alarms"].items()},
        "log": [line for line in log if '"GET ' not in line and '"POST ' not in line][-40:],
    }


async def _alarms_ok(config: Config) -> bool:
    try:
        state = await summary(config)
    except httpx.HTTPError:
        return False
    return {a["state"] for a in state["alarms"].values()} == {"OK"}
