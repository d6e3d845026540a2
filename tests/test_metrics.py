"""rideout._metrics: LabelCache, one child per set of label values, counting into the metric."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter

from rideout._metrics import LabelCache


def test_the_same_values_get_the_same_child_and_count_into_the_metric() -> None:
    registry = CollectorRegistry()
    counter = Counter(
        "things", "Things, by kind and outcome.", ["kind", "outcome"], registry=registry
    )
    cache = LabelCache(counter)
    assert cache("a", "ok") is cache("a", "ok")
    assert cache("a", "ok") is not cache("a", "failed")
    cache("a", "ok").inc()
    cache("a", "ok").inc()
    cache("b", "failed").inc()
    assert registry.get_sample_value("things_total", {"kind": "a", "outcome": "ok"}) == 2
    assert registry.get_sample_value("things_total", {"kind": "b", "outcome": "failed"}) == 1
