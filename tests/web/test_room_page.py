"""The waiting-room page in headless Chromium against `rideout up`: a visitor waits, the
admin moves the serving counter, the page goes on to the auction and its `/ws` accepts
the room's token; the same across a reload, and across a region failover (the page's
own zone killed while it waits). Debian's chromium through Playwright's
`executable_path`, as tests/web/test_browser.py; screenshots go to test-artifacts/.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio

from rideout.auth.admin import load_or_create_admin_token
from rideout.config import Config, dump_toml, parse_config
from tests.cluster.conftest import Up, rideout, started
from tests.conftest import config_data
from tests.web.test_browser import ARGS, CHROMIUM, shot, wait_region

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not Path(CHROMIUM).exists(),
        reason="Debian's chromium is not installed (apt install chromium)",
    ),
    pytest.mark.asyncio(loop_scope="module"),
]

EVENT = "auction"


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Up, Config]]:
    workdir = tmp_path_factory.mktemp("room-page")
    data = config_data(workdir / ".rideout")
    # No inlet: only the admin admits (the test decides when a visitor is served).
    data["waitingroom"] = {"inlet": "none", "events": [EVENT]}
    config = parse_config(data)
    (workdir / "rideout.toml").write_text(dump_toml(config))
    with started(workdir) as up:
        up.wait_ready()
        yield up, config


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def browser() -> AsyncIterator[Any]:
    from playwright.async_api import async_playwright

    async with async_playwright() as p:
        chromium = await p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            yield chromium
        finally:
            await chromium.close()


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
    await page.wait_for_function(
        "/^[0-9]+$/.test(document.getElementById('position').textContent)"
        " && /^[0-9]+$/.test(document.getElementById('serving').textContent)",
        timeout=30000,
    )
    position = int(await page.inner_text("#position"))
    serving = int(await page.inner_text("#serving"))
    return position, serving


async def wait_in_room(browser: Any, config: Config, zone: str) -> Any:
    page = await browser.new_page(viewport={"width": 1000, "height": 700})
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.errors = errors
    await page.goto(f"http://{zone}:{config.app_port}/room.html?event_id={EVENT}&next=/")
    return page


async def until_in_auction(page: Any) -> None:
    """The page went on to the auction, whose client is connected with the room's token."""
    await page.wait_for_function("window.rideout && window.rideout.connected", timeout=60000)
    assert await page.evaluate("sessionStorage.getItem('rideout-room-token') !== null")
    assert "room_token" not in page.url  # the fragment is cleared from the address bar


async def test_a_visitor_waits_is_admitted_and_the_auction_accepts_the_token(
    browser: Any, deployment: tuple[Up, Config]
) -> None:
    _, config = deployment
    zone = config.primary.zones[0].address
    page = await wait_in_room(browser, config, zone)
    position, serving = await serving_and_position(page)
    assert position > serving
    assert await page.inner_text("#status") == "waiting"
    await shot(page, "room-waiting")
    # the page polls with jittered, growing pauses (not a fixed period)
    await page.wait_for_function("window.rideoutRoom.delays.length >= 3", timeout=30000)
    delays = await page.evaluate("window.rideoutRoom.delays")
    assert len(set(delays)) == len(delays)
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
        await page.wait_for_function(
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
