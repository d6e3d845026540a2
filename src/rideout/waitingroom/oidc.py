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

import hashlib
import hmac
import html
import json
import math
import re
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, ClassVar, Final
from urllib.parse import parse_qsl, urlencode, urlsplit

import anyio.from_thread
import anyio.to_thread
from authlib.oauth2 import AuthorizationServer, OAuth2Request
from authlib.oauth2.rfc6749 import (
    AccessDeniedError,
    AuthorizationCodeMixin,
    ClientMixin,
    InvalidGrantError,
    InvalidRequestError,
    InvalidScopeError,
    OAuth2Error,
)
from authlib.oauth2.rfc6749.grants import AuthorizationCodeGrant, RefreshTokenGrant
from authlib.oauth2.rfc6749.requests import BasicOAuth2Payload
from authlib.oauth2.rfc7636 import CodeChallenge
from authlib.oidc.core import OpenIDCode, OpenIDToken, UserInfo
from authlib.oidc.discovery import OpenIDProviderMetadata
from joserfc.jwk import RSAKey
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
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
from rideout.waitingroom.errors import (
    NotServedYet,
    PositionExpired,
    RefreshTokenReused,
    RoomError,
    RoomUnavailable,
    SessionEnded,
    UnknownRequest,
)
from rideout.waitingroom.model import Renewal, TokenGrant, check_event_id
from rideout.waitingroom.store import RoomStore, new_request_id

__all__ = [
    "CODE_TTL",
    "OidcClient",
    "OidcProvider",
    "hash_secret",
]

CODE_TTL: Final = 60.0
"""Seconds an authorization code can be exchanged (RFC 6749 recommends at most 10 min)."""
AUTHORIZE_TTL: Final = 3600.0  # seconds an authorize request may wait in the room
_MAX_BODY: Final = 8192
_SECURITY_HEADERS: Final = {
    "Cache-Control": "no-store",
    "Pragma": "no-cache",
    "Content-Security-Policy": "default-src 'none'; style-src 'self'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}


def hash_secret(secret: str) -> str:
    """The SHA-256 (hex) a confidential client's secret is kept as. The secrets are
    random and long (``secrets.token_urlsafe(32)``), so a plain hash suffices."""
    return hashlib.sha256(_validate.text("secret", secret).encode()).hexdigest()


def _digest(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class OidcClient:
    """The relying party of one event: its id is the event id, its redirect URIs are
    matched exactly; ``secret_sha256`` (:func:`hash_secret`) makes it confidential
    (``client_secret_basic`` or ``client_secret_post``), None a public client (PKCE,
    no secret)."""

    client_id: str
    redirect_uris: tuple[str, ...]
    secret_sha256: str | None = None

    def __post_init__(self) -> None:
        check_event_id(self.client_id)
        if not self.redirect_uris:
            raise InvalidArgument("redirect_uris must name at least one URI")
        for uri in self.redirect_uris:
            parts = urlsplit(_validate.text("redirect_uri", uri))
            if parts.scheme not in ("https", "http") or not parts.netloc or parts.fragment:
                raise InvalidArgument(
                    f"redirect URI {uri!r} must be an absolute http(s) URI without a fragment"
                )
        secret = self.secret_sha256
        if secret is not None and (len(secret) != 64 or secret.strip("0123456789abcdef")):
            raise InvalidArgument("secret_sha256 must be a hex SHA-256 (hash_secret)")

    @property
    def public(self) -> bool:
        """Whether the client has no secret (it proves itself with PKCE alone)."""
        return self.secret_sha256 is None

    def check_secret(self, secret: object) -> bool:
        """Whether `secret` is the client's (constant time)."""
        if self.secret_sha256 is None or not isinstance(secret, str) or not secret:
            return False
        given = hashlib.sha256(secret.encode()).hexdigest()
        return hmac.compare_digest(given, self.secret_sha256)


# ----------------------------------------------------------------- Authlib's side


class _Client(ClientMixin):  # type: ignore[misc]
    def __init__(self, client: OidcClient) -> None:
        self.client = client

    def get_client_id(self) -> str:
        return self.client.client_id

    def get_default_redirect_uri(self) -> str | None:
        return None  # redirect_uri is required: nothing is guessed

    def get_allowed_scope(self, scope: str) -> str:
        return "openid"  # what this provider can answer; other scopes are ignored

    def check_redirect_uri(self, redirect_uri: str) -> bool:
        return redirect_uri in self.client.redirect_uris

    def check_client_secret(self, client_secret: str) -> bool:
        return self.client.check_secret(client_secret)

    def check_endpoint_auth_method(self, method: str, endpoint: str) -> bool:
        if self.client.public:
            return method == "none"
        return method in ("client_secret_basic", "client_secret_post")

    def check_response_type(self, response_type: str) -> bool:
        return response_type == "code"

    def check_grant_type(self, grant_type: str) -> bool:
        return grant_type in _GRANT_TYPES


@dataclass(frozen=True, slots=True)
class _Code(AuthorizationCodeMixin):  # type: ignore[misc]
    client_id: str
    redirect_uri: str
    scope: str
    nonce: str
    code_challenge: str
    code_challenge_method: str
    request_id: str
    auth_time: int
    expires_at: float

    def get_redirect_uri(self) -> str:
        return self.redirect_uri

    def get_scope(self) -> str:
        return self.scope

    def get_nonce(self) -> str:
        return self.nonce

    def get_auth_time(self) -> int:
        return self.auth_time

    def get_acr(self) -> None:
        return None

    def get_amr(self) -> None:
        return None


class _Request(OAuth2Request):  # type: ignore[misc]
    """An OAuth2Request of a Starlette request's query and (already read) form."""

    def __init__(
        self, method: str, uri: str, headers: Mapping[str, str], args: dict[str, str],
        form: dict[str, str], *, local_http: bool = False,
    ) -> None:  # fmt: skip
        # Authlib refuses http:// but for loopback hosts; `rideout up`'s app domain is a
        # name that resolves to loopback, served over http (local mode only).
        super().__init__(method, _SECURE_PLACEHOLDER if local_http else uri, headers=headers)
        self.uri = uri
        self._args, self._form = args, form
        self.payload = BasicOAuth2Payload({**args, **form})

    @property
    def args(self) -> dict[str, str]:
        return self._args

    @property
    def form(self) -> dict[str, str]:
        return self._form


class _S256ForAll(CodeChallenge):  # type: ignore[misc]
    """PKCE with S256, required of every client (Authlib's ``required=True`` lets a
    confidential client skip it; and an absent method would mean ``plain``)."""

    SUPPORTED_CODE_CHALLENGE_METHOD = ("S256",)

    def validate_code_challenge(self, grant: Any, redirect_uri: str) -> None:
        data = grant.request.payload.data
        if not data.get("code_challenge"):
            raise InvalidRequestError("Missing 'code_challenge': PKCE (S256) is required")
        if data.get("code_challenge_method") != "S256":
            raise InvalidRequestError("'code_challenge_method' must be S256")
        super().validate_code_challenge(grant, redirect_uri)

    def validate_code_verifier(self, grant: Any, result: Any) -> None:
        if not grant.request.form.get("code_verifier"):
            raise InvalidRequestError("Missing 'code_verifier'")
        super().validate_code_verifier(grant, result)


class _CodeGrant(AuthorizationCodeGrant):  # type: ignore[misc]
    TOKEN_ENDPOINT_AUTH_METHODS: ClassVar = ["client_secret_basic", "client_secret_post", "none"]
    AUTHORIZATION_CODE_LENGTH = 43
    server: OidcProvider

    def save_authorization_code(self, code: str, request: Any) -> None:
        self.server.save_code(code, request)

    def query_authorization_code(self, code: str, client: _Client) -> _Code | None:
        return self.server.take_code(code, client.get_client_id())

    def delete_authorization_code(self, authorization_code: _Code) -> None:
        pass  # taken (read and deleted at once) when it was queried: single use

    def authenticate_user(self, authorization_code: _Code) -> TokenGrant:
        return self.server.claim(authorization_code.request_id)


class _RefreshToken:
    """A verified refresh token, as Authlib's refresh grant asks about it."""

    def __init__(self, claims: RoomClaims) -> None:
        self.claims = claims

    def check_client(self, client: _Client) -> bool:
        return client.get_client_id() == self.claims.event_id  # aud: the client it went to

    def get_scope(self) -> str:
        return "openid"


class _RefreshGrant(RefreshTokenGrant):  # type: ignore[misc]
    """``grant_type=refresh_token``: renews the session; the refresh token rotates (a
    new one in every answer, the presented one refused from then on)."""

    TOKEN_ENDPOINT_AUTH_METHODS: ClassVar = ["client_secret_basic", "client_secret_post", "none"]
    INCLUDE_NEW_REFRESH_TOKEN = True
    server: OidcProvider

    def authenticate_refresh_token(self, refresh_token: str) -> _RefreshToken | None:
        return self.server.refresh_claims(refresh_token)

    def authenticate_user(self, refresh_token: _RefreshToken) -> Renewal:
        return self.server.renew(refresh_token.claims)

    def revoke_old_credential(self, refresh_token: _RefreshToken) -> None:
        pass  # the renewal rotated it, atomically, before the new set was signed


class _IdTokens:
    """How both grants sign their id tokens (Authlib's OpenIDToken hooks)."""

    provider: OidcProvider

    def resolve_client_private_key(self, client: _Client) -> Any:
        return self.provider.jose_key()

    def get_client_algorithm(self, client: _Client) -> str:
        return "RS256"  # OpenID Registration's default: what every RP can verify

    def get_client_claims(self, client: _Client) -> dict[str, Any]:
        return {"iss": self.provider.issuer, "aud": [client.get_client_id()]}

    def get_encode_header(self, client: _Client) -> dict[str, str]:
        return {"alg": "RS256", "kid": self.provider.id_keys.ring().current_kid, "typ": "JWT"}

    def generate_user_info(self, user: TokenGrant, scope: str) -> UserInfo:
        # The id token lives as long as the room's access token it comes with.
        info = UserInfo(
            sub=user.request_id, queue_position=user.queue_position, iat=user.issued_at,
            exp=user.expires_at,
        )  # fmt: skip
        if isinstance(user, Renewal):
            info["auth_time"] = user.started_at  # OpenID Core 12.2: the original one
        return info


class _OpenID(_IdTokens, OpenIDCode):  # type: ignore[misc]
    def __init__(self, provider: OidcProvider) -> None:
        super().__init__(require_nonce=True)
        self.provider = provider

    def exists_nonce(self, nonce: str, request: Any) -> bool:
        return self.provider.nonce_used(nonce)


class _RefreshedIdToken(_IdTokens, OpenIDToken):  # type: ignore[misc]
    """The refresh grant's id token: no nonce (there is no authorization code)."""

    def __init__(self, provider: OidcProvider) -> None:
        self.provider = provider


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
        self.clock = clock
        redis = store.redis
        self._take, self._put, self._read, self._bind = (
            StoreFunction(redis, functions.OIDC[name]) for name in ("TAKE", "PUT", "READ", "BIND")
        )
        self._jose: dict[str, Any] = {}
        self.register_token_generator("default", self._generate_token)
        self.register_grant(_CodeGrant, [_S256ForAll(required=True), _OpenID(self)])
        self.register_grant(_RefreshGrant, [_RefreshedIdToken(self)])

    # ------------------------------------------------------- Authlib's hooks

    def query_client(self, client_id: str) -> _Client | None:
        return _Client(self.client) if client_id == self.client.client_id else None

    def create_oauth2_request(self, request: Any) -> Any:
        return request  # already a _Request (built from the Starlette request)

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
        }
        ttl_ms = math.ceil(self.code_ttl * 1000)
        nonce_ms = max(ttl_ms, math.ceil((grant.expires_at - self.clock()) * 1000))
        anyio.from_thread.run(self._run, self._put, self._key("code", code), json.dumps(record),
                              ttl_ms)  # fmt: skip
        anyio.from_thread.run(self._run, self._put, self._key("nonce", data["nonce"]), "1",
                              nonce_ms)  # fmt: skip

    def take_code(self, code: str, client_id: str) -> _Code | None:
        """The code's record, deleted as it is read; None if unknown, used, expired
        or another client's."""
        raw = anyio.from_thread.run(self._run, self._take, self._key("code", code))
        if raw is None:
            return None
        record = _Code(**json.loads(raw))
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

    def refresh_claims(self, token: str) -> _RefreshToken | None:
        """The claims of a refresh token of this event's (None: Authlib answers
        ``invalid_grant``)."""
        try:
            claims = self.verifier.verify(token, token_use="refresh", audience=self.event_id)
        except AuthError:
            return None
        return _RefreshToken(claims)

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
            grant_types_supported=list(_GRANT_TYPES),
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

    def _oauth_request(self, request: Request, form: dict[str, str]) -> _Request:
        args = dict(request.query_params)
        return _Request(request.method, str(request.url), request.headers, args, form,
                        local_http=self.local_http)  # fmt: skip

    async def authorize(self, request: Request) -> Response:
        """Validate the request and send the browser into the room (or an error: to a
        validated redirect URI only, else on a page)."""
        query = _multi(request.query_params.multi_items())
        if any(len(v) > 1 for v in query.values()):
            return _error_page(400, "invalid_request", "A parameter is given more than once")
        if not _plain(query):
            return _error_page(400, "invalid_request", _PLAIN_RULE)
        req = self._oauth_request(request, {})
        try:
            await anyio.to_thread.run_sync(lambda: self.get_consent_grant(req))
        except OAuth2Error as error:
            return self._authorize_error(req, error)
        except ValueError:  # Authlib: a description it cannot quote (a '"' in a URI)
            return _error_page(400, "invalid_request", "The request cannot be read")
        authz = secrets.token_urlsafe(24)
        await self._run(self._put, self._key("authz", authz), json.dumps(req.args),
                        math.ceil(AUTHORIZE_TTL * 1000))  # fmt: skip
        page = routes.ROOM_PAGE + "?" + urlencode({"event_id": self.event_id, "authz": authz})
        return RedirectResponse(page, status_code=302, headers={"Cache-Control": "no-store"})

    def _authorize_error(self, req: _Request, error: OAuth2Error) -> Response:
        if error.redirect_uri:
            response: Response = self.handle_error_response(req, error)
            return response
        return _error_page(400, error.error, error.get_error_description() or "")

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
        if await self._authz(authz) is None:
            return JSONResponse({"error": "Unknown or expired authorize request"}, 404,
                                headers=_NO_STORE)  # fmt: skip
        assert isinstance(authz, str)
        candidate = new_request_id()
        request_id = await self._run(self._bind, self._key("bound", authz), candidate,
                                     math.ceil(AUTHORIZE_TTL * 1000))  # fmt: skip
        assert request_id is not None
        try:
            position = await self.store.assign(self.event_id, request_id)
        except RoomError as exc:
            return JSONResponse({"error": str(exc)}, exc.status, headers=_NO_STORE)
        out: dict[str, Any] = {"api_request_id": request_id, "event_id": self.event_id}
        if position.queue_number:
            out["queue_number"] = position.queue_number
            out["entry_time"] = math.floor(position.entry_time)
        return JSONResponse(out, headers=_NO_STORE)

    async def resume(self, request: Request) -> Response:
        """Back from the room: the code goes to the relying party once the position is
        served and its token can be minted; before that, back to the room page."""
        authz = request.query_params.get("authz")
        args = await self._authz(authz)
        if args is None:
            return _error_page(400, "invalid_request",
                               "Unknown, used or expired authorize request")  # fmt: skip
        assert isinstance(authz, str)
        req = _Request("GET", self.issuer + "/authorize", request.headers, args, {},
                       local_http=self.local_http)  # fmt: skip
        request_id = await self._run(self._read, self._key("bound", authz))
        room = routes.ROOM_PAGE + "?" + urlencode({"event_id": self.event_id, "authz": authz})
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
            return _error_page(400, "invalid_request", "This authorize request was used")

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


_GRANT_TYPES: Final = ("authorization_code", "refresh_token")
_NO_STORE: Final = {"Cache-Control": "no-store", "Pragma": "no-cache"}
_SECURE_PLACEHOLDER: Final = "https://local.invalid/"


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


def _error_page(status: int, error: str, description: str) -> Response:
    """The error shown to the user when it cannot go back to a validated redirect URI."""
    body = (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        "<title>Sign-in error</title><link rel=stylesheet href=/style.css></head>"
        f"<body><main class=card><h1>Sign-in error</h1><p><code>{html.escape(error)}</code></p>"
        f"<p>{html.escape(description)}</p></main></body></html>"
    )
    return HTMLResponse(body, status, headers=_SECURITY_HEADERS)
