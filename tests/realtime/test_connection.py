"""The WebSocket endpoint (``connection.py``): the ``$connect`` authorizer, routing on
``action``, sync replication's promise, against real servers and real Redis; and the
send queue and rate limiter in isolation."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from rideout.auth import SigningKey
from rideout.config import Config
from rideout.protocol import CloseCode, parse_retry_hint
from rideout.realtime import connection as connection_module
from rideout.realtime.connection import Connection, WebSocketEndpoint
from rideout.realtime.limits import TokenBucket
from rideout.realtime.metrics import AppMetrics
from tests.realtime.conftest import (
    Deployment,
    recv,
    recv_type,
    rejected,
    running_deployment,
    send,
)

# ----------------------------------------------------------------------------- handshake


def b64(obj: object) -> str:
    return base64.urlsafe_b64encode(json.dumps(obj).encode()).rstrip(b"=").decode()


async def test_no_token_is_rejected_before_the_upgrade(deployment: Deployment) -> None:
    code, body = await rejected(deployment.urls["a1"] + "/ws")
    assert (code, body["error"]) == (401, "missing_token")
    assert body["message"]


async def test_token_attacks(deployment: Deployment) -> None:
    url = deployment.urls["a1"] + "/ws?token="
    issuer = deployment.issuer
    signing_key = SigningKey.load_or_create(deployment.config.keys_dir)
    now = time.time()
    # Forge tokens the way attackers do.
    header = {"alg": "none", "typ": "JWT"}
    claims = {"sub": "alice", "iss": deployment.config.auth.issuer, "aud": deployment.config.auth.audience,
              "exp": now + 600, "iat": now, "token_use": "access", "jti": "x"}  # fmt: skip
    alg_none = f"{b64(header)}.{b64(claims)}."
    valid = issuer.issue("alice")
    h, _, sig = valid.split(".")
    tampered = f"{h}.{b64({**claims, 'sub': 'mallory'})}.{sig}"
    other_key = SigningKey.generate()
    foreign = other_key.encode({**claims, "exp": int(now + 600), "iat": int(now)})
    wrong_aud = signing_key.encode(
        {**claims, "aud": "someone-else", "exp": int(now + 600), "iat": int(now)}
    )
    id_token = signing_key.encode(
        {**claims, "token_use": "id", "exp": int(now + 600), "iat": int(now)}
    )
    cases = {
        "garbage": ("not-a-token", 401, "malformed"),
        "alg none": (alg_none, 401, "alg_not_allowed"),
        "tampered": (tampered, 401, "bad_signature"),
        "unknown key": (foreign, 401, "unknown_kid"),
        "wrong audience": (wrong_aud, 403, "wrong_audience"),
        "id token": (id_token, 403, "not_access_token"),
    }
    for name, (token, status, reason) in cases.items():
        code, body = await rejected(url + token)
        assert (code, body["error"]) == (status, reason), name
        assert token not in body["message"]


async def raw_handshake(
    url: str, target: str, headers: dict[str, str], timeout: float = 5.0
) -> tuple[int, dict[str, Any]]:
    """Send an upgrade request byte for byte; the status and JSON body of the answer.

    Fails (rather than hanging) when no complete answer arrives within `timeout`."""
    host, port = url.removeprefix("ws://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        lines = [f"GET {target} HTTP/1.1", f"Host: {host}:{port}", "Upgrade: websocket",
                 "Connection: Upgrade", "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==",
                 "Sec-WebSocket-Version: 13", *(f"{k}: {v}" for k, v in headers.items())]  # fmt: skip
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode())
        async with asyncio.timeout(timeout):
            head = await reader.readuntil(b"\r\n\r\n")
            status = int(head.split(b" ", 2)[1])
            length = next(
                int(line.split(b":", 1)[1])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length:")
            )
            body = await reader.readexactly(length)
    except TimeoutError:
        pytest.fail(f"no answer to an upgrade request within {timeout:g} s")
    finally:
        writer.close()
    return status, json.loads(body)


@pytest.mark.parametrize("where", ["query", "authorization", "subprotocol"])
async def test_a_token_over_the_maximum_length_gets_a_prompt_401(
    deployment: Deployment, where: str
) -> None:
    token = "a" * 5000  # over MAX_TOKEN_LENGTH (4096), under the HTTP layer's 8 KiB lines
    target, headers = {
        "query": (f"/ws?token={token}", {}),
        "authorization": ("/ws", {"Authorization": f"Bearer {token}"}),
        "subprotocol": ("/ws", {"Sec-WebSocket-Protocol": f"bearer, {token}"}),
    }[where]
    status, body = await raw_handshake(deployment.urls["a1"], target, headers)
    assert (status, body["error"]) == (401, "token_too_long")
    assert "4096" in body["message"]


# An upgrade request with a line over 8 KiB never reaches the authorizer: websockets
# refuses it below the app, and rideout._guard writes the refusal that uvicorn dropped.
@pytest.mark.parametrize("where", ["query", "subprotocol"])
async def test_a_9_kib_token_gets_a_prompt_answer_with_a_json_body(
    deployment: Deployment, where: str
) -> None:
    token = "a" * 9 * 1024
    target, headers = {
        "query": (f"/ws?token={token}", {}),
        "subprotocol": ("/ws", {"Sec-WebSocket-Protocol": f"bearer, {token}"}),
    }[where]
    status, body = await raw_handshake(deployment.urls["a1"], target, headers, timeout=3.0)
    assert status in (401, 414, 431)
    assert body["error"]


async def test_expired_token(make_config: Callable[..., Config]) -> None:
    config = make_config(auth={"leeway": 0.0})
    async with running_deployment(config) as d:
        token = d.issuer.issue("alice", ttl=1)
        await asyncio.sleep(1.5)
        code, body = await rejected(f"{d.urls['a1']}/ws?token={token}")
        assert (code, body["error"]) == (401, "token_expired")


async def test_token_locations_and_origin(deployment: Deployment) -> None:
    base = deployment.urls["a1"] + "/ws"
    token = deployment.token()
    async with connect(base, additional_headers={"Authorization": f"Bearer {token}"}) as ws:
        await send(ws, action="heartbeat")
        assert await recv(ws) == "pong"
    async with connect(base, subprotocols=["bearer", token]) as ws:  # type: ignore[list-item]
        assert ws.subprotocol == "bearer"
        await send(ws, action="heartbeat")
        assert await recv(ws) == "pong"
    code, body = await rejected(f"{base}?token={token}", origin="http://evil.example")  # type: ignore[arg-type]
    assert (code, body["error"]) == (403, "origin_not_allowed")
    own = f"http://{deployment.config.primary.zones[1].address}:{deployment.config.app_port}"
    async with connect(f"{base}?token={token}", origin=own) as ws:  # type: ignore[arg-type]
        await send(ws, action="heartbeat")
        assert await recv(ws) == "pong"


# ----------------------------------------------------------------------------- messages


async def test_heartbeat_state_and_unknown_action(deployment: Deployment) -> None:
    async with deployment.connect("a1") as ws:
        await send(ws, action="heartbeat")
        assert await recv(ws) == "pong"
        await send(ws, action="getState", room="lot-1")
        state = await recv(ws)
        assert state["type"] == "state"
        assert state["region"] == "us-east-1"
        assert state["room"] == "lot-1"
        assert state["state"]["bid"] == 0
        assert state["state"]["bids"] == 0
        assert state["recovered"] is False
        assert state["missed"] == []
        assert state["position"]["epoch"] == 1
        await send(ws, action="dance")
        error = await recv(ws)
        assert (error["type"], error["code"]) == ("error", "bad_request")


async def test_reconnect_replays_exactly_what_was_missed(deployment: Deployment) -> None:
    async with deployment.connect("a1", "alice") as bidder:
        await send(bidder, action="getState", room="lot-2")
        await recv_type(bidder, "state")
        await send(bidder, action="bid", room="lot-2", amount=5, id="first")
        await recv_type(bidder, "ack")
        async with deployment.connect("a2", "bob") as watcher:
            await send(watcher, action="getState", room="lot-2")
            position = (await recv_type(watcher, "state"))["position"]
        for amount in (6, 7, 8):
            await send(bidder, action="bid", room="lot-2", amount=amount, id=f"b{amount}")
            await recv_type(bidder, "ack")
        # Back, on another server, with the last position seen.
        async with deployment.connect("a1b", "bob") as watcher:
            await send(watcher, action="getState", room="lot-2", since=position)
            state = await recv_type(watcher, "state")
            assert state["recovered"] is True
            assert [m["state"]["bid"] for m in state["missed"]] == [6, 7, 8]
            assert state["state"]["bid"] == 8
            # And with a position from another writer's history: no replay, full state.
            await send(
                watcher,
                action="getState",
                room="lot-2",
                since={**position, "epoch": position["epoch"] + 1},
            )
            stale = await recv_type(watcher, "state")
            assert stale["recovered"] is False
            assert stale["missed"] == []
            assert stale["state"]["bid"] == 8


async def test_a_retried_bid_is_applied_once(deployment: Deployment) -> None:
    async with deployment.connect("a1", "alice") as ws:
        await send(ws, action="getState", room="lot-3")
        await recv_type(ws, "state")
        await send(ws, action="bid", room="lot-3", amount=50, id="same")
        first = await recv_type(ws, "ack")
    async with deployment.connect("a2", "alice") as ws:  # the retry lands elsewhere
        await send(ws, action="bid", room="lot-3", amount=50, id="same")
        again = await recv_type(ws, "ack")
        assert again == first
        await send(ws, action="getState", room="lot-3")
        state = await recv_type(ws, "state")
        assert state["state"]["bids"] == 1
        assert state["user"]["last_bid"] == 50


async def test_an_id_is_per_room_and_the_ack_names_its_room(deployment: Deployment) -> None:
    async with deployment.connect("a1", "alice") as ws:
        await send(ws, action="bid", room="lot-3a", amount=50, id="same")
        first = await recv_type(ws, "ack")
        await send(ws, action="bid", room="lot-3b", amount=70, id="same")
        second = await recv_type(ws, "ack")
        assert (first["room"], first["accepted"]) == ("lot-3a", True)
        assert (second["room"], second["accepted"]) == ("lot-3b", True)
        # Its own decision, not the first one's replayed: the ack's state is lot-3b's.
        # (Not its position: an offset is an entry id of the room's own stream, and two
        # rooms' streams written in the same millisecond give the same id.)
        assert (first["state"]["bid"], second["state"]["bid"]) == (50, 70)
        await send(ws, action="getState", room="lot-3b")
        assert (await recv_type(ws, "state"))["state"]["bid"] == 70


async def test_an_outbid_ack_names_the_price_that_beat_it(deployment: Deployment) -> None:
    async with deployment.connect("a1", "alice") as alice, deployment.connect("a2", "bob") as bob:
        await send(alice, action="bid", room="lot-3c", amount=80, id="a")
        won = await recv_type(alice, "ack")
        assert (won["accepted"], won["state"]["bid"], won["state"]["bidder"]) == (
            True, 80, "alice",
        )  # fmt: skip
        # Bob never followed the room: the refusal alone tells him what to beat.
        await send(bob, action="bid", room="lot-3c", amount=60, id="b")
        lost = await recv_type(bob, "ack")
        assert (lost["accepted"], lost["reason"]) == (False, "too_low")
        assert (lost["state"]["bid"], lost["state"]["bidder"]) == (80, "alice")


async def test_bids_are_refused_in_the_region_that_is_not_the_writer(
    deployment: Deployment,
) -> None:
    async with deployment.connect("b1", "alice") as ws:
        await send(ws, action="bid", room="lot-4", amount=5, id="x1")
        error = await recv_type(ws, "error")
        assert (error["code"], error["id"]) == ("unavailable", "x1")
        assert "not the writer" in error["message"]


async def test_bad_input_gets_an_error_and_the_connection_stays_open(
    deployment: Deployment,
) -> None:
    async with deployment.connect("a1") as ws:
        for garbage in ("{", "[]", "null", '{"action": 5}', '{"action":"bid","room":"r","amount":"10","id":"q"}',
                        '{"action":"bid","room":"r","amount":1e400,"id":"q"}', '{"action":"getState"}'):  # fmt: skip
            await ws.send(garbage)
            error = await recv(ws)
            assert (error["type"], error["code"]) == ("error", "bad_request"), garbage
            assert "Traceback" not in error["message"]
        await ws.send(b"\xff\xfe\x00garbage")
        assert (await recv(ws))["code"] == "bad_request"
        await send(ws, action="bid", room="r", amount=-1, id="neg")
        error = await recv(ws)
        assert (error["code"], error.get("id")) == ("bad_request", "neg")
        await send(ws, action="heartbeat")
        assert await recv(ws) == "pong"


async def test_an_oversized_message_closes_with_1009(deployment: Deployment) -> None:
    async with deployment.connect("a1") as ws:
        await ws.send("x" * (deployment.config.realtime.max_message_size + 1))
        with pytest.raises(ConnectionClosed) as info:
            await recv(ws)
        assert info.value.rcvd is not None
        assert info.value.rcvd.code == 1009


async def test_too_many_messages_are_throttled(make_config: Callable[..., Config]) -> None:
    config = make_config(realtime={"rate_limit": 1.0, "rate_burst": 3})
    async with running_deployment(config) as d, d.connect("a1") as ws:
        for _ in range(5):
            await send(ws, action="heartbeat")
        replies = [await recv(ws) for _ in range(5)]
        assert replies[:3] == ["pong"] * 3
        assert [r["code"] for r in replies[3:]] == ["throttled", "throttled"]
        assert 0 < (parse_retry_hint(replies[3]["message"]) or 0) <= 1.0  # when to retry


async def test_token_expiry_closes_with_1008(deployment: Deployment) -> None:
    token = deployment.issuer.issue("alice", ttl=1)
    async with connect(f"{deployment.urls['a1']}/ws?token={token}") as ws:
        with pytest.raises(ConnectionClosed) as info:
            await recv(ws, timeout=5)
        assert info.value.rcvd is not None
        assert (info.value.rcvd.code, info.value.rcvd.reason) == (1008, "token expired")


# ------------------------------------------------ sync replication: an ack promises the replica has it


async def test_acks_wait_for_the_replica(make_config: Callable[..., Config]) -> None:
    config = make_config(failover={"replication": "sync", "sync_timeout": 0.3})
    async with running_deployment(config) as d, d.connect("a1") as ws:
        await send(ws, action="bid", room="s1", amount=10, id="r1")
        ack = await recv_type(ws, "ack")
        assert ack["accepted"] is True
        # The replica has it the moment the ack arrives: read it in the other region.
        async with d.connect("b1", "bob") as other:
            await send(other, action="getState", room="s1")
            assert (await recv_type(other, "state"))["state"]["bid"] == 10


async def test_replica_down_rejects_and_the_retry_is_acked_once_replicated(
    make_config: Callable[..., Config],
) -> None:
    config = make_config(
        failover={"replication": "sync", "sync_timeout": 0.2, "replica_down": "reject"}
    )
    async with running_deployment(config) as d, d.connect("a1") as ws:
        replica = d.redis[config.secondary.name]
        await replica.stop()
        await send(ws, action="bid", room="s2", amount=10, id="r1")
        error = await recv_type(ws, "error")
        assert (error["code"], error["id"]) == ("unavailable", "r1")
        assert "not yet replicated" in error["message"]
        # The same id again, still no replica: still not acknowledged.
        await send(ws, action="bid", room="s2", amount=10, id="r1")
        assert (await recv_type(ws, "error"))["id"] == "r1"
        await replica.start()
        # As any client does: retry with the same id until the replica confirms (right
        # after a resync that can take a WAIT or two on a busy machine).
        for _ in range(20):
            await send(ws, action="bid", room="s2", amount=10, id="r1")
            reply = await recv(ws)
            if reply["type"] == "ack":
                break
            assert (reply["type"], reply["code"], reply["id"]) == ("error", "unavailable", "r1")
        assert reply["type"] == "ack"
        assert reply["accepted"] is True  # the original decision, now replicated


async def test_replica_down_degrades_to_async_when_configured(
    make_config: Callable[..., Config],
) -> None:
    config = make_config(
        failover={"replication": "sync", "sync_timeout": 0.2, "replica_down": "degrade"}
    )
    async with running_deployment(config) as d, d.connect("a1") as ws:
        await d.redis[config.secondary.name].stop()
        await send(ws, action="bid", room="s3", amount=10, id="r1")
        assert (await recv_type(ws, "ack"))["accepted"] is True
        zone = config.primary.zones[0]
        async with httpx.AsyncClient(trust_env=False) as http:
            base = f"http://{zone.address}:{config.app_port}"
            health = (await http.get(base + "/health")).json()
            assert health["replication"] == {"mode": "sync", "unreplicated_acks": 1}
            metrics = (await http.get(base + "/metrics")).text
            assert 'rideout_sync_replication_total{outcome="degraded"} 1.0' in metrics


# ----------------------------------------------------------------------------- in isolation


def test_token_bucket_refills_at_its_rate() -> None:
    now = [0.0]
    bucket = TokenBucket(rate=2.0, burst=3, clock=lambda: now[0])
    assert [bucket.take() for _ in range(4)] == [True, True, True, False]
    now[0] += 0.5  # one token back
    assert bucket.take() is True
    assert bucket.take() is False
    now[0] += 100  # never more than the burst
    assert sum(bucket.take() for _ in range(10)) == 3


class StuckPeer:
    """Stands in for the server's ASGI `send` to a client that stopped reading. A real
    one on loopback only blocks the server after megabytes have filled the socket
    buffers, which would make these tests slow; everything else is the real Connection."""

    def __init__(self, *, stuck: bool = True) -> None:
        self.sent: list[str] = []
        self.closed: tuple[int, str] | None = None
        self.unblock = asyncio.Event()
        if not stuck:
            self.unblock.set()

    async def __call__(self, message: dict[str, Any]) -> None:
        if message["type"] == "websocket.send":
            self.sent.append(message["text"])
        else:
            assert message["type"] == "websocket.close"
            self.closed = (message["code"], message["reason"])
        await self.unblock.wait()


def connection(config: Config, peer: StuckPeer) -> Connection:
    server: Any = SimpleNamespace(
        config=config, metrics=AppMetrics("r", "z"), connections=set(),
        hub=SimpleNamespace(unsubscribe=lambda room, conn: None),
    )  # fmt: skip
    return Connection(peer, "alice", 2e9, server)


class Client:
    """The server's ASGI `receive` for a client that sends `messages`, then stays."""

    def __init__(self) -> None:
        self.inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

    async def __call__(self) -> dict[str, Any]:
        return await self.inbox.get()

    def leave(self) -> None:
        self.inbox.put_nowait({"type": "websocket.disconnect", "code": 1001})


async def test_sends_finish_on_the_spot_when_the_transport_takes_them(
    make_config: Callable[..., Config],
) -> None:
    peer = StuckPeer(stuck=False)
    conn = connection(make_config(), peer)
    conn._seen["lot"] = (0, 0)
    for i in range(1, 4):
        conn.deliver("lot", (i, 0), f"update {i}")
    # No task switch needed: the updates are with the transport already.
    assert peer.sent == ["update 1", "update 2", "update 3"]
    assert conn._flusher is None


async def test_a_consumer_that_falls_behind_is_closed_with_1013(
    make_config: Callable[..., Config],
) -> None:
    config = make_config(realtime={"send_queue": 4})
    peer = StuckPeer()
    conn = connection(config, peer)
    conn._seen["lot"] = (0, 0)
    for i in range(1, 20):
        conn.deliver("lot", (i, 0), f"update {i}")
        await asyncio.sleep(0)
    assert conn._flusher is not None
    assert len(conn._queue) == 1  # everything dropped but the close
    peer.unblock.set()
    await asyncio.wait_for(conn._flusher, 5)
    assert conn._flusher is None
    assert peer.closed is not None
    code, reason = peer.closed
    assert code == CloseCode.OVERLOADED
    assert parse_retry_hint(reason) == pytest.approx(config.timing.backoff_base)
    assert peer.sent == ["update 1"]  # the one in flight when it stalled
    assert conn.server.metrics.slow_consumers._value.get() == 1


async def test_updates_are_filtered_by_offset_and_held_while_state_is_read(
    make_config: Callable[..., Config],
) -> None:
    peer = StuckPeer(stuck=False)
    conn = connection(make_config(), peer)
    conn.deliver("lot", (5, 0), "not subscribed: dropped")
    conn._pending["lot"] = []
    conn.deliver("lot", (6, 0), "held")
    assert conn._pending["lot"] == [((6, 0), "held")]
    del conn._pending["lot"]
    conn._seen["lot"] = (6, 0)
    conn.deliver("lot", (6, 0), "duplicate: dropped")
    conn.deliver("lot", (5, 9), "older: dropped")
    conn.deliver("lot", (7, 0), "new")
    assert peer.sent == ["new"]
    conn.close_soon(CloseCode.DRAINING, "bye")
    conn.close_soon(CloseCode.OVERLOADED, "ignored: already closing")
    assert peer.closed == (CloseCode.DRAINING, "bye")
    conn.deliver("lot", (8, 0), "after the close: dropped")
    assert peer.sent == ["new"]


async def test_a_close_queued_behind_a_stuck_send_gets_a_grace_period(
    make_config: Callable[..., Config], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(connection_module, "CLOSE_GRACE", 0.05)
    peer, client = StuckPeer(), Client()
    conn = connection(make_config(), peer)
    serving = asyncio.create_task(conn.serve(client))
    await asyncio.sleep(0)
    conn._send("stuck")
    flusher = conn._flusher
    assert flusher is not None
    conn.close_soon(CloseCode.DRAINING, "bye")
    client.inbox.put_nowait({"type": "websocket.receive", "text": "ignored"})
    await asyncio.wait_for(serving, 5)  # gave up on the stuck peer after the grace
    assert flusher.cancelled()
    assert peer.closed is None
    assert conn.server.connections == set()


async def test_a_client_that_leaves_stops_its_flusher_at_once(
    make_config: Callable[..., Config],
) -> None:
    peer, client = StuckPeer(), Client()
    conn = connection(make_config(), peer)
    serving = asyncio.create_task(conn.serve(client))
    await asyncio.sleep(0)
    conn._send("stuck")
    conn._send("queued")
    flusher = conn._flusher
    assert flusher is not None
    assert list(conn._queue) == ["queued"]
    client.leave()
    await asyncio.wait_for(serving, 5)
    assert flusher.cancelled()
    assert conn._flusher is None
    assert peer.sent == ["stuck"]


async def test_a_send_to_a_client_that_is_gone_is_not_an_error(
    make_config: Callable[..., Config],
) -> None:
    async def gone(message: dict[str, Any]) -> None:
        raise OSError("client disconnected")  # what uvicorn's ClientDisconnected is

    conn = connection(make_config(), StuckPeer())
    conn._asgi_send = gone
    conn._send("lost")
    conn.close_soon(CloseCode.DRAINING, "not sent either")
    assert conn._flusher is None


async def test_a_send_that_fails_after_waiting_ends_the_flusher_quietly(
    make_config: Callable[..., Config],
) -> None:
    gate = asyncio.Event()

    async def breaks_when_unblocked(message: dict[str, Any]) -> None:
        await gate.wait()
        raise OSError("client disconnected")

    conn = connection(make_config(), StuckPeer())
    conn._asgi_send = breaks_when_unblocked
    conn._send("waits, then fails")
    conn._send("queued behind it")
    flusher = conn._flusher
    assert flusher is not None
    gate.set()
    await asyncio.wait_for(flusher, 5)
    assert conn._flusher is None
    assert conn._queue is None
    conn._send("after: dropped, not raised")
    assert conn._flusher is None


class Sent(list[dict[str, Any]]):
    async def __call__(self, message: dict[str, Any]) -> None:
        self.append(message)


def endpoint_state(config: Config) -> SimpleNamespace:
    zone = SimpleNamespace(
        mode="draining", config=config, metrics=AppMetrics("r", "z"),
        origin_allowed=lambda origin: True,
    )  # fmt: skip
    return SimpleNamespace(zone=zone)


async def test_a_denial_without_the_http_response_extension_is_a_close(
    make_config: Callable[..., Config],
) -> None:
    """Servers without ASGI's websocket.http.response extension can only refuse with a
    close (the client sees 403); uvicorn has it, so the other tests see the JSON body."""
    sent, client = Sent(), Client()
    client.inbox.put_nowait({"type": "websocket.connect"})
    scope = {"type": "websocket", "path": "/ws", "headers": [], "extensions": {}}
    await WebSocketEndpoint(endpoint_state(make_config()))(scope, client, sent)
    assert sent == [{"type": "websocket.close", "code": CloseCode.POLICY}]


async def test_a_connection_that_never_asked_to_connect_gets_nothing(
    make_config: Callable[..., Config],
) -> None:
    sent, client = Sent(), Client()
    client.leave()
    scope = {"type": "websocket", "path": "/ws", "headers": []}
    await WebSocketEndpoint(endpoint_state(make_config()))(scope, client, sent)
    assert sent == []
