"""The runner's pure parts: options, the plan of a pass, objectives (no deployment but
the refusal of a running one)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from rideout.drill.deployment import timeouts
from rideout.drill.errors import DrillError
from rideout.drill.options import DrillOptions, report_head
from rideout.drill.plane import Plane, serves_from, writes_refused
from rideout.drill.records import ConnectedRecord, DrillRecord, RestoredRecord
from rideout.drill.runner import _objectives, _plan, _restored, run_region_outage
from rideout.errors import RideoutError
from tests.drill.conftest import sample_report


def test_objectives() -> None:
    options = DrillOptions(clients=10, max_rto=4.0, max_lost=0)
    found = _objectives(options, sample_report(p99=5.0, lost=1)["passes"][:1])
    assert [o["ok"] for o in found] == [False, False, True, True]
    found = _objectives(options, sample_report(p99=3.0)["passes"][:1])
    assert all(o["ok"] for o in found)
    # A bid applied twice fails the drill even with no objective asked for...
    found = _objectives(DrillOptions(clients=10), sample_report(duplicates=2)["passes"][:1])
    assert [(o["name"], o["ok"]) for o in found] == [
        ("full-jitter: clients whose connection loop failed", True),
        ("full-jitter: bids applied more than once", False),
    ]
    # ...and so does a client whose loop died (a bug in the client), counted by error.
    passes = sample_report()["passes"][:1]
    passes[0]["failed_clients"] = [["AttributeError('when')", 186], ["KeyError('x')", 1]]
    found = _objectives(DrillOptions(clients=10), passes)
    assert (found[0]["value"], found[0]["ok"]) == (187, False)


def test_the_write_rto_objective_gates_each_phase() -> None:
    passes = sample_report(p99=4.0)["passes"][:1]  # restored p99 4 s, write RTO p99 5 s
    found = _objectives(DrillOptions(clients=10, max_rto=4.5, max_write_rto=4.5), passes)
    assert [(o["name"], o["value"], o["ok"]) for o in found[:2]] == [
        ("full-jitter failover: p99 time to restored state", 4.0, True),
        ("full-jitter failover: p99 write RTO (first accepted bid)", 5.0, False),
    ]
    assert _objectives(DrillOptions(clients=10, max_write_rto=6.0), passes)[0]["ok"]
    passes[0]["failover"]["write"]["written_share"] = 0.9  # some never wrote again
    assert not _objectives(DrillOptions(clients=10, max_write_rto=6.0), passes)[0]["ok"]


def test_the_failback_is_gated_by_its_own_limits() -> None:
    passes = sample_report(p99=4.0)["passes"][:1]
    failover = passes[0]["failover"]
    # The failback counts from the restore: its damping hold and drain are in it.
    passes[0]["failback"] = {**failover, "time_to_restored": {**failover["time_to_restored"],
                                                                 "p99": 18.0}}  # fmt: skip
    names = [o["name"] for o in _objectives(DrillOptions(clients=10, max_rto=5.0), passes)]
    assert "full-jitter failback: p99 time to restored state" not in names
    options = DrillOptions(clients=10, failback=True, max_rto=5.0, max_failback_rto=20.0,
                           max_failback_write_rto=4.0)  # fmt: skip
    found = {o["name"]: (o["limit"], o["value"], o["ok"]) for o in _objectives(options, passes)}
    assert found["full-jitter failover: p99 time to restored state"] == (5.0, 4.0, True)
    assert found["full-jitter failback: p99 time to restored state"] == (20.0, 18.0, True)
    assert found["full-jitter failback: p99 write RTO (first accepted bid)"] == (4.0, 5.0, False)
    with pytest.raises(DrillError, match="--failback-rto needs --failback"):
        DrillOptions(max_failback_rto=20.0)
    with pytest.raises(DrillError, match="--failback-write-rto needs --failback"):
        DrillOptions(max_failback_write_rto=20.0)


def test_options_are_checked() -> None:
    with pytest.raises(DrillError, match="--fault"):
        DrillOptions(fault="nuke")
    with pytest.raises(DrillError, match="--replication"):
        DrillOptions(replication="maybe")
    with pytest.raises(DrillError, match="--clients"):
        DrillOptions(clients=0)


def test_rooms_and_the_clients_niceness_are_checked(make_config: Any) -> None:
    for bad, message in [
        ({"clients": 10, "rooms": 0}, "--rooms must be between 1 and --clients (10)"),
        ({"clients": 10, "rooms": 11}, "--rooms must be between 1 and --clients (10)"),
        ({"client_nice": -1}, "--client-nice must be between 0 and 19"),
        ({"client_nice": 20}, "--client-nice must be between 0 and 19"),
        ({"client_nice": 5, "processes": False}, "--client-nice needs the clients in worker processes"),
    ]:  # fmt: skip
        with pytest.raises(DrillError) as caught:
            DrillOptions(**bad)
        assert str(caught.value) == message, bad
    # A niceness puts even a small fleet in worker processes: the drill itself keeps its own.
    plan = _plan(make_config(), DrillOptions(clients=10, rooms=10, client_nice=10), True, "x",
                 now=0.0)  # fmt: skip
    assert (plan.processes, plan.nice, len(plan.rooms)) == (True, 10, 10)
    assert plan.header()["client_nice"] == 10
    assert {s.room(c) for s in plan.specs for c in range(10)} == set(plan.rooms)  # one each


def test_every_drill_refuses_the_same_way() -> None:
    """One set of checks (runner.check_*) serves the three drills: same messages."""
    from rideout.drill.surge import SurgeOptions
    from rideout.drill.zone import ZoneDrillOptions

    cases: list[tuple[Any, dict[str, Any], str]] = [
        (DrillOptions, {"clients": 0}, "--clients must be at least 1"),
        (ZoneDrillOptions, {"clients": 0}, "--clients must be at least 1"),
        (SurgeOptions, {"visitors": 0}, "--visitors must be at least 1"),
        (SurgeOptions, {"capacity": 0}, "--capacity must be at least 1"),
        (DrillOptions, {"fault": "nuke"}, "--fault must be one of kill, freeze, throttle, not 'nuke'"),
        (ZoneDrillOptions, {"fault": "nuke"}, "--fault must be one of kill, freeze, throttle, not 'nuke'"),
        (SurgeOptions, {"inlet": "fifo"}, "--inlet must be one of maxsize, periodic, not 'fifo'"),
        (SurgeOptions, {"fault": "freeze"}, "--fault must be kill (or absent), not 'freeze'"),
    ]  # fmt: skip
    for kind in (DrillOptions, ZoneDrillOptions, SurgeOptions):
        cases.append((kind, {"profile": "slow"}, "--profile must be one of seed, fast"))
    for kind, bad, message in cases:
        with pytest.raises(DrillError) as caught:
            kind(**bad)
        assert str(caught.value) == message, (kind, bad)


def test_report_head_keeps_options_json_able() -> None:
    options = DrillOptions(report_dir=Path("/tmp/r"), env={"SECRET": "x"})
    head = report_head("region-outage", options)
    assert list(head) == ["drill", "started_at", "options"]
    assert head["drill"] == "region-outage"
    assert head["options"]["report_dir"] == "/tmp/r"
    assert "env" not in head["options"]


async def test_refuses_a_running_deployment_with_other_replication(running_async: Path) -> None:
    options = DrillOptions(replication="sync", config_path=running_async, env={})
    with pytest.raises(DrillError, match="uses async replication, not sync"):
        await run_region_outage(options)


def test_drill_errors_are_rideout_errors() -> None:
    assert issubclass(DrillError, RideoutError)
    assert issubclass(DrillError, RuntimeError)  # what callers caught before


def test_a_small_pass_runs_its_clients_in_this_process(make_config: Any) -> None:
    config = make_config()
    plan = _plan(config, DrillOptions(clients=50), True, "full-jitter", now=1_700_000_000.123)
    assert plan.rooms == tuple(f"drill000000123-r{i}" for i in range(3))  # one per 20 clients
    assert not plan.processes
    (spec,) = plan.specs
    assert (spec.first, spec.count, spec.jitter, spec.bid_interval) == (0, 50, True, 1.0)
    assert plan.header() == {
        "name": "full-jitter", "backoff": "full jitter", "clients": 50, "processes": 0,
        "rooms": 3, "bid_interval": 1.0, "client_nice": 0,
    }  # fmt: skip


def test_a_large_pass_splits_its_clients_over_worker_processes(make_config: Any) -> None:
    options = DrillOptions(clients=1001, clients_per_process=400, rooms=7)
    plan = _plan(make_config(), options, False, "no-jitter", now=0.0)
    assert plan.processes
    assert [(s.first, s.count) for s in plan.specs] == [(0, 334), (334, 334), (668, 333)]
    assert {s.rooms for s in plan.specs} == {plan.rooms}
    assert len(plan.rooms) == 7
    assert plan.bid_interval == pytest.approx(1001 / 250)
    assert plan.header()["processes"] == 3
    assert plan.header()["backoff"] == "no jitter"
    forced = _plan(make_config(), DrillOptions(clients=10, processes=True), True, "x", now=0.0)
    assert forced.processes
    assert len(forced.specs) == 1


def test_timeouts_follow_the_profile(make_config: Any) -> None:
    config = make_config()
    t = config.timing
    failover, recovery = timeouts(config, DrillOptions())
    assert failover == (t.failover_datapoints + 4) * t.canary_interval * 3 + t.dns_ttl + 20
    assert recovery == max(30.0, failover + 4 * t.backoff_cap)
    assert timeouts(config, DrillOptions(recovery_timeout=7.0))[1] == 7.0


def test_restored_clients_and_where_the_deployment_serves_from() -> None:
    records: list[DrillRecord] = [
        RestoredRecord(1, 10.0, "east"),
        RestoredRecord(2, 12.0, "west"),
        ConnectedRecord(3, 12.5, "west"),
        RestoredRecord(1, 13.0, "west"),
    ]
    assert _restored(records, "west") == {1, 2}
    assert _restored(records, "west", since=12.5) == {1}
    serving_west = serves_from("west")
    assert serving_west({"dns": {"region": "west"}, "failover": {"writer": "west"}})
    assert not serving_west({"dns": {"region": "west"}, "failover": {"writer": "east"}})


def test_writes_are_refused_only_in_sync_reject_with_no_replica_following(
    make_config: Any,
) -> None:
    def summary(*replicas: tuple[str, str, str]) -> dict[str, Any]:
        rows = [{"part": "writer", "endpoint": "127.0.2.100:7000", "reachable": True,
                 "role": "master", "link": "n/a", "master": None}]  # fmt: skip
        for role, link, master in replicas:
            rows.append({"part": "cross-region replica", "endpoint": "127.0.1.100:7000",
                         "reachable": True, "role": role, "link": link, "master": master})  # fmt: skip
        return {"failover": {"topology": rows}}

    reject = make_config(failover={"replication": "sync", "replica_down": "reject"})
    following = ("replica", "up", "127.0.2.100:7000")
    assert writes_refused(reject, summary())  # the other region's Redis is gone
    assert writes_refused(reject, summary(("replica", "down", "127.0.2.100:7000")))
    assert writes_refused(reject, summary(("replica", "up", "127.0.9.9:1")))  # follows another
    assert not writes_refused(reject, summary(following))
    assert not writes_refused(reject, None)
    assert not writes_refused(reject, {"failover": {}})
    degrade = make_config(failover={"replication": "sync", "replica_down": "degrade"})
    assert not writes_refused(degrade, summary())
    assert not writes_refused(make_config(failover={"replication": "async"}), summary())


async def test_the_timeline_is_polled_while_the_drill_waits_on_something_else(
    make_config: Any,
) -> None:
    """keep_polling fills the gaps between the waits' own polls, and adds none while
    they poll often enough."""
    plane = Plane(make_config())
    polls: list[float] = []

    async def poll() -> None:
        plane.polled_at = time.monotonic()
        polls.append(plane.polled_at)

    plane.poll = poll  # type: ignore[method-assign]
    task = asyncio.create_task(plane.keep_polling(interval=0.1))
    try:
        await asyncio.sleep(1.0)  # the drill blocked on a command
        alone = len(polls)
        for _ in range(10):  # a wait polling every 50 ms: nothing to add
            await plane.poll()
            await asyncio.sleep(0.05)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await plane.aclose()
    assert 5 <= alone <= 12, polls
    assert len(polls) - alone <= 10 + 1
