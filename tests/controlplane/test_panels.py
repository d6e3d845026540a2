"""The dashboard's zones, ledger and rooms panels (rideout.controlplane.panels): the
pure parts, the rooms read against a stand-in of the room's private API, and the
ledger read from a real SQLite file."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from rideout.auth.admin import load_or_create_admin_token
from rideout.config import Config
from rideout.controlplane.panels import (
    AdmissionRates,
    AwsLedger,
    DashboardPanels,
    inlet_view,
    read_ledger,
    room_view,
    zone_verdict,
)
from rideout.controlplane.runtime import ControlPlane
from rideout.evacuate.ledger import LEDGER_FILE, SqliteLedger
from rideout.evacuate.model import Record
from rideout.health.canary import ProbeResult, metric_data
from tests.conftest import FakeClock, free_port

ALARMS = {
    "us-east-1": {"name": "us-east-1-websocket-health", "state": "ALARM"},
    "us-west-2": {"name": "us-west-2-websocket-health", "state": "OK"},
}


def test_a_zones_verdict_is_its_latest_datapoint() -> None:
    assert zone_verdict([]) is None
    assert zone_verdict([(10.0, 1.0), (10.5, 0.0)]) is False
    assert zone_verdict([(10.5, 1.0), (10.0, 0.0)]) is True  # by time, not by order


def test_admissions_per_minute_from_successive_reads() -> None:
    rates = AdmissionRates(window=60.0)
    assert rates.observe("e", 100.0, 0) == 0.0  # one read: no rate yet
    assert rates.observe("e", 100.5, 0) == 0.0
    assert rates.observe("e", 101.0, 10) == pytest.approx(10.0)  # 10 in the second since
    assert rates.observe("e", 160.0, 70) == pytest.approx(70 / 60)
    # Past the window the base is the last read at or before its start (t=101.0, 10).
    assert rates.observe("e", 170.0, 70) == pytest.approx(60 / 60)
    # A reset counter starts a new history instead of counting a negative admission.
    assert rates.observe("e", 171.0, 0) == 0.0
    assert rates.observe("e", 172.0, 5) == pytest.approx(5.0)
    rates.observe("f", 172.0, 3)
    rates.keep(["f"])
    assert rates.observe("e", 173.0, 9) == 0.0  # "e" was forgotten: a first read again
    assert rates.observe("f", 174.0, 9) == pytest.approx(3.0)


def test_an_inlet_says_what_it_does_and_whether_an_alarm_holds_it() -> None:
    none = inlet_view({"kind": "none"}, ALARMS, 1000.0)
    assert (none["kind"], none["held"], none["alarm"]) == ("none", False, None)
    assert none["doing"] == "only increment_serving_counter moves the counter"
    size = inlet_view({"kind": "max_size", "max_size": 50, "period": 1}, ALARMS, 1000.0)
    assert size["doing"] == "admits up to 50 less capacity held every 1 s"
    periodic = {"kind": "periodic", "increment_by": 5, "period": 2}
    assert inlet_view(periodic, ALARMS, 1000.0)["doing"] == "admits 5 every 2 s"
    # Named by the region (the alarms' key) or by the alarm's own name.
    for alarm in ("us-east-1", "us-east-1-websocket-health"):
        held = inlet_view({**periodic, "alarm": alarm}, ALARMS, 1000.0)
        assert (held["held"], held["alarm_state"]) == (True, "ALARM")
        assert held["doing"] == f"held: alarm {alarm} is in ALARM"
    fine = inlet_view({**periodic, "alarm": "us-west-2"}, ALARMS, 1000.0)
    assert (fine["held"], fine["alarm_state"], fine["doing"]) == (False, "OK", "admits 5 every 2 s")
    unknown = inlet_view({**periodic, "alarm": "nobody"}, ALARMS, 1000.0)
    assert (unknown["held"], unknown["alarm_state"]) == (False, None)  # counts as OK
    window = {**periodic, "start": 2000.0, "end": 3000.0}
    assert inlet_view(window, ALARMS, 1000.0)["doing"] == "not started"
    assert inlet_view(window, ALARMS, 3000.0)["doing"] == "ended"


def shown(event_id: str = "launch", **counters: int) -> dict[str, Any]:
    """A room's answer to GET /private/events/{id}."""
    values = {"queue": 0, "serving": 0, "tokens": 0, "expired": 0, "abandoned": 0,
              "completed": 0, "sessions_abandoned": 0, "max_expired": 0, "prequeued": 0}  # fmt: skip
    values.update(counters)
    values["waiting"] = values["queue"] - values["tokens"] - values["expired"] - values["abandoned"]
    inlet = {"kind": "max_size", "period": 1.0, "max_size": 40, "increment_by": 10,
             "start": 0.0, "end": 0.0, "alarm": ""}  # fmt: skip
    event = {"event_id": event_id, "open": True, "auto_open_threshold": 0, "inlet": inlet}
    return {"event": event, "counters": values, "active_tokens": 12, "holding": 15}


def test_a_rooms_row_estimates_the_wait_by_the_rooms_rule() -> None:
    row = room_view(shown(queue=100, serving=40, tokens=30), ALARMS, rate=0.5, now=1000.0)
    assert (row["queue"], row["serving"], row["waiting"]) == (100, 40, 70)
    assert (row["active"], row["holding"], row["capacity"]) == (12, 15, 40)
    assert row["capacity_from"] == "inlet max_size"
    assert row["admitted_per_minute"] == 30.0
    assert row["estimated_wait"] == 122  # (100 + 1 - 40) ahead at 0.5 a second, rounded up
    idle = room_view(shown(queue=100, serving=40), ALARMS, rate=0.0, now=1000.0)
    assert idle["estimated_wait"] is None  # nothing admitted: unknown, not zero
    served = room_view(shown(queue=10, serving=20), ALARMS, rate=0.0, now=1000.0)
    assert served["estimated_wait"] == 0  # a new arrival is served at once


def test_the_ledger_is_read_without_being_made(tmp_path: Path) -> None:
    path = tmp_path / LEDGER_FILE
    missing = read_ledger(path)
    assert (missing["exists"], missing["rows"], missing["error"]) == (False, [], None)
    assert not path.exists()
    ledger = SqliteLedger(path)
    ledger.merge(Record("use1-az1", "us-east-1", "local", ("use1-az1",), 1234.5, "alice",
                        ("use1-az1", "use1-az2"), "removed"))  # fmt: skip
    read = read_ledger(path)
    assert (read["exists"], read["total"]) == (True, 1)
    assert read["rows"] == [
        {"zone": "use1-az1", "type": "local", "resource": "us-east-1", "removed": ["use1-az1"],
         "operator": "alice", "since": 1234.5, "outcome": "removed"}
    ]  # fmt: skip
    with sqlite3.connect(path) as db:
        db.execute("UPDATE evacuations SET removed = 'not json'")
    db.close()
    broken = read_ledger(path)
    assert broken["rows"] == []
    assert "cannot read" in broken["error"]


async def test_zones_carry_their_canarys_latest_verdict(
    make_config: Callable[..., Config],
) -> None:
    config = make_config()
    clock = FakeClock(1_800_000_000.0)
    plane = ControlPlane(config, clock=clock)
    region = config.primary
    at = clock.now - 0.2
    probes = [ProbeResult(region.name, z.name, z.name == "use1-az2", 0.01, None, at)
              for z in region.zones]  # fmt: skip
    plane.put_metric_data(metric_data(probes))
    async with httpx.AsyncClient() as http:
        zones = DashboardPanels(config, plane, http, timeout=0.5).zones(
            plane.zones_status(), clock.now
        )
    assert {z["zone"]: z["healthy"] for z in zones} == {
        "use1-az1": False, "use1-az2": True, "usw2-az1": None, "usw2-az2": None,
    }  # fmt: skip


class RoomStandIn:
    """Answers the room's private API as an app server does, and records the calls."""

    def __init__(self, config: Config, down: set[str]) -> None:
        self.token = load_or_create_admin_token(config.keys_dir)
        self.down = down
        self.calls: list[str] = []
        self.serving = 0

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.calls.append(f"{request.url.host} {request.url.path}")
        if request.url.host in self.down:
            raise httpx.ConnectError("refused", request=request)
        if request.headers.get("authorization") != f"Bearer {self.token}":
            return httpx.Response(401, json={"error": "unauthorized"})
        if request.url.path == "/private/events":
            return httpx.Response(200, json={"events": [{"event_id": "launch"}]})
        if request.url.path == "/private/events/launch":
            return httpx.Response(200, json=shown(queue=100, serving=self.serving))
        return httpx.Response(404, json={"error": "not found"})


async def test_rooms_are_read_from_the_writer_regions_app_servers(
    make_config: Callable[..., Config],
) -> None:
    config = make_config()
    clock = FakeClock(1_800_000_000.0)
    plane = ControlPlane(config, clock=clock)
    room = RoomStandIn(config, down={"127.0.1.1"})  # use1-az1 does not answer
    async with httpx.AsyncClient(transport=httpx.MockTransport(room)) as http:
        panels = DashboardPanels(config, plane, http, timeout=0.5)

        async def frame(writer: str) -> dict[str, Any]:
            view: dict[str, Any] = {"alarms": ALARMS, "failover": {"writer": writer}}
            await panels.add_to(view, plane.zones_status())
            return view

        first = await frame("us-east-1")
        assert room.calls == ["127.0.1.1 /private/events", "127.0.1.2 /private/events",
                              "127.0.1.2 /private/events/launch"]  # fmt: skip
        rooms = first["rooms"]
        assert (rooms["error"], rooms["server"]) == (None, f"http://127.0.1.2:{config.app_port}")
        assert [e["admitted_per_minute"] for e in rooms["events"]] == [0.0]
        # The next period: 30 admitted in 0.5 s.
        clock.advance(0.5)
        room.serving = 30
        second = await frame("us-east-1")
        assert second["rooms"]["events"][0]["admitted_per_minute"] == 3600.0
        # After a failover the writer region's servers are asked first.
        room.calls.clear()
        await frame("us-west-2")
        assert room.calls[0] == "127.0.2.1 /private/events"
        assert first["ledger"]["exists"] is False
        # Nobody answers: the panel says so.
        room.down |= {"127.0.1.2", "127.0.2.1", "127.0.2.2"}
        gone = await frame("us-east-1")
        assert (gone["rooms"]["error"], gone["rooms"]["events"]) == ("no app server answered", [])


async def test_a_room_that_is_off_reads_nothing(make_config: Callable[..., Config]) -> None:
    config = make_config(waitingroom={"enabled": False})
    plane = ControlPlane(config)

    def nothing(request: httpx.Request) -> httpx.Response:
        raise AssertionError(f"asked {request.url}")

    async with httpx.AsyncClient(transport=httpx.MockTransport(nothing)) as http:
        view: dict[str, Any] = {"alarms": {}, "failover": {"writer": "us-east-1"}}
        await DashboardPanels(config, plane, http, timeout=0.5).add_to(view, plane.zones_status())
    assert (view["rooms"]["enabled"], view["rooms"]["events"]) == (False, [])
    assert json.dumps(view)  # the frame is JSON


# ------------------------------------------------- the AWS ledger (moto in server mode)


def _aws_config(make_config: Callable[..., Config], endpoint: str, **aws: Any) -> Config:
    return make_config(evacuate_aws={"dashboard": True, "region": "us-east-1",
                                     "endpoint_url": endpoint, "table": "ledger-t", **aws})  # fmt: skip


def test_the_aws_ledger_is_read_without_making_its_table(
    make_config: Callable[..., Config], moto_endpoint: str
) -> None:
    from rideout.evacuate.aws.connect import settings_from
    from rideout.evacuate.dynamo import DynamoLedger

    config = _aws_config(make_config, moto_endpoint)
    panel = AwsLedger(config)
    assert panel.empty()["exists"] is None  # before the first read: "not read yet"
    assert panel.where() == f"ledger-t (us-east-1, {moto_endpoint})"
    missing = panel.read()
    assert (missing["kind"], missing["rows"], missing["error"]) == ("dynamodb", [], None)
    client = settings_from(config.evacuate_aws).client("dynamodb")
    assert "ledger-t" not in client.list_tables()["TableNames"]  # never created

    DynamoLedger(settings_from(config.evacuate_aws), table="ledger-t").merge(
        Record("use1-az1", "arn:aws:lambda:us-east-1:1:function:resize", "lambda",
               ("subnet-1",), 1234.5, "bob", ("subnet-1", "subnet-2"), "removed")
    )  # fmt: skip
    read = panel.read()
    assert (read["total"], read["error"]) == (1, None)
    assert read["rows"] == [
        {"zone": "use1-az1", "type": "lambda",
         "resource": "arn:aws:lambda:us-east-1:1:function:resize", "removed": ["subnet-1"],
         "operator": "bob", "since": 1234.5, "outcome": "removed"}
    ]  # fmt: skip


def test_an_aws_ledger_it_cannot_reach_says_why(
    make_config: Callable[..., Config], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    no_region = AwsLedger(make_config(evacuate_aws={"dashboard": True}))
    assert "no AWS region" in no_region.read()["error"]
    # A closed port: the call fails (botocore's retries bounded by max_attempts).
    closed = AwsLedger(make_config(evacuate_aws={
        "dashboard": True, "region": "us-east-1", "max_attempts": 1,
        "endpoint_url": f"http://127.0.0.1:{free_port('127.0.0.1')}"}))  # fmt: skip
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    failed = closed.read()
    assert failed["rows"] == []
    assert "the ledger table rideout-evacuations" in failed["error"], failed


async def test_the_frame_carries_the_aws_ledger_only_when_asked(
    make_config: Callable[..., Config], moto_endpoint: str
) -> None:
    for asked in (False, True):
        config = _aws_config(make_config, moto_endpoint, dashboard=asked)
        plane = ControlPlane(config, clock=FakeClock(1_800_000_000.0))
        view: dict[str, Any] = {}
        async with httpx.AsyncClient(
            transport=httpx.MockTransport(lambda r: httpx.Response(503))
        ) as http:
            await DashboardPanels(config, plane, http, timeout=5.0).add_to(view, [])
        assert ("aws_ledger" in view) is asked
        if asked:
            assert (view["aws_ledger"]["kind"], view["aws_ledger"]["error"]) == ("dynamodb", None)
