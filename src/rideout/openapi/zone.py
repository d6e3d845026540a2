"""A zone's own routes (:func:`rideout.realtime.app.create_app`): probes, metrics, the
auction's keys, the page's settings, the demo sign-in and the admin switch. The
WebSocket API at ``/ws`` is described in docs/realtime-api.md (OpenAPI describes no
WebSocket); the pages and their scripts at ``/`` are files, not an API."""

from __future__ import annotations

from typing import Any, Final

from rideout import routes
from rideout.openapi._schema import (
    DOCUMENTS_TAG,
    answer,
    array,
    boolean,
    document_path_item,
    enum,
    header,
    header_param,
    integer,
    json_body,
    metrics_path_item,
    nullable,
    number,
    obj,
    operation,
    ref,
    string,
)

__all__ = ["ADMIN_TOKEN", "SECURITY_SCHEMES", "zone_fragment"]

ADMIN_TOKEN: Final = "adminToken"
"""The security scheme of the deployment's admin token (``KEYS_DIR/admin-token``)."""

SECURITY_SCHEMES: Final[dict[str, Any]] = {
    ADMIN_TOKEN: {
        "type": "http",
        "scheme": "bearer",
        "description": "The deployment's admin token (`KEYS_DIR/admin-token`), compared in "
        "constant time; never served over HTTP. AWS's private API takes IAM (SigV4) here.",
    },
}

_MODES: Final = ("serving", "degraded", "draining")

ERROR: Final = obj(
    {"error": string("A machine-readable code")},
    {"message": string("What went wrong, and what to do")},
    description="An error: `{error, message}`",
)
JWK: Final = obj(
    {"kty": string(), "kid": string("RFC 7638 thumbprint")},
    {n: string() for n in ("alg", "use", "crv", "x", "y", "n", "e")},
    description="A public JSON Web Key",
)
JWKS: Final = obj({"keys": array(ref("JWK"))}, description="A JSON Web Key Set")


def _error(description: str, **headers: Any) -> dict[str, Any]:
    return answer(description, ref("ZoneError"), headers=headers or None)


_RETRY_AFTER: Final = header("Seconds to wait before retrying", integer(), required=True)


def zone_fragment() -> dict[str, Any]:
    """The zone's own paths, with the components they name."""
    health = obj(
        {
            "status": enum(("ok", "degraded")),
            "region": string(),
            "zone": string(),
            "role": enum(("primary", "secondary")),
            "mode": enum(_MODES),
            "epoch": nullable(integer()),
            "connections": integer(minimum=0),
            "full": boolean("At the cap for ordinary connections"),
            "replication": obj(
                {"mode": enum(("async", "sync")), "unreplicated_acks": integer(minimum=0)}
            ),
            "redis": obj(description="The zone's Redis: reachable, role, replication"),
            "tasks_down": array(string()),
            "tasks": obj(description="Each background task's state"),
            "uptime": number(minimum=0),
        }
    )
    ready = obj(
        {
            "status": enum(("ready", "not_ready")),
            "mode": enum(_MODES),
            "redis_role": nullable(string()),
            "epoch": nullable(integer()),
        },
        {"message": string("Why not ready")},
    )
    mode_view = obj(
        {
            "region": string(),
            "zone": string(),
            "mode": enum(_MODES),
            "connections": integer(minimum=0),
        }
    )
    admin: list[dict[str, list[str]]] = [{ADMIN_TOKEN: []}]
    probes = ["probes"]
    paths: dict[str, Any] = {
        routes.HEALTH: {
            "get": operation(
                "Region, zone, role, epoch, the Redis link and the background tasks",
                {
                    "200": answer("Redis answers and every critical task runs", health),
                    "503": answer("Redis does not answer, or a critical task is down", health),
                },
                tags=probes,
                operation_id="zoneHealth",
            )
        },
        routes.LIVE: {
            "get": operation(
                "200 while the process runs its event loop",
                {"200": answer("Live", obj({"status": enum(("live",))}))},
                tags=probes,
                operation_id="zoneLive",
            )
        },
        routes.READY: {
            "get": operation(
                "200 while this server can take connections",
                {
                    "200": answer("Ready", ready),
                    "503": answer("Not ready (draining, Redis, the epoch, a task)", ready),
                },
                tags=probes,
                operation_id="zoneReady",
            )
        },
        routes.METRICS: metrics_path_item("zoneMetrics"),
        routes.JWKS: {
            "get": operation(
                "The public keys the auction's access tokens are verified with",
                {"200": answer("The auction's JWKS", ref("JWKS"))},
                tags=["auction"],
                operation_id="auctionJwks",
            )
        },
        routes.BROWSER_CONFIG: {
            "get": operation(
                "What the auction page needs: the name to resolve, where, and the timings",
                {
                    "200": answer(
                        "The page's settings",
                        obj(
                            {
                                "app_domain": string(),
                                "app_port": integer(),
                                "doh_url": string(),
                                "heartbeat_interval": number(),
                                "heartbeat_timeout": number(),
                                "heartbeat_failures": integer(),
                                "backoff_base": number(),
                                "backoff_cap": number(),
                                "region": string(),
                                "zone": string(),
                            }
                        ),
                    )
                },
                tags=["auction"],
                operation_id="browserConfig",
            )
        },
        routes.DEMO_TOKEN: {
            "post": operation(
                "The demo page's sign-in: a token for a bidder name nobody else holds",
                {
                    "200": answer(
                        "An access token for `/ws`; the name's claim in an HttpOnly cookie",
                        obj({"token": string("A JWT")}),
                    ),
                    "400": _error("Not `{name}` of 1 to 32 of `A-Z a-z 0-9 _ -`, or not JSON"),
                    "403": _error("Not from one of the deployment's own pages, or a reserved name"),
                    "404": _error("Demo tokens are off here (`[auth] demo_tokens`)"),
                    "409": _error("The name is someone else's"),
                    "413": _error("Body over 1024 bytes"),
                    "429": _error("Too many demo names held", **{"Retry-After": _RETRY_AFTER}),
                    "503": _error(
                        "The region is on standby, or its store does not answer",
                        **{"Retry-After": _RETRY_AFTER},
                    ),
                },
                tags=["auction"],
                operation_id="demoToken",
                description="Only from the deployment's own pages (`Origin`); the name is "
                "claimed by its first requester (cookie `rideout_demo`) for as long as its "
                "tokens live. See docs/realtime-api.md.",
                parameters=[
                    header_param("Origin", string(), "The page asking (a browser sends it)")
                ],
                body=json_body(
                    obj({"name": string(pattern="^[A-Za-z0-9_-]{1,32}$")}), "The bidder name"
                ),
            )
        },
        routes.ADMIN_MODE: {
            "get": operation(
                "The zone's mode (local mode only)",
                {
                    "200": answer("The zone's mode", mode_view),
                    "401": _error(
                        "No or a wrong admin token",
                        **{"WWW-Authenticate": header("`Bearer`", required=True)},
                    ),
                    "404": _error("Not in local mode"),
                },
                tags=["admin"],
                operation_id="getZoneMode",
                security=admin,
            ),
            "post": operation(
                "Degrade, drain or serve the zone (local mode only, for drills)",
                {
                    "200": answer("The zone's new mode", mode_view),
                    "400": _error("Not a mode, a bad `drain_over`, or not JSON"),
                    "401": _error(
                        "No or a wrong admin token",
                        **{"WWW-Authenticate": header("`Bearer`", required=True)},
                    ),
                    "404": _error("Not in local mode"),
                    "413": _error("Body over 4096 bytes"),
                },
                tags=["admin"],
                operation_id="setZoneMode",
                security=admin,
                body=json_body(
                    obj(
                        {"mode": enum(_MODES)},
                        {
                            "drain_over": number(
                                "Close the connections over this many seconds (with "
                                "`serving` or `draining`)",
                                minimum=0,
                                maximum=3600,
                            )
                        },
                    ),
                    "The mode to switch to",
                ),
            ),
        },
        routes.OPENAPI: document_path_item(),
    }
    return {
        "paths": paths,
        "components": {
            "schemas": {"ZoneError": ERROR, "JWK": JWK, "JWKS": JWKS},
            "securitySchemes": SECURITY_SCHEMES,
        },
        "tags": [
            {"name": "probes", "description": "Health, liveness, readiness, metrics"},
            {"name": "auction", "description": "The auction's keys, page settings, demo sign-in"},
            {"name": "admin", "description": "Drill switches, behind the admin token"},
            DOCUMENTS_TAG,
        ],
    }
