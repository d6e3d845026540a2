"""The auction page and the browser client in headless Chromium, against `rideout up`.

Debian's chromium, driven by Playwright through `executable_path` (Playwright's own
browser download is not used). Screenshots go to test-artifacts/.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import AsyncIterator, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from rideout.config import Config, parse_config
from tests.cluster.conftest import Up, rideout, started
from tests.conftest import page_until, until, watched

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]  # fmt: skip

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not Path(CHROMIUM).exists(),
        reason="Debian's chromium is not installed (apt install chromium)",
    ),
    pytest.mark.asyncio(loop_scope="module"),
]


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Up, Config]]:
    from rideout.config import dump_toml
    from tests.conftest import config_data

    workdir = tmp_path_factory.mktemp("browser")
    config = parse_config(config_data(workdir / ".rideout"))
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


async def open_page(browser: Any, config: Config, zone: str, user: str) -> Any:
    page = await browser.new_page(viewport={"width": 1100, "height": 800})
    page.errors = watched(page)
    await page.goto(f"http://{zone}:{config.app_port}/?user={user}")
    await page_until(page, "window.rideout && window.rideout.connected", timeout=15000)
    return page


async def shot(page: Any, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    await page.screenshot(path=str(ARTIFACTS / f"{name}.png"))


async def bid(page: Any, amount: int) -> None:
    await page.fill("#amount", str(amount))
    await page.click("#place")
    await page_until(
        page, f"document.getElementById('bid').textContent === '${amount:,}'", timeout=20000
    )


def chaos(up: Up, op: str, region: str) -> str:
    return rideout("chaos", op, region, "-c", "rideout.toml", cwd=up.workdir).stdout


async def wait_region(config: Config, region: str, timeout: float = 60) -> None:
    """Until the control plane's DNS answers `region` (and its alarms say so)."""
    import httpx

    cp = config.control_plane
    async with httpx.AsyncClient(trust_env=False) as http:

        async def answers() -> bool:
            summary = (await http.get(f"http://{cp.address}:{cp.port}/v1/summary")).json()
            return bool(summary["dns"]["region"] == region)

        await until(answers, timeout, interval=0.2, message=f"DNS answering {region}")


async def test_the_browser_client_module(browser: Any, deployment: tuple[Up, Config]) -> None:
    """Pure parts, in the browser: full jitter bounds, retry hints, offsets, DoH."""
    _, config = deployment
    page = await open_page(browser, config, config.primary.zones[0].address, "unit")
    cp = config.control_plane
    result = await page.evaluate(
        """async (doh) => {
            const m = await import('/client.js');
            const j = new m.FullJitter(0.25, 2);
            const draws = Array.from({length: 2000}, () => j.delay(3));
            const big = Array.from({length: 200}, () => j.delay(80));
            return {
              max3: Math.max(...draws), min3: Math.min(...draws),
              mean3: draws.reduce((a, b) => a + b) / draws.length, maxBig: Math.max(...big),
              hint: m.retryHint('overloaded; retry-after=2.5'), noHint: m.retryHint('nope'),
              order: [m.compareOffsets('10-2', '10-10'), m.compareOffsets('11-0', '10-99'), m.compareOffsets('5-5', '5-5')],
              doh: await m.resolveDoH(doh, 'auction.rideout.test'),
            };
        }""",
        f"http://{cp.address}:{cp.port}/resolve",
    )
    assert 0 <= result["min3"] < 0.05
    assert 1.9 < result["max3"] <= 2.0  # min(cap, base * 2**3) = 2
    assert 0.9 < result["mean3"] < 1.1  # uniform on [0, 2]
    assert result["maxBig"] <= 2.0  # capped, no overflow
    assert (result["hint"], result["noHint"]) == (2.5, None)
    assert result["order"] == [-1, 1, 0]
    assert result["doh"]["addresses"] == [z.address for z in config.primary.zones]
    assert result["doh"]["ttl"] == config.timing.dns_ttl
    assert page.errors == []
    await page.close()


async def test_a_throttled_region_is_detected_by_heartbeats(
    browser: Any, deployment: tuple[Up, Config]
) -> None:
    """Two replies that are not pong close the socket; the page reconnects elsewhere.

    The page comes from the primary's zone: signing in claims the name, a write, which
    the standby region's read-only Redis cannot take (it answers 503 until failover).
    """
    up, config = deployment
    page = await open_page(browser, config, config.primary.zones[1].address, "carol")
    events: list[dict[str, Any]] = []
    await page.expose_function("record", lambda e: events.append(json.loads(e)))
    await page.evaluate(
        """() => ['heartbeat-failed', 'disconnect', 'region'].forEach((t) =>
            window.rideout.addEventListener(t, (e) => window.record(JSON.stringify({type: t, ...e.detail}))))"""
    )
    try:
        chaos(up, "throttle", "us-east-1")
        await page_until(
            page, "window.rideout.region === 'us-west-2' && window.rideout.connected", timeout=60000
        )
        kinds = [e["type"] for e in events]
        assert "heartbeat-failed" in kinds
        assert {"type": "disconnect", "cause": "degraded"}.items() <= next(
            e for e in events if e["type"] == "disconnect"
        ).items()
        await shot(page, "browser-throttled-region")
    finally:
        chaos(up, "restore", "us-east-1")
        await wait_region(config, "us-east-1")
        await page.close()


async def test_the_auction_page_survives_a_regional_outage(
    browser: Any, deployment: tuple[Up, Config]
) -> None:
    up, config = deployment
    page = await open_page(browser, config, config.primary.zones[0].address, "alice")
    await page_until(page, "document.getElementById('region').textContent === 'us-east-1'")
    start = int((await page.inner_text("#bid")).strip("$—").replace(",", "") or 0)
    await bid(page, start + 10)
    await bid(page, start + 20)
    await shot(page, "auction-before-outage")
    history = await page.inner_text("#history")

    chaos(up, "kill", "us-east-1")
    # No reload: the client notices, re-resolves through DoH, reconnects to the secondary.
    await page_until(
        page, "document.getElementById('region').textContent === 'us-west-2'", timeout=60000
    )
    assert history in await page.inner_text("#history")  # the bid history is intact
    # A bid placed now is delivered once, in the region that serves now.
    await bid(page, start + 30)
    state = await page.evaluate("window.rideout.state('lot-1')")
    assert (state["bid"], state["bidder"]) == (start + 30, "alice")
    await shot(page, "auction-after-failover")
    assert "replayed" in await page.inner_text("#log") or "restored" in await page.inner_text(
        "#log"
    )
    assert page.errors == []

    chaos(up, "restore", "us-east-1")
    await wait_region(config, "us-east-1")
    await page.close()


def printed_login_link(up: Up, timeout: float = 30) -> str:
    """The one-time dashboard login link `rideout up` printed."""
    import re
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = re.search(r"http://127\.0\.0\.1:\d+/login\?code=[A-Za-z0-9_-]+",
                          up.output.read_text())  # fmt: skip
        if found:
            return found.group(0)
        time.sleep(0.1)
    raise AssertionError(f"no login link in the output of up:\n{up.output.read_text()}")


@pytest.mark.timeout(300)  # a failover and a failback, on a loaded machine
async def test_the_ops_dashboard_shows_the_alarm_and_the_dns_answer_change(
    browser: Any, deployment: tuple[Up, Config]
) -> None:
    """The operator opens the link `up` printed; the chaos buttons work through that
    session (cookie, CSRF token, Origin) and nothing else."""
    up, config = deployment
    cp = config.control_plane
    dashboard = f"http://{cp.address}:{cp.port}/"
    # A loaded machine can start a canary late and flap the primary once: start steady.
    await wait_region(config, "us-east-1")
    context = await browser.new_context(viewport={"width": 1200, "height": 900})
    page = await context.new_page()
    errors = watched(page)
    # Without a session: the status, but no buttons, and chaos is refused.
    await page.goto(dashboard)
    ok = "(id) => document.getElementById(`alarm-${id}`)?.textContent === 'OK'"
    await page_until(page, ok, arg="us-east-1", timeout=30000)
    assert "us-east-1" in await page.inner_text("#dns")
    assert await page.inner_text("#operator") == "view only"
    assert await page.locator("button[data-op]").count() == 0
    assert "rideout dashboard login" in await page.inner_text("#region-us-east-1")
    forged = await page.evaluate(
        """async () => (await fetch('/v1/chaos', {method: 'POST', headers: {'content-type':
            'application/json'}, body: JSON.stringify({op: 'kill', region: 'us-east-1'})})).status"""
    )
    assert forged == 401
    # The link `rideout up` printed signs this browser in, once.
    link = printed_login_link(up)
    await page.goto(link)
    assert page.url == dashboard
    await page_until(page, ok, arg="us-east-1", timeout=30000)
    assert await page.inner_text("#operator") == "operator"
    cookie = next(c for c in await context.cookies() if c["name"] == "rideout_operator")
    assert (cookie["httpOnly"], cookie["sameSite"], cookie["secure"]) == (True, "Strict", False)
    assert await page.evaluate("document.cookie") == ""  # the script cannot read it
    await shot(page, "dashboard-healthy")
    # The chaos buttons go through the control plane to the supervisor.
    await page.click("button[data-op=kill][data-region=us-east-1]")
    await page_until(
        page,
        "document.getElementById('alarm-us-east-1').textContent === 'ALARM'"
        " && document.getElementById('dns').textContent.includes('us-west-2')",
        timeout=60000,
    )
    assert await page.inner_text("#writer") == "us-west-2"
    assert "fail-over" in await page.inner_text("#events")
    # The canary, outside the region, keeps reporting it: the strip chart has its bars.
    assert (
        await page.eval_on_selector("#strip-us-east-1", "s => s.querySelectorAll('rect').length")
        > 0
    )
    await shot(page, "dashboard-alarm")
    # Restore completes whatever the controller does meanwhile (issue #11, finding 1): one
    # press. (An earlier version pressed up to three times, from before that fix.)
    await page.evaluate("window.dashboard.chaos = null")
    # Every text the primary's alarm pill shows from here on: it passes its canary again
    # for six periods before its alarm trusts it, and says so meanwhile.
    await page.evaluate(
        """() => { const pill = document.getElementById('alarm-us-east-1');
            window.alarmTexts = new Set([pill.textContent]);
            new MutationObserver(() => window.alarmTexts.add(pill.textContent))
                .observe(pill, {childList: true, characterData: true, subtree: true}); }"""
    )
    await page.click("button[data-op=restore][data-region=us-east-1]")
    await page_until(page, "window.dashboard.chaos", timeout=90000)
    answer = await page.evaluate("window.dashboard.chaos")
    assert answer["status"] == 200, answer
    await page_until(
        page,
        "document.getElementById('dns').textContent.includes('us-east-1')"
        " && document.getElementById('writer').textContent === 'us-east-1'",
        timeout=120000,  # restarts the region's processes, then six good periods
    )
    assert "restored us-east-1" in await page.inner_text("#events")
    texts = await page.evaluate("[...window.alarmTexts]")
    assert "ALARM (recovering)" in texts, texts
    assert errors == []
    # The link was used: a second browser gets nothing from it.
    other = await browser.new_page()
    used = await other.goto(link)
    assert used is not None
    assert used.status == 401
    await other.close()
    await context.close()


async def test_a_fresh_login_link_and_no_chaos_from_another_site(
    browser: Any, deployment: tuple[Up, Config]
) -> None:
    """`rideout dashboard login` prints a new link; a page of another site in the same
    browser, signed in or not, cannot make the control plane run chaos."""
    import httpx

    up, config = deployment
    cp = config.control_plane
    base = f"http://{cp.address}:{cp.port}"
    result = rideout("dashboard", "login", "-c", "rideout.toml", cwd=up.workdir)
    assert result.returncode == 0, result.stderr
    link = result.stdout.strip()
    assert link.startswith(f"{base}/login?code=")
    context = await browser.new_context()
    page = await context.new_page()
    await page.goto(link)
    await page_until(page, "document.getElementById('operator').textContent === 'operator'")
    # Another origin (a zone's page) posts to the control plane from the same browser.
    zone = config.primary.zones[0]
    other = await context.new_page()
    await other.goto(f"http://{zone.address}:{config.app_port}/config.json")

    def refused(text: str) -> float:
        prefix = 'rideout_control_plane_refused_total{endpoint="chaos",reason="origin"} '
        return sum(float(line[len(prefix) :]) for line in text.splitlines()
                   if line.startswith(prefix))  # fmt: skip

    async with httpx.AsyncClient(trust_env=False) as http:
        before = refused((await http.get(f"{base}/metrics")).text)
        await other.evaluate(
            """(url) => fetch(url, {method: 'POST', mode: 'no-cors', credentials: 'include',
                headers: {'content-type': 'text/plain'},
                body: JSON.stringify({op: 'kill', region: 'us-east-1'})})""",
            f"{base}/v1/chaos",
        )

        async def counted() -> bool:  # the control plane has answered the forged POST
            return refused((await http.get(f"{base}/metrics")).text) == before + 1

        await until(counted, 10, message="the cross-site chaos POST refused on Origin")
        summary = (await http.get(f"{base}/v1/summary")).json()
    assert summary["failover"]["writer"] == "us-east-1"  # nothing was killed
    await context.close()


async def shown(page: Any, expression: str, arg: Any = None, timeout: float = 30000) -> None:
    """`page_until`, failing with what the dashboard's panels showed."""
    try:
        await page_until(page, expression, arg=arg, timeout=timeout)
    except AssertionError as exc:  # not within the timeout
        panels = await page.evaluate(
            "['zones-card', 'ledger-card', 'rooms-card'].map((id) =>"
            " document.getElementById(id).innerText).join('\\n')"
        )
        raise AssertionError(f"{expression}\n--- the panels showed:\n{panels}") from exc


@pytest.mark.timeout(180)  # may first wait out an autoshift of the previous tests' outage
async def test_the_dashboard_shows_zones_the_ledger_and_the_rooms(
    browser: Any, deployment: tuple[Up, Config]
) -> None:
    """The zones, ledger and rooms panels fill; a zone evacuated with its button, and a
    room's admissions, show within two periods (two frames of the feed); a zone
    evacuated by the CLI shows with its operator in the panel, the ledger and the DNS
    card; the page's own origin cannot use the admin token's zone endpoints."""
    import httpx

    from rideout.auth.admin import load_or_create_admin_token

    up, config = deployment
    await wait_region(config, "us-east-1")
    link = rideout("dashboard", "login", "-c", "rideout.toml", cwd=up.workdir).stdout.strip()
    context = await browser.new_context(viewport={"width": 1200, "height": 1400})
    page = await context.new_page()
    errors = watched(page)
    await page.goto(link)
    await shown(page, "document.getElementById('operator').textContent === 'operator'")
    # The panels fill: four zones with their canaries' verdicts, the ledger, the rooms
    # (`rideout up` makes the auction's event).
    await shown(
        page,
        """() => [...document.querySelectorAll('#zones tbody tr')].length === 4
            && ['use1-az1', 'use1-az2', 'usw2-az1', 'usw2-az2'].every((z) =>
                document.getElementById(`zone-canary-${z}`).textContent === 'healthy')
            && document.getElementById('ledger-note').textContent.startsWith('empty')
            && document.getElementById('room-auction')""",
        timeout=60000,  # an autoshift of the previous tests' outage recovers meanwhile
    )
    assert "evacuations.sqlite3" in await page.inner_text("#ledger-where")

    async def frames() -> int:
        return int(await page.evaluate("window.dashboard.frames"))

    # A zone evacuated with its button: in the panel and the ledger within two frames.
    await page.click("button[data-zone-op=evacuate][data-zone=use1-az1]")
    await shown(page, "window.dashboard.zoneAction")
    answer = await page.evaluate("window.dashboard.zoneAction")
    assert answer["status"] == 200, answer
    answered = answer["frame"]  # frames drawn when the answer came
    await shown(
        page,
        """() => document.getElementById('zone-state-use1-az1').textContent
                   .startsWith('evacuated (manual, by dashboard')
            && document.querySelector('#ledger tr[data-zone="use1-az1"]')""",
        timeout=10000,
    )
    assert await frames() - answered <= 2
    assert "dashboard" in await page.inner_text("#ledger")
    # No [evacuate_aws] dashboard = true here: no AWS ledger card.
    assert await page.is_hidden("#aws-ledger-card")
    assert await page.inner_text("#dns-evacuated") == "use1-az1 (manual, by dashboard)"
    await shown(page, "!document.getElementById('dns-addresses').textContent.includes('127.0.1.1')")
    assert "127.0.1.2" in await page.inner_text("#dns-addresses")
    # The admin token's endpoints stay closed to the page (browser-shaped: 403).
    refused = await page.evaluate(
        """async () => (await fetch('/v1/zones/use1-az1/recover', {method: 'POST',
            headers: {'content-type': 'application/json'}, body: '{}'})).status"""
    )
    assert refused == 403
    await shot(page, "dashboard-zone-evacuated")
    await page.evaluate("window.dashboard.zoneAction = null")
    await page.click("button[data-zone-op=recover][data-zone=use1-az1]")
    await shown(page, "window.dashboard.zoneAction")
    assert (await page.evaluate("window.dashboard.zoneAction"))["status"] == 200
    await shown(
        page,
        """() => document.getElementById('zone-state-use1-az1').textContent === 'serving'
            && document.getElementById('ledger-note').textContent.startsWith('empty')""",
        timeout=10000,
    )
    # The CLI's evacuation shows the same way, with its operator.
    done = rideout("evacuate", "--zone-id", "use1-az2", "--operator", "alice",
                   "-c", "rideout.toml", cwd=up.workdir, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    await shown(
        page,
        """() => document.getElementById('zone-state-use1-az2').textContent
                   .startsWith('evacuated (manual, by alice')
            && document.querySelector('#ledger tr[data-zone="use1-az2"]')""",
        timeout=10000,
    )
    back = rideout("recover", "-c", "rideout.toml", cwd=up.workdir, timeout=60)
    assert back.returncode == 0, back.stdout + back.stderr

    # A room: an event, visitors through the public API, admissions through the private.
    zone = f"http://{config.primary.zones[0].address}:{config.app_port}"
    admin = {"Authorization": f"Bearer {load_or_create_admin_token(config.keys_dir)}"}
    async with httpx.AsyncClient(trust_env=False, base_url=zone, timeout=10) as http:
        created = await http.post("/private/events", json={"event_id": "dash-launch"},
                                  headers=admin)  # fmt: skip
        assert created.status_code == 201, created.text
        try:
            for _ in range(5):
                arrived = await http.post("/assign_queue_num", json={"event_id": "dash-launch"})
                assert arrived.status_code == 200, arrived.text
            row = "document.getElementById('room-dash-launch')"
            queued = f"{row}?.querySelector('[data-field=queue]').textContent === '5'"
            await shown(page, f"() => {queued}", timeout=10000)
            assert "0 (no cap)" in await page.inner_text("#room-dash-launch")
            assert "nothing admitted" in await page.inner_text("#room-dash-launch")
            moved = await http.post("/private/increment_serving_counter",
                                    json={"event_id": "dash-launch", "increment_by": 3},
                                    headers=admin)  # fmt: skip
            assert moved.status_code == 200, moved.text
            answered = await frames()
            await shown(
                page,
                f"""() => {row}.querySelector('[data-field=serving]').textContent === '3'
                    && Number({row}.querySelector('[data-field=admitted]').textContent) > 0""",
                timeout=10000,
            )
            assert await frames() - answered <= 2
            cells = await page.inner_text("#room-dash-launch")
            assert "none: only increment_serving_counter" in cells
            await shot(page, "dashboard-rooms")
        finally:
            await http.delete("/private/events/dash-launch", headers=admin)
    await shown(page, "!document.getElementById('room-dash-launch')", timeout=10000)
    assert errors == []
    await context.close()


def _refused(errors: list[str]) -> bool:
    return any("Content Security Policy" in e for e in errors)


INJECT = """() => {
    const s = document.createElement("script");
    s.textContent = "window.injected = true";
    document.body.appendChild(s);
    return window.injected === true;
}"""


async def test_markup_injected_into_a_page_cannot_run_a_script(
    browser: Any, deployment: tuple[Up, Config]
) -> None:
    """The auction page and the dashboard carry their Content-Security-Policy: an inline
    script put into either (what an injection would do) does not run, and the browser
    says why; no page may be framed."""
    _, config = deployment
    cp = config.control_plane
    zone = config.primary.zones[0].address
    for url in (f"http://{zone}:{config.app_port}/", f"http://{cp.address}:{cp.port}/"):
        page = await browser.new_page()
        errors = watched(page)
        response = await page.goto(url)
        assert "frame-ancestors 'none'" in response.headers["content-security-policy"]
        assert response.headers["x-content-type-options"] == "nosniff"
        assert await page.evaluate(INJECT) is False, url
        await until(partial(_refused, errors), 5, message=f"a CSP refusal on {url}")
        await page.close()
