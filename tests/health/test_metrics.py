"""The metric store: keys, puts and queries, retention, bounds, period statistics."""

from __future__ import annotations

import pytest

from rideout.health.metrics import (
    MAX_DIMENSIONS,
    MetricError,
    MetricKey,
    MetricStore,
    Statistic,
    aggregate,
    statistic_value,
)


def zone_key(region: str = "us-east-1", zone: str = "use1-az1") -> MetricKey:
    return MetricKey.of("App", "WebSocketHealth", {"ApiId": region, "Zone": zone})


# ------------------------------------------------------------------ keys


def test_key_dimensions_are_sorted_and_hashable() -> None:
    a = MetricKey("App", "M", (("Zone", "z"), ("ApiId", "r")))
    b = MetricKey.of("App", "M", {"ApiId": "r", "Zone": "z"})
    assert a == b
    assert hash(a) == hash(b)
    assert a.dimensions == (("ApiId", "r"), ("Zone", "z"))
    assert len({a, b}) == 1


def test_key_matching() -> None:
    key = zone_key()
    assert key.matches("App", "WebSocketHealth", {"ApiId": "us-east-1"})
    assert key.matches("App", "WebSocketHealth", {})
    assert not key.matches("App", "WebSocketHealth", {"ApiId": "us-west-2"})
    assert not key.matches("App", "Other", {"ApiId": "us-east-1"})
    assert not key.matches("Else", "WebSocketHealth", {"ApiId": "us-east-1"})
    assert not key.matches("App", "WebSocketHealth", {"Shard": "1"})
    assert not key.matches("App", "WebSocketHealth", {}, exclude={"Zone": {"use1-az1"}})
    assert key.matches("App", "WebSocketHealth", {}, exclude={"Zone": {"use1-az2"}})


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("", "M"), "namespace"),
        (("App", ""), "metric name"),
        (("App", "x" * 256), "longer than 255"),
        (("App", "M", (("A", "1"), ("A", "2"))), "unique"),
        (("App", "M", (("A", ""),)), "value of dimension"),
        (("App", "M", (("", "v"),)), "dimension name"),
        (("App", "M", (("A",),)), "pair"),
        (("App", "M\n"), "printable"),
        (("App", "M", tuple((f"d{i}", "v") for i in range(MAX_DIMENSIONS + 1))), "at most"),
    ],
)
def test_key_validation(args: tuple[object, ...], message: str) -> None:
    with pytest.raises(MetricError, match=message):
        MetricKey(*args)  # type: ignore[arg-type]


# ------------------------------------------------------------------ puts and queries


def test_put_and_query_half_open_sorted() -> None:
    store = MetricStore(retention=100)
    key = zone_key()
    for t, v in [(3.0, 3.0), (1.0, 1.0), (2.0, 2.0), (2.0, 2.5), (5.0, 5.0)]:
        assert store.put(key, v, t)
    assert store.datapoints(key, 1.0, 5.0) == [(1.0, 1.0), (2.0, 2.0), (2.0, 2.5), (3.0, 3.0)]
    assert store.datapoints(key, 2.5, 100.0) == [(3.0, 3.0), (5.0, 5.0)]
    assert store.datapoints(zone_key(zone="other"), 0, 100) == []
    assert len(store) == 1
    assert store.keys() == [key]


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf"), True, "1", None])
def test_values_must_be_finite_numbers(value: object) -> None:
    store = MetricStore(retention=100)
    with pytest.raises(MetricError):
        store.put(zone_key(), value, 1.0)  # type: ignore[arg-type]
    assert len(store) == 0


def test_timestamps_validated() -> None:
    store = MetricStore(retention=100, max_future=60)
    with pytest.raises(MetricError, match="timestamp"):
        store.put(zone_key(), 1.0, float("nan"))
    with pytest.raises(MetricError, match="after now"):
        store.put(zone_key(), 1.0, 1000.0, now=900.0)
    assert store.put(zone_key(), 1.0, 950.0, now=900.0)
    with pytest.raises(MetricError, match="MetricKey"):
        store.put(("App", "M"), 1.0, 1.0)  # type: ignore[arg-type]


def test_datapoints_matching_merges_zones() -> None:
    store = MetricStore(retention=1000)
    store.put(zone_key(zone="use1-az1"), 1.0, 10.0)
    store.put(zone_key(zone="use1-az2"), 0.0, 11.0)
    store.put(zone_key(zone="use1-az1"), 1.0, 12.0)
    store.put(zone_key("us-west-2", "usw2-az1"), 0.5, 10.5)
    merged = store.datapoints_matching("App", "WebSocketHealth", {"ApiId": "us-east-1"}, 0, 100)
    assert merged == [(10.0, 1.0), (11.0, 0.0), (12.0, 1.0)]
    assert store.datapoints_matching(
        "App", "WebSocketHealth", {"ApiId": "us-east-1"}, 0, 100, exclude={"Zone": {"use1-az2"}}
    ) == [(10.0, 1.0), (12.0, 1.0)]
    assert len(store.datapoints_matching("App", "WebSocketHealth", {}, 0, 100)) == 4


# ------------------------------------------------------------------ retention and bounds


def test_retention_relative_to_newest_put() -> None:
    store = MetricStore(retention=10)
    a, b = zone_key(zone="a"), zone_key(zone="b")
    store.put(a, 1.0, 0.0)
    store.put(b, 1.0, 5.0)
    store.put(a, 1.0, 12.0)
    assert store.horizon == 2.0
    assert store.datapoints(a, -100, 100) == [(12.0, 1.0)]
    assert store.datapoints(b, -100, 100) == [(5.0, 1.0)]
    assert not store.put(a, 1.0, 1.0)  # already expired: not stored
    assert store.datapoints(a, -100, 100) == [(12.0, 1.0)]
    assert store.prune(now=16.0) == 1  # b's point at 5.0 goes, and with it the series
    assert store.keys() == [a]
    assert store.datapoints(b, -100, 100) == []


def test_prune_never_moves_back() -> None:
    store = MetricStore(retention=10)
    store.put(zone_key(), 1.0, 100.0)
    assert store.prune(now=50.0) == 0
    assert store.horizon == 90.0


def test_series_count_is_bounded() -> None:
    store = MetricStore(retention=10, max_series=3)
    for i in range(3):
        store.put(zone_key(zone=f"z{i}"), 1.0, float(i))
    with pytest.raises(MetricError, match="3 series"):
        store.put(zone_key(zone="z3"), 1.0, 3.0)
    store.put(zone_key(zone="z0"), 1.0, 3.0)  # an existing series still takes points
    store.put(zone_key(zone="z2"), 1.0, 12.5)  # z1's only point (1.0) expires with this
    assert store.put(zone_key(zone="z3"), 1.0, 12.6)  # room after pruning
    assert len(store) == 3


def test_points_per_series_are_bounded() -> None:
    store = MetricStore(retention=1e9, max_points=5)
    for i in range(8):
        store.put(zone_key(), float(i), float(i))
    assert [t for t, _ in store.datapoints(zone_key(), 0, 100)] == [3.0, 4.0, 5.0, 6.0, 7.0]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"retention": 0},
        {"retention": float("inf")},
        {"retention": 1, "max_series": 0},
        {"retention": 1, "max_points": 1.5},
        {"retention": 1, "max_future": -1},
    ],
)
def test_store_validation(kwargs: dict[str, float]) -> None:
    with pytest.raises(MetricError):
        MetricStore(**kwargs)  # type: ignore[arg-type]


# ------------------------------------------------------------------ statistics


@pytest.mark.parametrize(
    ("statistic", "expected"),
    [
        ("Minimum", [0.0, None, 4.0]),
        ("Maximum", [2.0, None, 4.0]),
        ("Average", [1.0, None, 4.0]),
        ("Sum", [3.0, None, 4.0]),
        ("SampleCount", [3.0, None, 1.0]),
    ],
)
def test_aggregate_statistics(statistic: Statistic, expected: list[float | None]) -> None:
    pts = [(0.0, 1.0), (5.0, 0.0), (9.99, 2.0), (20.0, 4.0)]
    assert aggregate(pts, 10.0, 0.0, statistic) == expected


def test_aggregate_periods_and_bounds() -> None:
    pts = [(-1.0, 9.0), (10.0, 1.0), (19.0, 3.0), (30.0, 5.0), (40.0, 7.0)]
    # 10.0 starts period 0; 40.0 is beyond 3 periods; -1.0 is before start
    assert aggregate(pts, 10.0, 10.0, "Average", periods=3) == [2.0, None, 5.0]
    assert aggregate(pts, 10.0, 10.0, "Average") == [2.0, None, 5.0, 7.0]
    assert aggregate([], 10.0, 0.0, "Average") == []
    assert aggregate([], 10.0, 0.0, "Average", periods=2) == [None, None]
    assert aggregate([(0.25, 1.0), (0.5, 0.0)], 0.25, 0.0, "Minimum") == [None, 1.0, 0.0]


def test_aggregate_validation() -> None:
    with pytest.raises(MetricError, match="period"):
        aggregate([], 0.0, 0.0, "Average")
    with pytest.raises(MetricError, match="statistic"):
        aggregate([], 1.0, 0.0, "Median")  # type: ignore[arg-type]
    with pytest.raises(MetricError, match="periods"):
        aggregate([], 1.0, 0.0, "Average", periods=-1)
    with pytest.raises(MetricError, match="statistic"):
        statistic_value([1.0], "p99")  # type: ignore[arg-type]
    assert statistic_value([], "Sum") is None
