"""The supervisor's children as Prometheus metrics, for the control plane's ``/metrics``.

The supervisor has no HTTP server; it records each child's state and restarts in
``run/up.json``. :class:`ProcessMetrics` reads that file at every scrape. The local
composition (``rideout control-plane`` in local mode) registers it in the control
plane's registry, so the control plane exports it without importing this package.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from rideout.cluster.runstate import RunState

__all__ = ["ProcessMetrics"]

_LABELS = ["process", "kind"]


class ProcessMetrics(Collector):
    """``rideout_process_restarts_total``, ``rideout_process_up`` and
    ``rideout_process_gave_up``, labelled by process name and kind."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir

    def _families(self) -> tuple[CounterMetricFamily, GaugeMetricFamily, GaugeMetricFamily]:
        return (
            CounterMetricFamily(
                "rideout_process_restarts",
                "Times the supervisor restarted a process that died on its own.",
                labels=_LABELS,
            ),
            GaugeMetricFamily(
                "rideout_process_up", "1 while a supervised process runs.", labels=_LABELS
            ),
            GaugeMetricFamily(
                "rideout_process_gave_up",
                "1 for a process left down after crash-looping past its restart limit.",
                labels=_LABELS,
            ),
        )

    def describe(self) -> Iterator[Metric]:
        yield from self._families()

    def collect(self) -> Iterator[Metric]:
        restarts, up, gave_up = self._families()
        state = RunState.read(self.run_dir)
        for record in state.processes if state else []:
            labels = [record.name, record.kind]
            restarts.add_metric(labels, record.restarts)
            up.add_metric(labels, 1 if record.state == "running" and record.pid else 0)
            gave_up.add_metric(labels, 1 if record.state == "gave-up" else 0)
        yield from (restarts, up, gave_up)
