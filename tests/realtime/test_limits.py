"""What one client may take of a zone (issue #12, findings 4 and 5), against real app
servers on real sockets with real Redis: silent, slow and oversized requests, the
connection caps and the canary's reserve, and the replay budget per user."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Callable
from urllib.parse import urlsplit

import httpx
import pytest
from websockets.asyncio.client import connect

from rideout.config import Config
from rideout.controlplane.app import create_app as create_control_plane
from rideout.controlplane.runtime import ControlPlane
from rideout.health.canary import Canary, ProbeOutcome, probe
from rideout.protocol import PONG, parse_retry_hint
from rideout.realtime.limits import LoadShedder
from tests.conftest import serving, until
from tests.realtime.conftest import (
    Deployment,
    hold_lag,
    recv,
    rejected,
    running_deployment,
    send,
)

UPGRADE = (
    "Host: zone\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
    "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
)


def shed_reports(caplog: pytest.LogCaptureFixture) -> set[str]:
    """What the shedder's log lines so far say it refused, one item per kind and line."""
    items: set[str] = set()
    for record in caplog.records:
        message = record.getMessage()
        if message.startswith("shedding load: refused "):
            what = message.removeprefix("shedding load: refused ").split(" since the last")[0]
            items.update(what.split(" and "))
    return items


def address(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    assert parts.hostname is not None
    assert parts.port is not None
    return parts.hostname, parts.port


@contextlib.asynccontextmanager
async def raw_sockets(
    url: str, count: int
) -> AsyncIterator[list[tuple[asyncio.StreamReader, asyncio.StreamWriter]]]:
    host, port = address(url)
    opened = [await asyncio.open_connection(host, port) for _ in range(count)]
    try:
        yield opened
    finally:
        for _, writer in opened:
            writer.close()


async def closed_by_server(reader: asyncio.StreamReader, timeout: float) -> bool:
    """True once the server closes (EOF or reset) within `timeout`."""
    try:
        async with asyncio.timeout(timeout):
            while await reader.read(65536):
                pass
    except TimeoutError:
        return False
    except ConnectionError:
        pass
    return True


async def response(reader: asyncio.StreamReader, timeout: float = 5.0) -> tuple[int, bytes]:
    """The status and body of the one HTTP response the server sends, then closes."""
    async with asyncio.timeout(timeout):
        raw = await reader.read(-1)
    head, _, body = raw.partition(b"\r\n\r\n")
    return int(head.split()[1]), body


def http_url(deployment: Deployment, name: str = "a1") -> str:
    return deployment.urls[name].replace("ws://", "http://")


async def health_ok(deployment: Deployment, name: str = "a1") -> bool:
    async with httpx.AsyncClient(trust_env=False, timeout=2.0) as http:
        reply = await http.get(http_url(deployment, name) + "/health")
        return reply.status_code == 200


async def heartbeat(ws: object) -> str:
    await send(ws, action="heartbeat")  # type: ignore[arg-type]
    return str(await recv(ws))  # type: ignore[arg-type]


# ------------------------------------------------------------------ silent, slow, oversized


async def test_silent_sockets_are_closed_after_the_handshake_timeout(
    deployment: Deployment,
) -> None:
    """200 sockets that never send a byte (the attack sent 21,000): /health answers
    while they are open, and every one of them is closed once the fast profile's
    handshake timeout has passed."""
    timeout = deployment.config.timing.handshake_timeout
    started = time.monotonic()
    async with raw_sockets(deployment.urls["a1"], 200) as sockets:
        assert await health_ok(deployment)
        assert deployment.servers["a1"].connections == set()
        results = await asyncio.gather(
            *(closed_by_server(reader, timeout + 3.0) for reader, _ in sockets)
        )
        assert all(results), f"{results.count(False)} of 200 silent sockets still open"
        assert time.monotonic() - started >= timeout * 0.9
        assert await health_ok(deployment)


async def test_a_slow_loris_upgrade_is_closed(deployment: Deployment) -> None:
    """A WebSocket upgrade sent a header at a time, each well inside any idle timeout,
    never finishing: closed once the whole head is overdue."""
    timeout = deployment.config.timing.handshake_timeout
    async with raw_sockets(deployment.urls["a1"], 1) as [(reader, writer)]:
        writer.write(b"GET /ws HTTP/1.1\r\n" + UPGRADE.encode())
        started = time.monotonic()
        closed = False
        for i in range(int(timeout * 10) + 40):
            try:
                writer.write(f"X-Slow-{i}: a\r\n".encode())
                await writer.drain()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(0.1):
                        if await reader.read(65536) == b"":
                            closed = True
                            break
            except (ConnectionResetError, BrokenPipeError):
                # Closed while this side was still writing: the kernel answers with RST.
                closed = True
                break
        assert closed, "the half-sent upgrade was never closed"
        assert timeout * 0.9 <= time.monotonic() - started <= timeout + 2.0


async def test_a_slow_body_and_a_slow_second_request_are_closed(deployment: Deployment) -> None:
    """The same deadline covers a request body that never arrives, and the next request
    on a kept-alive connection (a byte of it used to cancel uvicorn's idle timer)."""
    timeout = deployment.config.timing.handshake_timeout
    async with raw_sockets(deployment.urls["a1"], 2) as [(body_r, body_w), (next_r, next_w)]:
        body_w.write(
            b"POST /auth/demo-token HTTP/1.1\r\nHost: zone\r\nContent-Length: 100\r\n\r\n{"
        )
        next_w.write(b"GET /health HTTP/1.1\r\nHost: zone\r\n\r\n")
        assert (await next_r.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200")
        next_w.write(b"GET /health HTTP/1.1\r\n")  # and the rest never
        started = time.monotonic()
        closed = await asyncio.gather(
            closed_by_server(body_r, timeout + 3.0), closed_by_server(next_r, timeout + 3.0)
        )
        assert closed == [True, True]
        assert time.monotonic() - started <= timeout + 2.0


@pytest.mark.parametrize("path", ["/ws", "/health"])
async def test_an_over_long_request_line_gets_431_with_a_body(
    deployment: Deployment, path: str
) -> None:
    """9 KB of request target: the upgrade used to get no answer at all."""
    target = f"{path}?token={'A' * 9000}"
    headers = UPGRADE if path == "/ws" else "Host: zone\r\n"
    async with raw_sockets(deployment.urls["a1"], 1) as [(reader, writer)]:
        writer.write(f"GET {target} HTTP/1.1\r\n{headers}\r\n".encode())
        status, body = await response(reader)
    assert status == 431
    error = json.loads(body)
    assert error["error"] == "request_too_large"
    assert "8000 bytes" in error["message"]


async def test_too_many_headers_for_websockets_get_431_not_silence(
    deployment: Deployment,
) -> None:
    """websockets' own limits (128 headers) refuse the upgrade. uvicorn 0.54 dropped the
    answer websockets wrote; 0.55 sends it, in plain text: rideout's is JSON."""
    many = "".join(f"X-H{i}: v\r\n" for i in range(200))
    async with raw_sockets(deployment.urls["a1"], 1) as [(reader, writer)]:
        writer.write(f"GET /ws HTTP/1.1\r\n{UPGRADE}{many}\r\n".encode())
        status, body = await response(reader)
    assert status == 431
    assert json.loads(body)["error"] == "request_too_large"


async def test_an_upgrade_websockets_cannot_parse_gets_400_json(deployment: Deployment) -> None:
    """httptools takes an upgrade request with a body; websockets refuses one."""
    async with raw_sockets(deployment.urls["a1"], 1) as [(reader, writer)]:
        writer.write(f"GET /ws HTTP/1.1\r\n{UPGRADE}Content-Length: 1\r\n\r\nx".encode())
        status, body = await response(reader)
    assert status == 400
    assert json.loads(body) == {"error": "bad_request", "message": "not a valid WebSocket request"}


async def test_a_refused_upgrade_reads_on_and_answers_once(deployment: Deployment) -> None:
    """After its answer the connection lingers: bytes the client still sends are read and
    dropped (closing with them unread would reset it and could lose the answer)."""
    many = "".join(f"X-H{i}: v\r\n" for i in range(200))
    async with raw_sockets(deployment.urls["a1"], 1) as [(reader, writer)]:
        writer.write(f"GET /ws HTTP/1.1\r\n{UPGRADE}{many}\r\n".encode())
        await writer.drain()
        writer.write(b"more bytes after the head" * 100)
        status, body = await response(reader)
    assert status == 431
    assert body.count(b"request_too_large") == 1


# ------------------------------------------------------------------ caps and the reserve


async def test_the_per_user_cap_refuses_the_next_connection_with_429(
    deployment: Deployment,
) -> None:
    cap = deployment.config.realtime.max_connections_per_user
    url = deployment.urls["a1"] + "/ws?token="
    async with contextlib.AsyncExitStack() as stack:
        first = [
            await stack.enter_async_context(deployment.connect(sub="alice")) for _ in range(cap)
        ]
        status, body = await rejected(url + deployment.token("alice"))
        assert (status, body["error"]) == (429, "too_many_connections")
        assert body["retry_after"] > 0
        # Another user, and alice on another zone, are not affected.
        async with deployment.connect(sub="bob") as bob:
            assert await heartbeat(bob) == PONG
        async with deployment.connect("a2", sub="alice") as elsewhere:
            assert await heartbeat(elsewhere) == PONG
        assert await heartbeat(first[0]) == PONG
    # Once closed, the places are free again (once the server has seen the closes).
    await until(lambda: deployment.servers["a1"].caps.of_user("alice") == 0, 10)
    async with deployment.connect(sub="alice") as again:
        assert await heartbeat(again) == PONG


async def test_the_per_address_cap_refuses_the_next_connection_with_429(
    make_config: Callable[..., Config],
) -> None:
    config = make_config(realtime={"max_connections_per_address": 3})
    async with running_deployment(config) as d, contextlib.AsyncExitStack() as stack:
        for i in range(3):
            await stack.enter_async_context(d.connect(sub=f"user-{i}"))
        status, body = await rejected(d.urls["a1"] + "/ws?token=" + d.token("user-3"))
        assert (status, body["error"]) == (429, "too_many_connections_from_address")


async def test_the_canary_and_health_get_through_a_zone_at_its_cap(
    make_config: Callable[..., Config],
) -> None:
    """Attackers hold every connection the zone gives ordinary users, and then as many
    silent sockets again as the whole cap: /health still answers and the real canary's
    probe still gets its pong, on the zone under attack and on the other zone. The
    canary's timeout is 1.9 s (the servers give its store probe three quarters of it):
    what is tested is that the probe is let in and answered, not how fast a loaded
    machine's Redis answers (0.3 s, the fast profile's, was missed once beside five other
    workers)."""
    config = make_config(
        realtime={"max_connections": 40, "reserved_connections": 8,
                  "max_connections_per_address": 0},
        timing={"canary_interval": 2.0, "canary_timeout": 1.9},
    )  # fmt: skip
    async with running_deployment(config) as d, contextlib.AsyncExitStack() as stack:
        held = [await stack.enter_async_context(d.connect(sub=f"attacker-{i}")) for i in range(32)]
        status, body = await rejected(d.urls["a1"] + "/ws?token=" + d.token("one-more"))
        assert (status, body["error"]) == (503, "zone_full")
        sockets = await stack.enter_async_context(raw_sockets(d.urls["a1"], 40))
        canary = patient_canary(config)
        for _ in range(3):
            assert await health_ok(d)
            results = await canary.probe_all()
            assert [(r.zone, r.healthy, r.error) for r in results] == [
                (z.name, True, None) for z in config.primary.zones
            ]
        assert await heartbeat(held[0]) == PONG
        # The silent sockets made room for the probes: the oldest were pushed out.
        pushed_out = await asyncio.gather(*(closed_by_server(r, 0.5) for r, _ in sockets[:8]))
        assert all(pushed_out)
        # Issue #29: full is a state. The zone says so, healthy; a real control plane
        # taking the canary's signed datapoints answers DNS with the region's other zone
        # and evacuates nothing, until the zone has room again.
        full, other = config.primary.zones
        assert [(r.zone, r.full) for r in results] == [(full.name, True), (other.name, False)]
        plane = ControlPlane(config)
        cp = config.control_plane
        async with (
            serving(create_control_plane(config, runtime=plane), cp.address, cp.port),
            httpx.AsyncClient(trust_env=False, timeout=5.0) as http,
        ):
            health = await http.get(http_url(d) + "/health")
            assert (health.status_code, health.json()["full"]) == (200, True)
            await canary.run(rounds=3)
            assert plane.zones.full() == {full.name}
            answer = plane.resolve(config.app_domain, "A").answers
            assert [r.value for r in answer] == [other.address]
            assert plane.zones.evacuated == frozenset()
            zones = (await http.get(f"{plane_url(config)}/v1/zones")).json()["zones"]
            assert [z["full"] for z in zones][:2] == [True, False]
            await held[0].close()  # room again: both zones answered
            await canary.run(rounds=1)
            assert plane.zones.full() == frozenset()
            assert len(plane.resolve(config.app_domain, "A").answers) == 2


def plane_url(config: Config) -> str:
    return f"http://{config.control_plane.address}:{config.control_plane.port}"


async def demo_token(d: Deployment, name: str) -> str:
    """A token from the demo sign-in (POST /auth/demo-token), as the auction page gets it."""
    base = http_url(d)
    async with httpx.AsyncClient(trust_env=False) as browser:
        answer = await browser.post(
            f"{base}/auth/demo-token", json={"name": name}, headers={"Origin": base}
        )
    assert answer.status_code == 200, answer.text
    return str(answer.json()["token"])


async def test_demo_identities_cannot_take_the_ordinary_users_connections(
    make_config: Callable[..., Config],
) -> None:
    """Issue #28, finding 2: demo users (1,033 of them x 16 connections) filled a zone's
    ordinary slots. Demo connections have a share of their own: at its end they get 503
    ``demo_full``, and ordinary users still have every slot of theirs."""
    config = make_config(
        realtime={"max_connections": 40, "reserved_connections": 8, "max_demo_connections": 6,
                  "max_connections_per_address": 0, "max_connections_per_user": 4},
    )  # fmt: skip
    async with running_deployment(config) as d, contextlib.AsyncExitStack() as stack:
        url = d.urls["a1"] + "/ws?token="
        tokens = [await demo_token(d, f"demo-{i}") for i in range(4)]
        for i in range(6):
            await stack.enter_async_context(connect(url + tokens[i // 3], open_timeout=5))
        status, body = await rejected(url + tokens[3])
        assert (status, body["error"]) == (503, "demo_full")
        assert body["retry_after"] > 0
        # Ordinary users: every slot but the canary's reserve and the demo share.
        ordinary = [
            await stack.enter_async_context(d.connect(sub=f"user-{i}")) for i in range(40 - 8 - 6)
        ]
        status, body = await rejected(url + d.token("one-more"))
        assert (status, body["error"]) == (503, "zone_full")
        assert await heartbeat(ordinary[-1]) == PONG
        assert await health_ok(d)


def patient_canary(config: Config) -> Canary:
    """The primary's canary with the real probe, bounded by 5 s instead of the fast
    profile's 0.4 s: these tests check that the probe is let in and answered, and the
    suite's load on two cores stalls this process's loop by more than 0.4 s at times
    (0.71 s in a run that failed so). A refused probe still fails at once."""

    async def patient(url: str, token: str, timeout: float) -> ProbeOutcome:
        return await probe(url, token, max(timeout, 5.0))

    return Canary(config, config.primary.name, probe_zone=patient)


async def test_a_late_loop_sheds_new_upgrades_but_never_the_canarys(
    make_config: Callable[..., Config], caplog: pytest.LogCaptureFixture
) -> None:
    """Half the canary's timeout late, every new ordinary upgrade gets 503 overloaded
    and every bid error/unavailable, while the canary's probe, and the heartbeats of
    those already connected, are answered; once the loop keeps time again, upgrades and
    bids are let in, and the bid's retry (same id) is applied once."""
    config = make_config()
    assert config.realtime.shed_load  # the default
    async with running_deployment(config, shed=True) as d:
        held = hold_lag(d, 0.0)  # this test's loop, not the deployment's lag, decides
        early = await d.connect(sub="early")
        for lag in held:
            lag.held = config.timing.canary_timeout / 2
        status, body = await rejected(d.urls["a1"] + "/ws?token=" + d.token("late"))
        assert (status, body["error"]) == (503, "overloaded")
        assert body["message"] == (
            f"this server's event loop is running {config.timing.canary_timeout / 2:.2f} s "
            "late; retry later"
        )
        assert body["retry_after"] == config.timing.backoff_cap
        results = await patient_canary(config).probe_all()
        # Answered, and busy: the probe's answer and /health say the zone sheds load.
        assert [(r.zone, r.healthy, r.error, r.busy) for r in results] == [
            (z.name, True, None, True) for z in config.primary.zones
        ]
        async with httpx.AsyncClient(trust_env=False) as http:
            assert (await http.get(d.urls["a1"] + "/health")).json()["busy"] is True
        assert await heartbeat(early) == PONG
        await send(early, action="bid", room="shed-1", amount=5, id="b-1")
        refused = await recv(early)
        assert (refused["type"], refused["code"], refused["id"]) == ("error", "unavailable", "b-1")
        assert "event loop is running" in refused["message"]
        shed = d.servers["a1"].metrics.handshakes.labels("overloaded")._value.get()
        assert shed >= 1
        # One report, or two if the watcher's timer fired between the two refusals: the
        # second then comes LoadShedder.every seconds after the first.
        await until(
            lambda: shed_reports(caplog) >= {"1 bid(s) (error/unavailable)",
                                             "1 new WebSocket connection(s) (503 overloaded)"},
            LoadShedder.every + 5, message="the shedder's reports in the log",
        )  # fmt: skip
        for lag in held:
            lag.held = config.timing.canary_timeout / 4  # where shedding starts: none yet
        async with d.connect(sub="late") as late:
            assert await heartbeat(late) == PONG
        results = await patient_canary(config).probe_all()
        assert [(r.healthy, r.busy) for r in results] == [(True, False)] * len(results)
        await send(early, action="bid", room="shed-1", amount=5, id="b-1")  # the retry
        ack = await recv(early)
        assert (ack["type"], ack["id"], ack["accepted"]) == ("ack", "b-1", True)
        await early.close()


async def test_shedding_is_off_with_shed_load_false(make_config: Callable[..., Config]) -> None:
    config = make_config(realtime={"shed_load": False})
    async with running_deployment(config, shed=True) as d:
        assert d.servers["a1"].shedder is None
        hold_lag(d, 10 * config.timing.canary_timeout)
        async with d.connect(sub="late") as late:
            assert await heartbeat(late) == PONG


async def test_a_connection_watches_a_bounded_number_of_rooms(
    make_config: Callable[..., Config],
) -> None:
    config = make_config(realtime={"max_rooms_per_connection": 3})
    async with running_deployment(config) as d, d.connect() as ws:
        for i in range(3):
            await send(ws, action="getState", room=f"room-{i}")
            assert (await recv(ws))["type"] == "state"
        await send(ws, action="getState", room="room-3")
        error = await recv(ws)
        assert (error["code"], error["message"]) == (
            "bad_request", "a connection may watch at most 3 rooms",
        )  # fmt: skip
        await send(ws, action="getState", room="room-1")  # one it watches already: fine
        assert (await recv(ws))["type"] == "state"


# ------------------------------------------------------------------ the replay budget


async def fill_room(deployment: Deployment, room: str, updates: int) -> dict[str, object]:
    """`updates` accepted bids in `room`; the position of the first."""
    server = deployment.servers["a1"]
    epoch = server.epoch.value
    assert epoch is not None
    first = None
    for i in range(1, updates + 1):
        result = await server.store.bid(room, f"bidder-{i % 7}", i, f"fill-{i}", epoch=epoch)
        assert result.accepted
        first = first or result.position
    assert first is not None
    return {"epoch": first.epoch, "offset": first.offset}


async def test_one_user_hammering_replays_is_throttled_and_others_are_answered(
    make_config: Callable[..., Config],
) -> None:
    """Finding 5: two connections of one user, each under the message-rate limit, ask
    for full replays again and again. The user is throttled with a retry hint once its
    budget is spent; meanwhile another user's heartbeats and the real canary's probes
    are answered well within the canary's own timeout.

    The canary's timeout is 1.9 s here, so the servers give its store probe three
    quarters of it: the fast profile's 0.3 s was missed once in the suite on a loaded
    machine (the store, not the replays: the median probe is still checked below)."""
    # Generous, for a loaded two-core machine: the fast profile's canary times out at
    # 0.4 s (seed's at 10 s); before the budget, a tenth of the probes took over 0.4 s.
    config = make_config(timing={"canary_interval": 2.0, "canary_timeout": 1.9})
    async with running_deployment(config) as deployment:
        await _hammering_replays(deployment, bound=2.0)


async def _hammering_replays(deployment: Deployment, *, bound: float) -> None:
    from rideout.health.canary import Canary, probe

    since = await fill_room(deployment, "lot", deployment.config.realtime.history_size)
    stop = asyncio.Event()
    seen = {"state": 0, "throttled": 0}
    hints: list[float] = []

    async def hammer(ws: object) -> None:
        while not stop.is_set():
            await send(ws, action="getState", room="lot", since=since)  # type: ignore[arg-type]
            raw = await ws.recv()  # type: ignore[attr-defined]
            if raw.startswith('{"type":"error"'):
                error = json.loads(raw)
                assert error["code"] == "throttled"
                hints.append(parse_retry_hint(error["message"]) or 0.0)
                seen["throttled"] += 1
                await asyncio.sleep(0.05)  # faster than told, still within the rate limit
            else:
                seen["state"] += 1

    latencies: list[float] = []
    probes: list[float] = []

    async def heartbeats() -> None:
        async with deployment.connect(sub="bob") as bob:
            while not stop.is_set():
                started = time.monotonic()
                assert await heartbeat(bob) == PONG
                latencies.append(time.monotonic() - started)
                await asyncio.sleep(0.05)

    async def canary_probes() -> None:
        canary = Canary(deployment.config, deployment.config.primary.name)
        token = canary._current_token()  # the canary's own credential
        while not stop.is_set():
            started = time.monotonic()
            healthy, error, *_ = await probe(deployment.urls["a1"] + "/ws", token, bound)
            assert healthy, error
            probes.append(time.monotonic() - started)
            await asyncio.sleep(0.1)

    connect = deployment.connect
    async with (
        connect(sub="mallory", max_size=None) as m1,
        connect(sub="mallory", max_size=None) as m2,
    ):
        tasks = [asyncio.create_task(t) for t in (hammer(m1), hammer(m2), heartbeats(), canary_probes())]  # fmt: skip
        await asyncio.sleep(6.0)
        stop.set()
        await asyncio.gather(*tasks)
    realtime = deployment.config.realtime
    # The burst, then about the budget's rate (two full replays in six seconds at most,
    # beyond the burst), and every refusal says when to come back.
    full = realtime.history_size
    assert seen["throttled"] > 10
    assert seen["state"] <= (realtime.replay_burst + 6 * realtime.replay_rate) / full + 1
    assert hints
    assert all(0 < h <= full / realtime.replay_rate + 0.1 for h in hints)
    assert max(latencies) < bound, sorted(latencies)[-5:]
    assert len(probes) > 10
    assert max(probes) < bound, sorted(probes)[-5:]
    assert sorted(probes)[len(probes) // 2] < 0.2  # the median probe: not held up at all
