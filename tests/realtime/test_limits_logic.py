"""The limits' pure logic (``realtime/limits.py``): buckets, the per-user budget and
the connection caps, with an injected clock."""

from __future__ import annotations

import pytest

from rideout.realtime.limits import ConnectionCaps, CostBudget, TokenBucket


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
    caps.release("alice", "10.0.0.1")
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
