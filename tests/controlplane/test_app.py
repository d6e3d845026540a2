from __future__ import annotations

import json
from collections.abc import Callable

import httpx
import pytest
from starlette.applications import Starlette

from rideout.cluster.chaos import LocalChaos
from rideout.cluster.status import LocalInventory
from rideout.config import Config
from rideout.controlplane.app import create_app
from rideout.controlplane.errors import ChaosFailed
from tests.conftest import HeldSleep, serving, until


def local_app(config: Config) -> Starlette:
    """The control plane as `rideout control-plane` builds it in local mode."""
    return create_app(config, chaos=LocalChaos(config.run_dir), inventory=LocalInventory(config))


async def test_health_status_and_metrics(make_config: Callable[..., Config]) -> None:
    config = make_config()
    cp = config.control_plane
    async with (
        serving(local_app(config), cp.address, cp.port),
        httpx.AsyncClient(trust_env=False, base_url=f"http://{cp.address}:{cp.port}") as http,
    ):
        health = (await http.get("/health")).json()
        assert (health["status"], health["app_domain"]) == ("ok", config.app_domain)
        assert health["tasks_down"] == []
        assert {"control-loop", "dashboard-feed"} <= set(health["tasks"])
        status = (await http.get("/status")).json()
        assert status["running"] is False  # no `rideout up` holds this data dir
        assert [r["name"] for r in status["regions"]] == ["us-east-1", "us-west-2"]
        assert status["control_plane"]["health"]["up"] is True
        # Nothing else runs: every probe says so rather than failing.
        assert all(not z["health"]["up"] for r in status["regions"] for z in r["zones"])
        assert all(not r["redis"]["state"]["reachable"] for r in status["regions"])
        metrics = (await http.get("/metrics")).text
        assert (
            'rideout_deployment_info{app_domain="auction.rideout.test",profile="fast"} 1.0'
            in metrics
        )
        assert 'rideout_control_plane_requests_total{endpoint="status"} 1.0' in metrics


class _BreaksOnce:
    """A gauge whose first ``set`` raises: a bug outside the round's own guard."""

    def __init__(self) -> None:
        self.broken = False

    def set(self, value: float) -> None:
        if not self.broken:
            self.broken = True
            raise RuntimeError("a bug past the round's guard")


async def test_a_dead_control_loop_turns_health_red_until_it_is_restarted(
    make_config: Callable[..., Config],
) -> None:
    config = make_config()
    cp = config.control_plane
    app = local_app(config)
    async with (
        serving(app, cp.address, cp.port),
        httpx.AsyncClient(trust_env=False, base_url=f"http://{cp.address}:{cp.port}") as http,
    ):
        plane = app.state.control_plane
        plane.tasks.sleep = held = HeldSleep()
        rounds = plane.rounds
        plane.metrics.round_delay = _BreaksOnce()  # the next round's first step
        await until(lambda: held.asked, 5, message="the control loop's death")
        response = await http.get("/health")
        assert response.status_code == 503
        assert response.json()["tasks_down"] == ["control-loop"]
        assert (
            'rideout_task_deaths_total{task="control-loop"} 1.0'
            in (await http.get("/metrics")).text
        )
        held.release()
        await until(lambda: plane.rounds > rounds, 5, message="a round after the restart")
        assert (await http.get("/health")).status_code == 200


async def test_dashboard_data_and_chaos_are_guarded(make_config: Callable[..., Config]) -> None:
    from rideout.auth.admin import load_or_create_admin_token

    config = make_config()
    cp = config.control_plane
    async with (
        serving(local_app(config), cp.address, cp.port),
        httpx.AsyncClient(trust_env=False, base_url=f"http://{cp.address}:{cp.port}") as http,
    ):
        admin = load_or_create_admin_token(config.keys_dir)
        answer = await http.get("/v1/dashboard")
        settings = answer.json()
        assert settings["local"] is True
        # No credential is served: not the admin token, no CSRF token without a session.
        assert admin not in answer.text
        assert "admin_token" not in settings
        assert (settings["session"], settings["csrf"]) == (False, None)
        assert "access-control-allow-origin" not in answer.headers
        # DNS rebinding: another name that resolves here is refused.
        assert (
            await http.get("/v1/dashboard", headers={"Host": "evil.example:9000"})
        ).status_code == 403
        auth = {"Authorization": f"Bearer {admin}"}
        assert (
            await http.post("/v1/chaos", json={"op": "kill", "region": "us-east-1"})
        ).status_code == 401
        bad_body = {**auth, "Content-Type": "application/json"}
        assert (await http.post("/v1/chaos", content=b"{", headers=bad_body)).status_code == 400
        refused = await http.post(
            "/v1/chaos", json={"op": "kill", "region": "us-east-1"}, headers=auth
        )
        assert refused.status_code == 409  # no supervisor is running
        assert "not running" in refused.json()["message"]
        async with http.stream("GET", "/v1/stream") as stream:
            async for line in stream.aiter_lines():
                if line.startswith("data: "):
                    import json

                    view = json.loads(line[len("data: ") :])
                    assert set(view) >= {"alarms", "dns", "failover", "canary", "clients", "now"}
                    assert admin not in line
                    break
        assert "<title>rideout · operations</title>" in (await http.get("/")).text


class RecordingChaos:
    """Stands in for the local supervisor's chaos port (LocalChaos), the seam the control
    plane is given: what crosses it is the test. The real supervisor behind LocalChaos is
    covered by tests/cluster/test_chaos.py."""

    def __init__(self, fail: str | None = None) -> None:
        self.calls: list[tuple[str, str]] = []
        self.fail = fail

    async def run(self, op: str, region: str) -> str:
        self.calls.append((op, region))
        if self.fail is not None:
            raise ChaosFailed(self.fail)
        return f"did {op} to {region}"


async def test_without_a_supervisor_chaos_is_refused_and_status_is_its_own(
    make_config: Callable[..., Config],
) -> None:
    from rideout.auth.admin import load_or_create_admin_token

    config = make_config()
    cp = config.control_plane
    auth = {"Authorization": f"Bearer {load_or_create_admin_token(config.keys_dir)}"}
    async with (
        serving(create_app(config), cp.address, cp.port),
        httpx.AsyncClient(trust_env=False, base_url=f"http://{cp.address}:{cp.port}") as http,
    ):
        refused = await http.post(
            "/v1/chaos", json={"op": "kill", "region": "us-east-1"}, headers=auth
        )
        assert refused.status_code == 501
        assert refused.json()["error"] == "not_implemented"
        assert "local supervisor" in refused.json()["message"]
        # Nothing to press: the dashboard gets no chaos buttons (and never a credential).
        settings = (await http.get("/v1/dashboard")).json()
        assert settings["local"] is False
        assert "admin_token" not in settings
        # /status: the configured topology and the control plane's own view, no probes.
        status = (await http.get("/status")).json()
        assert "running" not in status
        assert status["control_plane"]["alive"] is True
        assert set(status["control_plane"]) >= {"alarms", "dns", "failover", "health_checks"}
        assert [r["name"] for r in status["regions"]] == ["us-east-1", "us-west-2"]
        assert [z["name"] for z in status["regions"][0]["zones"]] == ["use1-az1", "use1-az2"]
        assert all("health" not in z for r in status["regions"] for z in r["zones"])


@pytest.mark.parametrize("fail", [None, "no region 'mars-1'"])
async def test_chaos_goes_through_the_injected_port(
    make_config: Callable[..., Config], fail: str | None
) -> None:
    from rideout.auth.admin import load_or_create_admin_token

    config = make_config()
    cp = config.control_plane
    port = RecordingChaos(fail)
    auth = {"Authorization": f"Bearer {load_or_create_admin_token(config.keys_dir)}"}
    async with (
        serving(create_app(config, chaos=port), cp.address, cp.port),
        httpx.AsyncClient(trust_env=False, base_url=f"http://{cp.address}:{cp.port}") as http,
    ):
        assert (await http.get("/v1/dashboard")).json()["local"] is True
        answer = await http.post(
            "/v1/chaos", json={"op": "freeze", "region": "us-west-2"}, headers=auth
        )
    assert port.calls == [("freeze", "us-west-2")]
    if fail is None:
        assert answer.status_code == 200
        assert answer.json() == {"message": "did freeze to us-west-2"}
    else:
        assert answer.status_code == 409
        assert answer.json() == {"error": "chaos_failed", "message": fail}


async def test_chaos_through_an_operator_session(make_config: Callable[..., Config]) -> None:
    """Login link (admin token) → session cookie → POSTs with CSRF token and own Origin."""
    from rideout.auth.admin import load_or_create_admin_token

    config = make_config()
    cp = config.control_plane
    own = f"http://{cp.address}:{cp.port}"
    port = RecordingChaos()
    admin = {"Authorization": f"Bearer {load_or_create_admin_token(config.keys_dir)}"}
    throttle = {"op": "throttle", "region": "us-east-1"}
    async with (
        serving(create_app(config, chaos=port), cp.address, cp.port),
        httpx.AsyncClient(trust_env=False, base_url=own) as http,
    ):
        # Only the admin token's holder gets a login link, and never through a browser.
        assert (await http.post("/v1/login-codes")).status_code == 401
        assert (
            await http.post("/v1/login-codes", headers={"Authorization": "Bearer nope" * 8})
        ).status_code == 401
        assert (
            await http.post("/v1/login-codes", headers={**admin, "Origin": own})
        ).status_code == 403
        minted = await http.post("/v1/login-codes", headers=admin)
        assert minted.status_code == 200
        link = minted.json()["url"]
        assert link.startswith(f"{own}/login?code=")
        # No session yet: chaos is refused, and the dashboard has no CSRF token.
        no_session = await http.post("/v1/chaos", json=throttle, headers={"Origin": own})
        assert no_session.status_code == 401
        assert "rideout dashboard login" in no_session.json()["message"]
        # The link opens a session once.
        opened = await http.get(link)
        assert (opened.status_code, opened.headers["location"]) == (303, "/")
        cookie = opened.headers["set-cookie"]
        assert cookie.startswith("rideout_operator=")
        attributes = {a.strip().lower() for a in cookie.split(";")[1:]}
        assert {"httponly", "samesite=strict", "path=/"} <= attributes
        assert "secure" not in attributes  # plain HTTP on loopback
        again = await http.get(link)
        assert (again.status_code, again.json()["error"]) == (401, "login_failed")
        settings = (await http.get("/v1/dashboard")).json()
        assert settings["session"] is True
        csrf = settings["csrf"]
        assert isinstance(csrf, str)
        assert len(csrf) >= 32
        # A session alone is not enough: the CSRF token, and the dashboard's own Origin.
        for headers in [
            {"Origin": own},
            {"Origin": own, "X-CSRF-Token": csrf[:-1] + ("A" if csrf[-1] != "A" else "B")},
            {"X-CSRF-Token": csrf},
            {"Origin": "http://evil.example", "X-CSRF-Token": csrf},
            {"Origin": "null", "X-CSRF-Token": csrf},
        ]:
            answer = await http.post("/v1/chaos", json=throttle, headers=headers)
            assert answer.status_code == 403, (headers, answer.text)
        text_plain = await http.post(
            "/v1/chaos", content=b'{"op": "throttle", "region": "us-east-1"}',
            headers={"Origin": own, "X-CSRF-Token": csrf, "Content-Type": "text/plain"},
        )  # fmt: skip
        assert text_plain.status_code == 415
        twice = await http.post(
            "/v1/chaos", content=b'{"op": "restore", "op": "throttle", "region": "us-east-1"}',
            headers={"Origin": own, "X-CSRF-Token": csrf, "Content-Type": "application/json"},
        )  # fmt: skip
        assert twice.status_code == 400  # strict JSON: which "op" would it be?
        assert port.calls == []
        done = await http.post("/v1/chaos", json=throttle,
                               headers={"Origin": own, "X-CSRF-Token": csrf})  # fmt: skip
        assert done.status_code == 200, done.text
        assert port.calls == [("throttle", "us-east-1")]
        # Another browser (no cookie) with a stolen CSRF token gets nowhere.
        http.cookies.clear()
        stolen = await http.post("/v1/chaos", json=throttle,
                                 headers={"Origin": own, "X-CSRF-Token": csrf})  # fmt: skip
        assert stolen.status_code == 401
        # The admin token (the CLI's path) never comes from a foreign page.
        foreign = {**admin, "Origin": "http://evil.example"}
        assert (await http.post("/v1/chaos", json=throttle, headers=foreign)).status_code == 403
        assert port.calls == [("throttle", "us-east-1")]
        # A login link from another Host (DNS rebinding) is refused.
        fresh = (await http.post("/v1/login-codes", headers=admin)).json()["url"]
        code = fresh.split("code=", 1)[1]
        assert (
            await http.get(f"/login?code={code}", headers={"Host": "evil.example:9000"})
        ).status_code == 403


async def test_an_expired_login_link_opens_nothing(make_config: Callable[..., Config]) -> None:
    from rideout.controlplane.sessions import OperatorSessions

    config = make_config()
    cp = config.control_plane
    app = create_app(config, chaos=RecordingChaos())
    now = [1_800_000_000.0]
    app.state.api.sessions = OperatorSessions(code_ttl=300, clock=lambda: now[0])
    async with (
        serving(app, cp.address, cp.port),
        httpx.AsyncClient(trust_env=False, base_url=f"http://{cp.address}:{cp.port}") as http,
    ):
        code, expires = app.state.api.sessions.mint_code()
        assert expires == now[0] + 300
        now[0] += 300.5
        expired = await http.get(f"/login?code={code}")
        assert expired.status_code == 401
        assert "set-cookie" not in expired.headers
        assert (await http.get("/login")).status_code == 401  # no code at all
        assert (await http.get("/login?code=" + "x" * 43)).status_code == 401  # made up
        assert (await http.get("/v1/dashboard")).json()["session"] is False


async def test_the_dashboards_zone_buttons_are_guarded_as_chaos_is(
    make_config: Callable[..., Config],
) -> None:
    """POST /v1/dashboard/zones: an operator session with its CSRF token from the
    dashboard's own Origin (or the admin token); then the evacuation engine, recorded in
    the ledger as `rideout evacuate` records it."""
    from rideout.auth.admin import load_or_create_admin_token
    from rideout.evacuate.ledger import LEDGER_FILE, SqliteLedger

    config = make_config()
    cp = config.control_plane
    own = f"http://{cp.address}:{cp.port}"
    admin = {"Authorization": f"Bearer {load_or_create_admin_token(config.keys_dir)}"}
    evacuate = {"op": "evacuate", "zone": "use1-az1"}
    ledger = config.data_dir / LEDGER_FILE
    async with (
        serving(create_app(config), cp.address, cp.port),
        httpx.AsyncClient(trust_env=False, base_url=own) as http,
    ):

        async def evacuated() -> list[str]:
            zones = (await http.get("/v1/zones")).json()["zones"]
            return [z["zone"] for z in zones if z["evacuated"]]

        no_session = await http.post("/v1/dashboard/zones", json=evacuate, headers={"Origin": own})
        assert no_session.status_code == 401
        link = (await http.post("/v1/login-codes", headers=admin)).json()["url"]
        assert (await http.get(link)).status_code == 303
        csrf = (await http.get("/v1/dashboard")).json()["csrf"]
        good = {"Origin": own, "X-CSRF-Token": csrf}
        for headers in [
            {"Origin": own},  # no CSRF token
            {"Origin": own, "X-CSRF-Token": csrf[:-1] + ("A" if csrf[-1] != "A" else "B")},
            {"X-CSRF-Token": csrf},  # no Origin
            {"Origin": "http://evil.example", "X-CSRF-Token": csrf},
            {**good, "Host": "evil.example:9000"},  # DNS rebinding
            {**admin, "Origin": "http://evil.example"},
        ]:
            answer = await http.post("/v1/dashboard/zones", json=evacuate, headers=headers)
            assert answer.status_code == 403, (headers, answer.text)
        plain = await http.post("/v1/dashboard/zones", content=json.dumps(evacuate),
                                headers={**good, "Content-Type": "text/plain"})  # fmt: skip
        assert plain.status_code == 415
        for body in [{"op": "kill", "zone": "use1-az1"}, {"op": "evacuate"},
                     {**evacuate, "operator": "mallory"}]:  # fmt: skip
            assert (
                await http.post("/v1/dashboard/zones", json=body, headers=good)
            ).status_code == 400
        unknown = await http.post("/v1/dashboard/zones", json={"op": "evacuate", "zone": "mars"},
                                  headers=good)  # fmt: skip
        assert unknown.status_code == 404
        assert await evacuated() == []
        assert not ledger.exists()  # nothing refused reached the engine

        done = await http.post("/v1/dashboard/zones", json=evacuate, headers=good)
        assert done.status_code == 200, done.text
        assert done.json()["message"] == "evacuated use1-az1"
        assert await evacuated() == ["use1-az1"]
        zone = (await http.get("/v1/zones")).json()["zones"][0]
        assert (zone["evacuation"]["operator"], zone["evacuation"]["reason"]) == (
            "dashboard", "manual",
        )  # fmt: skip
        rows = SqliteLedger(ledger, create=False).records()
        assert [(r.zone_id, r.resource, r.operator) for r in rows] == [
            ("use1-az1", "us-east-1", "dashboard")
        ]
        last = await http.post("/v1/dashboard/zones", json={"op": "evacuate", "zone": "use1-az2"},
                               headers=good)  # fmt: skip
        assert last.status_code == 409  # the region's last serving zone
        assert await evacuated() == ["use1-az1"]

        back = await http.post("/v1/dashboard/zones", json={"op": "recover", "zone": "use1-az1"},
                               headers=good)  # fmt: skip
        assert back.status_code == 200, back.text
        assert await evacuated() == []
        assert SqliteLedger(ledger, create=False).records() == []
        # A zone evacuated through /v1/zones alone has no ledger row: recovered directly.
        await http.post("/v1/zones/usw2-az1/evacuate", json={}, headers=admin)
        assert await evacuated() == ["usw2-az1"]
        # The admin token (the CLI's credential) works too, as for chaos.
        cli = await http.post("/v1/dashboard/zones", json={"op": "recover", "zone": "usw2-az1"},
                              headers=admin)  # fmt: skip
        assert cli.status_code == 200, cli.text
        assert await evacuated() == []
        # Another browser (no cookie) with the stolen CSRF token gets nowhere.
        http.cookies.clear()
        stolen = await http.post("/v1/dashboard/zones", json=evacuate, headers=good)
        assert stolen.status_code == 401
        assert await evacuated() == []
