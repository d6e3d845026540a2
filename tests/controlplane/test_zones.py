"""Zone evacuation in the control plane: the state, its endpoints, DNS, alarms, restarts."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import dns.asyncquery
import dns.message
import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from rideout.auth.admin import load_or_create_admin_token
from rideout.config import Config, parse_config
from rideout.controlplane.app import create_app
from rideout.controlplane.runtime import ControlPlane
from rideout.controlplane.zones import ZoneRefused, ZoneState
from rideout.errors import InvalidArgument
from rideout.health.canary import ProbeResult, metric_data
from tests.conftest import FakeClock, serving


def test_the_last_serving_zone_of_a_region_is_refused(make_config: Callable[..., Config]) -> None:
    clock = FakeClock()
    state = ZoneState(make_config(), clock=clock)
    evacuation, new = state.evacuate("use1-az1", operator="alice")
    assert new
    assert (evacuation.region, evacuation.since, evacuation.reason) == (
        "us-east-1",
        clock.now,
        "manual",
    )
    clock.advance(5)
    again, new = state.evacuate("use1-az1", operator="bob", reason="practice", expires_in=10)
    assert not new
    assert (again.since, again.operator, again.expires_at) == (
        evacuation.since,
        "bob",
        clock.now + 10,
    )
    with pytest.raises(ZoneRefused, match="last zone of us-east-1") as refused:
        state.evacuate("use1-az2", operator="alice")
    assert refused.value.status == 409
    state.evacuate("usw2-az2", operator="alice")  # another region: fine
    with pytest.raises(ZoneRefused, match="no zone 'mars'") as unknown:
        state.evacuate("mars", operator="alice")
    assert unknown.value.status == 404
    assert state.evacuated == {"use1-az1", "usw2-az2"}
    clock.advance(11)
    assert [e.zone for e in state.expired()] == ["use1-az1"]
    assert state.recover("use1-az1") is not None
    assert state.recover("use1-az1") is None
    assert [z["evacuated"] for z in state.status()] == [False, False, False, True]


def test_restored_state_never_evacuates_a_whole_region(make_config: Callable[..., Config]) -> None:
    state = ZoneState(make_config())
    saved = {
        z: {"zone": z, "region": "us-east-1", "since": 1.0, "operator": "x"}
        for z in ("use1-az1", "use1-az2", "gone-az9")
    }
    state.restore(saved)
    assert state.evacuated == {"use1-az1"}


def test_a_zone_is_full_while_its_latest_fresh_report_says_so(
    make_config: Callable[..., Config],
) -> None:
    config = make_config()
    clock = FakeClock(100.0)
    state = ZoneState(config, clock=clock)
    assert state.full_for == 3 * config.timing.canary_interval
    assert state.note_full("use1-az1", True, at=100.0) is True
    assert state.full() == {"use1-az1"}
    assert state.note_full("use1-az1", True, at=100.5) is False  # no change
    assert state.note_full("use1-az1", False, at=100.2) is False  # older than the last
    assert state.note_full("mars-az1", True, at=100.5) is False  # not a zone of ours
    assert [z["full"] for z in state.status()][:2] == [True, False]
    assert state.evacuated == frozenset()  # full is not evacuated
    clock.now = 100.5 + state.full_for + 0.01  # the canary fell silent: the word expires
    assert state.full() == frozenset()
    assert state.note_full("use1-az1", False, at=clock.now) is False


def test_a_zone_is_busy_while_its_latest_fresh_report_says_so_and_stays_healthy(
    make_config: Callable[..., Config],
) -> None:
    """Busy (shedding load) is kept apart from full, and changes nothing else."""
    config = make_config()
    clock = FakeClock(100.0)
    state = ZoneState(config, clock=clock)
    assert state.note("busy", "use1-az2", True, at=100.0) is True
    assert (state.busy(), state.full()) == ({"use1-az2"}, frozenset())
    assert state.note("busy", "use1-az2", False, at=99.0) is False  # older than the last
    assert [(z["zone"], z["busy"], z["full"], z["evacuated"]) for z in state.status()][:2] == [
        ("use1-az1", False, False, False), ("use1-az2", True, False, False)
    ]  # fmt: skip
    clock.now = 100.0 + state.full_for + 0.01  # the canary fell silent
    assert state.busy() == frozenset()
    assert state.note("busy", "use1-az2", True, at=clock.now) is True
    assert state.note("busy", "use1-az2", False, at=clock.now + 0.5) is True


def _points(config: Config, bad_zone: str | None, at: float) -> dict[str, object]:
    region = config.primary
    results = [
        ProbeResult(region.name, z.name, z.name != bad_zone, 0.01, None, at) for z in region.zones
    ]
    return metric_data(results)


async def test_evacuation_moves_dns_survives_a_restart_and_silences_the_zones_canary(
    make_config: Callable[..., Config],
) -> None:
    config = make_config()
    cp = config.control_plane
    admin = {"Authorization": f"Bearer {load_or_create_admin_token(config.keys_dir)}"}
    base = f"http://{cp.address}:{cp.port}"
    url = base + "/v1/zones/use1-az1/evacuate"

    async def a_records() -> list[str]:
        query = dns.message.make_query(config.app_domain, "A")
        response = await dns.asyncquery.udp(query, cp.address, port=cp.dns_port, timeout=2)
        return sorted(r.address for rrset in response.answer for r in rrset)

    app = create_app(config)
    async with (
        serving(app, cp.address, cp.port),
        httpx.AsyncClient(trust_env=False, base_url=base) as http,
    ):
        assert await a_records() == ["127.0.1.1", "127.0.1.2"]
        # Guarded: no token, a browser, a wrong token, another Host.
        assert (await http.post(url)).status_code == 401
        assert (await http.post(url, headers={**admin, "Origin": base})).status_code == 403
        assert (await http.post(url, headers={"Authorization": "Bearer nope"})).status_code == 401
        assert (await http.post(url, headers={**admin, "Host": "evil:1"})).status_code == 403
        # Bad bodies are refused and change nothing.
        for content, headers, status in [
            (b"{", {"Content-Type": "application/json"}, 400),
            (b"[]", {"Content-Type": "application/json"}, 400),
            (b'{"operator": "a"}', {"Content-Type": "text/plain"}, 415),
            (b'{"color": "red"}', {"Content-Type": "application/json"}, 400),
            (b'{"operator": "a", "operator": "b"}', {"Content-Type": "application/json"}, 400),
            (b'{"expires_in": NaN}', {"Content-Type": "application/json"}, 400),
            (b'{"expires_in": -1}', {"Content-Type": "application/json"}, 400),
            (b'{"reason": "whim"}', {"Content-Type": "application/json"}, 400),
            (b"x" * 5000, {"Content-Type": "application/json"}, 413),
        ]:
            answer = await http.post(url, content=content, headers={**admin, **headers})
            assert answer.status_code == status, (content, answer.text)
            assert "error" in answer.json()
        assert not any(z["evacuated"] for z in (await http.get("/v1/zones")).json()["zones"])

        done = await http.post(url, json={"operator": "alice"}, headers=admin)
        assert done.status_code == 200, done.text
        assert done.json()["evacuation"]["operator"] == "alice"
        assert await a_records() == ["127.0.1.2"]
        last = await http.post("/v1/zones/use1-az2/evacuate", headers=admin)
        assert last.status_code == 409
        assert "last zone" in last.json()["message"]
        assert (await http.post("/v1/zones/mars/evacuate", headers=admin)).status_code == 404
        metrics = (await http.get("/metrics")).text
        assert 'rideout_zone_evacuated{region="us-east-1",zone="use1-az1"} 1.0' in metrics
        assert 'rideout_zone_evacuated{region="us-east-1",zone="use1-az2"} 0.0' in metrics
        summary = (await http.get("/v1/summary")).json()
        assert [z["zone"] for z in summary["zones"] if z["evacuated"]] == ["use1-az1"]

        # The evacuated zone's failing canary does not count against its region.
        plane: ControlPlane = app.state.api.plane
        alarm = plane.alarms["us-east-1"]
        now = (plane.started_at // plane.period + 100) * plane.period
        for i in range(8):
            plane.put_metric_data(_points(config, "use1-az1", now - (8 - i - 0.5) * plane.period))
        assert alarm.datapoints(now, plane.store, exclude=plane._excluded())[-1] == 1.0
        assert alarm.datapoints(now, plane.store)[-1] == 0.0

    # A restarted control plane keeps the evacuation.
    again = create_app(config)
    async with (
        serving(again, cp.address, cp.port),
        httpx.AsyncClient(trust_env=False, base_url=base) as http,
    ):
        assert await a_records() == ["127.0.1.2"]
        back = await http.post("/v1/zones/use1-az1/recover", headers=admin)
        assert back.status_code == 200
        assert back.json()["evacuated"] is False
        assert await a_records() == ["127.0.1.1", "127.0.1.2"]
        assert (await http.post("/v1/zones/use1-az1/recover", headers=admin)).status_code == 200
        assert (await http.post("/v1/zones/mars/recover", headers=admin)).status_code == 404
        assert (await http.post("/v1/zones/use1-az1/recover")).status_code == 401


zone_names = st.sampled_from(["use1-az1", "use1-az2", "usw2-az1", "usw2-az2", "mars-az1"])
operations = st.lists(
    st.tuples(
        st.sampled_from(["evacuate", "recover"]),
        zone_names,
        st.one_of(st.none(), st.text(max_size=5), st.integers()),
        st.one_of(st.none(), st.floats(allow_nan=True), st.integers(-5, 5), st.text(max_size=3)),
        st.sampled_from(["manual", "autoshift", "practice", "whim"]),
    ),
    max_size=30,
)


@given(operations)
def test_no_sequence_of_requests_evacuates_a_whole_region(ops: list[tuple[Any, ...]]) -> None:
    """Whatever is asked, in whatever order: a region keeps a serving zone, a refused or
    malformed request changes nothing, and the saved state restores as it was."""
    state = ZoneState(parse_config({}))
    for op, zone, operator, expires_in, reason in ops:
        before = dict(state.evacuations)
        try:
            if op == "evacuate":
                state.evacuate(zone, operator=operator, reason=reason, expires_in=expires_in)
            else:
                state.recover(zone)
        except (ZoneRefused, InvalidArgument):
            assert state.evacuations == before
        for region in ("us-east-1", "us-west-2"):
            zones = [z for z, r in state.regions.items() if r == region]
            assert any(z not in state.evacuated for z in zones)
    again = ZoneState(parse_config({}))
    again.restore(state.to_dict())
    assert again.evacuations == state.evacuations
