"""The waiting room as an OpenID Connect provider: software that can sign users in
through an OpenID provider puts the room in front of itself without code changes
(docs/oidc.md).

One issuer per event, ``{app}/oidc/{event_id}``; the client id is the event id. Built on
Authlib's framework-free server: :class:`OidcProvider` is an ``AuthorizationServer``
with a small Starlette request adapter, the authorization-code grant keeps its codes in
the region's Redis (single use, short lived, bound to client, redirect URI, PKCE
challenge and nonce), PKCE S256 is required of every client (Authlib's
``CodeChallenge(required=True)`` requires it of public clients only) and so is a nonce.

The flow: ``/authorize`` validates the request (an error goes back only to a registered
redirect URI, else a page shows it), keeps it in Redis and sends the browser to the
waiting-room page; the page enters the queue through ``/enter`` (one position per
authorize request) and, once served, goes to ``/resume``, which issues the code only
when a token can be minted. ``/token`` answers the room's access token (the auction's
``/ws`` accepts it too), its refresh token and an id token with the nonce; with
``grant_type=refresh_token`` it renews the session (Authlib's ``RefreshTokenGrant`` over
:meth:`RoomStore.renew`: a new ``exp``, a new refresh token, the old one refused from
then on) and answers a new set with a refreshed id token (OpenID Core 12.2: same
``iss``, ``sub``, ``aud``, the original ``auth_time``, a new ``iat``, no nonce);
``/userinfo`` verifies the bearer token (signature, expiry, audience, session status)
before answering.

Authlib's server is synchronous: each endpoint runs it in a worker thread, and the
grant's storage calls come back to the event loop (``anyio.from_thread``).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import math
import re
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from functools import partial
from typing import Any, Final
from urllib.parse import parse_qsl, urlencode

import anyio.from_thread
import anyio.to_thread
from authlib.oauth2 import AuthorizationServer
from authlib.oauth2.rfc6749 import (
    AccessDeniedError,
    InvalidGrantError,
    InvalidScopeError,
    OAuth2Error,
)
from authlib.oidc.discovery import OpenIDProviderMetadata
from joserfc.jwk import RSAKey
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from rideout import _body, _validate, routes
from rideout.auth.errors import AuthError
from rideout.auth.room_tokens import (
    KeySource,
    RoomClaims,
    RoomKey,
    RoomTokenIssuer,
    RoomTokenVerifier,
)
from rideout.errors import InvalidArgument
from rideout.store import functions, keys
from rideout.store.functions import StoreFunction
from rideout.waitingroom._oidc_authlib import (
    GRANT_TYPES,
    AuthlibRequest,
    Client,
    Code,
    CodeGrant,
    OidcClient,
    OpenID,
    RefreshedIdToken,
    RefreshGrant,
    RefreshTokenRecord,
    S256ForAll,
    hash_secret,
)
from rideout.waitingroom.errors import (
    NotServedYet,
    PositionExpired,
    RefreshTokenReused,
    RoomError,
    RoomUnavailable,
    SessionEnded,
    UnknownRequest,
)
from rideout.waitingroom.model import Position, Renewal, TokenGrant
from rideout.waitingroom.oidc_page import WaitingPage, error_page
from rideout.waitingroom.store import RoomStore, new_request_id

__all__ = [
    "CODE_TTL",
    "OidcClient",
    "OidcProvider",
    "hash_secret",
]

log = logging.getLogger("rideout.waitingroom")

CODE_TTL: Final = 60.0
"""Seconds an authorization code can be exchanged (RFC 6749 recommends at most 10 min)."""
AUTHORIZE_TTL: Final = 3600.0  # seconds an authorize request may wait in the room
_MAX_BODY: Final = 8192


def _digest(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


# ----------------------------------------------------------------- the provider


class OidcProvider(AuthorizationServer):  # type: ignore[misc]
    """The OpenID provider of one event over the room's store, keys and signer.

    ``keys`` sign the room's tokens (the access token is one), ``id_keys`` (an RS256
    ring) the id tokens. ``base_url`` is where the app is reached (``http://app.example:8080``); the issuer
    is ``base_url + /oidc/{event_id}``; ``room_issuer`` is the ``iss`` of the room's
    tokens (the access token is one); ``origins`` are the pages allowed to call
    ``/enter``. ``local_http``: a local deployment's http issuer and endpoints (`rideout
    up`); else Authlib's rule holds: https, or http on a loopback host only.
    """

    def __init__(
        self,
        client: OidcClient,
        store: RoomStore,
        *,
        keys: KeySource,
        id_keys: KeySource,
        signer: RoomTokenIssuer,
        base_url: str,
        room_issuer: str,
        origins: Sequence[str] = (),
        local_http: bool = False,
        code_ttl: float = CODE_TTL,
        page_refresh: int = 5,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(scopes_supported=["openid"])
        self.client = client
        self.event_id = client.client_id
        self.store = store
        self.keys = keys
        self.id_keys = id_keys
        if id_keys.ring().algorithm != "RS256":
            raise InvalidArgument("id_keys must be an RS256 ring (OpenID's default algorithm)")
        self.signer = signer
        self.base_url = base_url.rstrip("/")
        self.path = routes.OIDC_PREFIX.format(event_id=self.event_id)
        self.issuer = self.base_url + self.path
        self.verifier = RoomTokenVerifier(keys, issuer=room_issuer)
        self.origins = frozenset(origins)
        self.local_http = local_http
        self.code_ttl = _validate.seconds("code_ttl", code_ttl)
        self.page = WaitingPage(page_refresh)
        self.clock = clock
        redis = store.redis
        self._take, self._take_code, self._put, self._read, self._bind = (
            StoreFunction(redis, functions.OIDC[name])
            for name in ("TAKE", "TAKE_CODE", "PUT", "READ", "BIND")
        )
        self._jose: dict[str, Any] = {}
        self.register_token_generator("default", self._generate_token)
        self.register_grant(CodeGrant, [S256ForAll(required=True), OpenID(self)])
        self.register_grant(RefreshGrant, [RefreshedIdToken(self)])

    # ------------------------------------------------------- Authlib's hooks

    def query_client(self, client_id: str) -> Client | None:
        return Client(self.client) if client_id == self.client.client_id else None

    def create_oauth2_request(self, request: Any) -> Any:
        return request  # already a AuthlibRequest (built from the Starlette request)

    def create_json_request(self, request: Any) -> Any:
        return request

    def save_token(self, token: dict[str, Any], request: Any) -> None:
        pass  # the room records the token's claims (claim_token)

    def send_signal(self, name: str, *args: Any, **kwargs: Any) -> None:
        pass

    def handle_response(self, status: int, body: Any, headers: Any) -> Response:
        merged = {**dict(headers), "Cache-Control": "no-store", "Pragma": "no-cache"}
        if 300 <= status < 400:
            location = merged.pop("Location")
            return RedirectResponse(location, status_code=302, headers=merged)
        merged.pop("Content-Type", None)
        return JSONResponse(body, status, headers=merged)

    def validate_requested_scope(self, scope: str) -> None:
        if "openid" not in (scope or "").split():
            raise InvalidScopeError("The scope must contain 'openid'")

    def _generate_token(
        self, *, user: TokenGrant, scope: str, include_refresh_token: bool = False, **_: Any
    ) -> dict[str, Any]:
        tokens = self.signer.issue(
            event_id=self.event_id, request_id=user.request_id,
            queue_position=user.queue_position, issued_at=user.issued_at,
            expires_at=user.expires_at, now=self.clock(),
            refresh_jti=user.refresh_jti if isinstance(user, Renewal) else None,
        )  # fmt: skip
        out: dict[str, Any] = {
            "token_type": "Bearer",
            "access_token": tokens.access_token,
            "expires_in": tokens.expires_in,
            "scope": scope,
        }
        if include_refresh_token:
            out["refresh_token"] = tokens.refresh_token
        return out

    # ------------------------------------------- storage (called from the thread)

    def _key(self, kind: str, name: str) -> str:
        return keys.waitingroom_oidc(self.event_id, kind, _digest(name))

    def save_code(self, code: str, request: Any) -> None:
        """Keep a new code with what it is bound to (from Authlib's worker thread)."""
        data = request.payload.data
        grant: TokenGrant = request.user
        record = {
            "client_id": request.client.get_client_id(),
            "redirect_uri": data["redirect_uri"],
            "scope": request.scope or "openid",
            "nonce": data["nonce"],
            "code_challenge": data["code_challenge"],
            "code_challenge_method": data["code_challenge_method"],
            "request_id": grant.request_id,
            "auth_time": grant.issued_at,
            "expires_at": self.clock() + self.code_ttl,
            "tokens_until": grant.expires_at,
        }
        ttl_ms = math.ceil(self.code_ttl * 1000)
        nonce_ms = max(ttl_ms, math.ceil((grant.expires_at - self.clock()) * 1000))
        anyio.from_thread.run(self._run, self._put, self._key("code", code), json.dumps(record),
                              ttl_ms)  # fmt: skip
        anyio.from_thread.run(self._run, self._put, self._key("nonce", data["nonce"]), "1",
                              nonce_ms)  # fmt: skip

    def take_code(self, code: str, client_id: str) -> Code | None:
        """The code's record, deleted as it is read; None if unknown, used, expired
        or another client's. A code used already ends the session it gave tokens for."""
        raw = anyio.from_thread.run(self._take_spent, code)
        if raw is None:
            return None
        record = Code(**json.loads(raw))
        if record.client_id != client_id or record.expires_at < self.clock():
            return None
        return record

    def nonce_used(self, nonce: str) -> bool:
        """Whether a code was issued with `nonce` (a replayed authorize request)."""
        return anyio.from_thread.run(self._run, self._read, self._key("nonce", nonce)) is not None

    def claim(self, request_id: str) -> TokenGrant:
        """The room's token claims for a served request, or an OAuth error."""
        try:
            return anyio.from_thread.run(self.store.claim_token, self.event_id, request_id)
        except (NotServedYet, UnknownRequest) as exc:
            raise InvalidGrantError(f"The waiting-room position cannot be served: {exc}") from exc
        except (PositionExpired, SessionEnded) as exc:
            raise InvalidGrantError(f"The waiting-room session has ended: {exc}") from exc

    def refresh_claims(self, token: str) -> RefreshTokenRecord | None:
        """The claims of a refresh token of this event's (None: Authlib answers
        ``invalid_grant``)."""
        try:
            claims = self.verifier.verify(token, token_use="refresh", audience=self.event_id)
        except AuthError:
            return None
        return RefreshTokenRecord(claims)

    def renew(self, claims: RoomClaims) -> Renewal:
        """Renew the session of a verified refresh token, or an OAuth error."""
        jti = claims.raw.get("jti")
        renew = partial(
            self.store.renew, self.event_id, claims.sub,
            jti=jti if isinstance(jti, str) else None, issued_at=math.floor(claims.iat),
            queue_position=claims.queue_position,
        )  # fmt: skip
        try:
            return anyio.from_thread.run(renew)
        except RoomUnavailable:
            raise  # 503 temporarily_unavailable: retry shortly
        except RefreshTokenReused as exc:
            raise InvalidGrantError(f"The refresh token cannot be used: {exc}") from exc
        except RoomError as exc:  # ended, expired, capped; the event reset or deleted
            raise InvalidGrantError(f"The waiting-room session has ended: {exc}") from exc

    async def _take_spent(self, code: str) -> str | None:
        """The code's record the first time; a code presented again is stolen or replayed
        (RFC 6749 4.1.2): the session its tokens belong to ends, so that /userinfo, a
        refresh and the auction's /ws refuse them, and None."""
        names = [self._key("code", code), self._key("spent", code)]
        with self.store.errors(f"oidc {self.event_id}"):
            reply = await self._take_code(keys=names, args=[math.ceil(self.code_ttl * 1000)])
        if not reply:
            return None
        kind, record = (v.decode() if isinstance(v, bytes) else str(v) for v in reply)
        if kind == "new":
            return record
        request_id = json.loads(record)["request_id"]
        log.warning("an authorization code of %s was presented again: its session %s ends "
                    "(RFC 6749 4.1.2)", self.event_id, request_id)  # fmt: skip
        with contextlib.suppress(UnknownRequest):  # ended already
            await self.store.update_session(self.event_id, request_id, -1)
        return None

    async def _run(self, script: Any, key: str, *args: str | int) -> str | None:
        with self.store.errors(f"oidc {self.event_id}"):
            raw = await script(keys=[key], args=list(args))
        return raw.decode() if isinstance(raw, bytes) else raw

    def jose_key(self) -> Any:
        """The current id-token key as a joserfc key (converted once per key)."""
        key: RoomKey = self.id_keys.ring().current
        if key.kid not in self._jose:
            self._jose[key.kid] = RSAKey.import_key(key.to_pem())
        return self._jose[key.kid]

    # ------------------------------------------------------------ HTTP routes

    def routes(self) -> list[BaseRoute]:
        """The event's discovery document, JWKS and endpoints."""
        table = [
            (routes.OIDC_DISCOVERY, self.discovery, ["GET"]),
            (routes.OIDC_JWKS, self.jwks, ["GET"]),
            (routes.OIDC_AUTHORIZE, self.authorize, ["GET"]),
            (routes.OIDC_WAIT, self.wait, ["GET"]),
            (routes.OIDC_ENTER, self.enter, ["POST"]),
            (routes.OIDC_RESUME, self.resume, ["GET"]),
            (routes.OIDC_TOKEN, self.token, ["POST"]),
            (routes.OIDC_USERINFO, self.userinfo, ["GET", "POST"]),
        ]
        return [
            Route(path.format(event_id=self.event_id), _unavailable_as_503(handler), methods=m)
            for path, handler, m in table
        ]

    def metadata(self) -> OpenIDProviderMetadata:
        """The discovery document: only what this provider does."""
        base = self.issuer
        meta = OpenIDProviderMetadata(
            issuer=base,
            authorization_endpoint=base + "/authorize",
            token_endpoint=base + "/token",
            userinfo_endpoint=base + "/userinfo",
            jwks_uri=base + "/.well-known/jwks.json",
            response_types_supported=["code"],
            response_modes_supported=["query"],
            grant_types_supported=list(GRANT_TYPES),
            scopes_supported=["openid"],
            subject_types_supported=["public"],
            id_token_signing_alg_values_supported=["RS256"],
            token_endpoint_auth_methods_supported=(
                ["none"] if self.client.public else ["client_secret_basic", "client_secret_post"]
            ),
            code_challenge_methods_supported=["S256"],
            claims_supported=[
                "iss",
                "sub",
                "aud",
                "exp",
                "iat",
                "auth_time",
                "nonce",
                "at_hash",
                "queue_position",
            ],
            request_parameter_supported=False,
            request_uri_parameter_supported=False,
            claims_parameter_supported=False,
        )
        if self.local_http:  # every check but the transport's (served over http)
            secure = {k: _https(v) for k, v in meta.items()}
            OpenIDProviderMetadata(secure).validate()
        else:
            meta.validate()
        return meta

    async def discovery(self, request: Request) -> Response:
        """``/.well-known/openid-configuration``."""
        return JSONResponse(
            dict(self.metadata()),
            headers={"Cache-Control": "public, max-age=300", "Access-Control-Allow-Origin": "*"},
        )

    async def jwks(self, request: Request) -> Response:
        """The id tokens' keys, then the room's (the access token's), current and previous."""
        seen: set[str] = set()
        merged = []
        for jwk in [*self.id_keys.ring().jwks()["keys"], *self.keys.ring().jwks()["keys"]]:
            if jwk["kid"] not in seen:
                seen.add(jwk["kid"])
                merged.append(jwk)
        return JSONResponse(
            {"keys": merged},
            headers={"Cache-Control": "public, max-age=300", "Access-Control-Allow-Origin": "*"},
        )

    def _oauth_request(self, request: Request, form: dict[str, str]) -> AuthlibRequest:
        args = dict(request.query_params)
        return AuthlibRequest(request.method, str(request.url), request.headers, args, form,
                        local_http=self.local_http)  # fmt: skip

    async def authorize(self, request: Request) -> Response:
        """Validate the request and send the browser into the room (or an error: to a
        validated redirect URI only, else on a page)."""
        query = _multi(request.query_params.multi_items())
        if any(len(v) > 1 for v in query.values()):
            return error_page(400, "invalid_request", "A parameter is given more than once")
        if not _plain(query):
            return error_page(400, "invalid_request", _PLAIN_RULE)
        req = self._oauth_request(request, {})
        try:
            await anyio.to_thread.run_sync(lambda: self.get_consent_grant(req))
        except OAuth2Error as error:
            return self._authorize_error(req, error)
        except ValueError:  # Authlib: a description it cannot quote (a '"' in a URI)
            return error_page(400, "invalid_request", "The request cannot be read")
        authz = secrets.token_urlsafe(24)
        await self._run(self._put, self._key("authz", authz), json.dumps(req.args),
                        math.ceil(AUTHORIZE_TTL * 1000))  # fmt: skip
        return RedirectResponse(self._url(routes.OIDC_WAIT, authz), 302, headers=_NO_STORE)

    def _authorize_error(self, req: AuthlibRequest, error: OAuth2Error) -> Response:
        if error.redirect_uri:
            response: Response = self.handle_error_response(req, error)
            return response
        return error_page(400, error.error, error.get_error_description() or "")

    async def _authz(self, authz: object) -> dict[str, str] | None:
        if not isinstance(authz, str) or not 16 <= len(authz) <= 64:
            return None
        raw = await self._run(self._read, self._key("authz", authz))
        return None if raw is None else dict(json.loads(raw))

    async def enter(self, request: Request) -> Response:
        """``{authz}`` -> the position of that authorize request (the same on every
        call: a reload or a failover keeps it)."""
        origin = request.headers.get("origin")
        if origin is None or (origin not in self.origins and origin != _own_origin(request)):
            return JSONResponse({"error": "Origin not allowed"}, 403, headers=_NO_STORE)
        response = await self._enter(request)
        # The page may poll another zone than the one it came from (a failover).
        response.headers.update({"Access-Control-Allow-Origin": origin, "Vary": "Origin"})
        return response

    async def _enter(self, request: Request) -> Response:
        try:
            authz = (await _body.read_json(request, _MAX_BODY)).get("authz")
        except _body.BodyRefused as exc:
            return JSONResponse({"error": f"{exc}: send {{authz}}"}, exc.status, headers=_NO_STORE)
        try:
            taken = await self._position(authz)
        except RoomError as exc:
            return JSONResponse({"error": str(exc)}, exc.status, headers=_NO_STORE)
        if taken is None:
            return JSONResponse({"error": "Unknown or expired authorize request"}, 404,
                                headers=_NO_STORE)  # fmt: skip
        request_id, position = taken
        out: dict[str, Any] = {"api_request_id": request_id, "event_id": self.event_id}
        if position.queue_number:
            out["queue_number"] = position.queue_number
            out["entry_time"] = math.floor(position.entry_time)
        return JSONResponse(out, headers=_NO_STORE)

    async def _position(self, authz: object) -> tuple[str, Position] | None:
        """The request id and position of authorize request `authz`, taken on its first
        call (None: no such request). Raises RoomError when the room refuses it."""
        if await self._authz(authz) is None:
            return None
        assert isinstance(authz, str)
        request_id = await self._run(self._bind, self._key("bound", authz), new_request_id(),
                                     math.ceil(AUTHORIZE_TTL * 1000))  # fmt: skip
        assert request_id is not None
        return request_id, await self.store.assign(self.event_id, request_id)

    async def wait(self, request: Request) -> Response:
        """The waiting page of an authorize request: its position is taken here, on the
        first visit, so that a client without a script waits too; the page moves on to
        ``/resume`` by itself (room.js, or the refresh for a client without a script)."""
        authz = request.query_params.get("authz")
        try:
            taken = await self._position(authz)
        except RoomUnavailable:
            raise  # 503 temporarily_unavailable: retry shortly
        except RoomError as exc:
            return error_page(exc.status, "access_denied", str(exc))
        if taken is None:
            return error_page(400, "invalid_request", "Unknown, used or expired authorize request")
        assert isinstance(authz, str)
        return self.page.render(self._url(routes.OIDC_RESUME, authz))

    def _url(self, route: str, authz: str) -> str:
        """The path of one of this event's routes for authorize request `authz`."""
        return route.format(event_id=self.event_id) + "?" + urlencode({"authz": authz})

    async def resume(self, request: Request) -> Response:
        """Back from the room: the code goes to the relying party once the position is
        served and its token can be minted; before that, back to the room page."""
        authz = request.query_params.get("authz")
        args = await self._authz(authz)
        if args is None:
            return error_page(400, "invalid_request",
                               "Unknown, used or expired authorize request")  # fmt: skip
        assert isinstance(authz, str)
        req = AuthlibRequest("GET", self.issuer + "/authorize", request.headers, args, {},
                       local_http=self.local_http)  # fmt: skip
        request_id = await self._run(self._read, self._key("bound", authz))
        room = self._url(routes.OIDC_WAIT, authz)
        if request_id is None:
            return RedirectResponse(room, status_code=302, headers=_NO_STORE)
        try:
            user = await self.store.claim_token(self.event_id, request_id)
        except NotServedYet:
            return RedirectResponse(room, status_code=302, headers=_NO_STORE)
        except RoomError as exc:
            return self._authorize_error(
                req, AccessDeniedError(str(exc), redirect_uri=args.get("redirect_uri"),
                                       state=args.get("state")),
            )  # fmt: skip
        if await self._run(self._take, self._key("authz", authz)) is None:
            return error_page(400, "invalid_request", "This authorize request was used")

        def respond() -> Response:
            grant = self.get_consent_grant(req)
            response: Response = self.create_authorization_response(req, user, grant)
            return response

        try:
            return await anyio.to_thread.run_sync(respond)
        except OAuth2Error as error:
            return self._authorize_error(req, error)

    async def token(self, request: Request) -> Response:
        """The code exchange and the refresh grant (``client_secret_basic``,
        ``client_secret_post``, or none for a public client: PKCE proves it at the code
        exchange, the rotating refresh token at a refresh)."""
        try:
            body = await _body.read(request, _MAX_BODY, media_type=_body.FORM)
        except _body.BodyRefused as exc:
            return JSONResponse({"error": "invalid_request", "error_description": str(exc)},
                                exc.status, headers=_NO_STORE)  # fmt: skip
        try:
            items = _multi(parse_qsl(body.decode(), keep_blank_values=True, strict_parsing=False))
        except UnicodeDecodeError:
            items = {"": ["", ""]}  # refused below
        if any(len(v) > 1 for v in items.values()) or not _plain(items):
            return JSONResponse({"error": "invalid_request", "error_description":
                                 "A parameter is given more than once, or " + _PLAIN_RULE},
                                400, headers=_NO_STORE)  # fmt: skip
        req = self._oauth_request(request, {k: v[0] for k, v in items.items()})
        try:
            response: Response = await anyio.to_thread.run_sync(self.create_token_response, req)
        except ValueError:  # Authlib: a description it cannot quote
            return JSONResponse({"error": "invalid_request"}, 400, headers=_NO_STORE)
        return response

    async def userinfo(self, request: Request) -> Response:
        """The claims of a valid access token whose session is still active."""
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not token:
            return _bearer_error(401, "invalid_request", "Send the access token as a bearer token")
        try:
            claims = self.verifier.verify(token, token_use="access", audience=self.event_id)
        except AuthError as exc:
            return _bearer_error(401, "invalid_token", str(exc))
        status = await self.store.session_status(self.event_id, claims.sub)
        if status != 0:
            return _bearer_error(401, "invalid_token", "The waiting-room session has ended")
        return JSONResponse(
            {"sub": claims.sub, "queue_position": claims.queue_position},
            headers=_NO_STORE,
        )


_NO_STORE: Final = {"Cache-Control": "no-store", "Pragma": "no-cache"}


_PLAIN: Final = re.compile(r"[\x20-\x7e]{0,2048}")
_PLAIN_RULE: Final = "parameters must be printable ASCII, at most 2048 characters"


def _plain(params: Mapping[str, list[str]]) -> bool:
    """Whether every name and value is RFC 6749's VSCHAR (printable ASCII), bounded."""
    return all(_PLAIN.fullmatch(k) and all(_PLAIN.fullmatch(v) for v in vs)
               for k, vs in params.items())  # fmt: skip


def _multi(items: Any) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for key, value in items:
        out.setdefault(key, []).append(value)
    return out


def _https(value: Any) -> Any:
    return (
        "https://" + value[7:] if isinstance(value, str) and value.startswith("http://") else value
    )


def _unavailable_as_503(
    handler: Callable[[Request], Awaitable[Response]],
) -> Callable[[Request], Awaitable[Response]]:
    """The region's store unreachable, or read-only before a promotion: 503
    ``temporarily_unavailable`` (RFC 6749's), to retry shortly."""

    async def run(request: Request) -> Response:
        try:
            return await handler(request)
        except RoomUnavailable as exc:
            return JSONResponse(
                {"error": "temporarily_unavailable", "error_description": str(exc)}, 503,
                headers={**_NO_STORE, "Retry-After": "1"},
            )  # fmt: skip

    return run


def _own_origin(request: Request) -> str:
    return f"{request.url.scheme}://{request.url.netloc}"


def _bearer_error(status: int, error: str, description: str) -> Response:
    quoted = description.replace("\\", "").replace('"', "'")
    return JSONResponse(
        {"error": error, "error_description": description}, status,
        headers={**_NO_STORE,
                 "WWW-Authenticate": f'Bearer error="{error}", error_description="{quoted}"'},
    )  # fmt: skip
