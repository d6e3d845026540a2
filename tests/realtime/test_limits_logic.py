"""The limits' pure logic (``realtime/limits.py``): buckets, the per-user budget and
the connection caps, with an injected clock."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rideout.config import RealtimeConfig
from rideout.realtime.limits import ConnectionCaps, CostBudget, LoadShedder, TokenBucket


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_bucket_spends_into_debt_and_says_how_long_to_wait() -> None:
    clock = Clock()
    bucket = TokenBucket(rate=100.0, burst=1000, clock=clock)
    assert bucket.wait() == 0
    bucket.spend(1500)  # a cost known only afterwards
    assert bucket.wait() == pytest.approx(5.01)  # 501 tokens short of one
    assert not bucket.take()
    clock.now += 5.01
    assert bucket.wait() == pytest.approx(0, abs=1e-9)
    bucket.spend(-10_000)  # giving back never goes beyond the burst
    assert bucket.full()
    clock.now += 100
    bucket.spend(1)
    assert not bucket.full()


def test_the_budget_is_per_user_and_reserving_the_most_stops_concurrent_requests() -> None:
    clock = Clock()
    budget = CostBudget(rate=200.0, burst=1000, clock=clock)
    assert budget.wait("mallory") == 0
    budget.charge("mallory", 1001)  # a replay may cost up to 1 + 1000
    assert budget.wait("mallory") > 0  # a second connection must wait for it
    assert budget.wait("bob") == 0  # others are not affected
    budget.charge("mallory", 3 - 1001)  # it cost 3: the rest is given back
    assert budget.wait("mallory") == 0
    budget.charge("carol", 1001)
    budget.charge("carol", 0)  # a full replay: nothing back, 1 token in debt
    assert budget.wait("carol") == pytest.approx(2 / 200)
    budget.charge("carol", 1001)  # (what a connection that did not ask would do)
    assert budget.wait("carol") == pytest.approx(1003 / 200)


def test_the_budget_forgets_users_whose_buckets_refilled() -> None:
    clock = Clock()
    budget = CostBudget(rate=10.0, burst=10, clock=clock)
    for i in range(64):
        budget.charge(f"user-{i}", 5)
    assert len(budget) == 64
    clock.now += 1.0  # all full again
    budget.charge("late", 5)
    assert len(budget) == 1
    assert budget.wait("user-1") == 0


def test_caps_per_user_per_address_and_the_reserve() -> None:
    caps = ConnectionCaps(total=10, reserved=2, per_user=3, per_address=5)
    for _ in range(3):
        assert caps.admit("alice", "10.0.0.1") is None
    refusal = caps.admit("alice", "10.0.0.2")
    assert refusal is not None
    assert (refusal.status, refusal.reason) == (429, "too_many_connections")
    for user in ("bob", "carol"):
        assert caps.admit(user, "10.0.0.1") is None
    refusal = caps.admit("dave", "10.0.0.1")
    assert refusal is not None
    assert (refusal.status, refusal.reason) == (429, "too_many_connections_from_address")
    for user in ("dave", "erin", "frank"):
        assert caps.admit(user, "10.0.0.9") is None
    assert caps.open == 8  # total - reserved: ordinary users are refused now
    assert caps.full  # a state the zone reports, not a failure
    refusal = caps.admit("grace", "10.0.0.10")
    assert refusal is not None
    assert (refusal.status, refusal.reason) == (503, "zone_full")
    # The canary uses the reserve, exempt from the user and address caps...
    assert caps.admit("canary", "10.0.0.1", probe=True) is None
    assert caps.admit("canary", "10.0.0.1", probe=True) is None
    # ...but not beyond the total.
    refusal = caps.admit("canary", "10.0.0.1", probe=True)
    assert refusal is not None
    assert refusal.reason == "zone_full"
    caps.release("canary", "10.0.0.1", probe=True)
    assert caps.full  # the canary's reserve does not count
    caps.release("alice", "10.0.0.1")
    assert not caps.full
    assert (caps.of_user("alice"), caps.from_address("10.0.0.1")) == (2, 4)
    assert caps.admit("alice", "10.0.0.1") is None  # the canary's release made room
    for _ in range(3):
        caps.release("alice", "10.0.0.1")
    assert caps.of_user("alice") == 0


def test_a_cap_of_zero_is_no_cap() -> None:
    caps = ConnectionCaps(total=100, reserved=0, per_user=1, per_address=0)
    assert all(caps.admit(f"u{i}", "127.0.0.1") is None for i in range(100))
    refusal = caps.admit("u100", "127.0.0.1")
    assert refusal is not None
    assert refusal.reason == "zone_full"


def test_the_shedder_ramps_from_none_to_all_between_its_bounds() -> None:
    draws = iter([0.49, 0.51, 0.0, 0.999])
    shedder = LoadShedder(start=0.1, full=0.2, rng=lambda: next(draws))
    assert shedder.share(0.0) == 0.0
    assert shedder.refuse(0.1) is None  # at the start: nobody (and no draw)
    assert shedder.share(0.15) == pytest.approx(0.5)
    refused = shedder.refuse(0.15)  # draws 0.49 < 0.5
    assert refused is not None
    assert (refused.status, refused.reason) == (503, "overloaded")
    assert refused.message == "this server's event loop is running 0.15 s late; retry later"
    assert shedder.refuse(0.15) is None  # draws 0.51
    assert shedder.refuse(0.1001) is not None  # draws 0.0: a sliver refused
    assert shedder.refuse(0.1999) is None  # draws 0.999
    assert shedder.refuse(0.2) is not None  # from `full`, everybody, without a draw
    assert shedder.refuse(5.0) is not None
    with pytest.raises(StopIteration):
        next(draws)


@given(st.floats(0.0, 10.0), st.floats(0.0, 10.0))
def test_the_share_shed_never_falls_as_the_lag_grows(a: float, b: float) -> None:
    shedder = LoadShedder.for_canary(0.4)
    low, high = sorted((a, b))
    assert 0.0 <= shedder.share(low) <= shedder.share(high) <= 1.0


def test_the_shedder_follows_the_canarys_timeout_and_checks_its_bounds() -> None:
    shedder = LoadShedder.for_canary(0.4)
    assert (shedder.start, shedder.full) == (pytest.approx(0.1), pytest.approx(0.2))
    for start, full in ((0.0, 1.0), (0.2, 0.2), (0.3, 0.1)):
        with pytest.raises(ValueError, match="need 0 < start < full"):
            LoadShedder(start, full)


def test_the_shedder_reports_what_it_refused_at_most_every_five_seconds() -> None:
    shedder = LoadShedder(start=0.1, full=0.2, rng=lambda: 0.0)
    assert shedder.report(0.0) is None  # nothing refused yet
    assert shedder.refuse(0.3) is not None
    assert shedder.refuse(0.25) is not None
    assert shedder.refuse(0.05) is None  # let in: not counted
    assert shedder.report(1.0) == (
        "shedding load: refused 2 new WebSocket connection(s) (503 overloaded) since the "
        "last report, the event loop typically up to 0.30 s late (realtime.shed_load)"
    )
    assert shedder.refuse(0.4, "bid") is not None
    assert shedder.refuse(0.2, "bid") is not None
    assert shedder.refuse(0.2) is not None
    assert shedder.report(5.9) is None  # within 5 s of the last one: counted on
    later = shedder.report(6.0)
    assert later == (
        "shedding load: refused 2 bid(s) (error/unavailable) and 1 new WebSocket "
        "connection(s) (503 overloaded) since the last report, the event loop typically "
        "up to 0.40 s late (realtime.shed_load)"
    )
    assert shedder.report(20.0) is None  # none since


def test_demo_connections_have_a_share_of_their_own() -> None:
    """Demo identities' connections stop at their share; ordinary ones keep everything
    else (the total less the reserve and that share) and may use the share's free places."""
    caps = ConnectionCaps(total=10, reserved=2, per_user=5, per_address=0, demo=3)
    for _ in range(3):
        assert caps.admit("demo-1", "10.0.0.1", demo=True) is None
    refusal = caps.admit("demo-2", "10.0.0.1", demo=True)
    assert refusal is not None
    assert (refusal.status, refusal.reason) == (503, "demo_full")
    for i in range(5):  # 10 - 2 - 3
        assert caps.admit(f"user-{i}", "10.0.0.2") is None
    refusal = caps.admit("user-5", "10.0.0.2")
    assert refusal is not None
    assert refusal.reason == "zone_full"
    caps.release("demo-1", "10.0.0.1", demo=True)
    assert caps.admit("user-5", "10.0.0.2") is None  # a free place of the share
    refusal = caps.admit("demo-2", "10.0.0.1", demo=True)
    assert refusal is not None
    assert refusal.reason == "zone_full"
    caps.release("user-5", "10.0.0.2")
    assert caps.admit("demo-2", "10.0.0.1", demo=True) is None
    assert caps.admit("canary", "10.0.0.1", probe=True) is None
    assert (caps.demos, caps.of_user("demo-2")) == (3, 1)


def test_the_demo_share_fits_what_the_process_may_open() -> None:
    realtime = RealtimeConfig(max_demo_connections=256)
    assert ConnectionCaps.for_config(realtime, demo_tokens=True).demo == 256
    assert ConnectionCaps.for_config(realtime, demo_tokens=False).demo == 0
    # A process allowed few connections keeps most of them for ordinary users.
    small = ConnectionCaps.for_config(realtime, 164, demo_tokens=True)
    assert (small.demo, small.total - small.reserved - small.demo) == (50, 50)
