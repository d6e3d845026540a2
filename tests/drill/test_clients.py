"""The drill's clients: their groups, their settings, and what they record (no deployment;
the whole fleet runs in tests/drill/test_drill_e2e.py)."""

from __future__ import annotations

import asyncio
import pickle
from typing import Any

import pytest

from rideout.backoff import FullJitter, NoJitter
from rideout.client.resolve import Resolved
from rideout.client.ws import (
    Acked,
    AuctionClient,
    Cause,
    ClientClosed,
    ClientSettings,
    Connected,
    Disconnected,
    ReconnectScheduled,
    StateRestored,
    Updated,
)
from rideout.drill.clients import (
    ClientFleet,
    GroupSpec,
    _ClientRecorder,
    _RecordingResolver,
    client_settings,
    failed_bidders,
    failed_records,
    fleet_loop_factory,
    region_of,
)
from rideout.drill.records import (
    AckRecord,
    AttemptRecord,
    ConnectedRecord,
    DisconnectedRecord,
    DrillRecord,
    FailedRecord,
    RejectedRecord,
    RestoredRecord,
)
from rideout.protocol import Position
from tests.conftest import until


def test_a_group_spreads_its_clients_over_its_rooms(make_config: Any) -> None:
    spec = GroupSpec(make_config(), first=40, count=20, rooms=("a", "b", "c"), prefix="d1")
    assert [spec.room(cid) for cid in range(40, 44)] == ["b", "c", "a", "b"]
    assert spec.bidder(41) == "d1-41"
    assert pickle.loads(pickle.dumps(spec)) == spec  # it crosses into worker processes


def test_region_of_every_zone_address(make_config: Any) -> None:
    config = make_config()
    regions = region_of(config)
    for region in config.regions:
        for zone in region.zones:
            assert regions[zone.address] == region.name
    assert len(regions) == sum(len(r.zones) for r in config.regions)


def test_client_settings_with_and_without_jitter(make_config: Any) -> None:
    config = make_config()
    t = config.timing
    jittered, plain = client_settings(config, True), client_settings(config, False)
    assert isinstance(jittered.backoff, FullJitter)
    assert isinstance(plain.backoff, NoJitter)
    # A frozen region never answers the handshake: bounded like the heartbeat.
    assert jittered.open_timeout == min(10.0, max(2.0, 2 * t.heartbeat_timeout))


def test_the_events_that_matter_become_records(make_config: Any) -> None:
    config = make_config()
    west = config.secondary
    address = west.zones[0].address
    out: list[DrillRecord] = []
    recorder = _ClientRecorder(5, "d1-5", region_of(config), out)
    record = recorder.on_event
    position = Position(2, "1700000000000-0")
    record(Connected(address, None))
    record(StateRestored("lot", {"bid": 3}, position, True, 0, west.name))
    record(Acked("b1", True, None, position, "lot", 10, west.name))
    record(Acked("b2", False, "too_low", None, "lot", 2, None))
    record(Disconnected(Cause.CLOSED, 1012, "draining", address))
    record(Connected("127.9.9.9", None))  # an address of no zone
    record(ReconnectScheduled(1, 0.5, Cause.CLOSED))
    assert [type(r) for r in out] == [
        ConnectedRecord, RestoredRecord, AckRecord, RejectedRecord, DisconnectedRecord,
        ConnectedRecord,
    ]  # fmt: skip
    assert all(r.client == 5 for r in out)
    connected, restored, ack, rejected, disconnected, nowhere = out
    assert connected.region == disconnected.region == restored.region == west.name
    assert (ack.room, ack.bidder, ack.amount, ack.offset, ack.region) == (
        "lot", "d1-5", 10, "1700000000000-0", west.name,
    )  # fmt: skip
    assert rejected.reason == "too_low"
    assert rejected.region == "?"  # the ack named no region (a reply from no server)
    assert nowhere.region == "?"
    assert recorder.take_due(0.0) >= out[-1].t + 0.5  # when the next attempt's backoff ends
    assert recorder.take_due(7.0) == 7.0  # taken: the next attempt, if no backoff, is due now


def test_a_restored_client_bids_at_once_and_above_the_price_that_beat_it_until_accepted(
    make_config: Any,
) -> None:
    config = make_config()
    west = config.secondary.name
    recorder = _ClientRecorder(1, "d1-1", region_of(config), [])
    record, resume = recorder.on_event, recorder.resume
    position = Position(2, "1700000000000-0")
    record(Acked("b0", False, "too_low", None, "lot", 2, None))
    assert not resume.is_set()  # outbid in its own pace: it waits for its next turn
    record(StateRestored("lot", {"bid": 3}, position, True, 0, west))
    assert resume.is_set()  # restored: bid now
    resume.clear()
    record(Acked("b1", False, "unavailable", None, "lot", 4, None))
    assert not resume.is_set()  # not outbid: the client's own retries and pace go on
    record(Acked("b2", False, "too_low", None, "lot", 5, None))
    assert not resume.is_set()  # outbid, but by a price it has not seen yet
    record(Updated("lot", {"bid": 4}, position, west))
    assert not resume.is_set()  # not the bid that beat it
    record(Updated("lot", {"bid": 7}, position, west))
    assert resume.is_set()  # now it knows the price to beat: again at once
    resume.clear()
    record(Acked("b3", False, "too_low", None, "lot", 6, None))
    assert resume.is_set()  # beaten by a price it has seen already (7): at once
    resume.clear()
    record(Acked("b3a", False, "too_low", None, "lot", 8, west, {"bid": 8}))
    assert resume.is_set()  # the ack itself names the price that beat it (8)
    assert recorder.price == 8  # and the bidder bids above it, whatever its view says
    resume.clear()
    record(Acked("b4", True, None, position, "lot", 9, west))
    record(Acked("b5", False, "too_low", None, "lot", 10, None))
    record(Updated("lot", {"bid": 12}, position, west))
    assert not resume.is_set()  # accepted since the restore: back to its pace


class Fixed:
    """A resolver that always answers `addresses` (what a name server would)."""

    def __init__(self, *addresses: str) -> None:
        self.addresses = addresses

    async def resolve(self, name: str) -> Resolved:
        return Resolved(self.addresses, 1.0, "fixed")


async def test_each_resolution_is_an_attempt_toward_the_region_named(make_config: Any) -> None:
    config = make_config()
    primary = config.primary
    out: list[DrillRecord] = []
    recorder = _ClientRecorder(3, "d1-3", region_of(config), out)
    recorder.on_event(ReconnectScheduled(1, 0.5, Cause.CLOSED))
    resolver = _RecordingResolver(Fixed(primary.zones[1].address), recorder)
    answer = await resolver.resolve(config.app_domain)
    assert answer.addresses == (primary.zones[1].address,)
    await _RecordingResolver(Fixed(), recorder).resolve(config.app_domain)
    first, second = out
    assert isinstance(first, AttemptRecord)
    assert (first.client, first.region) == (3, primary.name)
    assert first.due - first.t == pytest.approx(0.5, abs=0.25)  # when its backoff was to end
    assert isinstance(second, AttemptRecord)
    assert (second.region, second.due) == ("?", second.t)  # no backoff before it: due now


class Broken:
    """A resolver with a bug: it raises what no resolver may."""

    async def resolve(self, name: str) -> Resolved:
        raise RuntimeError("a bug")


async def test_a_client_whose_loop_died_is_recorded_and_one_that_gave_up_is_not() -> None:
    settings = ClientSettings(max_attempts=1)
    died = AuctionClient("app.test", port=1, token="t", resolver=Broken())
    gave_up = AuctionClient("app.test", port=1, token="t", resolver=Fixed(), settings=settings)
    never_started = AuctionClient("app.test", port=1, token="t", resolver=Fixed())
    for client in (died, gave_up):
        client.start()
    try:
        await until(lambda: not died.running and not gave_up.running)
        records = failed_records([never_started, died, gave_up], 4, 9.0)
        assert records == [FailedRecord(5, 9.0, "RuntimeError('a bug')")]
    finally:
        await asyncio.gather(died.stop(), gave_up.stop())


def test_a_bidder_that_died_of_a_bug_is_recorded_and_one_whose_client_ended_is_not() -> None:
    outcomes = [
        None,  # returned (it never does, but nothing failed)
        asyncio.CancelledError(),  # cancelled at the end: the normal way out
        ClientClosed("the client for 'app.test' was stopped"),  # its client's own record
        KeyError("bid"),  # a bug
    ]
    assert failed_bidders(outcomes, 10, 5.0) == [FailedRecord(13, 5.0, "bidder: KeyError('bid')")]


async def test_a_fleet_without_processes_collects_what_its_groups_report(
    make_config: Any,
) -> None:
    fleet = ClientFleet([], processes=False)
    assert fleet.clients == 0
    fleet.start()
    fleet._add([ConnectedRecord(0, 1.0, "east")])
    await fleet.stop()
    assert fleet.snapshot() == [ConnectedRecord(0, 1.0, "east")]
    assert fleet.stopping.is_set()
    assert not fleet.bidding.is_set()


NICED_FLEET = """
import asyncio, json, os, pickle, sys, time
from dataclasses import replace
from rideout.drill.clients import ClientFleet

async def main():
    with open(sys.argv[1], "rb") as f:
        spec = pickle.load(f)
    fleet = ClientFleet([spec, replace(spec, first=1)], processes=True, nice=7)
    fleet.start()
    seen, deadline = [], time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            seen = [os.getpriority(os.PRIO_PROCESS, p.pid) for p in fleet._procs]
            if seen and all(n != os.nice(0) for n in seen):
                break
            await asyncio.sleep(0.05)
    finally:
        await fleet.stop()
    print(json.dumps({"ours": os.nice(0), "workers": seen, "records": len(fleet.snapshot()),
                      "alive": [p.pid for p in fleet._procs if p.is_alive()]}))

asyncio.run(main())
"""


def test_a_fleet_with_a_niceness_runs_its_workers_that_much_nicer(
    make_config: Any, tmp_path: Any
) -> None:
    """Real spawned workers (the drill's own runner, with no clients), in a process of
    their own, whose multiprocessing resource tracker ends with it: each worker runs
    `nice` above that process's niceness, which stays as it was."""
    import json
    import os
    import subprocess
    import sys

    path = tmp_path / "spec.pickle"
    spec = GroupSpec(make_config(), first=0, count=0, rooms=("r",), prefix="p")
    path.write_bytes(pickle.dumps(spec))
    done = subprocess.run([sys.executable, "-c", NICED_FLEET, str(path)], capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["workers"] == [min(19, seen["ours"] + 7)] * 2
    assert seen["ours"] == os.nice(0)
    assert (seen["records"], seen["alive"]) == (0, [])  # no clients, no records; both ended
    with pytest.raises(ValueError, match="cannot run at another niceness"):
        ClientFleet([], processes=False, nice=7)


def test_the_fleet_runs_on_uvloop_as_the_servers_do() -> None:
    import uvloop

    factory = fleet_loop_factory()
    assert factory is uvloop.new_event_loop
    with asyncio.Runner(loop_factory=factory) as runner:
        assert runner.run(asyncio.sleep(0, "ran")) == "ran"
        assert isinstance(runner.get_loop(), uvloop.Loop)
