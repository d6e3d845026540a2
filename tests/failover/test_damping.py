"""Failback damping's arithmetic, with the time passed in (no clock, no I/O)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rideout.config import FAILOVER_PROFILES, Config, ConfigError, config_to_dict, parse_config
from rideout.errors import InvalidArgument
from rideout.failover.controller import damping_policy
from rideout.failover.damping import DampingPolicy, DampingState

POLICY = DampingPolicy(half_life=10.0, max_hold=40.0, suppress=2.0, reuse=1.0)
T0 = 1_800_000_000.0


def after(moves: list[float], policy: DampingPolicy = POLICY) -> DampingState:
    state = DampingState()
    for t in moves:
        state = state.record_move(policy, t)
    return state


def test_the_figure_of_merit_halves_every_half_life() -> None:
    state = after([T0])
    assert state.merit == 1.0
    assert state.at(POLICY, T0 + 10).merit == pytest.approx(0.5)
    assert POLICY.decayed(1.0, 20) == pytest.approx(0.25)
    assert POLICY.decayed(1.0, -5) == 1.0  # time never runs backwards here


def test_one_move_does_not_hold_failback() -> None:
    """A failover, then a failback: the ordinary case is not delayed at all."""
    state = after([T0])
    assert not state.suppressed
    assert state.hold(POLICY, T0) == 0.0
    assert state.hold(POLICY, T0 + 1) == 0.0


def test_a_move_above_suppress_holds_until_the_figure_decays_to_reuse() -> None:
    # Three moves 1 s apart: 1 * 2^-0.2 + 1 * 2^-0.1 + 1 ≈ 2.80 > suppress.
    state = after([T0, T0 + 1, T0 + 2])
    merit = 2.0 ** (-0.2) + 2.0 ** (-0.1) + 1.0
    assert state.merit == pytest.approx(merit)
    assert state.suppressed
    expected = 10.0 * math.log2(merit / 1.0)  # until merit * 2^(-t/10) == reuse
    assert state.hold(POLICY, T0 + 2) == pytest.approx(expected)
    assert state.hold(POLICY, T0 + 2 + 5) == pytest.approx(expected - 5)
    assert state.release_at(POLICY) == pytest.approx(T0 + 2 + expected)
    # Released exactly when the figure reaches reuse, whenever it is asked.
    released = state.at(POLICY, T0 + 2 + expected + 0.001)
    assert not released.suppressed
    assert released.hold(POLICY, released.updated_at) == 0.0
    assert released.merit == pytest.approx(1.0, abs=0.01)


def test_hysteresis_released_stays_released_until_a_move_goes_above_suppress() -> None:
    state = after([T0, T0 + 1, T0 + 2])
    released = state.at(POLICY, state.release_at(POLICY) + 0.01)
    # The next move takes it to ~2.0, not above suppress: no hold...
    again = released.record_move(POLICY, released.updated_at)
    assert again.merit == pytest.approx(2.0, abs=0.01)
    assert again.merit <= POLICY.suppress
    assert again.hold(POLICY, again.updated_at) == 0.0
    # ...but one more soon after does.
    flap = again.record_move(POLICY, again.updated_at + 1)
    assert flap.suppressed
    assert flap.hold(POLICY, flap.updated_at) > 0


def test_the_ceiling_bounds_the_hold_at_max_hold() -> None:
    assert POLICY.ceiling == pytest.approx(1.0 * 2 ** (40 / 10))  # 16
    state = after([T0 + i * 0.1 for i in range(100)])
    assert state.merit == pytest.approx(POLICY.ceiling)
    assert state.hold(POLICY, state.updated_at) == pytest.approx(POLICY.max_hold)
    assert state.hold(POLICY, state.updated_at + POLICY.max_hold) == 0.0
    # A smaller max_hold (the policy changed across a restart) bounds an old state too.
    tight = DampingPolicy(half_life=10.0, max_hold=12.0)
    assert state.hold(tight, state.updated_at) <= 12.0


def test_a_decayed_figure_is_forgotten_below_half_of_reuse() -> None:
    state = after([T0])
    assert state.at(POLICY, T0 + 9.9).merit > 0.5
    assert state.at(POLICY, T0 + 10.1).merit == 0.0


def test_the_view_counts_the_moves_of_the_window() -> None:
    state = after([T0, T0 + 1, T0 + 2])
    view = state.view(POLICY, T0 + 3)
    assert view["moves"] == 3
    assert view["window"] == POLICY.max_hold
    assert view["suppressed"] is True
    assert view["hold_seconds"] > 0
    assert view["penalty"] == pytest.approx(state.at(POLICY, T0 + 3).merit, abs=0.001)
    assert state.view(POLICY, T0 + 2 + POLICY.max_hold + 1)["moves"] == 0


def test_the_state_round_trips_and_refuses_damage() -> None:
    state = after([T0, T0 + 1, T0 + 2])
    assert DampingState.from_dict(state.to_dict()) == state
    for bad in (
        {"merit": "x", "updated_at": T0, "suppressed": False},
        {"merit": -1.0, "updated_at": T0, "suppressed": False},
        {"merit": 1.0, "updated_at": T0, "suppressed": "yes"},
        {"merit": 1.0, "suppressed": False},
    ):
        with pytest.raises((ValueError, TypeError, KeyError)):
            DampingState.from_dict(bad)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"half_life": 0.0, "max_hold": 1.0},
        {"half_life": 1.0, "max_hold": -1.0},
        {"half_life": 1.0, "max_hold": 1.0, "reuse": 0.0},
        {"half_life": 1.0, "max_hold": 1.0, "suppress": 0.5, "reuse": 1.0},
        {"half_life": 1.0, "max_hold": 1.0, "penalty": float("nan")},
        {"half_life": True, "max_hold": 1.0},
    ],
)
def test_a_bad_policy_is_refused_naming_the_argument(kwargs: dict[str, float]) -> None:
    with pytest.raises(InvalidArgument) as info:
        DampingPolicy(**kwargs)
    assert any(name in str(info.value) for name in kwargs)


# ------------------------------------------------------------------ monotonicity

offsets = st.lists(st.floats(min_value=0.0, max_value=120.0), min_size=0, max_size=12)


@st.composite
def policies(draw: st.DrawFn) -> DampingPolicy:
    """Valid policies: a max_hold long enough for the ceiling to pass suppress."""
    half_life = draw(st.floats(min_value=0.5, max_value=100.0))
    reuse = draw(st.floats(min_value=0.1, max_value=1.0))
    suppress = draw(st.floats(min_value=1.0, max_value=5.0))
    shortest = half_life * math.log2(suppress / reuse)
    max_hold = max(0.5, shortest * draw(st.floats(min_value=1.01, max_value=4.0)))
    return DampingPolicy(half_life=half_life, max_hold=max_hold, suppress=suppress, reuse=reuse)


@given(policy=policies(), moves=offsets, extra=offsets, later=st.floats(0.0, 400.0))
def test_more_moves_never_shorten_the_hold(
    policy: DampingPolicy, moves: list[float], extra: list[float], later: float
) -> None:
    fewer = after(sorted(T0 + m for m in moves), policy)
    more = after(sorted(T0 + m for m in moves + extra), policy)
    now = T0 + 120.0 + later
    assert more.hold(policy, now) >= fewer.hold(policy, now) - 1e-9
    assert more.at(policy, now).merit >= fewer.at(policy, now).merit - 1e-9


@given(policy=policies(), moves=offsets, a=st.floats(0.0, 400.0), b=st.floats(0.0, 400.0))
def test_time_never_lengthens_the_hold(
    policy: DampingPolicy, moves: list[float], a: float, b: float
) -> None:
    state = after(sorted(T0 + m for m in moves), policy)
    first, second = sorted((a, b))
    start = T0 + 120.0
    # A microsecond: the hold goes through exp2 and log2 of a decayed figure at two
    # different times, and the rounding of that round trip (seen: 1e-7 s on a 114 s
    # hold, absolute times ~1.8e9) is not time lengthening a hold.
    assert state.hold(policy, start + second) <= state.hold(policy, start + first) + 1e-6
    assert state.hold(policy, start + first) <= policy.max_hold + 1e-6


def test_a_max_hold_too_short_to_ever_hold_is_refused() -> None:
    # ceiling = reuse * 2^(max_hold / half_life) must exceed suppress: here 2^(5/10) < 2.
    with pytest.raises(InvalidArgument, match=r"max_hold .* too short"):
        DampingPolicy(half_life=10.0, max_hold=5.0, suppress=2.0, reuse=1.0)


# ------------------------------------------------------------------ configuration


def test_the_profiles_scale_damping_and_the_drain_like_the_timing() -> None:
    fast, seed = parse_config({}), parse_config({"profile": "seed"})
    assert fast.failover == Config().failover  # the defaults are the fast profile's
    assert (fast.failover.damping_half_life, fast.failover.damping_max_hold) == (15.0, 60.0)
    assert fast.failover.failback_drain_seconds == 5.0
    assert (seed.failover.damping_half_life, seed.failover.damping_max_hold) == (900.0, 3600.0)
    assert seed.failover.failback_drain_seconds == 60.0
    for config in (fast, seed):
        assert FAILOVER_PROFILES[config.profile]["damping_half_life"] == (
            config.failover.damping_half_life
        )
        policy = damping_policy(config.failover)
        assert policy is not None
        assert policy.ceiling > policy.suppress
    explicit = parse_config({"profile": "seed", "failover": {"damping_half_life": 120}})
    assert explicit.failover.damping_half_life == 120.0  # the file wins over the profile
    assert damping_policy(parse_config({"failover": {"flap_damping": False}}).failover) is None
    again = parse_config(config_to_dict(seed))
    assert again.failover == seed.failover


@pytest.mark.parametrize(
    ("failover", "key", "problem"),
    [
        ({"damping_suppress": 0.5}, "damping_suppress", "must be at least damping_reuse"),
        ({"damping_reuse": 0}, "damping_reuse", "above zero"),
        ({"damping_reuse": "lots"}, "damping_reuse", "expected a number"),
        ({"damping_half_life": -1}, "damping_half_life", "positive number of seconds"),
        ({"damping_max_hold": 5}, "damping_max_hold", "must be longer than 15 s"),
        ({"failback_drain_seconds": -1}, "failback_drain_seconds", "zero or more seconds"),
    ],
)
def test_bad_damping_settings_are_refused_naming_the_key(
    failover: dict[str, object], key: str, problem: str
) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config({"failover": failover})
    assert info.value.key.startswith(f"failover.{key}")
    assert problem in info.value.problem
    assert (
        parse_config({"failover": {"failback_drain_seconds": 0}}).failover.failback_drain_seconds
        == 0
    )
