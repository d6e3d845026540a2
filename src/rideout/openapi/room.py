"""The waiting room's routes on a zone (:class:`rideout.waitingroom.extension.WaitingRoom`):
AWS Virtual Waiting Room's public API at its paths plus rideout's own, the private API
behind the admin token, the room's JWKS, and the OpenID adapter's endpoints per event
with a registered client (docs/waiting-room.md, docs/oidc.md)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from rideout import routes
from rideout.openapi._schema import (
    HTML,
    JSON,
    PROBLEM,
    Schema,
    answer,
    array,
    boolean,
    enum,
    header,
    header_param,
    integer,
    json_body,
    nullable,
    number,
    obj,
    operation,
    path,
    query,
    ref,
    string,
)
from rideout.openapi.zone import ADMIN_TOKEN, JWK, JWKS, SECURITY_SCHEMES

__all__ = ["room_fragment"]

EVENT_ID: Final = string(
    "1 to 64 letters, digits, `_ . -`, starting with a letter or digit",
    pattern="^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$",
    examples=["auction"],
)
REQUEST_ID: Final = string(
    "A UUID's shape, letters and digits",
    pattern="^[0-9A-Za-z]{8}-[0-9A-Za-z]{4}-[0-9A-Za-z]{4}-[0-9A-Za-z]{4}-[0-9A-Za-z]{12}$",
)
MAX_EPOCH: Final = 253_402_300_799.0
"""The latest time a setting may name (:data:`rideout.waitingroom.model.MAX_EPOCH`)."""
ROOM_TOKEN: Final = "roomAccessToken"
OIDC_CLIENT: Final = "oidcClient"

_ERROR: Final = obj({"error": string("What went wrong")}, description="`{error}`, as AWS's")
_PROBLEM: Final = obj(
    {"type": string(), "title": string(), "status": integer(), "detail": string()},
    {"original_status": nullable(integer())},
    description="An RFC 9457 problem document (the `Idempotency-Key` layer's refusals)",
)
_TOKEN_SET: Final = obj(
    {
        "access_token": string("JWT, `token_use: access`; the auction's `/ws` takes it"),
        "refresh_token": string("JWT, `token_use: refresh`; `POST /refresh_token` takes it"),
        "id_token": string("JWT, `token_use: id`"),
        "token_type": enum(("Bearer",)),
        "expires_in": integer("Seconds the access token has left (0 once expired)", minimum=0),
    }
)
_INLET: Final = obj(
    optional={
        "kind": enum(("none", "max_size", "periodic")),
        "period": number(minimum=0.05, maximum=1e9),
        "max_size": integer(minimum=0, maximum=10**12),
        "increment_by": integer(minimum=0, maximum=10**12),
        "start": number("Epoch seconds (0: now)", minimum=0, maximum=MAX_EPOCH),
        "end": number("Epoch seconds (0: no end), after `start`", minimum=0, maximum=MAX_EPOCH),
        "alarm": string("A rideout alarm's name, or ''", pattern="^[A-Za-z0-9_.:/-]{0,255}$"),
    },
    closed=True,
)
_SETTINGS: Final = {
    "validity": number("Seconds a token lives", minimum=1, maximum=86400),
    "expiry": number(
        "Seconds a servable position can take its token (0: never)", minimum=0, maximum=1e9
    ),
    "incr_on_expiry": boolean("Move the counter past expired and abandoned positions"),
    "abandon_after": number("Seconds without a poll (0: off)", minimum=0, maximum=1e9),
    "open": boolean("Whether arrivals are taken"),
    "auto_open_threshold": integer(minimum=0, maximum=10**12),
    "prequeue_until": number("Epoch seconds (0: off)", minimum=0, maximum=MAX_EPOCH),
    "pow_bits": integer("Proof-of-work bits `assign_queue_num` asks for", minimum=0, maximum=32),
    "max_session": number("Seconds a session may last (0: no cap)", minimum=0, maximum=1e9),
    "inlet": ref("Inlet"),
}
_EVENT: Final = obj({"event_id": EVENT_ID}, _SETTINGS, closed=True)
_EVENT_OUT: Final = obj({"event_id": EVENT_ID, **_SETTINGS}, closed=True)
_COUNTERS: Final = obj(
    {
        name: integer(minimum=0)
        for name in (
            "queue",
            "serving",
            "tokens",
            "expired",
            "abandoned",
            "completed",
            "sessions_abandoned",
            "max_expired",
            "prequeued",
            "waiting",
        )
    }
)

_RETRY_AFTER: Final = header("Seconds to wait", integer(), required=True)
_CORS: Final = header("`*`", enum(("*",)), required=True)
_IDEMPOTENCY_KEY: Final = header_param(
    "Idempotency-Key",
    string(minLength=1, maxLength=255),
    "A retry with the same key gets the first answer back (`Idempotent-Replayed: true`)",
)


def _error(
    description: str, *, problem: bool = False, headers: dict[str, Schema] | None = None
) -> Schema:
    return answer(
        description,
        ref("RoomError"),
        headers=headers or None,
        also={PROBLEM: ref("Problem")} if problem else None,
    )


def _unavailable(problem: bool = False) -> Schema:
    return _error(
        "The room's store cannot be reached, or is a read-only replica (writes)",
        problem=problem,
        headers={"Retry-After": _RETRY_AFTER},
    )


def _keyed(responses: dict[str, Schema]) -> dict[str, Schema]:
    """A POST's or PATCH's answers with the `Idempotency-Key` layer's own."""
    out = dict(responses)
    for status, what in (
        ("400", "A bad body, or an invalid `Idempotency-Key`"),
        ("409", "A request with this key is in flight, or its answer cannot be replayed"),
        ("413", "Body over `max_body` (4 KiB)"),
        ("422", "The key was used for another request"),
        ("503", "The room's store cannot be reached, or is a read-only replica"),
    ):
        if status in out:
            content = out[status].setdefault("content", {})
            content[PROBLEM] = {"schema": ref("Problem")}
        else:
            out[status] = _error(what, problem=True)
    return out


def _json(description: str, schema: Schema, **headers: Schema) -> Schema:
    return answer(description, schema, headers=headers or None)


def _linked(response: Schema, links: dict[str, Schema]) -> Schema:
    return {**response, "links": links}


def _to(operation_ids: Sequence[str], field: str, value: Schema) -> dict[str, Schema]:
    """Links to each of `operation_ids`, its `field` (parameters, requestBody) `value`."""
    return {op[0].upper() + op[1:]: {"operationId": op, field: value} for op in operation_ids}


_BODY_EVENT: Final = "$response.body#/event_id"
_POSITION: Final = {"event_id": _BODY_EVENT, "request_id": "$response.body#/api_request_id"}
_POSITION_LINKS: Final = {
    # A client follows an arrival with its polls, its token, and (the site) its end.
    **_to(("queueNum", "queuePosExpiry", "estimatedWait"), "parameters", _POSITION),
    **_to(("generateToken", "privateGenerateToken"), "requestBody", _POSITION),
    **_to(("updateSession",), "requestBody", {**_POSITION, "status": 1}),
}
_TOKEN_LINKS: Final = _to(
    ("refreshToken",),
    "requestBody",
    {"event_id": "$request.body#/event_id", "refresh_token": "$response.body#/refresh_token"},
)
_EVENT_LINKS: Final = {
    **_to(
        ("showEvent", "changeEvent", "openEvent", "closeEvent", "deleteEvent"),
        "parameters",
        {"event_id": _BODY_EVENT},
    ),
    **_to(("assignQueueNum",), "requestBody", {"event_id": _BODY_EVENT}),
    **_to(
        ("incrementServingCounter",), "requestBody", {"event_id": _BODY_EVENT, "increment_by": 1}
    ),
}
_Q_EVENT: Final = query("event_id", EVENT_ID, "The event", required=True)
_Q_REQUEST: Final = query("request_id", REQUEST_ID, "The position's request id", required=True)


def _public() -> dict[str, Any]:
    tags = ["waiting room"]
    arrival = obj(
        {"api_request_id": REQUEST_ID, "event_id": EVENT_ID},
        {"queue_number": integer(minimum=1), "entry_time": integer("Epoch seconds")},
    )
    paths: dict[str, Any] = {
        routes.ROOM_ASSIGN_QUEUE_NUM: {
            "post": operation(
                "A queue position for a new arrival",
                _keyed(
                    {
                        "200": _linked(
                            _json("The position (no number while pre-queued)", arrival),
                            _POSITION_LINKS,
                        ),
                        "400": _error("Unknown event, a bad body, or proof of work required"),
                        "403": _error("The room is closed"),
                        "503": _unavailable(),
                    }
                ),
                tags=tags,
                operation_id="assignQueueNum",
                parameters=[_IDEMPOTENCY_KEY],
                body=json_body(
                    obj(
                        {"event_id": EVENT_ID},
                        {"pow": string("`TIMESTAMP:NONCE`, where the event asks for one")},
                    ),
                    "The event to queue for",
                ),
            )
        },
        routes.ROOM_QUEUE_NUM: {
            "get": operation(
                "A position's number",
                {
                    "200": _json(
                        "The number; it never changes",
                        obj(
                            {
                                "queue_number": integer(minimum=1),
                                "entry_time": integer(),
                                "event_id": EVENT_ID,
                                "status": enum_int((1,)),
                            }
                        ),
                    ),
                    "202": _error("Pre-queued: numbers are given at the start"),
                    "400": _error("Bad or unknown ids"),
                    "404": _error("Unknown request id"),
                    "503": _unavailable(),
                },
                tags=tags,
                operation_id="queueNum",
                parameters=[_Q_EVENT, _Q_REQUEST],
            )
        },
        routes.ROOM_SERVING_NUM: {
            "get": operation(
                "The serving counter",
                {
                    "200": _json(
                        "A JSON string, as AWS's",
                        obj({"serving_counter": string(pattern="^[0-9]+$")}),
                    ),
                    "400": _error("Bad or unknown event"),
                    "503": _unavailable(),
                },
                tags=tags,
                operation_id="servingNum",
                parameters=[_Q_EVENT],
            )
        },
        routes.ROOM_WAITING_NUM: {
            "get": operation(
                "Positions still waiting",
                {
                    "200": _json("The count", obj({"waiting_num": integer(minimum=0)})),
                    "400": _error("Bad or unknown event"),
                    "503": _unavailable(),
                },
                tags=tags,
                operation_id="waitingNum",
                parameters=[_Q_EVENT],
            )
        },
        routes.ROOM_QUEUE_POS_EXPIRY: {
            "get": operation(
                "Seconds a served position has left to take its token",
                {
                    "200": _json("Seconds left", obj({"expires_in": integer(minimum=0)})),
                    "202": _error("Expiry not enabled, or not served yet"),
                    "400": _error("Bad or unknown ids"),
                    "404": _error("Unknown request id"),
                    "410": _error("The position has expired"),
                    "503": _unavailable(),
                },
                tags=tags,
                operation_id="queuePosExpiry",
                parameters=[_Q_EVENT, _Q_REQUEST],
            )
        },
        routes.ROOM_GENERATE_TOKEN: {
            "post": operation(
                "The token set of a served position (the same claims on every call)",
                _keyed(
                    {
                        "200": _linked(_json("The tokens", ref("TokenSet")), _TOKEN_LINKS),
                        "202": _error("Not served yet"),
                        "400": _error("Bad or unknown ids, or a bad body"),
                        "404": _error("Unknown request id"),
                        "410": _error("Expired, abandoned, or the session ended"),
                        "503": _unavailable(),
                    }
                ),
                tags=tags,
                operation_id="generateToken",
                parameters=[_IDEMPOTENCY_KEY],
                body=json_body(
                    obj({"event_id": EVENT_ID, "request_id": REQUEST_ID}), "The position"
                ),
            )
        },
        routes.ROOM_REFRESH_TOKEN: {
            "post": operation(
                "Renew an active session with its refresh token (rideout's; AWS has none)",
                _keyed(
                    {
                        "200": _json(
                            "A new set: a new `exp`, a new refresh token", ref("TokenSet")
                        ),
                        "400": _error("A malformed body"),
                        "401": _error("Not a refresh token of this event's room, or used already"),
                        "410": _error("The session expired, ended or reached `max_session`"),
                        "503": _unavailable(),
                    }
                ),
                tags=tags,
                operation_id="refreshToken",
                parameters=[_IDEMPOTENCY_KEY],
                body=json_body(
                    obj({"event_id": EVENT_ID, "refresh_token": string(minLength=1)}),
                    "The refresh token",
                ),
            )
        },
        routes.ROOM_PUBLIC_KEY: {
            "get": operation(
                "The room's current public key (what AWS's authorizer fetches)",
                {
                    "200": _json("The current JWK", ref("JWK")),
                    "400": _error("Bad or unknown event"),
                    "503": _unavailable(),
                },
                tags=tags,
                operation_id="publicKey",
                parameters=[_Q_EVENT],
            )
        },
        routes.ROOM_ESTIMATED_WAIT: {
            "get": operation(
                "The estimated wait, from the counter's moves over the last 5 minutes",
                {
                    "200": _json(
                        "`estimated_wait` null while nothing was admitted lately",
                        obj(
                            {
                                "event_id": EVENT_ID,
                                "serving_counter": integer(minimum=0),
                                "ahead": nullable(integer(minimum=0)),
                                "admitted_per_minute": number(minimum=0),
                                "estimated_wait": nullable(integer(minimum=0)),
                            }
                        ),
                    ),
                    "400": _error("Bad or unknown ids"),
                    "404": _error("Unknown request id"),
                    "503": _unavailable(),
                },
                tags=tags,
                operation_id="estimatedWait",
                parameters=[
                    _Q_EVENT,
                    query("request_id", REQUEST_ID, "A position (else: a new arrival's wait)"),
                ],
            )
        },
    }
    for route, item in list(paths.items()):
        item["options"] = operation(
            "CORS preflight: any origin, GET and POST",
            {
                "204": answer(
                    "Allowed",
                    headers={
                        "Access-Control-Allow-Origin": _CORS,
                        "Access-Control-Allow-Methods": header("GET, POST, OPTIONS", required=True),
                        "Access-Control-Allow-Headers": header(
                            "Content-Type, Idempotency-Key", required=True
                        ),
                    },
                )
            },
            tags=tags,
            operation_id="preflight" + route.replace("_", " ").title().replace(" ", "")[1:],
        )
    paths[routes.ROOM_JWKS] = {
        "get": operation(
            "The room's current and previous public keys (under its issuer)",
            {"200": _json("The room's JWKS", ref("JWKS"))},
            tags=tags,
            operation_id="roomJwks",
        )
    }
    return paths


def enum_int(values: Sequence[int]) -> Schema:
    return {"type": "integer", "enum": list(values)}


def _private() -> dict[str, Any]:
    tags = ["waiting room: private"]
    admin: list[dict[str, list[str]]] = [{ADMIN_TOKEN: []}]
    unauthorized = _error(
        "No or a wrong admin token",
        headers={"WWW-Authenticate": header("`Bearer realm=...`", required=True)},
    )

    def private(
        summary: str, responses: dict[str, Schema], *, keyed: bool = False, **kw: Any
    ) -> Schema:
        answers = {**responses, "401": unauthorized}
        if keyed:
            answers = _keyed(answers)
            kw["parameters"] = [*kw.get("parameters", ()), _IDEMPOTENCY_KEY]
        else:
            answers.setdefault("503", _unavailable())
        return operation(summary, answers, tags=tags, security=admin, **kw)

    event_path = path("event_id", EVENT_ID, "The event")
    settings = _json("The event's settings", ref("EventSettings"))
    return {
        routes.ROOM_PRIVATE_INCREMENT: {
            "post": private(
                "Move the serving counter (never below the highest position served, nor 0)",
                {
                    "200": _json("The counter", obj({"serving_num": integer(minimum=0)})),
                    "400": _error("Unknown event, or not an integer"),
                },
                keyed=True,
                operation_id="incrementServingCounter",
                body=json_body(
                    obj(
                        {
                            "event_id": EVENT_ID,
                            "increment_by": integer(minimum=-(10**12), maximum=10**12),
                        }
                    ),
                    "How far to move it",
                ),
            )
        },
        routes.ROOM_PRIVATE_UPDATE_SESSION: {
            "post": private(
                "End a session: completed (1) or abandoned (-1)",
                {
                    "200": _json(
                        "Ended",
                        obj(
                            {
                                "event_id": EVENT_ID,
                                "request_id": REQUEST_ID,
                                "status": enum_int((1, -1)),
                            }
                        ),
                    ),
                    "400": _error("Unknown event, bad ids, or a status other than 1 or -1"),
                    "404": _error("No session at 0 for this request id"),
                },
                keyed=True,
                operation_id="updateSession",
                body=json_body(
                    obj(
                        {
                            "event_id": EVENT_ID,
                            "request_id": REQUEST_ID,
                            "status": enum_int((1, -1)),
                        }
                    ),
                    "The session and its end",
                ),
            )
        },
        routes.ROOM_PRIVATE_ACTIVE_TOKENS: {
            "get": private(
                "Unexpired tokens whose session is still active",
                {
                    "200": _json("The count", obj({"active_tokens": integer(minimum=0)})),
                    "400": _error("Bad or unknown event"),
                },
                operation_id="numActiveTokens",
                parameters=[_Q_EVENT],
            )
        },
        routes.ROOM_PRIVATE_EXPIRED_TOKENS: {
            "get": private(
                "Request ids whose tokens expired, oldest expiry first, a page at a time",
                {
                    "200": _json(
                        "A bare array, as AWS's",
                        array(REQUEST_ID),
                        **{"Next-Cursor": header("The next page's `cursor`, while more remain")},
                    ),
                    "400": _error("Bad or unknown event, a bad `limit` or `cursor`"),
                },
                operation_id="expiredTokens",
                parameters=[
                    _Q_EVENT,
                    query("limit", integer(minimum=1, maximum=10000, default=1000), "Page size"),
                    query("cursor", string(), "From a previous page's `Next-Cursor`"),
                ],
            )
        },
        routes.ROOM_PRIVATE_RESET: {
            "post": private(
                "Zero the counters and forget every position (done when answered)",
                {
                    "200": _json("Done", obj({"message": enum(("Counters reset",))})),
                    "400": _error("Bad or unknown event"),
                },
                keyed=True,
                operation_id="resetInitialState",
                body=json_body(obj({"event_id": EVENT_ID}), "The event"),
            )
        },
        routes.ROOM_PRIVATE_GENERATE_TOKEN: {
            "post": private(
                "As the public `generate_token`, with overrides for this call only",
                {
                    "200": _json("The tokens", ref("TokenSet")),
                    "202": _error("Not served yet"),
                    "400": _error("Bad or unknown ids, or a bad override"),
                    "404": _error("Unknown request id"),
                    "410": _error("Expired, abandoned, or the session ended"),
                },
                keyed=True,
                operation_id="privateGenerateToken",
                body=json_body(
                    obj(
                        {"event_id": EVENT_ID, "request_id": REQUEST_ID},
                        {
                            "issuer": string("The tokens' `iss`", minLength=1, maxLength=512),
                            "validity_period": number(
                                "Seconds (the position's first token only)",
                                minimum=1,
                                maximum=86400,
                            ),
                        },
                    ),
                    "The position",
                ),
            )
        },
        routes.ROOM_PRIVATE_EVENTS: {
            "get": private(
                "Every event's settings",
                {"200": _json("The events", obj({"events": array(ref("EventSettings"))}))},
                operation_id="listEvents",
            ),
            "post": private(
                "Create an event",
                {
                    "201": _linked(_json("Created", ref("EventSettings")), _EVENT_LINKS),
                    "400": _error("A bad setting (named)"),
                    "409": _error("The event exists", problem=True),
                },
                keyed=True,
                operation_id="createEvent",
                body=json_body(_EVENT, "The settings (`event_id` required)"),
            ),
        },
        routes.ROOM_PRIVATE_EVENT: {
            "get": private(
                "An event's settings and counters",
                {
                    "200": _json(
                        "The event",
                        obj(
                            {
                                "event": ref("EventSettings"),
                                "counters": _COUNTERS,
                                "active_tokens": integer(minimum=0),
                                "holding": integer(minimum=0),
                            }
                        ),
                    ),
                    "400": _error("Bad or unknown event"),
                },
                operation_id="showEvent",
                parameters=[event_path],
            ),
            "patch": private(
                "Change an event's settings (`inlet` fields merge)",
                {"200": settings, "400": _error("Unknown event, or a bad setting")},
                keyed=True,
                operation_id="changeEvent",
                parameters=[event_path],
                body=json_body(
                    obj(optional={"event_id": EVENT_ID, **_SETTINGS}, closed=True),
                    "The settings to change",
                ),
            ),
            "delete": private(
                "Delete an event: every position, token and record",
                {"204": answer("Deleted"), "400": _error("Bad or unknown event")},
                operation_id="deleteEvent",
                parameters=[event_path],
            ),
        },
        routes.ROOM_PRIVATE_EVENT_OPEN: {
            "post": private(
                "Take arrivals again",
                {"200": settings, "400": _error("Bad or unknown event")},
                keyed=True,
                operation_id="openEvent",
                parameters=[event_path],
            )
        },
        routes.ROOM_PRIVATE_EVENT_CLOSE: {
            "post": private(
                "Refuse new arrivals (403); those queued keep their positions",
                {"200": settings, "400": _error("Bad or unknown event")},
                keyed=True,
                operation_id="closeEvent",
                parameters=[event_path],
            )
        },
    }


def _oidc(events: Sequence[str]) -> dict[str, Any]:
    tags = ["openid"]
    event = path(
        "event_id",
        {**EVENT_ID, "enum": list(events)},
        "An event with a registered client (the client id)",
    )
    page_error = answer(
        "An error page (the request cannot go back to the relying party)", string(), media=HTML
    )
    unavailable = answer(
        "The room's store cannot be reached, or is a read-only replica",
        ref("OAuthError"),
        headers={"Retry-After": _RETRY_AFTER},
    )
    redirect = answer(
        "On to the next step (or an RFC 6749 error to a validated redirect URI)",
        headers={"Location": header("Where to go", required=True)},
    )
    authz = query("authz", string(), "The waiting authorize request", required=True)
    oauth_error = answer("An RFC 6749 error", ref("OAuthError"))
    no_client = answer("No OpenID client for this event", ref("OAuthError"))
    if not events:
        return {}
    paths = {
        routes.OIDC_DISCOVERY: {
            "get": operation(
                "The event's OpenID provider metadata",
                {"200": answer("Discovery document", obj({"issuer": string()}))},
                tags=tags,
                operation_id="oidcDiscovery",
                parameters=[event],
            )
        },
        routes.OIDC_JWKS: {
            "get": operation(
                "The id tokens' keys, then the room's",
                {"200": answer("JWKS", ref("JWKS"))},
                tags=tags,
                operation_id="oidcJwks",
                parameters=[event],
            )
        },
        routes.OIDC_AUTHORIZE: {
            "get": operation(
                "Validate an authorize request and send the browser into the room",
                {"302": redirect, "400": page_error, "503": unavailable},
                tags=tags,
                operation_id="oidcAuthorize",
                parameters=[
                    event,
                    *(
                        query(name, string(), what)
                        for name, what in (
                            ("client_id", "The event id"),
                            ("redirect_uri", "A registered redirect URI, exactly"),
                            ("response_type", "`code`"),
                            ("scope", "Contains `openid`"),
                            ("state", "Passed back"),
                            ("nonce", "Required; in the id token"),
                            ("code_challenge", "PKCE, required"),
                            ("code_challenge_method", "`S256`"),
                        )
                    ),
                ],
            )
        },
        routes.OIDC_WAIT: {
            "get": operation(
                "The waiting page of an authorize request (takes its position on the first visit)",
                {
                    "200": answer("The waiting-room page", string(), media=HTML),
                    "400": page_error,
                    "403": page_error,
                    "404": page_error,
                    "410": page_error,
                    "503": unavailable,
                },
                tags=tags,
                operation_id="oidcWait",
                parameters=[event, authz],
            )
        },
        routes.OIDC_ENTER: {
            "post": operation(
                "The page's arrival for a waiting authorize request (one position per request)",
                {
                    "200": answer(
                        "The position, as `assign_queue_num` answers it",
                        obj(
                            {"api_request_id": REQUEST_ID, "event_id": EVENT_ID},
                            {"queue_number": integer(minimum=1), "entry_time": integer()},
                        ),
                    ),
                    "400": _error("Not a JSON object"),
                    "403": _error("Not from an allowed Origin, or the room is closed"),
                    "404": _error("Unknown or expired authorize request"),
                    "413": _error("Body over 8 KiB"),
                    "503": _error("The room's store cannot be reached, or is a replica"),
                },
                tags=tags,
                operation_id="oidcEnter",
                parameters=[
                    event,
                    header_param("Origin", string(), "The page's origin", required=True),
                ],
                body=json_body(obj({"authz": string()}), "`{authz}`, any content type"),
            )
        },
        routes.OIDC_RESUME: {
            "get": operation(
                "Back from the room: the code to the relying party once served",
                {"302": redirect, "400": page_error, "503": unavailable},
                tags=tags,
                operation_id="oidcResume",
                parameters=[event, authz],
            )
        },
        routes.OIDC_TOKEN: {
            "post": operation(
                "The code exchange and the refresh grant",
                {
                    "200": answer(
                        "The tokens",
                        obj(
                            {
                                "access_token": string(),
                                "token_type": enum(("Bearer",)),
                                "expires_in": integer(minimum=0),
                                "scope": string(),
                            },
                            {"refresh_token": string(), "id_token": string()},
                        ),
                    ),
                    "400": oauth_error,
                    "401": oauth_error,
                    "413": oauth_error,
                    "415": oauth_error,
                    "503": unavailable,
                },
                tags=tags,
                operation_id="oidcToken",
                description="Client authentication: `client_secret_basic` (the scheme "
                "below), `client_secret_post` (in the form), or none for a public client.",
                parameters=[event],
                security=[{OIDC_CLIENT: []}, {}],
                body={
                    "required": True,
                    "content": {
                        "application/x-www-form-urlencoded": {
                            "schema": obj(
                                {"grant_type": enum(("authorization_code", "refresh_token"))},
                                {
                                    n: string()
                                    for n in (
                                        "code",
                                        "redirect_uri",
                                        "code_verifier",
                                        "refresh_token",
                                        "scope",
                                        "client_id",
                                        "client_secret",
                                    )
                                },
                            )
                        }
                    },
                },
            )
        },
        routes.OIDC_USERINFO: {
            method: operation(
                "The claims of a valid access token whose session is still active",
                {
                    "200": answer(
                        "The claims",
                        obj({"sub": REQUEST_ID, "queue_position": integer(minimum=1)}),
                    ),
                    "401": answer(
                        "No, an invalid or expired token, or the session ended",
                        ref("OAuthError"),
                        headers={"WWW-Authenticate": header("`Bearer error=...`", required=True)},
                    ),
                    "503": unavailable,
                },
                tags=tags,
                operation_id=f"oidcUserinfo{method.title()}",
                parameters=[event],
                security=[{ROOM_TOKEN: []}],
            )
            for method in ("get", "post")
        },
    }
    # A path under /oidc/ that no provider has (an event without a client): 404, JSON.
    for item in paths.values():
        for op in item.values():
            known = op["responses"].get("404", no_client)
            content = {JSON: {"schema": ref("OAuthError")}, **known.get("content", {})}
            op["responses"]["404"] = {**known, "content": content}
    return paths


def room_fragment(oidc_events: Sequence[str] = ()) -> dict[str, Any]:
    """The room's paths and components; the OpenID adapter's for `oidc_events` (the
    events with a registered client), none without one."""
    schemes = {
        **SECURITY_SCHEMES,
        ROOM_TOKEN: {
            "type": "http",
            "scheme": "bearer",
            "bearerFormat": "JWT",
            "description": "A room access token (`generate_token`, or the OpenID `/token`)",
        },
    }
    if oidc_events:
        schemes[OIDC_CLIENT] = {
            "type": "http",
            "scheme": "basic",
            "description": "`client_secret_basic`: the event id and `KEYS_DIR/oidc-EVENT.secret`",
        }
    return {
        "paths": {**_public(), **_private(), **_oidc(oidc_events)},
        "components": {
            "schemas": {
                "RoomError": _ERROR,
                "Problem": _PROBLEM,
                "TokenSet": _TOKEN_SET,
                "EventSettings": _EVENT_OUT,
                "Inlet": _INLET,
                "JWK": JWK,
                "JWKS": JWKS,
                "OAuthError": obj({"error": string()}, {"error_description": string()}),
            },
            "securitySchemes": schemes,
        },
        "tags": [
            {"name": "waiting room", "description": "AWS Virtual Waiting Room's public API"},
            {"name": "waiting room: private", "description": "Behind the admin token"},
            *(
                [{"name": "openid", "description": "The OpenID Connect adapter, per event"}]
                if oidc_events
                else []
            ),
        ],
    }
