"""The OpenID adapter against a real relying party: Authlib's OAuth2 client (on httpx2,
the HTTP stack Authlib 1.9 uses) runs code + PKCE + nonce against the adapter served by
a real uvicorn on loopback, over a real redis-server; then each refusal the issue names.
"""

from __future__ import annotations

import base64
import contextlib
import secrets
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest
from authlib.integrations.httpx_client import AsyncOAuth2Client
from authlib.integrations.httpx_client._compat import httpx2
from authlib.oauth2.rfc7636 import create_s256_code_challenge
from authlib.oidc.core import CodeIDToken
from hypothesis import given, settings
from hypothesis import strategies as st
from joserfc import jwt
from joserfc.jwk import KeySet
from starlette.applications import Starlette

from rideout.auth.room_tokens import RoomKeyRing, RoomTokenIssuer
from rideout.waitingroom.api import RoomAPI
from rideout.waitingroom.model import EventSettings
from rideout.waitingroom.oidc import OidcClient, OidcProvider, hash_secret
from tests.conftest import FakeClock, examples, free_port, serving
from tests.waitingroom.conftest import Redis, fresh_event

pytestmark = pytest.mark.asyncio(loop_scope="module")

ADMIN_TOKEN = secrets.token_urlsafe(32)
ROOM_ISSUER = "http://room.test/waitingroom"
RP = "https://rp.example"
CALLBACK = RP + "/callback"
SECRET = secrets.token_urlsafe(32)
ADDRESS = "127.0.0.1"


@dataclass
class Site:
    """The adapter and the room's API of one event on a real uvicorn."""

    base: str
    event_id: str
    provider: OidcProvider
    http: httpx2.AsyncClient
    clock: Callable[[], float]

    @property
    def issuer(self) -> str:
        return self.provider.issuer

    def rp(self, *, secret: str | None = SECRET, method: str = "client_secret_basic",
           redirect_uri: str = CALLBACK, client_id: str | None = None) -> AsyncOAuth2Client:  # fmt: skip
        return AsyncOAuth2Client(
            client_id=client_id or self.event_id, client_secret=secret, scope="openid",
            redirect_uri=redirect_uri, code_challenge_method="S256",
            token_endpoint_auth_method=method if secret is not None else "none",
            transport=httpx2.AsyncHTTPTransport(), trust_env=False,
        )  # fmt: skip

    async def authorize(self, **params: str) -> httpx2.Response:
        return await self.http.get(self.issuer + "/authorize", params=params)

    async def wait_and_serve(self, location: str) -> str:
        """Follow the room page's part: enter, be served, resume; the RP's callback URL."""
        authz = parse_qs(urlsplit(location).query)["authz"][0]
        r = await self.http.post(
            self.issuer + "/enter", json={"authz": authz}, headers={"Origin": self.base}
        )
        assert r.status_code == 200, r.text
        request_id = r.json()["api_request_id"]
        queue_number = r.json()["queue_number"]
        r = await self.http.get(self.base + "/serving_num", params={"event_id": self.event_id})
        if int(r.json()["serving_counter"]) < queue_number:  # not served: back to the page
            r = await self.http.get(self.issuer + "/resume", params={"authz": authz})
            assert r.status_code == 302
            assert r.headers["location"].startswith(f"/oidc/{self.event_id}/wait?authz=")
        r = await self.http.post(
            self.base + "/private/increment_serving_counter",
            json={"event_id": self.event_id, "increment_by": 1_000},
            headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
        )
        assert r.status_code == 200, r.text
        r = await self.http.get(self.issuer + "/resume", params={"authz": authz})
        assert r.status_code == 302, r.text
        assert request_id
        return r.headers["location"]  # type: ignore[no-any-return]

    async def sign_in(self, rp: AsyncOAuth2Client) -> tuple[str, str, dict[str, Any]]:
        """`rp` signed in: the callback URL with its code, the PKCE verifier, the tokens
        the code gave (/userinfo answers for them)."""
        verifier, nonce = pkce()
        callback = await self.code_for(rp, verifier, nonce)
        token = await rp.fetch_token(
            self.issuer + "/token", authorization_response=callback, code_verifier=verifier
        )
        assert (await rp.get(self.issuer + "/userinfo")).status_code == 200
        return callback, verifier, dict(token)

    async def code_for(self, rp: AsyncOAuth2Client, verifier: str, nonce: str,
                       **extra: str) -> str:  # fmt: skip
        """An authorization code for `rp`: the callback URL it is redirected to."""
        url, _state = rp.create_authorization_url(
            self.issuer + "/authorize", code_verifier=verifier, nonce=nonce, **extra
        )
        r = await self.http.get(url)
        assert r.status_code == 302, r.text
        return await self.wait_and_serve(r.headers["location"])


@contextlib.asynccontextmanager
async def site(redis: Redis, *, public: bool = False, clock: Callable[[], float] = time.time,
               **options: Any) -> AsyncIterator[Site]:  # fmt: skip
    event_id = fresh_event("oidc")
    store = redis.store(clock=time.time)  # type: ignore[arg-type]
    await store.create_event(EventSettings(event_id))
    ring = RoomKeyRing.generate()
    signer = RoomTokenIssuer(ring, issuer=ROOM_ISSUER)
    api = RoomAPI(store, admin_token=ADMIN_TOKEN, issuer=ROOM_ISSUER, signer=signer, keys=ring)
    port = free_port(ADDRESS)
    base = f"http://{ADDRESS}:{port}"
    client = OidcClient(
        event_id, (CALLBACK, RP + "/other"), None if public else hash_secret(SECRET)
    )
    provider = OidcProvider(
        client, store, keys=ring, id_keys=RoomKeyRing.generate("RS256"), signer=signer, base_url=base, room_issuer=ROOM_ISSUER,
        clock=clock, **options,
    )  # fmt: skip
    app = Starlette(routes=[*provider.routes(), *api.routes()])
    async with serving(app, ADDRESS, port), httpx2.AsyncClient(trust_env=False) as http:
        yield Site(base, event_id, provider, http, clock)


def pkce() -> tuple[str, str]:
    return secrets.token_urlsafe(48), secrets.token_urlsafe(16)


def query(location: str) -> dict[str, str]:
    return {k: v[0] for k, v in parse_qs(urlsplit(location).query).items()}


# ------------------------------------------------------------------- the real RP


async def test_a_real_relying_party_signs_in_through_the_room(redis_server: Redis) -> None:
    async with site(redis_server) as s:
        r = await s.http.get(s.issuer + "/.well-known/openid-configuration")
        meta = r.json()
        assert meta["issuer"] == s.issuer
        assert meta["code_challenge_methods_supported"] == ["S256"]
        assert meta["token_endpoint_auth_methods_supported"] == [
            "client_secret_basic",
            "client_secret_post",
        ]
        jwks = (await s.http.get(meta["jwks_uri"])).json()
        for method in ("client_secret_basic", "client_secret_post"):
            verifier, nonce = pkce()
            async with s.rp(method=method) as rp:
                url, state = rp.create_authorization_url(
                    meta["authorization_endpoint"], code_verifier=verifier, nonce=nonce
                )
                r = await s.http.get(url)
                assert r.status_code == 302
                assert r.headers["location"].startswith(f"/oidc/{s.event_id}/wait?authz=")
                callback = await s.wait_and_serve(r.headers["location"])
                assert callback.startswith(CALLBACK + "?")
                assert query(callback)["state"] == state
                token = await rp.fetch_token(
                    meta["token_endpoint"], authorization_response=callback,
                    code_verifier=verifier,
                )  # fmt: skip
                assert (token["token_type"], token["scope"]) == ("Bearer", "openid")
                decoded = jwt.decode(token["id_token"], KeySet.import_key_set(jwks))
                claims = CodeIDToken(
                    decoded.claims, decoded.header,
                    {"iss": {"value": s.issuer}, "aud": {"value": s.event_id}},
                    {"nonce": nonce, "access_token": token["access_token"]},
                )  # fmt: skip
                claims.validate()  # iss, aud, exp, iat, nonce, at_hash
                assert claims["nonce"] == nonce
                assert claims["at_hash"]
                r = await rp.get(meta["userinfo_endpoint"])
                assert r.status_code == 200, r.text
                assert r.json()["sub"] == claims["sub"]


async def test_a_public_client_with_pkce_alone(redis_server: Redis) -> None:
    async with site(redis_server, public=True) as s:
        verifier, nonce = pkce()
        async with s.rp(secret=None) as rp:
            callback = await s.code_for(rp, verifier, nonce)
            token = await rp.fetch_token(
                s.issuer + "/token", authorization_response=callback, code_verifier=verifier
            )
            assert token["id_token"]


# ----------------------------------------------------------------- the refusals


def _params(s: Site, **changes: str | None) -> dict[str, str]:
    verifier, nonce = pkce()
    params: dict[str, str | None] = {
        "client_id": s.event_id, "response_type": "code", "scope": "openid",
        "redirect_uri": CALLBACK, "state": "st-1", "nonce": nonce,
        "code_challenge": create_s256_code_challenge(verifier), "code_challenge_method": "S256",
        **changes,
    }  # fmt: skip
    return {k: v for k, v in params.items() if v is not None}


@pytest.mark.parametrize(
    "redirect_uri",
    [CALLBACK + "/x", CALLBACK + "x", RP, "https://evil.example/callback",
     CALLBACK + "?next=https://evil.example", "//evil.example/callback"],
)  # fmt: skip
async def test_a_wrong_prefixed_or_open_redirect_uri_gets_a_page_not_a_redirect(
    redis_server: Redis, redirect_uri: str
) -> None:
    async with site(redis_server) as s:
        r = await s.authorize(**_params(s, redirect_uri=redirect_uri))
        assert r.status_code == 400
        assert "location" not in r.headers
        assert r.headers["content-type"].startswith("text/html")
        assert r.text.count("href=") == 1  # the stylesheet: no link onward


async def test_an_unknown_client_gets_a_page(redis_server: Redis) -> None:
    async with site(redis_server) as s:
        r = await s.authorize(**_params(s, client_id="another-event"))
        assert r.status_code == 400
        assert "location" not in r.headers
        assert "invalid_client" in r.text


@pytest.mark.parametrize(
    ("changes", "error"),
    [
        ({"nonce": None}, "invalid_request"),
        ({"code_challenge": None, "code_challenge_method": None}, "invalid_request"),
        ({"code_challenge_method": "plain"}, "invalid_request"),
        ({"code_challenge_method": None}, "invalid_request"),
        ({"scope": "profile email"}, "invalid_scope"),
        ({"response_type": "token"}, "unsupported_response_type"),
    ],
)
async def test_bad_authorize_requests_go_back_to_the_validated_redirect_uri(
    redis_server: Redis, changes: dict[str, str | None], error: str
) -> None:
    async with site(redis_server) as s:
        r = await s.authorize(**_params(s, **changes))
        assert r.status_code == 302, r.text
        location = r.headers["location"]
        assert location.startswith(CALLBACK + "?")
        assert query(location)["error"] == error, location
        assert query(location)["state"] == "st-1"


async def test_scope_with_openid_and_others_is_accepted(redis_server: Redis) -> None:
    async with site(redis_server) as s:
        verifier, nonce = pkce()
        async with s.rp() as rp:
            callback = await s.code_for(rp, verifier, nonce, scope="openid profile email")
            token = await rp.fetch_token(
                s.issuer + "/token", authorization_response=callback, code_verifier=verifier
            )
            assert token["scope"] == "openid"  # what is granted: the others are ignored


async def _exchange(s: Site, callback: str, *, verifier: str | None,
                    auth: tuple[str, str] | None = None, **form: str) -> httpx2.Response:  # fmt: skip
    data = {"grant_type": "authorization_code", "code": query(callback)["code"],
            "redirect_uri": CALLBACK, **form}  # fmt: skip
    if verifier is not None:
        data["code_verifier"] = verifier
    headers = {"Content-Type": "application/x-www-form-urlencoded"}
    if auth is not None:
        raw = f"{auth[0]}:{auth[1]}".encode()
        headers["Authorization"] = "Basic " + base64.b64encode(raw).decode()
    return await s.http.post(s.issuer + "/token", content=urlencode(data), headers=headers)


async def test_token_endpoint_refusals(redis_server: Redis) -> None:
    async with site(redis_server) as s:
        good = (s.event_id, SECRET)

        async def fresh() -> tuple[str, str]:
            verifier, nonce = pkce()
            async with s.rp() as rp:
                return await s.code_for(rp, verifier, nonce), verifier

        # reused code: the first exchange wins, the second is refused
        callback, verifier = await fresh()
        assert (await _exchange(s, callback, verifier=verifier, auth=good)).status_code == 200
        r = await _exchange(s, callback, verifier=verifier, auth=good)
        assert (r.status_code, r.json()["error"]) == (400, "invalid_grant")
        # wrong verifier
        callback, verifier = await fresh()
        r = await _exchange(s, callback, verifier=verifier + "x", auth=good)
        assert (r.status_code, r.json()["error"]) == (400, "invalid_grant")
        # missing verifier on this confidential client (Authlib alone would accept it)
        callback, verifier = await fresh()
        r = await _exchange(s, callback, verifier=None, auth=good)
        assert (r.status_code, r.json()["error"]) == (400, "invalid_request")
        # wrong redirect URI at the token endpoint
        callback, verifier = await fresh()
        r = await _exchange(s, callback, verifier=verifier, auth=good, redirect_uri=RP + "/other")
        assert (r.status_code, r.json()["error"]) == (400, "invalid_grant")
        # wrong secret, basic and post; and no secret at all
        callback, verifier = await fresh()
        r = await _exchange(s, callback, verifier=verifier, auth=(s.event_id, "wrong"))
        assert (r.status_code, r.json()["error"]) == (401, "invalid_client")
        r = await _exchange(s, callback, verifier=verifier, client_id=s.event_id,
                            client_secret="wrong")  # fmt: skip
        assert (r.status_code, r.json()["error"]) == (401, "invalid_client")
        r = await _exchange(s, callback, verifier=verifier, client_id=s.event_id)
        assert (r.status_code, r.json()["error"]) == (401, "invalid_client")
        # the client is authenticated before the code is looked at: a wrong secret
        # cannot burn the relying party's code
        r = await _exchange(s, callback, verifier=verifier, auth=good)
        assert r.status_code == 200, r.text


async def test_a_code_from_another_client_is_refused(redis_server: Redis) -> None:
    async with site(redis_server) as a, site(redis_server) as b:
        verifier, nonce = pkce()
        async with a.rp() as rp:
            callback = await a.code_for(rp, verifier, nonce)
        # b's client (another event) presents a's code at b's token endpoint
        r = await _exchange(b, callback, verifier=verifier, auth=(b.event_id, SECRET))
        assert (r.status_code, r.json()["error"]) == (400, "invalid_grant")


async def test_an_expired_code_is_refused(redis_server: Redis) -> None:
    clock = FakeClock(time.time())
    async with site(redis_server, clock=clock) as s:
        verifier, nonce = pkce()
        async with s.rp() as rp:
            callback = await s.code_for(rp, verifier, nonce)
        clock.advance(61)
        r = await _exchange(s, callback, verifier=verifier, auth=(s.event_id, SECRET))
        assert (r.status_code, r.json()["error"]) == (400, "invalid_grant")


@pytest.mark.parametrize("status", [1, -1])
async def test_userinfo_refuses_a_completed_or_abandoned_session(
    redis_server: Redis, status: int
) -> None:
    async with site(redis_server) as s, s.rp() as rp:
        _, _, token = await s.sign_in(rp)
        sub = jwt.decode(token["id_token"], s.provider.jose_key()).claims["sub"]
        r = await s.http.post(
            s.base + "/private/update_session",
            json={"event_id": s.event_id, "request_id": sub, "status": status},
            headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
        )
        assert r.status_code == 200, r.text
        r = await rp.get(s.issuer + "/userinfo")
        assert r.status_code == 401
        assert 'error="invalid_token"' in r.headers["www-authenticate"]


async def test_userinfo_refuses_forged_foreign_and_missing_tokens(redis_server: Redis) -> None:
    async with site(redis_server) as s:
        other = RoomTokenIssuer(RoomKeyRing.generate(), issuer=ROOM_ISSUER)
        now = time.time()
        forged = other.issue(event_id=s.event_id, request_id="r" * 20, queue_position=1,
                             issued_at=now, expires_at=now + 60).access_token  # fmt: skip
        for headers in ({}, {"Authorization": "Bearer " + forged},
                        {"Authorization": "Bearer not.a.jwt"}):  # fmt: skip
            r = await s.http.get(s.issuer + "/userinfo", headers=headers)
            assert r.status_code == 401, headers


async def test_enter_checks_origin_and_keeps_one_position(redis_server: Redis) -> None:
    async with site(redis_server) as s:
        r = await s.authorize(**_params(s))
        authz = query(r.headers["location"])["authz"]
        r = await s.http.post(s.issuer + "/enter", json={"authz": authz},
                              headers={"Origin": "https://evil.example"})  # fmt: skip
        assert r.status_code == 403
        ids = set()
        for _ in range(3):
            r = await s.http.post(s.issuer + "/enter", json={"authz": authz},
                                  headers={"Origin": s.base})  # fmt: skip
            ids.add(r.json()["api_request_id"])
        assert len(ids) == 1
        r = await s.http.post(s.issuer + "/enter", json={"authz": "x" * 32},
                              headers={"Origin": s.base})  # fmt: skip
        assert r.status_code == 404


async def test_metadata_validates_and_lists_only_what_is_true(redis_server: Redis) -> None:
    async with site(redis_server, public=True) as s:
        meta = s.provider.metadata()
        meta.validate()
        assert meta["token_endpoint_auth_methods_supported"] == ["none"]
        assert meta["grant_types_supported"] == ["authorization_code", "refresh_token"]
        assert meta["id_token_signing_alg_values_supported"] == ["RS256"]


# ----------------------------------------------------------------- open-ended input

_text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=40)
_param = st.sampled_from(
    ["client_id", "response_type", "scope", "redirect_uri", "state", "nonce",
     "code_challenge", "code_challenge_method", "grant_type", "code", "code_verifier",
     "client_secret", "prompt", "response_mode", "refresh_token", "x"]
)  # fmt: skip


def _drawn(strategy: st.SearchStrategy[Any], n: int = 60) -> list[Any]:
    """`n` inputs from hypothesis (drawn up front: the requests are async)."""
    out: list[Any] = []

    @settings(max_examples=examples(n), database=None, deadline=None)
    @given(strategy)
    def draw(value: Any) -> None:
        out.append(value)

    draw()
    return out


async def test_any_authorize_query_is_refused_cleanly_or_sent_into_the_room(
    redis_server: Redis,
) -> None:
    async with site(redis_server) as s:
        base = _params(s)
        for changes in _drawn(st.dictionaries(_param, _text, max_size=5)):
            r = await s.authorize(**{**base, **changes})
            assert r.status_code in (302, 400), (changes, r.status_code)
            location = r.headers.get("location", "")
            if r.status_code == 302:  # into the room, or an error to the one callback
                ok = location.startswith(f"/oidc/{s.event_id}/wait?") or location.startswith(
                    CALLBACK + "?"
                )
                assert ok, (changes, location)
            else:
                assert r.headers["content-type"].startswith("text/html")


async def test_any_token_request_gets_an_oauth_error(redis_server: Redis) -> None:
    async with site(redis_server) as s:
        for form in _drawn(st.dictionaries(_param, _text, max_size=6)):
            r = await s.http.post(
                s.issuer + "/token", content=urlencode(form),
                headers={"Content-Type": "application/x-www-form-urlencoded"},
            )  # fmt: skip
            assert r.status_code in (400, 401), (form, r.status_code)
            assert r.json()["error"] in {
                "invalid_request", "invalid_client", "invalid_grant",
                "unauthorized_client", "unsupported_grant_type",
            }, form  # fmt: skip


async def test_bodies_over_8_kib_are_413_before_they_are_read(redis_server: Redis) -> None:
    big = b"x" * 16_384
    async with site(redis_server) as s:
        token = await s.http.post(s.issuer + "/token", content=big,
                                  headers={"Content-Type": "application/x-www-form-urlencoded"})  # fmt: skip
        assert (token.status_code, token.json()["error"]) == (413, "invalid_request")
        assert "8192" in token.json()["error_description"]
        enter = await s.http.post(s.issuer + "/enter", content=big,
                                  headers={"Origin": s.base, "Content-Type": "application/json"})  # fmt: skip
        assert enter.status_code == 413, enter.text
        form = await s.http.post(s.issuer + "/token", content=b"grant_type=x",
                                 headers={"Content-Type": "text/plain"})  # fmt: skip
        assert (form.status_code, form.json()["error"]) == (415, "invalid_request")
        twice = await s.http.post(s.issuer + "/enter", content=b'{"authz": "a", "authz": "b"}',
                                  headers={"Origin": s.base})  # fmt: skip
        assert twice.status_code == 400
