"""The OpenID adapter's refresh grant against a real relying party: Authlib's OAuth2
client does code + PKCE + nonce, then ``grant_type=refresh_token`` (the session is
renewed, the refresh token rotates), over a real uvicorn and redis-server; then the
refusals: a replayed refresh token, another client's, an access token, a wrong secret,
an ended session."""

from __future__ import annotations

import base64
import time
from typing import Any
from urllib.parse import urlencode

import pytest
from authlib.integrations.base_client.errors import OAuthError
from authlib.integrations.httpx_client import AsyncOAuth2Client
from authlib.integrations.httpx_client._compat import httpx2
from authlib.oidc.core import CodeIDToken, IDToken
from joserfc import jwt
from joserfc.jwk import KeySet

import tests.waitingroom.test_oidc as base
from tests.conftest import until
from tests.waitingroom.conftest import Redis

pytestmark = pytest.mark.asyncio(loop_scope="module")


async def signed_in(s: base.Site, rp: AsyncOAuth2Client) -> tuple[dict[str, Any], str]:
    """The relying party's token after the code exchange, and the nonce it sent."""
    verifier, nonce = base.pkce()
    callback = await s.code_for(rp, verifier, nonce)
    token = await rp.fetch_token(
        s.issuer + "/token", authorization_response=callback, code_verifier=verifier
    )
    return dict(token), nonce


async def jwks(s: base.Site) -> KeySet:
    return KeySet.import_key_set((await s.http.get(s.issuer + "/.well-known/jwks.json")).json())


async def refresh_form(s: base.Site, refresh_token: str, *, auth: tuple[str, str] | None = (
    "", base.SECRET), **form: str) -> httpx2.Response:  # fmt: skip
    """A raw refresh request (client_secret_basic for this site's client by default)."""
    data = {"grant_type": "refresh_token", "refresh_token": refresh_token, **form}
    headers = {"Content-Type": "application/x-www-form-urlencoded"}
    if auth is not None:
        raw = f"{auth[0] or s.event_id}:{auth[1]}".encode()
        headers["Authorization"] = "Basic " + base64.b64encode(raw).decode()
    return await s.http.post(s.issuer + "/token", content=urlencode(data), headers=headers)


async def test_a_real_relying_party_refreshes_and_the_old_token_is_refused(
    redis_server: Redis,
) -> None:
    async with base.site(redis_server) as s:
        meta = (await s.http.get(s.issuer + "/.well-known/openid-configuration")).json()
        assert "refresh_token" in meta["grant_types_supported"]
        async with s.rp() as rp:
            first, nonce = await signed_in(s, rp)
            assert first["refresh_token"]  # the code exchange gives one now
            keys = await jwks(s)
            original = jwt.decode(first["id_token"], keys).claims
            # a renewal within the second of the first token would give the same
            # access token (deterministic claims and signature): be a second later
            await until(lambda: int(time.time()) > original["iat"], 5, interval=0.05)
            renewed = dict(await rp.refresh_token(s.issuer + "/token"))  # rp's own token
            assert renewed["refresh_token"] != first["refresh_token"]
            assert renewed["access_token"] != first["access_token"]
            assert (renewed["token_type"], renewed["scope"]) == ("Bearer", "openid")
            # OpenID Core 12.2: same iss, sub, aud; the original auth_time; no nonce
            decoded = jwt.decode(renewed["id_token"], keys)
            claims = IDToken(
                decoded.claims, decoded.header,
                {"iss": {"value": s.issuer}, "aud": {"value": s.event_id}},
                {"access_token": renewed["access_token"]},
            )  # fmt: skip
            claims.validate()
            assert (claims["sub"], claims["aud"]) == (original["sub"], original["aud"])
            assert claims["auth_time"] == original["auth_time"]
            assert "nonce" not in claims
            assert original["nonce"] == nonce
            assert claims["at_hash"]
            assert claims["iat"] > original["iat"]
            assert claims["exp"] > original["exp"]
            # userinfo takes the new access token; the old one until its own exp
            for access in (renewed["access_token"], first["access_token"]):
                r = await s.http.get(s.issuer + "/userinfo",
                                     headers={"Authorization": f"Bearer {access}"})  # fmt: skip
                assert r.status_code == 200, r.text
                assert r.json()["sub"] == original["sub"]
            # the replayed (first) refresh token is refused; the new one still renews
            with pytest.raises(OAuthError) as caught:
                await rp.refresh_token(s.issuer + "/token", refresh_token=first["refresh_token"])
            assert caught.value.error == "invalid_grant"
            again = dict(await rp.refresh_token(s.issuer + "/token"))
            assert again["refresh_token"] != renewed["refresh_token"]
            r = await refresh_form(s, renewed["refresh_token"])
            assert (r.status_code, r.json()["error"]) == (400, "invalid_grant")


async def test_a_public_client_refreshes_with_the_rotating_token_alone(
    redis_server: Redis,
) -> None:
    async with base.site(redis_server, public=True) as s, s.rp(secret=None) as rp:
        first, _ = await signed_in(s, rp)
        renewed = dict(await rp.refresh_token(s.issuer + "/token"))
        decoded = jwt.decode(renewed["id_token"], await jwks(s))
        assert decoded.claims["aud"] == [s.event_id]
        r = await refresh_form(s, first["refresh_token"], auth=None, client_id=s.event_id)
        assert (r.status_code, r.json()["error"]) == (400, "invalid_grant")


async def test_refresh_refusals(redis_server: Redis) -> None:
    async with base.site(redis_server) as s, base.site(redis_server) as other:
        async with s.rp() as rp:
            token, _ = await signed_in(s, rp)
        async with other.rp() as rp:
            foreign, _ = await signed_in(other, rp)
        refresh = token["refresh_token"]
        # the client is authenticated first; a wrong or missing secret burns nothing
        r = await refresh_form(s, refresh, auth=(s.event_id, "wrong"))
        assert (r.status_code, r.json()["error"]) == (401, "invalid_client")
        r = await refresh_form(s, refresh, auth=None)
        assert (r.status_code, r.json()["error"]) == (401, "invalid_client")
        # another client's refresh token (its event's), an access token, an id token,
        # garbage: invalid_grant
        for wrong in (foreign["refresh_token"], token["access_token"], token["id_token"],
                      "not-a-token", refresh[:-2]):  # fmt: skip
            r = await refresh_form(s, wrong)
            assert (r.status_code, r.json()["error"]) == (400, "invalid_grant"), wrong
        r = await refresh_form(s, refresh, scope="openid profile")  # beyond what was granted
        assert (r.status_code, r.json()["error"]) == (400, "invalid_scope")
        r = await refresh_form(s, refresh, scope="openid")
        assert r.status_code == 200, r.text
        # an ended session is not renewed
        async with s.rp() as rp:
            ended, _ = await signed_in(s, rp)
        sub = jwt.decode(ended["id_token"], await jwks(s)).claims["sub"]
        r = await s.http.post(
            s.base + "/private/update_session",
            json={"event_id": s.event_id, "request_id": sub, "status": -1},
            headers={"Authorization": f"Bearer {base.ADMIN_TOKEN}"},
        )
        assert r.status_code == 200, r.text
        r = await refresh_form(s, ended["refresh_token"])
        assert (r.status_code, r.json()["error"]) == (400, "invalid_grant")
        assert "ended" in r.json()["error_description"]


async def test_the_code_grants_id_token_still_carries_the_nonce(redis_server: Redis) -> None:
    async with base.site(redis_server) as s, s.rp() as rp:
        token, nonce = await signed_in(s, rp)
        decoded = jwt.decode(token["id_token"], await jwks(s))
        CodeIDToken(
            decoded.claims, decoded.header,
            {"iss": {"value": s.issuer}, "aud": {"value": s.event_id}},
            {"nonce": nonce, "access_token": token["access_token"]},
        ).validate()  # fmt: skip
