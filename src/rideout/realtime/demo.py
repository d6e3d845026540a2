"""``POST /auth/demo-token``: the demo page's sign-in, a token for a bidder name.

Only when ``[auth] demo_tokens`` is on (by default in local mode only), only for a
request from one of the deployment's own pages (``Origin`` in ``config.origins()``), and
never for a name someone else holds: a name is claimed by its first requester for as
long as its tokens live. The claim is the hash of a random secret kept in an HttpOnly,
SameSite=Strict cookie on that browser, stored in the region's Redis
(:func:`rideout.store.keys.demo_name_claim`); another requester gets 409.

``Origin`` stops other web pages, not a script, which sets any: demo identities are
free credentials. So new names are counted, per region, in all and per client address
(``[auth] max_demo_identities``, ``max_demo_identities_per_address``; past either 429
with ``Retry-After``, when the oldest counted claim expires), and a demo token carries
:data:`DEMO_CLAIM`, by which ``/ws`` counts its connections in a share of their own
(``[realtime] max_demo_connections``, :class:`~rideout.realtime.limits.ConnectionCaps`)
and refuses them where demo sign-in is off. A name already held is renewed whatever
the counts.

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
from dataclasses import dataclass
from typing import Final

import redis.asyncio as aioredis
from redis.exceptions import ReadOnlyError, RedisError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from rideout import _body
from rideout.auth import TokenIssuer
from rideout.config import AuthConfig, Config
from rideout.store import functions, keys
from rideout.store.functions import StoreFunction

__all__ = ["DEMO_CLAIM", "DEMO_COOKIE", "QuotaReached", "claim_name", "demo_token"]

DEMO_COOKIE: Final = "rideout_demo"
DEMO_CLAIM: Final = "rideout_demo"
"""The access-token claim (``true``) of a demo sign-in's tokens: only this route sets it."""
MAX_BODY: Final = 1024
_NAME: Final = re.compile(r"[A-Za-z0-9_-]{1,32}")
_SECRET: Final = re.compile(r"[A-Za-z0-9_-]{43}")
_RESERVED: Final = ("canary-",)  # the canaries' own subjects
_NO_STORE: Final = {"Cache-Control": "no-store"}


@dataclass(frozen=True, slots=True)
class QuotaReached:
    """A new name refused at a cap: the JSON ``error`` and the seconds until a place frees."""

    error: str
    retry_after: int

    @property
    def message(self) -> str:
        where = "from this address" if self.error.endswith("_from_address") else "in this region"
        return (
            f"too many demo names are held {where}; retry in {self.retry_after} s, or sign "
            "in again with a name this browser already holds"
        )


_QUOTAS: Final = {2: "too_many_demo_identities", 3: "too_many_demo_identities_from_address"}


def _error(status: int, error: str, message: str, **headers: str) -> JSONResponse:
    return JSONResponse(
        {"error": error, "message": message}, status_code=status, headers={**_NO_STORE, **headers}
    )


async def claim_name(
    redis: aioredis.Redis, name: str, holder: str, ttl: int, *, address: str, auth: AuthConfig
) -> int | QuotaReached | None:
    """Claim `name` for `holder` (a hash) for `ttl` seconds, or renew the holder's claim:
    the seconds the claim now lasts, None when someone else holds the name, or the
    quota a new name from `address` would exceed (``auth``'s caps).

    Raises :class:`~redis.exceptions.ReadOnlyError` on a replica for a name not yet
    claimed, and other RedisErrors when Redis fails.
    """
    per_address = auth.max_demo_identities_per_address
    names = [keys.demo_name_claim(name), keys.demo_identities()]
    if per_address:
        names.append(keys.demo_identities_from(address))
    # A claim stored before claims moved beside the counts, read apart (its own slot):
    # none is written any more, so nothing can take the name between this read and the
    # script, which moves the holder's claim to its new key.
    legacy = keys.legacy_demo_name_claim(name)
    before = await redis.get(legacy)
    if before is not None and not _same(before, holder):
        return None
    script = StoreFunction(redis, functions.DEMO_NAME_CLAIM)  # store/scripts.py has its Lua
    args: list[str | int] = [
        holder,
        ttl * 1000,
        name.casefold(),
        auth.max_demo_identities,
        per_address,
        int(before is not None),
    ]
    try:
        outcome, ms = (int(v) for v in await script(keys=names, args=args))
    except ReadOnlyError:  # a replica: a name its holder has lasts what it has left
        for where in (names[0], legacy):
            held = await redis.get(where)
            if held is None:
                continue
            if not _same(held, holder):
                return None
            left = int(await redis.ttl(where))
            if left > 0:
                return left
        raise
    if outcome == 1:
        return math.ceil(ms / 1000)
    if outcome == 0:
        return None
    return QuotaReached(_QUOTAS[outcome], max(1, math.ceil(ms / 1000)))


def _same(held: object, holder: str) -> bool:
    return hmac.compare_digest(str(held).encode(), holder.encode())


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
    client = request.client
    try:
        lifetime = await claim_name(
            redis, name, holder, max(1, math.ceil(config.auth.token_ttl)),
            address=client.host if client else "", auth=config.auth,
        )  # fmt: skip
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
    if isinstance(lifetime, QuotaReached):
        return _error(429, lifetime.error, lifetime.message,
                      **{"Retry-After": str(lifetime.retry_after)})  # fmt: skip
    token = issuer.issue(name, ttl=lifetime, extra_claims={DEMO_CLAIM: True})
    response = JSONResponse({"token": token}, headers=_NO_STORE)
    response.set_cookie(
        DEMO_COOKIE, secret, max_age=lifetime, path=request.url.path, httponly=True,
        samesite="strict",
    )  # fmt: skip
    return response
