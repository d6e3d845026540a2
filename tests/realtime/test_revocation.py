"""Revocation end to end: `rideout token revoke` (the real command, in a subprocess)
against real app servers and real Redis in two regions."""

from __future__ import annotations

import asyncio
import logging
import math
import sys
import time
from collections.abc import AsyncIterator, Callable

import jwt
import pytest
from websockets.asyncio.client import ClientConnection, connect

from rideout.auth.revocation import RevocationList, revoke_subject, revoke_token
from rideout.config import Config, dump_toml
from rideout.realtime.app import create_app
from rideout.realtime.revocation import RevocationFollower
from rideout.store import keys
from rideout.store.acl import RedisRole
from rideout.store.client import probe_client, state_client
from rideout.store.replication import promote
from rideout.store.revocations import RevocationStore
from tests.conftest import credentials, running_redis_pair, serving, until
from tests.realtime.conftest import Deployment, recv, rejected, running_deployment, send

INTERVAL = 0.2  # auth.revocation_interval in these tests
BOUND = INTERVAL + 2.0  # one poll, plus slack for a shared 2-core machine


@pytest.fixture
async def revocable(make_config: Callable[..., Config]) -> AsyncIterator[Deployment]:
    config = make_config(auth={"revocation_interval": INTERVAL, "leeway": 0.0})
    async with running_deployment(config) as d:
        yield d


async def rideout(config: Config, *args: str) -> tuple[int, str, str]:
    """Run the `rideout` command (this tree's: PYTHONPATH is inherited) without blocking
    the servers that share this event loop."""
    path = config.data_dir.parent / "rideout.toml"
    if not path.exists():
        path.write_text(dump_toml(config))
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "rideout", *args, "-c", str(path),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def closed_within(ws: ClientConnection, seconds: float) -> tuple[int, str, float]:
    """Wait for the server to close `ws`: (code, reason, seconds it took)."""
    start = time.monotonic()
    async with asyncio.timeout(seconds):
        await ws.wait_closed()
    took = time.monotonic() - start
    received = ws.protocol.close_rcvd
    assert received is not None, "closed without a close frame"
    return received.code, received.reason, took


async def alive(ws: ClientConnection) -> bool:
    await send(ws, action="heartbeat")
    return await recv(ws) == "pong"


def jti_of(token: str) -> str:
    return str(jwt.decode(token, options={"verify_signature": False})["jti"])


async def test_revoking_a_subject_closes_its_connections_in_both_regions_within_the_bound(
    revocable: Deployment,
) -> None:
    d = revocable
    token = d.token("alice")
    urls = d.urls
    async with (
        connect(f"{urls['a1']}/ws?token={token}") as here,
        connect(f"{urls['b1']}/ws?token={token}") as there,  # the secondary region
        d.connect("a1", "bob") as bob,
    ):
        assert await alive(here) and await alive(there)  # noqa: PT018
        code, out, err = await rideout(d.config, "token", "revoke", "--sub", "alice")
        assert code == 0, err
        assert "revoked tokens of 'alice' issued before" in out
        assert "us-east-1 (writer, epoch 1)" in out
        assert "warning" not in err  # the replica confirmed it
        for ws in (here, there):
            close_code, reason, took = await closed_within(ws, BOUND)
            assert (close_code, reason) == (1008, "token revoked")
            assert took <= BOUND
        assert await alive(bob)

    # The same token is refused before the upgrade, everywhere, once each server has read
    # the list: a2 held no connection of alice's, so nothing above showed that it had
    # (its follower polls on its own phase; a rehearsal once asked it first).
    claims = jwt.decode(token, options={"verify_signature": False})
    for name in ("a1", "a2", "b1"):
        held = d.servers[name].revocations
        await until(
            lambda held=held: held.match(claims["sub"], claims["jti"], claims["iat"]),  # type: ignore[misc]
            BOUND, message=f"{name} read the revocation",
        )  # fmt: skip
        status, body = await rejected(f"{urls[name]}/ws?token={token}")
        assert (status, body["error"]) == (403, "token_revoked"), name
        assert token not in body["message"]
    metrics = d.servers["a1"].metrics.registry
    assert metrics.get_sample_value("rideout_ws_closes_total", {"code": "1008"}) == 1
    assert metrics.get_sample_value("rideout_ws_handshakes_total", {"outcome": "token_revoked"})


async def test_connections_close_within_one_interval_of_the_record(revocable: Deployment) -> None:
    """Timed from the write itself (the command's own start-up is not the servers')."""
    d = revocable
    primary = d.config.primary.redis
    # An operator's write, as `rideout token revoke` makes it: the controller's user.
    writer = state_client(
        primary.address, primary.port, credentials=credentials(d.config, RedisRole.CONTROLLER)
    )
    async with writer, d.connect("a1", "alice") as here, d.connect("b1", "alice") as there:
        assert await alive(here) and await alive(there)  # noqa: PT018
        entry = revoke_subject("alice", now=time.time(), max_ttl=86400, leeway=0)
        times = entry.record()
        start = time.monotonic()
        await RevocationStore(writer, "us-east-1").record(
            entry.field, until_ms=times["until"], expires_ms=times["expires"],
            at_ms=times["at"], now_ms=times["at"],
        )  # fmt: skip
        for ws in (here, there):
            code, reason, _ = await closed_within(ws, BOUND)
            assert (code, reason) == (1008, "token revoked")
            assert time.monotonic() - start <= BOUND


async def test_a_token_issued_after_a_subject_revocation_works(revocable: Deployment) -> None:
    d = revocable
    code, _, err = await rideout(d.config, "token", "revoke", "--sub", "alice")
    assert code == 0, err
    revoked_at = time.time()
    await asyncio.sleep(BOUND)  # every server has the list
    # Tokens carry whole seconds (iat = floor(now)): wait for the next second.
    await asyncio.sleep(math.floor(revoked_at) + 1 - time.time() + 0.05)
    async with connect(f"{d.urls['a1']}/ws?token={d.token('alice')}") as ws:
        assert await alive(ws)
        await asyncio.sleep(2 * INTERVAL)  # later polls do not close it either
        assert await alive(ws)


async def test_revoking_one_token_leaves_the_others_of_its_subject(revocable: Deployment) -> None:
    d = revocable
    stolen, kept = d.token("alice"), d.token("alice")
    async with (
        connect(f"{d.urls['a1']}/ws?token={stolen}") as thief,
        connect(f"{d.urls['a2']}/ws?token={kept}") as owner,
    ):
        code, out, err = await rideout(d.config, "token", "revoke", "--jti", jti_of(stolen))
        assert code == 0, err
        assert f"revoked the token '{jti_of(stolen)}' until" in out
        assert (await closed_within(thief, BOUND))[:2] == (1008, "token revoked")
        assert await alive(owner)
    # The other region learns it through replication and its own follower's next poll.
    await until(lambda: d.servers["b1"].revocations.match("alice", jti_of(stolen), 0) is not None,
                BOUND, message="the other region's list has the revocation")  # fmt: skip
    status, body = await rejected(f"{d.urls['b1']}/ws?token={stolen}")
    assert (status, body["error"]) == (403, "token_revoked")
    async with connect(f"{d.urls['b1']}/ws?token={kept}") as ws:
        assert await alive(ws)


async def test_a_subject_locked_out_until_later_cannot_sign_in_again_meanwhile(
    revocable: Deployment,
) -> None:
    d = revocable
    code, _, err = await rideout(d.config, "token", "revoke", "--sub", "carol", "--until", "1h")
    assert code == 0, err
    await asyncio.sleep(BOUND)
    await asyncio.sleep(1.05)  # a token issued a whole second after the command
    status, body = await rejected(f"{d.urls['a1']}/ws?token={d.token('carol')}")
    assert (status, body["error"]) == (403, "token_revoked")


async def test_a_revocation_survives_a_failover_to_the_other_region(
    revocable: Deployment,
) -> None:
    """Recorded on the primary, replicated: a server that starts after the secondary's
    Redis was promoted, with the primary gone, refuses the token."""
    d = revocable
    config = d.config
    token = d.token("alice")
    code, _, err = await rideout(config, "token", "revoke", "--sub", "alice")
    assert code == 0, err
    await d.redis[config.primary.name].stop()
    replica = probe_client(
        config.secondary.redis.address, config.secondary.redis.port,
        credentials=credentials(config, RedisRole.CONTROLLER),
    )  # fmt: skip
    try:
        await promote(replica)
    finally:
        await replica.aclose()
    zone = config.secondary.zones[1]
    async with serving(create_app(config, config.secondary.name, zone.name), zone.address,
                       config.app_port):  # fmt: skip
        status, body = await rejected(f"ws://{zone.address}:{config.app_port}/ws?token={token}")
    assert (status, body["error"]) == (403, "token_revoked")


async def test_the_follower_reads_only_changes_and_keeps_the_last_list_while_redis_is_down(
    make_config: Callable[..., Config], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "rideout.realtime.revocation")
    config = make_config()
    address, port = config.primary.redis.address, config.primary.redis.port
    async with running_redis_pair(config) as (primary, _):
        client = state_client(
            address, port, timeout=0.5, credentials=credentials(config, RedisRole.CONTROLLER)
        )
        try:
            store = RevocationStore(client, config.primary.name)
            held = RevocationList(leeway=0)
            changes: list[int] = []
            failures: list[int] = []
            follower = RevocationFollower(
                store, held, INTERVAL, lambda: changes.append(len(held)),
                on_failure=lambda: failures.append(1),
            )  # fmt: skip
            assert await follower.refresh() is True  # the first read
            assert await follower.refresh() is False  # nothing changed: one GET
            now = time.time()
            for entry in (
                revoke_subject("alice", now=now, max_ttl=3600, leeway=0),
                revoke_token("j1", now=now, max_ttl=3600, leeway=0),
            ):
                times = entry.record()
                await store.record(
                    entry.field, until_ms=times["until"], expires_ms=times["expires"],
                    at_ms=times["at"], now_ms=times["at"],
                )  # fmt: skip
            await client.hset(keys.REVOCATIONS, "sub:mallory", "not json")  # skipped, logged
            assert await follower.refresh() is True
            assert changes == [0, 2]
            assert held.match("alice", "x", now - 1) is not None
            assert "ignoring an unreadable revocation 'sub:mallory'" in caplog.text

            await primary.stop()
            assert await follower.refresh() is False
            assert await follower.refresh() is False
            assert len(failures) == 2
            assert caplog.text.count("cannot read the revocation list") == 1  # said once
            assert held.match("alice", "x", now - 1) is not None  # the last list holds
            await primary.start()
            assert await follower.refresh() is False  # back, and unchanged
            assert "can be read again" in caplog.text
        finally:
            await client.aclose()
