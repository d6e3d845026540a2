"""The supervisor's children as Prometheus metrics, read from run/up.json at each scrape."""

from __future__ import annotations

import os
from collections.abc import Callable

from prometheus_client import CollectorRegistry, generate_latest

from rideout.cluster.metrics import ProcessMetrics
from rideout.cluster.runstate import ProcessRecord, RunLock, RunState
from rideout.cluster.status import collect_status
from rideout.config import Config


def records() -> list[ProcessRecord]:
    return [
        ProcessRecord("control-plane", "control-plane", os.getpid(), restarts=2),
        ProcessRecord("app-usw2-az2", "app", 0, region="us-west-2", zone="usw2-az2",
                      state="gave-up", restarts=5,
                      note="crash-looping, gave up after 5 restarts"),
        ProcessRecord("redis-us-west-2", "redis", 0, region="us-west-2", state="stopped",
                      note="stopped by `rideout chaos kill`"),
    ]  # fmt: skip


async def test_counts_come_from_the_run_state(make_config: Callable[..., Config]) -> None:
    config = make_config()
    registry = CollectorRegistry()
    registry.register(ProcessMetrics(config.run_dir))
    assert registry.get_sample_value("rideout_process_restarts_total", {}) is None  # no file
    RunState(os.getpid(), 0.0, "x", records()).write(config.run_dir)

    def value(name: str, process: str, kind: str) -> float | None:
        return registry.get_sample_value(name, {"process": process, "kind": kind})

    assert value("rideout_process_restarts_total", "control-plane", "control-plane") == 2
    assert value("rideout_process_up", "control-plane", "control-plane") == 1
    assert value("rideout_process_restarts_total", "app-usw2-az2", "app") == 5
    assert value("rideout_process_up", "app-usw2-az2", "app") == 0
    assert value("rideout_process_gave_up", "app-usw2-az2", "app") == 1
    assert value("rideout_process_gave_up", "redis-us-west-2", "redis") == 0
    assert b"# TYPE rideout_process_restarts_total counter" in generate_latest(registry)

    # `status --json` has the same, per process.
    lock = RunLock(config.run_dir)
    lock.acquire()
    try:
        view = await collect_status(config, probe=False)
    finally:
        lock.release()
    assert view["control_plane"]["restarts"] == 2
    zone = view["regions"][1]["zones"][1]
    assert (zone["pid"], zone["alive"], zone["supervision"]) == (None, False, "gave-up")
    assert zone["note"] == "crash-looping, gave up after 5 restarts"
    assert view["regions"][1]["redis"]["supervision"] == "stopped"
    assert view["dns"]["supervision"] is None  # not recorded: no such process
