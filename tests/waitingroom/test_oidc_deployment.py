"""The OpenID adapter as `rideout serve` mounts it: configured in ``[waitingroom]``, on
real zone servers (uvicorn on loopback) in both regions over a real primary Redis and its
replica; a sign-in begun in one region is finished in the other after a failover."""

from __future__ import annotations

import base64
import secrets
import stat
from collections.abc import Callable
from urllib.parse import parse_qs, urlencode, urlsplit

from authlib.oauth2.rfc7636 import create_s256_code_challenge

from rideout import routes
from rideout.auth.admin import load_or_create_admin_token
from rideout.auth.oidc_secrets import oidc_secret_path
from rideout.config import Config
from rideout.store.client import probe_client
from rideout.store.replication import promote
from tests.conftest import TEST_ADMIN, replicated
from tests.waitingroom.test_extension import two_regions

CALLBACK = "https://shop.example/callback"


def query(url: str) -> dict[str, str]:
    return {k: v[0] for k, v in parse_qs(urlsplit(url).query).items()}


async def test_a_sign_in_started_in_one_region_ends_in_the_other(
    make_config: Callable[..., Config],
) -> None:
    config = make_config(
        waitingroom={
            "inlet": "none",
            "events": ["auction"],
            "oidc_clients": [f"auction {CALLBACK}"],
        }
    )
    admin = {"Authorization": f"Bearer {load_or_create_admin_token(config.keys_dir)}"}
    async with two_regions(config) as d:
        http, a, b = d["http"], d["urls"]["a"], d["urls"]["b"]
        issuer = routes.oidc_issuer(config, "auction")
        path = urlsplit(issuer).path
        meta = (await http.get(a + path + "/.well-known/openid-configuration")).json()
        assert meta["issuer"] == issuer
        secret_file = oidc_secret_path(config.keys_dir, "auction")
        assert stat.S_IMODE(secret_file.stat().st_mode) == 0o600
        secret = secret_file.read_text().strip()

        verifier, nonce = secrets.token_urlsafe(48), secrets.token_urlsafe(16)
        params = {
            "client_id": "auction", "response_type": "code", "scope": "openid",
            "redirect_uri": CALLBACK, "state": "s1", "nonce": nonce,
            "code_challenge": create_s256_code_challenge(verifier),
            "code_challenge_method": "S256",
        }  # fmt: skip
        r = await http.get(a + path + "/authorize", params=params)
        assert r.status_code == 302, r.text
        authz = query(r.headers["location"])["authz"]
        r = await http.post(a + path + "/enter", json={"authz": authz}, headers={"Origin": a})
        assert r.status_code == 200, r.text
        assert r.headers["access-control-allow-origin"] == a
        rid = r.json()["api_request_id"]
        # the replica takes no writes before a promotion: a clear 503, not a 500
        r = await http.get(b + path + "/authorize", params=params)
        assert (r.status_code, r.json()["error"]) == (503, "temporarily_unavailable")
        writer = probe_client(config.primary.redis.address, config.primary.redis.port,
                              credentials=TEST_ADMIN, timeout=6.0)  # fmt: skip
        try:
            await replicated(writer)  # all of it reached the replica
        finally:
            await writer.aclose()
        replica = probe_client(config.secondary.redis.address, config.secondary.redis.port,
                               credentials=TEST_ADMIN, timeout=5.0)  # fmt: skip
        try:
            await promote(replica)
        finally:
            await replica.aclose()
        r = await http.post(b + "/private/increment_serving_counter",
                            json={"event_id": "auction", "increment_by": 5}, headers=admin)  # fmt: skip
        assert r.status_code == 200, r.text
        r = await http.post(b + path + "/enter", json={"authz": authz}, headers={"Origin": b})
        assert r.json()["api_request_id"] == rid  # the same position, in the other region
        r = await http.get(b + path + "/resume", params={"authz": authz})
        assert r.status_code == 302, r.text
        callback = query(r.headers["location"])
        assert callback["state"] == "s1"
        basic = base64.b64encode(f"auction:{secret}".encode()).decode()
        r = await http.post(
            b + path + "/token",
            content=urlencode({"grant_type": "authorization_code", "code": callback["code"],
                               "redirect_uri": CALLBACK, "code_verifier": verifier}),
            headers={"Content-Type": "application/x-www-form-urlencoded",
                     "Authorization": f"Basic {basic}"},
        )  # fmt: skip
        assert r.status_code == 200, r.text
        access = r.json()["access_token"]
        r = await http.get(b + path + "/userinfo", headers={"Authorization": f"Bearer {access}"})
        assert r.status_code == 200, r.text
