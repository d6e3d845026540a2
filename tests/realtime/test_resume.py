"""Resumption tickets end to end: real app servers and Redis, raw WebSockets and the
client library (rideout.auth.resume, docs/realtime-api.md "Resumption tickets")."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import jwt
from websockets.asyncio.client import connect

from rideout.auth.resume import ResumeKey, ResumeKeyRing, ResumeTickets
from rideout.auth.revocation import revoke_subject
from rideout.client.ws import AuctionClient, Connected, Event
from rideout.config import Config
from rideout.realtime.zone import ZoneServer
from tests.client.ws.support import fast_settings, of_type, running_dns
from tests.conftest import until
from tests.realtime.conftest import Deployment, recv, recv_type, rejected, running_deployment, send


def credentials(server: ZoneServer, kind: str) -> float:
    value = server.metrics.registry.get_sample_value("rideout_ws_credentials_total", {"kind": kind})
    return value or 0.0


def bearer(credential: str) -> dict[str, dict[str, str]]:
    return {"additional_headers": {"Authorization": f"Bearer {credential}"}}


async def ticket_of(d: Deployment, name: str, token: str) -> dict[str, Any]:
    """The ticket a connection to `name` opened with `token` is given."""
    async with connect(f"{d.urls[name]}/ws", **bearer(token)) as ws:
        await send(ws, action="ticket")
        return await recv_type(ws, "ticket")


async def test_a_ticket_opens_any_zone_of_either_region_and_resumes_the_tokens_identity(
    deployment: Deployment,
) -> None:
    d = deployment
    token = d.token("alice")
    reply = await ticket_of(d, "a1", token)
    ticket = reply["ticket"]
    assert ticket.startswith("rt1.")
    assert 0 < reply["ttl"] <= d.config.auth.resume_ttl
    claims = jwt.decode(token, options={"verify_signature": False})
    for name in ("a2", "b1"):  # another zone, the other region
        async with connect(f"{d.urls[name]}/ws", **bearer(ticket)) as ws:
            await send(ws, action="getState", room="lot-t")
            state = await recv_type(ws, "state")
            assert state["room"] == "lot-t"
            if name == "a2":  # the writer's region (b1's Redis is a replica)
                await send(ws, action="bid", room="lot-t", amount=7, id=name)
                assert (await recv_type(ws, "ack"))["accepted"] is True
        server = d.servers[name]
        assert credentials(server, "ticket") == 1
        assert credentials(server, "token") == 0
    # The resumed connection is the token's: its session is alice's, and it lives to the
    # token's exp (not the ticket's).
    async with connect(f"{d.urls['a2']}/ws?token={ticket}") as ws:
        await send(ws, action="getState", room="lot-t")
        state = await recv_type(ws, "state")
        assert state["user"]["last_bid_id"] == "a2"
        (connection,) = [c for c in d.servers["a2"].connections if not c.probe]
        assert connection.expires == claims["exp"]  # type: ignore[attr-defined]
        assert connection.jti == claims["jti"]  # type: ignore[attr-defined]


async def test_a_revoked_users_ticket_is_refused_and_a_bad_one_gets_a_tokens_401(
    deployment: Deployment,
) -> None:
    d = deployment
    ticket = (await ticket_of(d, "a1", d.token("alice")))["ticket"]
    bob = (await ticket_of(d, "a1", d.token("bob")))["ticket"]
    server = d.servers["a2"]
    server.revocations.replace(
        [revoke_subject("alice", now=time.time() + 1, max_ttl=86400, leeway=5)]
    )
    status, body = await rejected(f"{d.urls['a2']}/ws", **bearer(ticket))
    assert (status, body["error"]) == (403, "token_revoked")
    assert ticket not in body["message"]
    tampered = ticket[:-3] + ("AAA" if not ticket.endswith("AAA") else "BBB")
    for bad, reason in ((tampered, "bad_signature"), ("rt1.x", "malformed")):
        status, body = await rejected(f"{d.urls['a1']}/ws", **bearer(bad))
        assert (status, body["error"]) == (401, reason)
    # Under a key this server does not hold (a rotation, or tickets off): 401 too.
    d.servers["a1"].tickets = ResumeTickets(ResumeKeyRing(ResumeKey(b"z" * 32)), 300.0)
    status, body = await rejected(f"{d.urls['a1']}/ws", **bearer(bob))
    assert (status, body["error"]) == (401, "unknown_kid")
    d.servers["a1"].tickets = None
    status, body = await rejected(f"{d.urls['a1']}/ws", **bearer(bob))
    assert (status, body["error"]) == (401, "unknown_kid")


async def test_the_canarys_connections_get_no_ticket(deployment: Deployment) -> None:
    d = deployment
    probe = d.token("canary", extra_claims={"rideout_probe": "canary"})
    async with connect(f"{d.urls['a1']}/ws?token={probe}") as ws:
        await send(ws, action="ticket")
        error = await recv(ws)
        assert (error["type"], error["code"]) == ("error", "forbidden")


async def test_the_client_reconnects_with_its_ticket_and_falls_back_to_its_token(
    make_config: Callable[..., Config],
) -> None:
    config = make_config()
    events: list[Event] = []
    async with running_deployment(config) as d, running_dns(config) as dns:
        dns.answer("127.0.1.1", "127.0.1.2")
        tokens: list[str] = []

        def token() -> str:
            tokens.append(d.token("alice"))
            return tokens[-1]

        client = AuctionClient(
            config.app_domain, port=config.app_port, token=token, resolver=dns.resolver(),
            rooms=["lot-r"], settings=fast_settings(shuffle_addresses=False), on_event=events.append,
        )  # fmt: skip
        async with client:
            await client.wait_ready(5)
            await until(lambda: client.stats.tickets_received == 1, message="a ticket")
            first = client.address
            assert first is not None
            d.servers["a1" if first == "127.0.1.1" else "a2"].set_mode("draining")
            await until(lambda: len(of_type(events, Connected)) == 2, message="the reconnect")
            await client.wait_ready(5)
            assert len(tokens) == 1  # the ticket opened the second connection
            assert client.stats.tickets_presented == 1 and client.stats.tickets_refused == 0  # noqa: PT018
            second = client.address
            assert second not in (None, first)
            here = d.servers["a1" if second == "127.0.1.1" else "a2"]
            assert credentials(here, "ticket") == 1
            ack = await client.bid_and_wait("lot-r", 5, timeout=5)
            assert ack.accepted

            # Every server forgets the key (a rotation gone wrong): the ticket is refused,
            # and the client presents its token at once, on the same address.
            assert client.stats.tickets_received == 1  # the one held is still more than half good
            for server in d.servers.values():
                server.tickets = ResumeTickets(ResumeKeyRing(ResumeKey(b"q" * 32)), 300.0)
            for server in d.servers.values():
                server.set_mode("serving")
            here.set_mode("draining")
            await until(lambda: len(of_type(events, Connected)) == 3, message="the fallback")
            await client.wait_ready(5)
            assert client.stats.tickets_refused == 1
            assert len(tokens) == 2
            assert of_type(events, Connected)[2].address != second
