"""POST /auth/demo-token on real app servers with real Redis: a name is its first
requester's, only the deployment's pages may ask, and the setting turns it off."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable

import httpx

from rideout.config import Config
from rideout.realtime.app import create_app
from rideout.realtime.demo import DEMO_CLAIM, QuotaReached, claim_name
from rideout.store.keys import demo_identities, demo_name_claim, legacy_demo_name_claim
from tests.conftest import serving
from tests.realtime.conftest import Deployment, rejected, running_deployment


def http_url(deployment: Deployment, name: str) -> str:
    return deployment.urls[name].replace("ws://", "http://")


async def ask(
    http: httpx.AsyncClient, base: str, name: object, origin: str | None = None
) -> httpx.Response:
    headers = {"Origin": origin if origin is not None else base}
    return await http.post(f"{base}/auth/demo-token", json={"name": name}, headers=headers)


async def test_a_name_is_held_by_its_first_browser(deployment: Deployment) -> None:
    base = http_url(deployment, "a1")
    async with (
        httpx.AsyncClient(trust_env=False) as alice_browser,
        httpx.AsyncClient(trust_env=False) as mallory,
    ):
        first = await ask(alice_browser, base, "alice")
        assert first.status_code == 200, first.text
        cookie = first.headers["set-cookie"]
        assert cookie.startswith("rideout_demo=")
        attributes = {a.strip().lower() for a in cookie.split(";")[1:]}
        assert {"httponly", "samesite=strict", "path=/auth/demo-token"} <= attributes
        claims = deployment.servers["a1"].verifier.verify(first.json()["token"])
        assert claims.sub == "alice"
        # The same browser (its cookie) signs in again, on another zone of the region too.
        assert (await ask(alice_browser, base, "alice")).status_code == 200
        a2 = http_url(deployment, "a2")
        alice_browser.cookies.set("rideout_demo", alice_browser.cookies["rideout_demo"],
                                  domain="127.0.1.2")  # fmt: skip
        assert (await ask(alice_browser, a2, "alice")).status_code == 200
        # Anyone else asking for that name (any case) is refused, without a token.
        for name in ("alice", "ALICE", "Alice"):
            taken = await ask(mallory, base, name)
            assert taken.status_code == 409, taken.text
            assert taken.json()["error"] == "name_taken"
            assert "token" not in taken.text
        # A made-up cookie is just another browser.
        mallory.cookies.set("rideout_demo", "A" * 43, domain="127.0.1.1")
        assert (await ask(mallory, base, "alice")).status_code == 409
        assert (await ask(mallory, base, "mallory")).status_code == 200
        # The canaries' names are not for the taking.
        reserved = await ask(mallory, base, "canary-us-east-1")
        assert (reserved.status_code, reserved.json()["error"]) == (403, "reserved_name")
    # The claim lives as long as the token, in Redis.
    redis = deployment.servers["a1"].redis
    ttl = await redis.ttl(demo_name_claim("alice"))
    assert deployment.config.auth.token_ttl - 5 <= ttl <= deployment.config.auth.token_ttl


async def test_only_the_deployments_pages_may_ask(deployment: Deployment) -> None:
    base = http_url(deployment, "a1")
    async with httpx.AsyncClient(trust_env=False) as http:
        for origin in ("http://evil.example", "null", "http://127.0.0.1:1"):
            refused = await ask(http, base, "bob", origin=origin)
            assert refused.status_code == 403, origin
        no_origin = await http.post(f"{base}/auth/demo-token", json={"name": "bob"})
        assert no_origin.status_code == 403
        assert (await ask(http, base, "b" * 33)).status_code == 400
        assert (await ask(http, base, 7)).status_code == 400
        huge = await http.post(f"{base}/auth/demo-token", content=b"{" * 100_000,
                               headers={"Origin": base})  # fmt: skip
        assert huge.status_code == 413  # as every endpoint answers a body over its limit
        twice = await http.post(f"{base}/auth/demo-token", content=b'{"name": "a", "name": "b"}',
                                headers={"Origin": base})  # fmt: skip
        assert twice.status_code == 400
        # Refusals claimed nothing: bob is still free.
        assert (await ask(http, base, "bob")).status_code == 200


async def test_the_standby_region_checks_claims_but_makes_none(deployment: Deployment) -> None:
    primary, standby = http_url(deployment, "a1"), http_url(deployment, "b1")
    async with (
        httpx.AsyncClient(trust_env=False) as carol,
        httpx.AsyncClient(trust_env=False) as other,
    ):
        assert (await ask(carol, primary, "carol")).status_code == 200
        # Replicated to the standby region: there, too, carol is carol's only.
        secret = carol.cookies["rideout_demo"]
        carol.cookies.set("rideout_demo", secret, domain="127.0.2.1")
        async with asyncio.timeout(5):
            while (answer := await ask(other, standby, "carol")).status_code != 409:
                await asyncio.sleep(0.05)
        again = await ask(carol, standby, "carol")
        assert again.status_code == 200, again.text
        # A new name cannot be recorded on a read-only replica.
        new = await ask(other, standby, "dave")
        assert (new.status_code, new.json()["error"]) == (503, "standby")
        assert "retry-after" in new.headers
        assert answer.json()["error"] == "name_taken"


async def test_a_name_claimed_before_claims_moved_stays_its_holders(
    deployment: Deployment,
) -> None:
    """Claims moved from the user's tag to the counts' (one slot for the claim's script):
    one stored at the old key before an upgrade still holds the name, and its holder's
    renewal moves it, even with the count at its cap (the name is counted already)."""
    redis, auth = deployment.servers["a1"].redis, deployment.config.auth
    at_cap = dataclasses.replace(auth, max_demo_identities=1)
    old, new = legacy_demo_name_claim("Erin"), demo_name_claim("Erin")
    assert old != new
    await redis.set(old, "h1", ex=60)
    await redis.zadd(demo_identities(), {"erin": 2**52})  # counted, as it was then
    assert await claim_name(redis, "erin", "h2", 60, address="a", auth=auth) is None
    assert await redis.get(new) is None  # a refusal records nothing
    renewed = await claim_name(redis, "ERIN", "h1", 60, address="a", auth=at_cap)
    assert renewed == 60
    assert await redis.get(new) == "h1"
    assert await claim_name(redis, "erin", "h2", 60, address="a", auth=auth) is None
    # A name never claimed is counted against the cap as before.
    refused = await claim_name(redis, "frank", "h3", 60, address="a", auth=at_cap)
    assert isinstance(refused, QuotaReached), refused


async def test_the_setting_turns_demo_tokens_off(make_config: Callable[..., Config]) -> None:
    config = make_config(auth={"demo_tokens": False})
    zone = config.primary.zones[0]
    base = f"http://{zone.address}:{config.app_port}"
    from tests.conftest import running_redis_pair

    async with (
        running_redis_pair(config),
        serving(create_app(config, config.primary.name, zone.name), zone.address, config.app_port),
        httpx.AsyncClient(trust_env=False) as http,
    ):
        answer = await ask(http, base, "erin")
        assert (answer.status_code, answer.json()["error"]) == (404, "not_found")
    # On by default in local mode, off by default otherwise.
    assert make_config().auth.demo_tokens is True
    assert make_config(mode="external").auth.demo_tokens is False
    assert make_config(auth={"demo_tokens": True}).auth.demo_tokens is True


def from_address(source: str) -> httpx.AsyncClient:
    """A client whose connections leave from `source` (a loopback address of its own)."""
    return httpx.AsyncClient(
        transport=httpx.AsyncHTTPTransport(local_address=source), trust_env=False
    )


async def test_demo_identities_are_capped_per_address_and_in_all(
    make_config: Callable[..., Config],
) -> None:
    """Issue #28, finding 2: a script that sets Origin made 1,033 demo users. New names
    are capped per source address and in all, refused with 429 and Retry-After; a name
    already held is renewed whatever the caps."""
    config = make_config(auth={"max_demo_identities": 5, "max_demo_identities_per_address": 3})
    async with running_deployment(config) as d:
        base = http_url(d, "a1")
        async with from_address("127.0.0.1") as one, from_address("127.0.0.3") as other:
            for i in range(3):
                assert (await ask(one, base, f"bot-{i}")).status_code == 200
            refused = await ask(one, base, "bot-3")
            assert refused.status_code == 429, refused.text
            assert refused.json()["error"] == "too_many_demo_identities_from_address"
            assert "token" not in refused.json()
            ttl = config.auth.token_ttl
            assert ttl - 5 <= int(refused.headers["retry-after"]) <= ttl + 1
            # A name this browser holds is renewed.
            assert (await ask(one, base, "bot-0")).status_code == 200
            # Another address has its own quota, until the region's is reached.
            for i in range(2):
                assert (await ask(other, base, f"other-{i}")).status_code == 200
            full = await ask(other, base, "other-2")
            assert (full.status_code, full.json()["error"]) == (429, "too_many_demo_identities")
            assert int(full.headers["retry-after"]) >= 1
        async with from_address("127.0.0.4") as third:
            assert (await ask(third, base, "third")).status_code == 429
        # A refused name was not claimed: nobody holds it.
        assert await d.servers["a1"].redis.get(demo_name_claim("bot-3")) is None


async def test_a_demo_token_is_refused_where_demo_sign_in_is_off(
    make_config: Callable[..., Config],
) -> None:
    """A demo token carries its kind: where demo sign-in is off, /ws refuses it."""
    async with running_deployment(make_config()) as d, httpx.AsyncClient(trust_env=False) as http:
        token = (await ask(http, http_url(d, "a1"), "demo-user")).json()["token"]
    claims = d.servers["a1"].verifier.verify(token)
    assert claims.raw.get(DEMO_CLAIM) is True
    config = make_config(auth={"demo_tokens": False})
    async with running_deployment(config) as off:
        status, body = await rejected(off.urls["a1"] + "/ws?token=" + token)
        assert (status, body["error"]) == (403, "demo_tokens_off")
