"""The OpenID adapter's waiting page without JavaScript, and a code presented twice
(issue #28): a plain httpx client that follows redirects and ``<meta http-equiv=refresh>``
but runs no script reaches the relying party (Authlib's client) with a code; a code
exchanged a second time ends what the first exchange issued."""

from __future__ import annotations

import asyncio
import html
import re
from urllib.parse import urljoin

import pytest
from authlib.integrations.base_client.errors import OAuthError
from authlib.integrations.httpx_client._compat import httpx2

from rideout.auth import AuthError
from rideout.auth.room_tokens import RoomTokenVerifier
from rideout.waitingroom.authorizer import RoomAuthorizer, SessionCache
from tests.waitingroom.conftest import Redis
from tests.waitingroom.test_oidc import (
    ADMIN_TOKEN,
    CALLBACK,
    SECRET,
    Site,
    _exchange,
    pkce,
    query,
    site,
)

pytestmark = pytest.mark.asyncio(loop_scope="module")

_REFRESH = re.compile(
    r"""<meta\s+http-equiv=["']?refresh["']?\s+content=["'](\d+)\s*;\s*url=([^"']+)["']""",
    re.IGNORECASE,
)


async def follow_without_script(http: httpx2.AsyncClient, url: str, *, limit: float = 30.0,
                                on_page: list[str] | None = None) -> str:  # fmt: skip
    """Follow redirects and meta refreshes from `url`, as a client that runs no script
    does, until a redirect to the relying party's callback: that URL."""
    async with asyncio.timeout(limit):
        while True:
            r = await http.get(url)
            if r.status_code in (301, 302, 303, 307):
                url = urljoin(url, r.headers["location"])
                if url.startswith(CALLBACK):
                    return url
                continue
            assert r.status_code == 200, (url, r.status_code, r.text[:300])
            refresh = _REFRESH.search(r.text)
            assert refresh is not None, f"{url} is a page with nowhere to go: {r.text[:300]}"
            if on_page is not None:
                on_page.append(url)
            await asyncio.sleep(int(refresh.group(1)))
            url = urljoin(url, html.unescape(refresh.group(2)))


async def admit_everyone(s: Site) -> None:
    r = await s.http.post(
        s.base + "/private/increment_serving_counter",
        json={"event_id": s.event_id, "increment_by": 1_000},
        headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
    )
    assert r.status_code == 200, r.text


async def test_a_client_without_javascript_is_signed_in(redis_server: Redis) -> None:
    async with site(redis_server, page_refresh=1) as s:
        verifier, nonce = pkce()
        async with s.rp() as rp, httpx2.AsyncClient(trust_env=False) as no_script:
            url, state = rp.create_authorization_url(
                s.issuer + "/authorize", code_verifier=verifier, nonce=nonce
            )
            pages: list[str] = []
            follower = asyncio.create_task(follow_without_script(no_script, url, on_page=pages))
            # The first visit took the position: the room counts it as waiting.
            async with asyncio.timeout(10):
                while not pages:
                    await asyncio.sleep(0.05)
            r = await s.http.get(s.base + "/waiting_num", params={"event_id": s.event_id})
            assert int(r.json()["waiting_num"]) == 1, r.text
            await asyncio.sleep(1.5)  # at least one refresh while still waiting
            assert not follower.done()
            await admit_everyone(s)
            callback = await follower
            assert query(callback)["state"] == state
            token = await rp.fetch_token(
                s.issuer + "/token", authorization_response=callback, code_verifier=verifier
            )
            assert token["id_token"]
            assert (await rp.get(s.issuer + "/userinfo")).status_code == 200


async def test_a_code_presented_twice_ends_what_it_issued(redis_server: Redis) -> None:
    """RFC 6749 4.1.2: a code used twice is stolen or replayed; the tokens the first
    exchange issued are revoked (the room's session ends: /userinfo, a refresh and the
    room's authorizer, which the auction's /ws asks, refuse them)."""
    async with site(redis_server) as s:
        async with s.rp() as rp:
            callback, verifier, token = await s.sign_in(rp)
        again = await _exchange(s, callback, verifier=verifier, auth=(s.event_id, SECRET))
        assert (again.status_code, again.json()["error"]) == (400, "invalid_grant")
        bearer = {"Authorization": f"Bearer {token['access_token']}"}
        r = await s.http.get(s.issuer + "/userinfo", headers=bearer)
        assert (r.status_code, r.json()["error"]) == (401, "invalid_token")
        async with s.rp() as rp:
            with pytest.raises(OAuthError) as refused:
                await rp.refresh_token(s.issuer + "/token", refresh_token=token["refresh_token"])
            assert refused.value.error == "invalid_grant"
        # The authorizer the app servers' /ws handshake asks (as the zone servers build it).
        provider = s.provider
        verifier = RoomTokenVerifier(
            provider.keys, issuer=provider.signer.issuer, audiences=frozenset({s.event_id})
        )
        check = RoomAuthorizer(verifier, provider.store, cache=SessionCache(0))
        with pytest.raises(AuthError) as ended:
            await check.authorize(token["access_token"])
        assert (ended.value.status, ended.value.reason) == (403, "session_abandoned")
