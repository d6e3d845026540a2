"""The waiting-room page in headless Chromium against `rideout up`: a visitor waits, the
admin moves the serving counter, the page goes on to the auction and its `/ws` accepts
the room's token; the same across a reload, and across a region failover (the page's
own zone killed while it waits). Debian's chromium through Playwright's
`executable_path`, as tests/web/test_browser.py; screenshots go to test-artifacts/.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx
import pytest
from authlib.oauth2.rfc7636 import create_s256_code_challenge
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route

from rideout import routes
from rideout.auth.admin import load_or_create_admin_token
from rideout.auth.oidc_secrets import oidc_secret_path
from rideout.config import Config, dump_toml, parse_config
from tests.cluster.conftest import Up, rideout, started
from tests.conftest import config_data, free_port, page_until, serving, watched
from tests.web.test_browser import CHROMIUM, browser, shot, wait_region

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not Path(CHROMIUM).exists(),
        reason="Debian's chromium is not installed (apt install chromium)",
    ),
    pytest.mark.asyncio(loop_scope="module"),
]

EVENT = "auction"
RP_PORT = free_port("127.0.0.1")
CALLBACK = f"http://127.0.0.1:{RP_PORT}/callback"  # the relying party: served by the test
__all__ = ["browser"]  # the module's Chromium, shared with tests/web/test_browser.py


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Up, Config]]:
    workdir = tmp_path_factory.mktemp("room-page")
    data = config_data(workdir / ".rideout")
    # No inlet: only the admin admits (the test decides when a visitor is served).
    data["waitingroom"] = {
        "inlet": "none", "events": [EVENT], "oidc_clients": [f"{EVENT} {CALLBACK}"],
    }  # fmt: skip
    config = parse_config(data)
    (workdir / "rideout.toml").write_text(dump_toml(config))
    with started(workdir) as up:
        up.wait_ready()
        yield up, config


def chaos(up: Up, op: str, region: str) -> None:
    """`rideout chaos OP REGION` (a restore under load can take most of a minute)."""
    done = rideout("chaos", op, region, "-c", "rideout.toml", cwd=up.workdir, timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr


async def admit(config: Config, zone: str, by: int = 1) -> None:
    """The admin moves the serving counter (through `zone`, a zone of the writer)."""
    token = load_or_create_admin_token(config.keys_dir)
    async with httpx.AsyncClient(trust_env=False, timeout=10) as http:
        r = await http.post(
            f"http://{zone}:{config.app_port}/private/increment_serving_counter",
            json={"event_id": EVENT, "increment_by": by},
            headers={"Authorization": f"Bearer {token}"},
        )
        assert r.status_code == 200, r.text


async def serving_and_position(page: Any) -> tuple[int, int]:
    await page_until(
        page,
        "/^[0-9]+$/.test(document.getElementById('position').textContent)"
        " && /^[0-9]+$/.test(document.getElementById('serving').textContent)",
        timeout=30000,
    )
    position = int(await page.inner_text("#position"))
    serving = int(await page.inner_text("#serving"))
    return position, serving


async def wait_in_room(browser: Any, config: Config, zone: str, random: float | None = None) -> Any:
    """A page in the room; `random` fixes the page's Math.random (its jitter)."""
    page = await browser.new_page(viewport={"width": 1000, "height": 700})
    if random is not None:
        await page.add_init_script(f"Math.random = () => {random!r};")
    page.errors = watched(page)
    await page.goto(f"http://{zone}:{config.app_port}/room.html?event_id={EVENT}&next=/")
    return page


async def until_in_auction(page: Any) -> None:
    """The page went on to the auction, whose client is connected with the room's token."""
    await page_until(page, "window.rideout && window.rideout.connected", timeout=60000)
    assert await page.evaluate("sessionStorage.getItem('rideout-room-token') !== null")
    assert "room_token" not in page.url  # the fragment is cleared from the address bar


async def test_a_visitor_waits_is_admitted_and_the_auction_accepts_the_token(
    browser: Any, deployment: tuple[Up, Config]
) -> None:
    _, config = deployment
    zone = config.primary.zones[0].address
    page = await wait_in_room(browser, config, zone, random=0.9)
    position, serving = await serving_and_position(page)
    assert position > serving
    assert await page.inner_text("#status") == "waiting"
    await shot(page, "room-waiting")
    # The page polls with jittered pauses that grow while the counter stands still (not
    # a fixed period): full jitter, random x min(8, 2^idle) s, and never under 0.25 s.
    # Math.random is fixed, so the pauses are known; with a real one, two draws can
    # both fall under the floor and be equal (a test that asked for distinct pauses
    # failed so on CI).
    await page_until(page, "window.rideoutRoom.delays.length >= 3", timeout=30000)
    delays = await page.evaluate("window.rideoutRoom.delays")
    assert delays[:3] == pytest.approx([0.9, 1.8, 3.6])
    await admit(config, zone, position - serving)
    await until_in_auction(page)
    await shot(page, "room-admitted-auction")
    assert page.errors == []
    await page.close()


async def test_a_reload_keeps_the_place(browser: Any, deployment: tuple[Up, Config]) -> None:
    _, config = deployment
    zone = config.primary.zones[1].address
    page = await wait_in_room(browser, config, zone)
    position, serving = await serving_and_position(page)
    rid = await page.evaluate("window.rideoutRoom.entry.requestId")
    await page.reload()
    again, _ = await serving_and_position(page)
    assert again == position
    assert await page.evaluate("window.rideoutRoom.entry.requestId") == rid
    await admit(config, zone, position - serving)
    await until_in_auction(page)
    assert page.errors == []
    await page.close()


async def test_the_page_follows_a_region_failover(
    browser: Any, deployment: tuple[Up, Config]
) -> None:
    up, config = deployment
    zone = config.primary.zones[0].address
    page = await wait_in_room(browser, config, zone)
    position, serving = await serving_and_position(page)
    try:
        chaos(up, "kill", "us-east-1")
        await wait_region(config, "us-west-2")
        # the page keeps polling through the failover name: now the secondary answers
        await page_until(
            page,
            "document.getElementById('region').textContent.startsWith('127.0.2.')",
            timeout=60000,
        )
        again, _ = await serving_and_position(page)
        assert again == position  # the position survived the promotion
        await admit(config, config.secondary.zones[0].address, position - serving)
        await until_in_auction(page)
        assert page.url.startswith("http://127.0.2.")
        await shot(page, "room-after-failover")
        assert page.errors == []
    finally:
        chaos(up, "restore", "us-east-1")
        await wait_region(config, "us-east-1")
        await page.close()


async def test_openid_mode_returns_to_the_relying_party_with_a_code(
    browser: Any, deployment: tuple[Up, Config]
) -> None:
    """The relying party sends the browser to /authorize; the page waits; once admitted
    the adapter sends it back with a code, which the relying party exchanges."""
    _, config = deployment
    zone = config.primary.zones[0].address
    issuer = routes.oidc_issuer(config, EVENT)
    path = urlsplit(issuer).path
    verifier, nonce = secrets.token_urlsafe(48), secrets.token_urlsafe(16)
    params = {
        "client_id": EVENT, "response_type": "code", "scope": "openid profile",
        "redirect_uri": CALLBACK, "state": "st-browser", "nonce": nonce,
        "code_challenge": create_s256_code_challenge(verifier), "code_challenge_method": "S256",
    }  # fmt: skip
    page = await browser.new_page(viewport={"width": 1000, "height": 700})
    errors = watched(page)
    arrived: list[str] = []

    async def callback_page(request: Request) -> Response:
        arrived.append(str(request.url))
        return HTMLResponse("<p>signed in</p>")

    relying_party = Starlette(routes=[Route("/callback", callback_page)])
    async with serving(relying_party, "127.0.0.1", RP_PORT):
        await _sign_in(page, config, zone, path, params)
    callback = parse_qs(urlsplit(arrived[-1]).query)
    assert callback["state"] == ["st-browser"]
    secret = oidc_secret_path(config.keys_dir, EVENT).read_text().strip()
    async with httpx.AsyncClient(trust_env=False, timeout=10) as http:
        r = await http.post(
            f"http://{zone}:{config.app_port}{path}/token",
            data={"grant_type": "authorization_code", "code": callback["code"][0],
                  "redirect_uri": CALLBACK, "code_verifier": verifier},
            auth=(EVENT, secret),
        )  # fmt: skip
        assert r.status_code == 200, r.text
        assert r.json()["id_token"]
    assert errors == []
    await page.close()


async def _sign_in(page: Any, config: Config, zone: str, path: str, params: dict[str, str]) -> None:
    await page.goto(f"http://{zone}:{config.app_port}{path}/authorize?{urlencode(params)}")
    assert f"{path}/wait?authz=" in page.url
    position, serving_now = await serving_and_position(page)
    await admit(config, zone, position - serving_now)
    await page.wait_for_url(CALLBACK + "?**", timeout=60000)
