"""``POST /auth/demo-token``: the demo page's sign-in, a token for a bidder name.

Only when ``[auth] demo_tokens`` is on (by default in local mode only), only for a
request from one of the deployment's own pages (``Origin`` in ``config.origins()``), and
never for a name someone else holds: a name is claimed by its first requester for as
long as its tokens live. The claim is the hash of a random secret kept in an HttpOnly,
SameSite=Strict cookie on that browser, stored in the region's Redis
(:func:`rideout.store.keys.demo_name_claim`); another requester gets 409.

A zone whose Redis is a read-only replica (the standby region) can check a claim but not
record one: it issues tokens for names its browser already holds, and answers 503 for a
new name until its region takes over.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import re
import secrets
from typing import Final

import redis.asyncio as aioredis
from redis.exceptions import ReadOnlyError, RedisError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from rideout import _body
from rideout.auth import TokenIssuer
from rideout.config import Config
from rideout.store import keys

__all__ = ["DEMO_COOKIE", "claim_name", "demo_token"]

DEMO_COOKIE: Final = "rideout_demo"
MAX_BODY: Final = 1024
_NAME: Final = re.compile(r"[A-Za-z0-9_-]{1,32}")
_SECRET: Final = re.compile(r"[A-Za-z0-9_-]{43}")
_RESERVED: Final = ("canary-",)  # the canaries' own subjects
_NO_STORE: Final = {"Cache-Control": "no-store"}


def _error(status: int, error: str, message: str, **headers: str) -> JSONResponse:
    return JSONResponse(
        {"error": error, "message": message}, status_code=status, headers={**_NO_STORE, **headers}
    )


async def claim_name(redis: aioredis.Redis, name: str, holder: str, ttl: int) -> int | None:
    """Claim `name` for `holder` (a hash) for `ttl` seconds, or renew the holder's claim:
    the seconds the claim now lasts, or None when someone else holds the name.

    Raises :class:`~redis.exceptions.ReadOnlyError` on a replica for a name not yet
    claimed, and other RedisErrors when Redis fails.
    """
    key = keys.demo_name_claim(name)
    for _ in range(3):  # a claim that expires between two calls is claimed afresh
        held = await redis.get(key)
        if held is None:
            if await redis.set(key, holder, nx=True, ex=ttl):
                return ttl
            continue
        if not hmac.compare_digest(str(held).encode(), holder.encode()):
            return None
        try:
            if await redis.expire(key, ttl):
                return ttl
        except ReadOnlyError:  # a replica: the claim lasts what it has left
            left = int(await redis.ttl(key))
            if left > 0:
                return left
    raise RedisError(f"the claim on {name!r} kept changing")


def _origin_allowed(config: Config, origin: str | None) -> bool:
    allowed = config.origins()
    return origin is not None and ("*" in allowed or origin in allowed)


async def demo_token(
    request: Request, config: Config, redis: aioredis.Redis, issuer: TokenIssuer
) -> Response:
    """The handler: a token for the requested name, bound to this browser's claim."""
    if not config.auth.demo_tokens:
        return _error(404, "not_found", "demo tokens are off here ([auth] demo_tokens)")
    if not _origin_allowed(config, request.headers.get("origin")):
        return _error(403, "forbidden", "demo tokens are issued to the deployment's own pages")
    try:
        name = (await _body.read_json(request, MAX_BODY)).get("name")
    except _body.BodyRefused as exc:
        return _error(exc.status, exc.code, str(exc))
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        return _error(400, "bad_request", 'expected {"name": 1-32 of A-Z a-z 0-9 _ -}')
    if name.casefold().startswith(_RESERVED):
        return _error(403, "reserved_name", f"{name!r} is reserved; choose another name")
    secret = request.cookies.get(DEMO_COOKIE, "")
    if not _SECRET.fullmatch(secret):
        secret = secrets.token_urlsafe(32)
    holder = hashlib.sha256(secret.encode()).hexdigest()
    try:
        lifetime = await claim_name(redis, name, holder, max(1, math.ceil(config.auth.token_ttl)))
    except ReadOnlyError:
        return _error(
            503, "standby",
            "this region is on standby (its state store is a read-only replica): sign in "
            "on the region that serves, or retry once it takes over", **{"Retry-After": "5"},
        )  # fmt: skip
    except (RedisError, OSError):
        return _error(503, "unavailable", "the state store does not answer; retry",
                      **{"Retry-After": "1"})  # fmt: skip
    if lifetime is None:
        return _error(409, "name_taken", f"{name!r} is someone else's; choose another name")
    response = JSONResponse({"token": issuer.issue(name, ttl=lifetime)}, headers=_NO_STORE)
    response.set_cookie(
        DEMO_COOKIE, secret, max_age=lifetime, path=request.url.path, httponly=True,
        samesite="strict",
    )  # fmt: skip
    return response
