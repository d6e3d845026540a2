"""CloudWatch metric alarm semantics as a pure function, and a small stateful alarm.

:func:`evaluate` decides an alarm's state from the datapoints of its evaluation range
(one per period, oldest first, None for a period without data); :class:`Alarm` keeps the
state, turns a :class:`~rideout.health.metrics.MetricStore` (or raw points) into those
datapoints at a given ``now``, records state changes and serialises itself so a
restarting control plane resumes where it was instead of failing over for lack of data.

The rules (``reference/aws-and-redis-semantics.md``), with N = ``evaluation_periods``
and M = ``datapoints_to_alarm``:

* **Evaluation range.** CloudWatch fetches more than N periods (N = 3 → 5); rideout
  generalises this as N + 2 periods (:attr:`AlarmConfig.evaluation_range`).
* **At least N real datapoints in the range** (always so when none is missing): the N
  most recent real datapoints are evaluated, ``TreatMissingData`` is not consulted, and
  the alarm is ``ALARM`` when at least M of them breach, else ``OK``.
* **Fewer than N real datapoints**: every real datapoint is kept and N minus their count
  filled ones are added (filled datapoints used as few times as possible):
  ``breaching`` fills breach, ``notBreaching`` fills do not, and M breaching out of N
  decides. ``missing``/``ignore`` fills are neither: M real breaching datapoints give
  ``ALARM``; otherwise

  - ``missing``: no real datapoint at all → ``INSUFFICIENT_DATA``; the *premature alarm*
    rule (below) → ``ALARM``; else ``OK``.
  - ``ignore``: no real datapoint, or every real datapoint breaching (too few of them to
    alarm, but no evidence of health either) → the current state is kept; else ``OK``.

* **Premature alarm** (``missing``): ``ALARM`` when the oldest available datapoint is
  breaching and at least M periods old (the newest period is 1 period old) and every
  more recent one is breaching or missing. *Interpretation:* "the oldest available
  breaching datapoint" is read as "the oldest available datapoint, which is breaching":
  the reference's row ``0 - X - -`` (M = 2, N = 3) is ``OK`` under ``missing`` although
  its ``X`` is 3 periods old with only missing points after it, so an older non-breaching
  datapoint must prevent the rule. Read this way ``missing`` never alarms where
  ``breaching`` would not.

All rows of the reference's two example tables are tests of this module.

**Asymmetric recovery** (rideout's addition, seed 002: "a low threshold (two datapoints)
for fast failover and a higher threshold (over five) for slower failback"). Entering
``ALARM`` follows CloudWatch exactly. With ``ok_datapoints = K`` an alarm in ``ALARM``
moves to ``OK`` only when CloudWatch's rule says ``OK`` *and* each of the last K periods
has a non-breaching datapoint; a missing period counts as non-breaching only under
``notBreaching`` (a gap is no evidence of health). Otherwise it stays in ``ALARM`` (reason
"Recovering: …"), and while its newest datapoint is good the evaluation says so
(:attr:`Evaluation.recovering`): a region that fails no longer can be told from one
that still does (the failover controller does not leave a writer region that passes
again), and the first bad datapoint ends it. Leaving ``ALARM`` for
``INSUFFICIENT_DATA`` (``missing`` with no data at all) is not held back. Without K (the default) CloudWatch's rule alone applies. The
datapoints given to :func:`evaluate` therefore cover ``max(N + 2, K)`` periods
(:attr:`AlarmConfig.lookback`); a shorter sequence counts as missing at the old end.

**Periods.** :class:`Alarm` aligns periods to multiples of ``period`` (as CloudWatch
aligns them to the clock) and evaluates only complete periods: at ``now`` the newest
period evaluated is the one that ended at ``floor(now / period) * period``. The current,
unfinished period never counts, so a datapoint is judged once its period is over and an
alarm reacts within one period of its Nth bad datapoint.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal, get_args

from rideout.health.metrics import (
    STATISTICS,
    MetricKey,
    MetricStore,
    Statistic,
    aggregate,
)

__all__ = [
    "ALARM_STATES",
    "COMPARISONS",
    "INITIAL_REASON",
    "TREAT_MISSING_DATA",
    "Alarm",
    "AlarmConfig",
    "AlarmState",
    "Comparison",
    "Evaluation",
    "StateChange",
    "TreatMissingData",
    "canary_alarm",
    "evaluate",
]

AlarmState = Literal["OK", "ALARM", "INSUFFICIENT_DATA"]
Comparison = Literal[
    "GreaterThanThreshold",
    "GreaterThanOrEqualToThreshold",
    "LessThanThreshold",
    "LessThanOrEqualToThreshold",
]
TreatMissingData = Literal["breaching", "notBreaching", "ignore", "missing"]

ALARM_STATES: Final[tuple[AlarmState, ...]] = get_args(AlarmState)
COMPARISONS: Final[tuple[Comparison, ...]] = get_args(Comparison)
TREAT_MISSING_DATA: Final[tuple[TreatMissingData, ...]] = get_args(TreatMissingData)
INITIAL_REASON: Final = "Unchecked: Initial alarm creation"

_PHRASES: Final[Mapping[Comparison, str]] = {
    "GreaterThanThreshold": "greater than",
    "GreaterThanOrEqualToThreshold": "greater than or equal to",
    "LessThanThreshold": "less than",
    "LessThanOrEqualToThreshold": "less than or equal to",
}
_MAX_PERIODS: Final = 10_000  # bounds the work of one evaluation
_SERIAL_VERSION: Final = 1


def _choice(what: str, value: object, options: tuple[str, ...]) -> None:
    if value not in options:
        raise ValueError(f"{what} must be one of {', '.join(options)}; got {value!r}")


def _count(what: str, value: object, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{what} must be an integer, not {value!r}")
    if not low <= value <= high:
        raise ValueError(f"{what} must be between {low} and {high}, not {value}")
    return value


def _finite(what: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{what} must be a number, not {value!r}")
    if not math.isfinite(value):
        raise ValueError(f"{what} must be finite, not {value!r}")
    return float(value)


@dataclass(frozen=True, slots=True)
class AlarmConfig:
    """A metric alarm: which series, how it is judged, and how it recovers.

    ``datapoints_to_alarm`` defaults to ``evaluation_periods`` (N of N);
    ``treat_missing_data`` to ``missing`` (CloudWatch's default); ``ok_datapoints`` to
    None (no recovery threshold beyond CloudWatch's rule; see the module docstring).
    ``dimensions`` are the ones the series must have (more are allowed, see
    :meth:`MetricStore.datapoints_matching`); they are kept sorted.
    """

    name: str
    namespace: str
    metric_name: str
    period: float
    evaluation_periods: int
    threshold: float
    comparison: Comparison
    statistic: Statistic = "Average"
    dimensions: tuple[tuple[str, str], ...] = ()
    datapoints_to_alarm: int | None = None
    treat_missing_data: TreatMissingData = "missing"
    ok_datapoints: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not 0 < len(self.name) <= 255:
            raise ValueError(f"alarm name must be 1 to 255 characters, not {self.name!r}")
        key = MetricKey(self.namespace, self.metric_name, self.dimensions)
        object.__setattr__(self, "dimensions", key.dimensions)
        period = _finite("period", self.period)
        if period <= 0:
            raise ValueError(f"period must be > 0 seconds, not {self.period!r}")
        object.__setattr__(self, "period", period)
        n = _count("evaluation_periods", self.evaluation_periods, 1, _MAX_PERIODS - 2)
        if self.datapoints_to_alarm is not None:
            _count("datapoints_to_alarm", self.datapoints_to_alarm, 1, n)
        object.__setattr__(self, "threshold", _finite("threshold", self.threshold))
        _choice("comparison", self.comparison, COMPARISONS)
        _choice("statistic", self.statistic, STATISTICS)
        _choice("treat_missing_data", self.treat_missing_data, TREAT_MISSING_DATA)
        if self.ok_datapoints is not None:
            _count("ok_datapoints", self.ok_datapoints, 1, _MAX_PERIODS)

    @property
    def alarm_datapoints(self) -> int:
        """M: breaching datapoints (of the last N) that put the alarm in ALARM."""
        if self.datapoints_to_alarm is None:
            return self.evaluation_periods
        return self.datapoints_to_alarm

    @property
    def evaluation_range(self) -> int:
        """Periods CloudWatch's rules look at: N + 2 (N = 3 → 5, as in the reference)."""
        return self.evaluation_periods + 2

    @property
    def lookback(self) -> int:
        """Periods :func:`evaluate` wants: the evaluation range, or K if that is longer."""
        return max(self.evaluation_range, self.ok_datapoints or 0)

    def metric_key(self, **more_dimensions: str) -> MetricKey:
        """The series key with this alarm's dimensions (and `more_dimensions`)."""
        return MetricKey.of(
            self.namespace, self.metric_name, {**dict(self.dimensions), **more_dimensions}
        )

    def breaches(self, value: float) -> bool:
        """True when `value` is on the alarming side of the threshold."""
        c, t = self.comparison, self.threshold
        if c == "GreaterThanThreshold":
            return value > t
        if c == "GreaterThanOrEqualToThreshold":
            return value >= t
        if c == "LessThanThreshold":
            return value < t
        return value <= t

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (dimensions as an object)."""
        return {
            "name": self.name,
            "namespace": self.namespace,
            "metric_name": self.metric_name,
            "dimensions": dict(self.dimensions),
            "period": self.period,
            "evaluation_periods": self.evaluation_periods,
            "datapoints_to_alarm": self.datapoints_to_alarm,
            "threshold": self.threshold,
            "comparison": self.comparison,
            "statistic": self.statistic,
            "treat_missing_data": self.treat_missing_data,
            "ok_datapoints": self.ok_datapoints,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> AlarmConfig:
        """The inverse of :meth:`to_dict`; ValueError for anything missing or invalid."""
        if not isinstance(data, Mapping):
            raise ValueError(f"an alarm config is an object, not {type(data).__name__}")
        known = set(cls.__dataclass_fields__)
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"unknown alarm config keys: {sorted(unknown)}")
        values = dict(data)
        dims = values.get("dimensions", {})
        if not isinstance(dims, Mapping):
            raise ValueError(f"dimensions must be an object, not {dims!r}")
        values["dimensions"] = tuple(dims.items())
        try:
            return cls(**values)
        except TypeError as e:
            raise ValueError(f"bad alarm config: {e}") from None


def canary_alarm(
    region: str,
    period: float,
    *,
    failover_datapoints: int = 2,
    failback_datapoints: int = 6,
) -> AlarmConfig:
    """The seed's canary alarm for `region`.

    ``App/WebSocketHealth`` with ``ApiId=<region>`` across zones, statistic ``Minimum``
    (any failed probe makes the period's datapoint 0), ``LessThanThreshold 1``,
    ``TreatMissingData: breaching``, `failover_datapoints` consecutive bad datapoints to
    alarm, `failback_datapoints` good ones to clear (the seed: 2 and "more than five").
    """
    return AlarmConfig(
        name=f"{region}-websocket-health",
        namespace="App",
        metric_name="WebSocketHealth",
        dimensions=(("ApiId", region),),
        period=period,
        evaluation_periods=failover_datapoints,
        datapoints_to_alarm=failover_datapoints,
        threshold=1.0,
        comparison="LessThanThreshold",
        statistic="Minimum",
        treat_missing_data="breaching",
        ok_datapoints=failback_datapoints,
    )


# ---------------------------------------------------------------------- evaluation


@dataclass(frozen=True, slots=True)
class Evaluation:
    """The outcome of one evaluation: the state the alarm should be in, and why."""

    state: AlarmState
    reason: str
    recovering: bool = False
    """Held in ``ALARM`` only by the recovery threshold, the newest datapoint good: what
    failed passes again, and is counting its way back to ``OK``."""


def _fmt(value: float) -> str:
    return repr(float(value))


def _window(config: AlarmConfig, datapoints: Sequence[float | None]) -> list[float | None]:
    """The last `lookback` datapoints, padded with missing ones at the old end."""
    points = list(datapoints)[-config.lookback :]
    for i, value in enumerate(points):
        if value is not None:
            _finite(f"datapoint {i}", value)
    return [None] * (config.lookback - len(points)) + points


def evaluate(
    config: AlarmConfig,
    datapoints_in_range: Sequence[float | None],
    current_state: AlarmState = "INSUFFICIENT_DATA",
) -> Evaluation:
    """The state an alarm in `current_state` should be in, given its datapoints.

    `datapoints_in_range` has one value per period, oldest first, None for a period
    with no data; it should cover :attr:`AlarmConfig.lookback` periods (a shorter
    sequence is padded with missing periods at the old end, a longer one is cut).
    """
    _choice("current_state", current_state, ALARM_STATES)
    window = _window(config, datapoints_in_range)
    result = _cloudwatch(config, window[-config.evaluation_range :], current_state)
    k = config.ok_datapoints
    if k is not None and current_state == "ALARM" and result.state == "OK":
        good = [_good(config, v) for v in window[-k:]]
        if sum(good) < k:
            return Evaluation(
                "ALARM",
                f"Recovering: {sum(good)} of the last {k} datapoints were good; "
                f"{k} consecutive non-breaching datapoints are needed to leave ALARM.",
                recovering=good[-1],
            )
    return result


def _good(config: AlarmConfig, value: float | None) -> bool:
    """A datapoint that counts toward recovery: non-breaching, or a gap under
    ``notBreaching`` (elsewhere a gap is no evidence of health)."""
    if value is None:
        return config.treat_missing_data == "notBreaching"
    return not config.breaches(value)


def _cloudwatch(
    config: AlarmConfig, points: Sequence[float | None], current_state: AlarmState
) -> Evaluation:
    """CloudWatch's own rules over the evaluation range (see the module docstring)."""
    n, m = config.evaluation_periods, config.alarm_datapoints
    size = len(points)
    real = [(size - i, v) for i, v in enumerate(points) if v is not None]  # (age, value)
    phrase = _PHRASES[config.comparison]
    threshold = _fmt(config.threshold)
    transition = f"(minimum {m} datapoint{'s' if m != 1 else ''} for OK -> ALARM transition)"

    def crossed(used: Sequence[float], breaching: int, filled: str = "") -> Evaluation:
        shown = f"[{', '.join(_fmt(v) for v in used)}]{filled}"
        if breaching >= m:
            return Evaluation(
                "ALARM",
                f"Threshold Crossed: {breaching} out of the last {n} datapoints were {phrase} "
                f"the threshold ({threshold}) {transition}: {shown}.",
            )
        return Evaluation(
            "OK",
            f"{breaching} out of the last {n} datapoints were {phrase} the threshold "
            f"({threshold}), fewer than {m}: {shown}.",
        )

    if len(real) >= n:
        used = [v for _, v in real[-n:]]
        return crossed(used, sum(1 for v in used if config.breaches(v)))

    values = [v for _, v in real]
    breaching = sum(1 for v in values if config.breaches(v))
    fill = n - len(real)
    treat = config.treat_missing_data
    plural = "s" if fill != 1 else ""
    if treat == "breaching":
        return crossed(
            values, breaching + fill, f" + {fill} missing datapoint{plural} treated as breaching"
        )
    if treat == "notBreaching":
        return crossed(
            values, breaching, f" + {fill} missing datapoint{plural} treated as not breaching"
        )
    if not real:
        if treat == "missing":
            return Evaluation(
                "INSUFFICIENT_DATA",
                f"Insufficient Data: no datapoints were received for {size} periods "
                f"and missing data is treated as missing.",
            )
        return Evaluation(
            current_state,
            f"No datapoints for {size} periods; state kept (missing data is ignored).",
        )
    if breaching >= m:
        return crossed(values, breaching, f" + {fill} missing")
    if breaching == len(real):
        oldest_age = real[0][0]
        if treat == "missing" and oldest_age >= m:
            return Evaluation(
                "ALARM",
                f"Threshold Crossed: the oldest available datapoint ({_fmt(real[0][1])}, "
                f"{oldest_age} periods old) and every datapoint since were {phrase} the "
                f"threshold ({threshold}) or missing {transition}.",
            )
        if treat == "ignore":
            return Evaluation(
                current_state,
                f"{breaching} of {len(real)} available datapoints were {phrase} the "
                f"threshold ({threshold}), fewer than {m}, and the rest are missing; "
                f"state kept (missing data is ignored).",
            )
    return crossed(values, breaching, f" + {fill} missing")


# ---------------------------------------------------------------------- stateful alarm


@dataclass(frozen=True, slots=True)
class StateChange:
    """One state change of an alarm, at `timestamp` (seconds)."""

    timestamp: float
    old: AlarmState
    new: AlarmState
    reason: str

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "timestamp": self.timestamp,
            "old": self.old,
            "new": self.new,
            "reason": self.reason,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StateChange:
        """The inverse of :meth:`to_dict`; ValueError when it is not one."""
        try:
            old, new, reason = data["old"], data["new"], data["reason"]
            timestamp = _finite("timestamp", data["timestamp"])
        except (KeyError, TypeError) as e:
            raise ValueError(f"bad alarm history entry {data!r}: {e}") from None
        _choice("history state", old, ALARM_STATES)
        _choice("history state", new, ALARM_STATES)
        if not isinstance(reason, str):
            raise ValueError(f"history reason must be a string, not {reason!r}")
        return cls(timestamp, old, new, reason)


PointSource = MetricStore | Iterable[tuple[float, float]]


class Alarm:
    """An alarm's state over time: starts in ``INSUFFICIENT_DATA``, changes on evaluation.

    The caller owns the clock: ``alarm.evaluate(now, store)`` once per period (or more
    often; only complete periods count). The last ``history_limit`` state changes are
    kept.
    """

    def __init__(self, config: AlarmConfig, *, history_limit: int = 100) -> None:
        if not isinstance(config, AlarmConfig):
            raise TypeError(f"config must be an AlarmConfig, not {type(config).__name__}")
        _count("history_limit", history_limit, 1, 1_000_000)
        self.config = config
        self._state: AlarmState = "INSUFFICIENT_DATA"
        self._reason: str = INITIAL_REASON
        self._history: deque[StateChange] = deque(maxlen=history_limit)
        self.last_evaluation: Evaluation | None = None
        self.last_evaluated_at: float | None = None

    def __repr__(self) -> str:
        return f"<Alarm {self.config.name} {self._state}>"

    @property
    def state(self) -> AlarmState:
        """``OK``, ``ALARM`` or ``INSUFFICIENT_DATA``."""
        return self._state

    @property
    def state_reason(self) -> str:
        """Why the alarm entered its current state."""
        return self._reason

    @property
    def recovering(self) -> bool:
        """In ``ALARM`` only by the recovery threshold, its newest datapoint good
        (:attr:`Evaluation.recovering`): failing no longer, not yet trusted again."""
        e = self.last_evaluation
        return self._state == "ALARM" and e is not None and e.recovering

    @property
    def last_change(self) -> StateChange | None:
        """The most recent state change (None while the alarm has never changed)."""
        return self._history[-1] if self._history else None

    @property
    def history(self) -> tuple[StateChange, ...]:
        """Recorded state changes, oldest first."""
        return tuple(self._history)

    def window(self, now: float) -> tuple[float, float]:
        """``(start, end)`` of the complete periods evaluated at `now`."""
        now = _finite("now", now)
        period = self.config.period
        end = math.floor(now / period) * period
        return end - self.config.lookback * period, end

    def datapoints(
        self,
        now: float,
        source: PointSource,
        *,
        exclude: Mapping[str, Collection[str]] | None = None,
    ) -> list[float | None]:
        """One datapoint per complete period (the alarm's statistic), oldest first.

        `source` is a :class:`MetricStore` (queried for every series with at least the
        alarm's dimensions, minus `exclude`) or ``(timestamp, value)`` points.
        """
        start, end = self.window(now)
        c = self.config
        if isinstance(source, MetricStore):
            points = source.datapoints_matching(
                c.namespace, c.metric_name, dict(c.dimensions), start, end, exclude=exclude
            )
        else:
            points = [(t, v) for t, v in source if start <= t < end]
        return aggregate(points, c.period, start, c.statistic, periods=c.lookback)

    def evaluate(
        self,
        now: float,
        source: PointSource,
        *,
        exclude: Mapping[str, Collection[str]] | None = None,
    ) -> StateChange | None:
        """Evaluate at `now` from `source` (see :meth:`datapoints`); the change, if any."""
        return self.update(now, self.datapoints(now, source, exclude=exclude))

    def update(self, now: float, datapoints: Sequence[float | None]) -> StateChange | None:
        """Evaluate already aggregated datapoints (oldest first) at `now`."""
        now = _finite("now", now)
        result = evaluate(self.config, datapoints, self._state)
        self.last_evaluation = result
        self.last_evaluated_at = now
        if result.state == self._state:
            return None
        change = StateChange(now, self._state, result.state, result.reason)
        self._history.append(change)
        self._state, self._reason = result.state, result.reason
        return change

    # ------------------------------------------------------------------ persistence

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready state: config, state, reason, history, last evaluation time."""
        return {
            "version": _SERIAL_VERSION,
            "config": self.config.to_dict(),
            "state": self._state,
            "reason": self._reason,
            "last_evaluated_at": self.last_evaluated_at,
            "history": [change.to_dict() for change in self._history],
            "history_limit": self._history.maxlen,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, config: AlarmConfig | None = None) -> Alarm:
        """Restore an alarm saved by :meth:`to_dict`.

        With `config` the saved state is applied to that configuration (the operator
        may have changed thresholds across the restart); otherwise the saved one is used.
        """
        if not isinstance(data, Mapping):
            raise ValueError(f"a saved alarm is an object, not {type(data).__name__}")
        if data.get("version") != _SERIAL_VERSION:
            raise ValueError(f"unsupported saved alarm version {data.get('version')!r}")
        try:
            saved_config = data["config"]
            state, reason = data["state"], data["reason"]
            history = data.get("history", [])
            limit = data.get("history_limit", 100)
            evaluated_at = data.get("last_evaluated_at")
        except KeyError as e:
            raise ValueError(f"saved alarm has no {e}") from None
        chosen = config if config is not None else AlarmConfig.from_dict(saved_config)
        alarm = cls(chosen, history_limit=limit)
        _choice("state", state, ALARM_STATES)
        if not isinstance(reason, str):
            raise ValueError(f"reason must be a string, not {reason!r}")
        if not isinstance(history, list):
            raise ValueError(f"history must be a list, not {type(history).__name__}")
        alarm._state, alarm._reason = state, reason
        alarm._history.extend(StateChange.from_dict(entry) for entry in history)
        if evaluated_at is not None:
            alarm.last_evaluated_at = _finite("last_evaluated_at", evaluated_at)
        return alarm
