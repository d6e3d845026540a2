"""The DNS view handed from the control plane to a DNS server in another process."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import dns.asyncquery
import dns.message
import dns.rcode
import dns.rdatatype
import pytest

from rideout.dns.errors import DnsError
from rideout.dns.feed import DnsFeedError, DnsFollower, DnsView, ViewFile
from rideout.dns.records import Answer, DnsZoneConfig, Endpoint, RegionRecords
from rideout.dns.server import DnsServer
from tests.conftest import free_port

APP = "auction.rideout.test"
PRIMARY = ["127.0.1.1", "127.0.1.2"]
SECONDARY = ["127.0.2.1", "127.0.2.2"]
ZONE = DnsZoneConfig(
    APP,
    1,
    (
        RegionRecords(
            "us-east-1",
            "primary",
            (Endpoint(PRIMARY[0], "a1"), Endpoint(PRIMARY[1], "a2")),
            "us-east-1",
        ),
        RegionRecords(
            "us-west-2",
            "secondary",
            (Endpoint(SECONDARY[0], "b1"), Endpoint(SECONDARY[1], "b2")),
            "us-west-2",
        ),
    ),
)


def view(primary: bool, serial: int = 1, at: float = 1.0) -> DnsView:
    return DnsView(APP, {"us-east-1": primary, "us-west-2": not primary}, serial, at)


def a_records(follower: DnsFollower) -> list[str]:
    return [r[3] for r in follower.resolve(APP, "A").answers]


def test_a_view_round_trips_and_bad_ones_are_refused() -> None:
    good = view(False, serial=7, at=12.5)
    assert DnsView.parse(good.to_bytes(), ZONE) == good
    assert good.answer(ZONE).region == "us-west-2"
    assert issubclass(DnsFeedError, DnsError)

    def bad(change: dict[str, object]) -> bytes:
        return json.dumps({**json.loads(good.to_bytes()), **change}).encode()

    for data, message in [
        (b"{half", "not JSON"),
        (b"[]", "format-1 object"),
        (bad({"format": 2}), "format-1 object"),
        (bad({"app_domain": "evil.test"}), "is for 'evil.test'"),
        (bad({"health": {"us-east-1": True}}), "must map"),
        (bad({"health": {"us-east-1": 1, "us-west-2": 0}}), "must map"),
        (bad({"health": {"us-east-1": True, "us-west-2": True, "mars": True}}), "must map"),
        (bad({"serial": 0}), "serial"),
        (bad({"serial": True}), "serial"),
        (bad({"published_at": "now"}), "published_at"),
    ]:
        with pytest.raises(DnsFeedError, match=message):
            DnsView.parse(data, ZONE)


def test_the_follower_answers_the_last_good_view(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    source = ViewFile(tmp_path / "run" / "dns-view.json")
    changes: list[tuple[int, Answer]] = []
    follower = DnsFollower(
        ZONE, source, on_change=lambda v, a: changes.append((v.serial, a)), clock=lambda: 11.0
    )
    # Nothing published yet: SERVFAIL ("ask again"), never a guess.
    assert not follower.refresh()
    assert follower.resolve(APP, "A").rcode == "SERVFAIL"
    assert follower.age() is None

    source.publish(view(True, serial=1, at=10.0))
    assert follower.refresh()
    assert a_records(follower) == PRIMARY
    assert follower.age() == 1.0
    assert not follower.refresh()  # unchanged file: not read again

    source.publish(view(True, serial=2))  # same decision, new serial
    assert follower.refresh()
    soa = follower.resolve(APP, "AAAA").authority[0]
    assert soa[1] == "SOA"
    assert " 2 " in soa[3]
    source.publish(view(False, serial=3))
    assert follower.refresh()
    assert a_records(follower) == SECONDARY
    assert [(s, a.region) for s, a in changes] == [(1, "us-east-1"), (3, "us-west-2")]

    # A damaged or vanished file changes nothing; each problem is reported once.
    with caplog.at_level("WARNING"):
        for damaged in ("{garbage", "{garbage, again", "[]"):
            source.path.write_text(damaged)
            assert not follower.refresh()
    assert a_records(follower) == SECONDARY
    assert len([r for r in caplog.records if "cannot use" in r.message]) == 2  # two problems
    source.path.unlink()
    assert not follower.refresh()
    assert a_records(follower) == SECONDARY


def test_the_generation_moves_with_the_decision_not_with_a_republish(tmp_path: Path) -> None:
    source = ViewFile(tmp_path / "dns-view.json")
    follower = DnsFollower(ZONE, source, clock=lambda: 30.0)
    before = follower.generation()
    source.publish(view(True, serial=1, at=10.0))
    assert follower.refresh()
    first = follower.generation()
    assert first != before
    source.publish(view(True, serial=1, at=25.0))  # the same decision, published again
    assert not follower.refresh()  # nothing to rebuild...
    assert follower.generation() == first
    assert follower.age() == 5.0  # ...but the view is fresh again
    source.publish(view(True, serial=2, at=26.0))  # a new serial changes the SOA
    assert follower.refresh()
    assert follower.generation() != first
    source.publish(view(False, serial=3, at=27.0))
    assert follower.refresh()
    assert a_records(follower) == SECONDARY


def test_publishing_replaces_the_file_whole(tmp_path: Path) -> None:
    source = ViewFile(tmp_path / "dns-view.json")
    source.publish(view(True))
    first = source.stamp()
    source.publish(view(False, serial=2))
    assert source.stamp() != first
    assert source.read(ZONE) == view(False, serial=2)
    assert (source.path.stat().st_mode & 0o777) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["dns-view.json"]  # no temp files left


async def test_a_dns_server_keeps_answering_while_nobody_publishes(tmp_path: Path) -> None:
    """Real packets: the server follows the file, and answers the last view without it."""
    source = ViewFile(tmp_path / "dns-view.json")
    source.publish(view(True))
    follower = DnsFollower(ZONE, source, interval=0.02)
    follower.refresh()
    port = free_port("127.0.0.1", udp=True)

    async def ask() -> list[str]:
        query = dns.message.make_query(APP, dns.rdatatype.A)
        response = await dns.asyncquery.udp(query, "127.0.0.1", port=port, timeout=2)
        assert response.rcode() == dns.rcode.NOERROR
        return sorted(str(r) for rrset in response.answer for r in rrset)

    async with DnsServer(follower.resolve, "127.0.0.1", port):
        task = asyncio.create_task(follower.run())
        try:
            assert await ask() == PRIMARY
            source.publish(view(False, serial=2))
            for _ in range(100):
                if await ask() == SECONDARY:
                    break
                await asyncio.sleep(0.02)
            assert await ask() == SECONDARY
            source.path.unlink()  # the publisher is gone, its file with it
            for _ in range(10):
                assert await ask() == SECONDARY
                await asyncio.sleep(0.02)
        finally:
            task.cancel()


def test_evacuated_zones_travel_with_the_view() -> None:
    evacuated = DnsView(APP, {"us-east-1": True, "us-west-2": False}, 3, 1.0, frozenset({"a1"}))
    assert DnsView.parse(evacuated.to_bytes(), ZONE) == evacuated
    assert evacuated.answer(ZONE).addresses == (PRIMARY[1],)
    assert not evacuated.same_decision(view(True))
    assert view(True).same_decision(view(True, serial=9))
    # A view from before evacuation existed has none; an unknown zone is refused.
    old = json.loads(view(True).to_bytes())
    del old["evacuated"]
    assert DnsView.parse(json.dumps(old).encode(), ZONE).evacuated == frozenset()
    old["evacuated"] = ["mars-az1"]
    with pytest.raises(DnsFeedError, match="evacuated must list zones"):
        DnsView.parse(json.dumps(old).encode(), ZONE)


def test_full_zones_travel_with_the_view() -> None:
    full = DnsView(APP, {"us-east-1": True, "us-west-2": False}, 3, 1.0, full=frozenset({"a1"}))
    assert DnsView.parse(full.to_bytes(), ZONE) == full
    assert full.answer(ZONE).addresses == (PRIMARY[1],)
    assert not full.same_decision(view(True, serial=3))
    assert full.decision() != view(True, serial=3).decision()  # the replies are rebuilt
    # A view of an earlier version has none; an unknown zone is refused.
    old = json.loads(view(True).to_bytes())
    del old["full"]
    assert DnsView.parse(json.dumps(old).encode(), ZONE).full == frozenset()
    old["full"] = ["mars-az1"]
    with pytest.raises(DnsFeedError, match="full must list zones"):
        DnsView.parse(json.dumps(old).encode(), ZONE)


def test_the_follower_leaves_evacuated_zones_out(tmp_path: Path) -> None:
    source = ViewFile(tmp_path / "dns-view.json")
    follower = DnsFollower(ZONE, source)
    source.publish(DnsView(APP, {"us-east-1": True, "us-west-2": False}, 2, 1.0, frozenset({"a2"})))
    assert follower.refresh()
    assert a_records(follower) == [PRIMARY[0]]
