"""A Prometheus labelled metric's children, looked up once per label set.

``metric.labels(...)`` validates the values and takes a lock on every call (a few
microseconds); counters on a hot path (every message, every request) keep their
children here instead.
"""

from __future__ import annotations

from typing import Any

from prometheus_client.metrics import MetricWrapperBase

__all__ = ["LabelCache"]


class LabelCache:
    """``cache(*values)`` is ``metric.labels(*values)``, built once per set of values."""

    __slots__ = ("_children", "_metric")

    def __init__(self, metric: MetricWrapperBase) -> None:
        self._metric = metric
        self._children: dict[tuple[str, ...], Any] = {}

    def __call__(self, *values: str) -> Any:
        child = self._children.get(values)
        if child is None:
            child = self._children[values] = self._metric.labels(*values)
        return child
