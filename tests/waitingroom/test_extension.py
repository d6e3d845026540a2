"""The room on real zone servers (uvicorn on loopback) over a real primary Redis and its
replica in the other region: the configured event, the token flow end to end, tokens
that verify with the room's JWKS, and a failover that keeps every position."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx

from rideout import routes
from rideout.auth import JWKSet
from rideout.auth.admin import load_or_create_admin_token
from rideout.auth.room_tokens import RoomTokenVerifier
from rideout.config import Config
from rideout.realtime.app import create_app
from rideout.store.client import probe_client
from rideout.store.replication import ensure_epoch, promote
from rideout.waitingroom.extension import WaitingRoom
from tests.conftest import TEST_ADMIN, replicated, running_redis_pair, serving, until


@contextlib.asynccontextmanager
async def two_regions(config: Config) -> AsyncIterator[dict[str, Any]]:
    """A zone server with the room in each region; their base URLs and the Redis pair."""
    p, s = config.primary, config.secondary
    async with running_redis_pair(config) as pair, contextlib.AsyncExitStack() as stack:
        writer = probe_client(p.redis.address, p.redis.port, credentials=TEST_ADMIN, timeout=6.0)
        try:
            await ensure_epoch(writer)
            await replicated(writer)
        finally:
            await writer.aclose()
        urls = {}
        for name, region in (("a", p), ("b", s)):
            zone = region.zones[0]
            app = create_app(config, region.name, zone.name, extensions=[WaitingRoom(config)])
            await stack.enter_async_context(serving(app, zone.address, config.app_port))
            urls[name] = f"http://{zone.address}:{config.app_port}"
        http = await stack.enter_async_context(httpx.AsyncClient(trust_env=False, timeout=10))
        yield {"urls": urls, "http": http, "redis": pair}


def room_config(make_config: Callable[..., Config]) -> Config:
    # abandonment on: the replica's polls try to touch the clock (and must not fail)
    return make_config(
        waitingroom={"inlet": "none", "tick_interval": 0.2, "events": ["auction"],
                     "abandon_after": 300},
    )  # fmt: skip


async def test_the_token_flow_end_to_end_and_across_a_failover(
    make_config: Callable[..., Config],
) -> None:
    config = room_config(make_config)
    admin = {"Authorization": f"Bearer {load_or_create_admin_token(config.keys_dir)}"}
    async with two_regions(config) as d:
        http, a, b = d["http"], d["urls"]["a"], d["urls"]["b"]
        # the configured event exists, created by the writer region's zone
        r = await http.get(a + "/private/events/auction", headers=admin)
        assert r.status_code == 200, r.text
        rids = []
        keyed = {"Idempotency-Key": "arrival-1"}
        for i in range(3):
            r = await http.post(a + "/assign_queue_num", json={"event_id": "auction"},
                                headers=keyed if i == 0 else {})  # fmt: skip
            rids.append(r.json()["api_request_id"])
        r = await http.post(a + "/private/increment_serving_counter",
                            json={"event_id": "auction", "increment_by": 2}, headers=admin)  # fmt: skip
        assert r.json() == {"serving_num": 2}
        r = await http.post(
            a + "/generate_token", json={"event_id": "auction", "request_id": rids[0]}
        )
        assert r.status_code == 200, r.text
        tokens = r.json()
        assert set(tokens) == {
            "access_token",
            "refresh_token",
            "id_token",
            "token_type",
            "expires_in",
        }
        assert tokens["token_type"] == "Bearer"
        jwks = (await http.get(a + routes.ROOM_JWKS)).json()
        public = (await http.get(a + "/public_key", params={"event_id": "auction"})).json()
        assert public in jwks["keys"]
        verifier = RoomTokenVerifier(JWKSet(jwks), issuer=routes.room_issuer(config))
        claims = verifier.verify(tokens["access_token"], audience="auction")
        assert (claims.sub, claims.queue_position) == (rids[0], 1)
        verifier.verify(tokens["refresh_token"], token_use="refresh")
        verifier.verify(tokens["id_token"], token_use="id")
        r = await http.post(
            a + "/generate_token", json={"event_id": "auction", "request_id": rids[2]}
        )
        assert r.status_code == 202

        # the other region's replica has it all, and answers reads
        async def replicated() -> bool:
            r = await http.get(b + "/serving_num", params={"event_id": "auction"})
            return r.status_code == 200 and r.json() == {"serving_counter": "2"}

        await until(replicated, 10)
        exposition = (await http.get(b + "/metrics")).text
        assert 'rideout_room_requests_total{endpoint="/serving_num",status="200"}' in exposition
        assert "rideout_room_counter_loads_total" in exposition
        for _ in range(2):  # a read, then from b's position cache; no touch is written
            r = await http.get(
                b + "/queue_num", params={"event_id": "auction", "request_id": rids[1]}
            )
            assert (r.status_code, r.json()["queue_number"]) == (200, 2)
        exposition = (await http.get(b + "/metrics")).text
        assert "rideout_room_position_polls_total 2.0" in exposition
        assert "rideout_room_position_loads_total 1.0" in exposition
        r = await http.post(b + "/assign_queue_num", json={"event_id": "auction"})
        assert r.status_code == 503  # the replica takes no arrivals until promoted

        # failover: promote the replica; positions, counters, sessions and tokens survive
        replica = probe_client(config.secondary.redis.address, config.secondary.redis.port,
                               credentials=TEST_ADMIN, timeout=5.0)  # fmt: skip
        try:
            await promote(replica)
        finally:
            await replica.aclose()
        r = await http.post(
            b + "/generate_token", json={"event_id": "auction", "request_id": rids[0]}
        )
        assert r.status_code == 200, r.text
        again = verifier.verify(r.json()["access_token"], audience="auction")
        assert (again.iat, again.exp, again.queue_position) == (claims.iat, claims.exp, 1)
        # a client retrying its arrival across the failover keeps its one position
        r = await http.post(b + "/assign_queue_num", json={"event_id": "auction"}, headers=keyed)
        assert (r.json()["api_request_id"], r.headers["idempotent-replayed"]) == (rids[0], "true")
        r = await http.post(b + "/assign_queue_num", json={"event_id": "auction"})
        assert r.json()["queue_number"] == 4
        r = await http.get(b + "/private/events/auction", headers=admin)
        counters = r.json()["counters"]
        assert (
            counters["queue"],
            counters["serving"],
            counters["tokens"],
            counters["waiting"],
        ) == (4, 2, 1, 3)
        r = await http.post(b + "/private/update_session",
                            json={"event_id": "auction", "request_id": rids[0], "status": 1}, headers=admin)  # fmt: skip
        assert r.status_code == 200


def test_serve_mounts_the_room_unless_disabled(make_config: Callable[..., Config]) -> None:
    """`rideout serve` (rideout.processes) builds the zone app with the room as an
    extension and its authority for the auction's event; realtime never imports it."""
    from rideout.processes import zone_extensions
    from rideout.waitingroom.authorizer import RoomAuthorizer

    extensions, authorities = zone_extensions(make_config())
    assert [type(e) for e in extensions] == [WaitingRoom]
    assert [type(a) for a in authorities] == [RoomAuthorizer]
    extensions, authorities = zone_extensions(
        make_config(waitingroom={"enabled": False}, auth={"room_events": []})
    )
    assert extensions == authorities == []
