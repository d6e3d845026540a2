"""The partition drill's checker, from constructed records and histories (pure)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rideout.drill.partition_check import (
    BidAttempt,
    HistoryEntry,
    check,
    fence_times,
)
from tests.conftest import examples


def ack(
    room: str, amount: int, sent: float, *, epoch: int = 1, region: str = "us-east-1",
    bidder: str = "b1", acked: float | None = None,
) -> BidAttempt:  # fmt: skip
    return BidAttempt("c1", room, bidder, amount, sent, sent + 0.01 if acked is None else acked,
                      True, None, region, epoch, f"{int(sent * 1000)}-0")  # fmt: skip


def entry(a: BidAttempt, n: int = 0) -> HistoryEntry:
    return HistoryEntry(a.room, f"{int(a.sent * 1000)}-{n}", a.bidder, a.amount, a.epoch)


def run(attempts: list[BidAttempt], writer_holds: list[HistoryEntry], **kw: object):  # type: ignore[no-untyped-def]
    args: dict[str, object] = {"writer": "w", "replication": "sync", "reported_lost": 0}
    args.update(kw)
    return check(attempts, {"w": writer_holds, "r": list(writer_holds)}, **args)  # type: ignore[arg-type]


def test_every_acknowledged_bid_present_passes() -> None:
    bids = [ack("r1", n, float(n)) for n in range(1, 6)]
    verdict = run(bids, [entry(b) for b in bids])
    assert verdict.ok, verdict.problems
    assert verdict.acknowledged == 5
    assert verdict.missing == []
    assert verdict.windows == []
    assert verdict.as_dict()["lost"] == 0


def test_the_missing_bids_are_listed_exactly() -> None:
    bids = [ack("r1", n, float(n)) for n in range(1, 6)]
    verdict = run(bids, [entry(b) for b in bids if b.amount not in (2, 4)])
    assert [b.amount for b in verdict.missing] == [2, 4]
    assert not verdict.ok
    assert (
        "2 acknowledged bids are not in the writer's (w) history (allowed 0)" in verdict.problems[0]
    )


def test_max_lost_allows_but_async_still_needs_the_count_reported() -> None:
    bids = [ack("r1", n, float(n)) for n in range(1, 4)]
    held = [entry(b) for b in bids[:2]]
    assert run(bids, held, max_lost=1).ok
    silent = run(bids, held, max_lost=1, replication="async", reported_lost=0)
    assert silent.problems == ["1 acknowledged bids lost, the control plane reported 0 writes lost"]
    assert run(bids, held, max_lost=1, replication="async", reported_lost=1).ok
    unknown = run(bids, [entry(b) for b in bids], replication="async", reported_lost=None)
    assert "lost_writes is unknown" in unknown.problems[0]
    # More reported than lost, with no write the old writer could have taken unacknowledged:
    # the count is wrong the other way.
    over = run(bids, [entry(b) for b in bids], replication="async", reported_lost=2)
    assert over.problems == ["0 acknowledged bids lost, the control plane reported 2 writes lost"]


def test_a_count_may_exceed_the_losses_by_the_writes_never_acknowledged() -> None:
    """A bid retried across the fence (sent to the old writer, acknowledged in epoch 2)
    and one whose outcome was never learnt may each have left a copy in the old writer
    that the heal discards: the count may exceed the acknowledged losses by those two."""
    lost = ack("r1", 1, 1.0)
    crossed = ack("r2", 1, 4.0, epoch=2, region="us-west-2", acked=9.0)  # fence at 5
    unknown = BidAttempt("c2", "r3", "b2", 1, 4.5, None, None, "timeout")
    later = ack("r4", 1, 6.0, epoch=2, region="us-west-2")  # sent after the fence
    held = [entry(crossed), entry(later)]
    fence = {1: 0.0, 2: 5.0}

    def verdict(reported: int):  # type: ignore[no-untyped-def]
        return run([lost, crossed, unknown, later], held, max_lost=1, replication="async",
                   reported_lost=reported, promoted=fence)  # fmt: skip

    assert verdict(1).ok
    assert verdict(3).ok
    assert verdict(3).unacked_discards == 2
    assert verdict(4).problems == [
        "1 acknowledged bids lost, the control plane reported 4 writes lost "
        "(of which up to 2 may be writes never acknowledged)"
    ]
    assert "reported 0 writes lost" in verdict(0).problems[0]  # silent, whatever the slack


def test_refused_and_indeterminate_bids_are_not_required() -> None:
    good = ack("r1", 1, 1.0)
    refused = BidAttempt("c1", "r1", "b1", 1, 2.0, 2.1, False, "too_low", "us-east-1", 1, None)
    lost_in_flight = BidAttempt("c1", "r1", "b1", 5, 3.0, None, None, "TimeoutError")
    applied = BidAttempt("c1", "r1", "b1", 6, 4.0, None, None, "ConnectionClosed")
    held = [entry(good), HistoryEntry("r1", "4000-0", "b1", 6, 1)]
    verdict = run([good, refused, lost_in_flight, applied], held)
    assert verdict.ok, verdict.problems
    assert (verdict.refused, verdict.indeterminate, verdict.indeterminate_applied) == (1, 2, 1)


def test_a_bid_acknowledged_twice_is_one_bid() -> None:
    a = ack("r1", 1, 1.0)
    verdict = run([a, a], [entry(a)])
    assert verdict.acknowledged == 1
    assert verdict.ok


def test_a_server_that_did_not_catch_up_is_named() -> None:
    bids = [ack("r1", n, float(n)) for n in range(1, 4)]
    held = [entry(b) for b in bids]
    stray = HistoryEntry("r1", "9-0", "b9", 99, 1)
    verdict = check(bids, {"w": held, "behind": held[:1], "ahead": [*held, stray]},
                    writer="w", replication="sync", reported_lost=None)  # fmt: skip
    assert verdict.servers["behind"].lacks == 2
    assert verdict.servers["ahead"].extra == 1
    assert len(verdict.problems) == 2
    assert "behind did not catch up with the writer w: it lacks 2 entries" in verdict.problems[1]


def test_an_old_epoch_acknowledging_after_the_fence_is_a_window() -> None:
    old = [ack("r1", n, float(n), epoch=1) for n in range(1, 11)]  # sent at 1..10
    new = [ack("r2", n, 5.5 + n, epoch=2, region="us-west-2") for n in range(1, 4)]  # 6.5..
    verdict = run([*old, *new], [entry(b) for b in [*old, *new]], promoted={2: 6.0})
    assert len(verdict.windows) == 1
    w = verdict.windows[0]
    assert (w.old_epoch, w.new_epoch, w.start) == (1, 2, 6.0)
    assert [b.amount for b in w.bids] == [7, 8, 9, 10]  # sent after 6.0
    assert w.end == pytest.approx(10.01)
    assert w.regions == ["us-east-1"]
    assert "split brain: 4 bids acknowledged in epoch 1 (us-east-1)" in verdict.problems[0]
    # Without the promotion time the new epoch's first ack (6.51) fences the old one in.
    assert [b.amount for b in run([*old, *new], [], promoted=None).windows[0].bids] == [7, 8, 9, 10]


def test_an_ack_in_flight_across_the_fence_is_not_a_window() -> None:
    # Sent before the promotion, acknowledged after: it may have been decided before.
    straddle = ack("r1", 1, 5.9, epoch=1, acked=6.5)
    new = ack("r2", 1, 7.0, epoch=2)
    verdict = run([straddle, new], [entry(straddle), entry(new)], promoted={2: 6.0})
    assert verdict.windows == []
    assert verdict.ok


def test_the_writer_must_be_among_the_histories() -> None:
    with pytest.raises(ValueError, match="writer 'x'"):
        check([], {"w": []}, writer="x", replication="sync", reported_lost=0)
    with pytest.raises(ValueError, match="replication"):
        check([], {"w": []}, writer="w", replication="semi", reported_lost=0)


def test_fence_times_are_the_first_sight_of_each_epoch() -> None:
    assert fence_times([(3.0, 1), (1.0, 1), (5.0, 2), (4.0, 2), (9.0, 3)]) == {
        1: 1.0,
        2: 4.0,
        3: 9.0,
    }


def test_records_round_trip() -> None:
    a = ack("r1", 3, 1.0)
    assert BidAttempt.from_dict(a.as_dict()) == a
    assert BidAttempt.from_dict({**a.as_dict(), "extra": 1}) == a


@settings(max_examples=examples(200), deadline=None)
@given(
    rooms=st.integers(1, 4),
    per_room=st.integers(1, 12),
    data=st.data(),
)
def test_property_the_checker_finds_exactly_the_removed_bids(rooms: int, per_room: int,
                                                              data: st.DataObject) -> None:  # fmt: skip
    bids = [ack(f"r{r}", n, r * 100 + n) for r in range(rooms) for n in range(1, per_room + 1)]
    removed = data.draw(st.sets(st.sampled_from(range(len(bids)))), label="removed")
    held = [entry(b) for i, b in enumerate(bids) if i not in removed]
    extra = data.draw(st.lists(st.integers(1000, 2000), max_size=3), label="unacked")
    held += [HistoryEntry("r0", f"{x}-1", "other", x, 1) for x in extra]
    verdict = run(bids, held, max_lost=len(bids), replication="async", reported_lost=len(removed))
    assert sorted(verdict.missing, key=bids.index) == [bids[i] for i in sorted(removed)]
    assert verdict.ok, verdict.problems


@settings(max_examples=examples(200), deadline=None)
@given(
    split=st.booleans(),
    fence=st.floats(10, 20),
    old_count=st.integers(1, 10),
    data=st.data(),
)
def test_property_a_window_is_found_iff_one_was_made(split: bool, fence: float, old_count: int,
                                                     data: st.DataObject) -> None:  # fmt: skip
    # Old-epoch sends strictly before the fence, unless `split` puts some after it.
    before = data.draw(st.lists(st.floats(0, fence - 0.001), min_size=old_count,
                                max_size=old_count), label="before")  # fmt: skip
    after = (
        data.draw(st.lists(st.floats(fence + 0.001, 40), min_size=1, max_size=5), label="after")
        if split
        else []
    )
    old = [ack("r1", i, t, epoch=1, acked=t + 0.5) for i, t in enumerate(before + after)]
    new_sent = data.draw(st.floats(fence, 40), label="new")
    new = [ack("r2", 1, new_sent, epoch=2, region="us-west-2")]
    held = [entry(b) for b in [*old, *new]]
    verdict = run([*old, *new], held, promoted={1: 0.0, 2: fence})
    assert bool(verdict.windows) is split
    if split:
        assert sorted(b.sent for b in verdict.windows[0].bids) == sorted(after)
        assert verdict.windows[0].start == fence
