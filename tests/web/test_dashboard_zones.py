"""The dashboard shows evacuated zones, and a page cannot evacuate or recover one
(headless Chromium against `rideout up`, as tests/web/test_browser.py runs it)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from rideout.config import dump_toml, parse_config
from tests.cluster.conftest import rideout, started
from tests.conftest import config_data
from tests.web.test_browser import ARGS, CHROMIUM, shot

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not Path(CHROMIUM).exists(),
        reason="Debian's chromium is not installed (apt install chromium)",
    ),
]


@pytest_asyncio.fixture
async def chromium() -> AsyncIterator[Any]:
    from playwright.async_api import async_playwright

    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            yield browser
        finally:
            await browser.close()


async def test_the_dashboard_shows_an_evacuated_zone(chromium: Any, tmp_path: Path) -> None:
    config = parse_config(config_data(tmp_path / ".rideout"))
    (tmp_path / "rideout.toml").write_text(dump_toml(config))
    cp = config.control_plane
    with started(tmp_path) as up:
        up.wait_ready()
        page = await chromium.new_page(viewport={"width": 1200, "height": 900})
        errors: list[str] = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        await page.goto(f"http://{cp.address}:{cp.port}/")
        shown = "(text) => document.getElementById('dns-evacuated')?.textContent === text"
        await page.wait_for_function(shown, arg="none", timeout=30000)

        done = rideout("evacuate", "--zone-id", "use1-az1", "--operator", "alice",
                       "-c", "rideout.toml", cwd=tmp_path, timeout=60)  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        await page.wait_for_function(shown, arg="use1-az1 (manual, by alice)", timeout=30000)
        assert "127.0.1.2" in await page.inner_text("#dns-addresses")
        assert "127.0.1.1" not in await page.inner_text("#dns-addresses")
        await shot(page, "dashboard-zone-evacuated")
        # The page's own origin cannot change zones: browser requests are refused.
        status = await page.evaluate(
            """async () => (await fetch('/v1/zones/use1-az1/recover', {method: 'POST',
                headers: {'content-type': 'application/json'}, body: '{}'})).status"""
        )
        assert status == 403

        back = rideout("recover", "-c", "rideout.toml", cwd=tmp_path, timeout=60)
        assert back.returncode == 0, back.stdout + back.stderr
        await page.wait_for_function(shown, arg="none", timeout=30000)
        assert errors == []
