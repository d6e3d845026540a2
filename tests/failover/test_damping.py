"""Failback damping's arithmetic, with the time passed in (no clock, no I/O)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rideout.errors import InvalidArgument
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
    assert flap.suppressed and flap.hold(POLICY, flap.updated_at) > 0


def test_the_ceiling_bounds_the_hold_at_max_hold() -> None:
    assert POLICY.ceiling == pytest.approx(1.0 * 2 ** (40 / 10))  # 16
    state = after([T0 + i * 0.1 for i in range(100)])
    assert state.merit == pytest.approx(POLICY.ceiling)
    assert state.hold(POLICY, state.updated_at) == pytest.approx(POLICY.max_hold)
    assert state.hold(POLICY, state.updated_at + POLICY.max_hold) == 0.0
    # A smaller max_hold (the policy changed across a restart) bounds an old state too.
    tight = DampingPolicy(half_life=10.0, max_hold=5.0)
    assert state.hold(tight, state.updated_at) <= 5.0


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
policies = st.builds(
    DampingPolicy,
    half_life=st.floats(min_value=0.5, max_value=100.0),
    max_hold=st.floats(min_value=0.5, max_value=300.0),
    suppress=st.floats(min_value=1.0, max_value=5.0),
    reuse=st.floats(min_value=0.1, max_value=1.0),
)


@given(policy=policies, moves=offsets, extra=offsets, later=st.floats(0.0, 400.0))
def test_more_moves_never_shorten_the_hold(
    policy: DampingPolicy, moves: list[float], extra: list[float], later: float
) -> None:
    fewer = after(sorted(T0 + m for m in moves), policy)
    more = after(sorted(T0 + m for m in moves + extra), policy)
    now = T0 + 120.0 + later
    assert more.hold(policy, now) >= fewer.hold(policy, now) - 1e-9
    assert more.at(policy, now).merit >= fewer.at(policy, now).merit - 1e-9


@given(policy=policies, moves=offsets, a=st.floats(0.0, 400.0), b=st.floats(0.0, 400.0))
def test_time_never_lengthens_the_hold(
    policy: DampingPolicy, moves: list[float], a: float, b: float
) -> None:
    state = after(sorted(T0 + m for m in moves), policy)
    first, second = sorted((a, b))
    start = T0 + 120.0
    assert state.hold(policy, start + second) <= state.hold(policy, start + first) + 1e-9
    assert state.hold(policy, start + first) <= policy.max_hold + 1e-9
