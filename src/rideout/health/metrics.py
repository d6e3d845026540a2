"""A PutMetricData-like time series store and CloudWatch-style period statistics.

The canary pushes one datapoint per probe per zone, 1 healthy / 0 unhealthy, as
``App/WebSocketHealth`` with dimensions ``ApiId=<region>`` and ``Zone=<zone>``. The
region's alarm asks for ``App/WebSocketHealth`` with ``ApiId=<region>`` only:
:meth:`MetricStore.datapoints_matching` merges every series whose dimensions include
the ones asked for (CloudWatch itself matches dimensions exactly; rideout queries across
the ``Zone`` dimension instead of making the canary push a second, region-level series).
With statistic ``Minimum`` a period's datapoint is 0 as soon as any zone's probe failed
in it, which is what "the region is unhealthy if a probe fails" means.

Everything is in memory and pure: no clock is read, timestamps are float seconds given
by the caller. Retention is relative to the newest timestamp seen (a put, or the ``now``
of :meth:`MetricStore.prune`), the number of series and of points per series are
bounded, and bad input raises :class:`MetricError` (a ValueError) before anything is
stored.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Literal, get_args

from rideout.errors import RideoutError

__all__ = [
    "MAX_DIMENSIONS",
    "MAX_NAME_LENGTH",
    "STATISTICS",
    "MetricError",
    "MetricKey",
    "MetricStore",
    "Statistic",
    "aggregate",
    "statistic_value",
]

Statistic = Literal["Minimum", "Maximum", "Average", "Sum", "SampleCount"]
STATISTICS: Final[tuple[Statistic, ...]] = get_args(Statistic)

MAX_NAME_LENGTH: Final = 255  # CloudWatch: namespace, metric and dimension names, values
MAX_DIMENSIONS: Final = 30  # CloudWatch's limit per metric


class MetricError(RideoutError, ValueError):
    """A metric name, dimension, value or timestamp was refused; the message says why.

    The base of the health package's errors.
    """


def _check_name(what: str, value: object) -> str:
    if not isinstance(value, str):
        raise MetricError(f"{what} must be a string, not {type(value).__name__}")
    if not value:
        raise MetricError(f"{what} must not be empty")
    if len(value) > MAX_NAME_LENGTH:
        raise MetricError(f"{what} is longer than {MAX_NAME_LENGTH} characters: {value[:40]!r}…")
    if not value.isprintable():
        raise MetricError(f"{what} must be printable text: {value!r}")
    return value


def _check_number(what: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise MetricError(f"{what} must be a number, not {value!r}")
    number = float(value)
    if not math.isfinite(number):
        raise MetricError(f"{what} must be finite, not {value!r}")
    return number


@dataclass(frozen=True, slots=True)
class MetricKey:
    """One series: namespace, metric name and dimensions (kept sorted by name)."""

    namespace: str
    name: str
    dimensions: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        _check_name("namespace", self.namespace)
        _check_name("metric name", self.name)
        dims = tuple(self.dimensions)
        if len(dims) > MAX_DIMENSIONS:
            raise MetricError(f"at most {MAX_DIMENSIONS} dimensions, got {len(dims)}")
        for pair in dims:
            if not isinstance(pair, tuple) or len(pair) != 2:
                raise MetricError(f"a dimension is a (name, value) pair, not {pair!r}")
            _check_name("dimension name", pair[0])
            _check_name(f"value of dimension {pair[0]!r}", pair[1])
        ordered = tuple(sorted(dims))
        names = [name for name, _ in ordered]
        if len(set(names)) != len(names):
            raise MetricError(f"dimension names must be unique: {names}")
        object.__setattr__(self, "dimensions", ordered)

    @classmethod
    def of(
        cls, namespace: str, name: str, dimensions: Mapping[str, str] | None = None
    ) -> MetricKey:
        """A key from a dimensions mapping (``{"ApiId": "us-east-1", "Zone": "use1-az1"}``)."""
        return cls(namespace, name, tuple((dimensions or {}).items()))

    def matches(
        self,
        namespace: str,
        name: str,
        dimensions: Mapping[str, str],
        exclude: Mapping[str, Collection[str]] | None = None,
    ) -> bool:
        """True when this series has `namespace`/`name` and at least `dimensions`.

        A series whose value for a dimension named in `exclude` is one of the excluded
        values does not match (an evacuated zone's canary series, for instance).
        """
        if self.namespace != namespace or self.name != name:
            return False
        own = dict(self.dimensions)
        if any(own.get(k) != v for k, v in dimensions.items()):
            return False
        return not exclude or not any(own.get(k) in values for k, values in exclude.items())


class _Series:
    """One series' points, sorted by timestamp (parallel lists for bisect)."""

    __slots__ = ("timestamps", "values")

    def __init__(self) -> None:
        self.timestamps: list[float] = []
        self.values: list[float] = []

    def add(self, timestamp: float, value: float) -> None:
        if not self.timestamps or timestamp >= self.timestamps[-1]:
            self.timestamps.append(timestamp)
            self.values.append(value)
            return
        i = bisect.bisect_right(self.timestamps, timestamp)
        self.timestamps.insert(i, timestamp)
        self.values.insert(i, value)

    def drop_before(self, horizon: float) -> None:
        i = bisect.bisect_left(self.timestamps, horizon)
        if i:
            del self.timestamps[:i]
            del self.values[:i]

    def drop_oldest(self, count: int) -> None:
        del self.timestamps[:count]
        del self.values[:count]

    def between(self, start: float, end: float) -> list[tuple[float, float]]:
        lo = bisect.bisect_left(self.timestamps, start)
        hi = bisect.bisect_left(self.timestamps, end)
        return list(zip(self.timestamps[lo:hi], self.values[lo:hi], strict=True))


class MetricStore:
    """In-memory series with bounded retention, series count and points per series.

    ``retention`` seconds of data are kept, counted back from the newest timestamp the
    store has seen (a :meth:`put`, or the ``now`` given to :meth:`prune`). Puts older
    than that are not stored. ``max_series`` distinct keys at most: a put that would
    create one more raises :class:`MetricError` (after pruning expired series). Each
    series keeps at most ``max_points`` points, the oldest going first.
    """

    def __init__(
        self,
        retention: float,
        *,
        max_series: int = 10_000,
        max_points: int = 100_000,
        max_future: float = 7200.0,
    ) -> None:
        retention = _check_number("retention", retention)
        if retention <= 0:
            raise MetricError(f"retention must be > 0 seconds, not {retention!r}")
        for what, bound in (("max_series", max_series), ("max_points", max_points)):
            if isinstance(bound, bool) or not isinstance(bound, int) or bound < 1:
                raise MetricError(f"{what} must be a positive integer, not {bound!r}")
        max_future = _check_number("max_future", max_future)
        if max_future < 0:
            raise MetricError(f"max_future must be >= 0 seconds, not {max_future!r}")
        self.retention = retention
        self.max_series = max_series
        self.max_points = max_points
        self.max_future = max_future
        self._series: dict[MetricKey, _Series] = {}
        self._newest = -math.inf

    # ------------------------------------------------------------------ writes

    @property
    def horizon(self) -> float:
        """Points older than this timestamp are expired (``-inf`` while the store is empty)."""
        return self._newest - self.retention

    def put(
        self, key: MetricKey, value: float, timestamp: float, *, now: float | None = None
    ) -> bool:
        """Store one datapoint; False when it is already older than the retention.

        With `now` (the receiver's clock) a timestamp more than ``max_future`` seconds
        ahead of it is refused, as CloudWatch refuses datapoints from the far future: one
        such point would otherwise expire every real one.
        """
        if not isinstance(key, MetricKey):
            raise MetricError(f"key must be a MetricKey, not {type(key).__name__}")
        value = _check_number(f"value of {key.name}", value)
        timestamp = _check_number("timestamp", timestamp)
        if now is not None:
            now = _check_number("now", now)
            if timestamp > now + self.max_future:
                raise MetricError(
                    f"timestamp {timestamp} is more than {self.max_future:g} s after now ({now})"
                )
            self._advance(now)
        if timestamp < self.horizon:
            return False
        series = self._series.get(key)
        if series is None:
            if len(self._series) >= self.max_series:
                self.prune()
            if len(self._series) >= self.max_series:
                raise MetricError(
                    f"the store holds {self.max_series} series already; refusing a new one "
                    f"({key.namespace}/{key.name} {dict(key.dimensions)})"
                )
            series = self._series[key] = _Series()
        series.add(timestamp, value)
        if len(series.timestamps) > self.max_points:
            series.drop_oldest(len(series.timestamps) - self.max_points)
        if timestamp > self._newest:
            self._advance(timestamp)
            series.drop_before(self.horizon)
        return True

    def _advance(self, now: float) -> None:
        self._newest = max(self._newest, now)

    def prune(self, now: float | None = None) -> int:
        """Drop expired points (and emptied series); returns how many points went."""
        if now is not None:
            self._advance(_check_number("now", now))
        horizon = self.horizon
        dropped = 0
        for key in list(self._series):
            series = self._series[key]
            before = len(series.timestamps)
            series.drop_before(horizon)
            dropped += before - len(series.timestamps)
            if not series.timestamps:
                del self._series[key]
        return dropped

    # ------------------------------------------------------------------ reads

    def __len__(self) -> int:
        """The number of series held."""
        return len(self._series)

    def keys(self) -> list[MetricKey]:
        """Every series held, in insertion order."""
        return list(self._series)

    def datapoints(self, key: MetricKey, start: float, end: float) -> list[tuple[float, float]]:
        """``(timestamp, value)`` of `key` with ``start <= timestamp < end``, oldest first."""
        series = self._series.get(key)
        if series is None:
            return []
        return series.between(max(start, self.horizon), end)

    def datapoints_matching(
        self,
        namespace: str,
        name: str,
        dimensions: Mapping[str, str],
        start: float,
        end: float,
        *,
        exclude: Mapping[str, Collection[str]] | None = None,
    ) -> list[tuple[float, float]]:
        """Points of every series that has at least `dimensions`, merged, oldest first.

        ``exclude={"Zone": {"use1-az2"}}`` leaves out the series of that zone.
        """
        merged: list[tuple[float, float]] = []
        for key, series in self._series.items():
            if key.matches(namespace, name, dimensions, exclude):
                merged.extend(series.between(max(start, self.horizon), end))
        merged.sort(key=lambda point: point[0])
        return merged


# ---------------------------------------------------------------------- statistics


def statistic_value(values: Sequence[float], statistic: Statistic) -> float | None:
    """One statistic of a period's values; None (missing) when there are none."""
    if not values:
        return None
    if statistic == "Minimum":
        return min(values)
    if statistic == "Maximum":
        return max(values)
    if statistic == "Sum":
        return math.fsum(values)
    if statistic == "Average":
        return math.fsum(values) / len(values)
    if statistic == "SampleCount":
        return float(len(values))
    raise MetricError(f"unknown statistic {statistic!r} (one of {', '.join(STATISTICS)})")


def aggregate(
    points: Iterable[tuple[float, float]],
    period: float,
    start: float,
    statistic: Statistic,
    *,
    periods: int | None = None,
) -> list[float | None]:
    """One datapoint per period from `start`, oldest first; None for a period with no points.

    Period ``i`` covers ``[start + i*period, start + (i+1)*period)``. With `periods` the
    result has exactly that many entries and points outside them are ignored; without it,
    it runs up to the period of the newest point (points before `start` are ignored).
    """
    period = _check_number("period", period)
    if period <= 0:
        raise MetricError(f"period must be > 0 seconds, not {period!r}")
    start = _check_number("start", start)
    if statistic not in STATISTICS:
        raise MetricError(f"unknown statistic {statistic!r} (one of {', '.join(STATISTICS)})")
    if periods is not None and (isinstance(periods, bool) or periods < 0):
        raise MetricError(f"periods must be >= 0, not {periods!r}")
    buckets: dict[int, list[float]] = {}
    for timestamp, value in points:
        if timestamp < start:
            continue
        index = math.floor((timestamp - start) / period)
        if periods is not None and index >= periods:
            continue
        buckets.setdefault(index, []).append(value)
    count = periods if periods is not None else (max(buckets) + 1 if buckets else 0)
    return [statistic_value(buckets.get(i, ()), statistic) for i in range(count)]
