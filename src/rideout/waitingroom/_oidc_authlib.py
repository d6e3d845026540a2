"""Authlib's side of the OpenID adapter (:mod:`rideout.waitingroom.oidc`): the relying
party's registration, the client, code and request objects Authlib's server asks about,
the grants (authorization code with PKCE S256 for every client, refresh token) and the
id-token hooks. The grants reach the provider through :class:`Provider`, the port
:class:`~rideout.waitingroom.oidc.OidcProvider` implements: storage and the room's
decisions stay there.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Final, Protocol
from urllib.parse import urlsplit

from authlib.oauth2 import OAuth2Request
from authlib.oauth2.rfc6749 import AuthorizationCodeMixin, ClientMixin, InvalidRequestError
from authlib.oauth2.rfc6749.grants import AuthorizationCodeGrant, RefreshTokenGrant
from authlib.oauth2.rfc6749.requests import BasicOAuth2Payload
from authlib.oauth2.rfc7636 import CodeChallenge
from authlib.oidc.core import OpenIDCode, OpenIDToken, UserInfo

from rideout import _validate
from rideout.auth.room_tokens import KeySource, RoomClaims
from rideout.errors import InvalidArgument
from rideout.waitingroom.model import Renewal, TokenGrant, check_event_id

GRANT_TYPES: Final = ("authorization_code", "refresh_token")
SECURE_PLACEHOLDER: Final = "https://local.invalid/"


def hash_secret(secret: str) -> str:
    """The SHA-256 (hex) a confidential client's secret is kept as. The secrets are
    random and long (``secrets.token_urlsafe(32)``), so a plain hash suffices."""
    return hashlib.sha256(_validate.text("secret", secret).encode()).hexdigest()


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


class Client(ClientMixin):  # type: ignore[misc]
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
        return grant_type in GRANT_TYPES


@dataclass(frozen=True, slots=True)
class Code(AuthorizationCodeMixin):  # type: ignore[misc]
    client_id: str
    redirect_uri: str
    scope: str
    nonce: str
    code_challenge: str
    code_challenge_method: str
    request_id: str
    auth_time: int
    expires_at: float
    tokens_until: float  # when the tokens the code gives expire (how long it is kept spent)

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


class AuthlibRequest(OAuth2Request):  # type: ignore[misc]
    """An OAuth2Request of a Starlette request's query and (already read) form."""

    def __init__(
        self, method: str, uri: str, headers: Mapping[str, str], args: dict[str, str],
        form: dict[str, str], *, local_http: bool = False,
    ) -> None:  # fmt: skip
        # Authlib refuses http:// but for loopback hosts; `rideout up`'s app domain is a
        # name that resolves to loopback, served over http (local mode only).
        super().__init__(method, SECURE_PLACEHOLDER if local_http else uri, headers=headers)
        self.uri = uri
        self._args, self._form = args, form
        self.payload = BasicOAuth2Payload({**args, **form})

    @property
    def args(self) -> dict[str, str]:
        return self._args

    @property
    def form(self) -> dict[str, str]:
        return self._form


class S256ForAll(CodeChallenge):  # type: ignore[misc]
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


class CodeGrant(AuthorizationCodeGrant):  # type: ignore[misc]
    TOKEN_ENDPOINT_AUTH_METHODS: ClassVar = ["client_secret_basic", "client_secret_post", "none"]
    AUTHORIZATION_CODE_LENGTH = 43
    server: Provider

    def save_authorization_code(self, code: str, request: Any) -> None:
        self.server.save_code(code, request)

    def query_authorization_code(self, code: str, client: Client) -> Code | None:
        return self.server.take_code(code, client.get_client_id())

    def delete_authorization_code(self, authorization_code: Code) -> None:
        pass  # taken (read and deleted at once) when it was queried: single use

    def authenticate_user(self, authorization_code: Code) -> TokenGrant:
        return self.server.claim(authorization_code.request_id)


class RefreshTokenRecord:
    """A verified refresh token, as Authlib's refresh grant asks about it."""

    def __init__(self, claims: RoomClaims) -> None:
        self.claims = claims

    def check_client(self, client: Client) -> bool:
        return client.get_client_id() == self.claims.event_id  # aud: the client it went to

    def get_scope(self) -> str:
        return "openid"


class RefreshGrant(RefreshTokenGrant):  # type: ignore[misc]
    """``grant_type=refresh_token``: renews the session; the refresh token rotates (a
    new one in every answer, the presented one refused from then on)."""

    TOKEN_ENDPOINT_AUTH_METHODS: ClassVar = ["client_secret_basic", "client_secret_post", "none"]
    INCLUDE_NEW_REFRESH_TOKEN = True
    server: Provider

    def authenticate_refresh_token(self, refresh_token: str) -> RefreshTokenRecord | None:
        return self.server.refresh_claims(refresh_token)

    def authenticate_user(self, refresh_token: RefreshTokenRecord) -> Renewal:
        return self.server.renew(refresh_token.claims)

    def revoke_old_credential(self, refresh_token: RefreshTokenRecord) -> None:
        pass  # the renewal rotated it, atomically, before the new set was signed


class IdTokens:
    """How both grants sign their id tokens (Authlib's OpenIDToken hooks)."""

    provider: Provider

    def resolve_client_private_key(self, client: Client) -> Any:
        return self.provider.jose_key()

    def get_client_algorithm(self, client: Client) -> str:
        return "RS256"  # OpenID Registration's default: what every RP can verify

    def get_client_claims(self, client: Client) -> dict[str, Any]:
        return {"iss": self.provider.issuer, "aud": [client.get_client_id()]}

    def get_encode_header(self, client: Client) -> dict[str, str]:
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


class OpenID(IdTokens, OpenIDCode):  # type: ignore[misc]
    def __init__(self, provider: Provider) -> None:
        super().__init__(require_nonce=True)
        self.provider = provider

    def exists_nonce(self, nonce: str, request: Any) -> bool:
        return self.provider.nonce_used(nonce)


class RefreshedIdToken(IdTokens, OpenIDToken):  # type: ignore[misc]
    """The refresh grant's id token: no nonce (there is no authorization code)."""

    def __init__(self, provider: Provider) -> None:
        self.provider = provider


class Provider(Protocol):
    """What the grants and id-token hooks need of the provider (called from Authlib's
    worker thread)."""

    issuer: str
    id_keys: KeySource

    def save_code(self, code: str, request: Any) -> None: ...
    def take_code(self, code: str, client_id: str) -> Code | None: ...
    def claim(self, request_id: str) -> TokenGrant: ...
    def nonce_used(self, nonce: str) -> bool: ...
    def refresh_claims(self, token: str) -> RefreshTokenRecord | None: ...
    def renew(self, claims: RoomClaims) -> Renewal: ...
    def jose_key(self) -> Any: ...
