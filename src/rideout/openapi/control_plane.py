"""The control plane's routes (:func:`rideout.controlplane.app.create_app`,
docs/control-plane.md): probes, the status and summary, the canaries' signed ingest, the
writer, DNS-over-HTTPS, the dashboard's feed, settings and login, chaos and zone
evacuation. The dashboard's static files under ``/static`` are files, not an API."""

from __future__ import annotations

from typing import Any, Final

from rideout import routes
from rideout.openapi import document
from rideout.openapi._schema import (
    DOCUMENTS_TAG,
    HTML,
    Schema,
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
    path,
    query,
    ref,
    string,
)
from rideout.openapi.zone import ADMIN_TOKEN, SECURITY_SCHEMES

__all__ = ["control_plane_document"]

CANARY: Final = "canarySignature"
SESSION: Final = "operatorSession"
CSRF: Final = "csrfToken"

_ERROR: Final = obj(
    {"error": string("A machine-readable code")},
    {"message": string("What went wrong, and what to do")},
    description="An error: `{error, message}`",
)
_RETRY_AFTER: Final = header("Seconds to wait", integer(), required=True)


def _error(description: str, **headers: Schema) -> Schema:
    return answer(description, ref("Error"), headers=headers or None)


def _zone_view() -> Schema:
    return obj(
        {
            "zone": string(),
            "region": string(),
            "evacuated": boolean(),
            "full": boolean(),
            "evacuation": nullable(
                obj(
                    {
                        "zone": string(),
                        "region": string(),
                        "since": number(),
                        "operator": string(),
                        "reason": enum(("manual", "autoshift", "practice")),
                        "expires_at": nullable(number()),
                    }
                )
            ),
            "drain": nullable(obj(description="The zone's latest drain and its steps")),
        }
    )


def _paths() -> dict[str, Any]:
    probes, feed, ops = ["probes"], ["state"], ["operations"]
    admin: list[dict[str, list[str]]] = [{ADMIN_TOKEN: []}]
    machine = "Refused to browsers (`Origin`, `Sec-Fetch-*`: 403) and to another `Host`."
    unauthorized = _error("No or a wrong admin token")
    zone_id = path(
        "zone_id",
        string(pattern="^[a-z0-9][a-z0-9-]{0,62}$", examples=["use1-az1"]),
        "A configured zone (`use1-az1`)",
    )
    tasks = obj(
        {
            "status": enum(("ok", "degraded")),
            "app_domain": string(),
            "tasks_down": array(string()),
            "tasks": obj(description="Each background task's state"),
        }
    )
    ready = obj(
        {"rounds": integer(minimum=0), "status": enum(("active", "standby", "stopped"))},
        {"message": string(), "lease": obj(description="The lease, in external mode")},
    )
    return {
        routes.HEALTH: {
            "get": operation(
                "200 while every critical background task runs",
                {"200": answer("Healthy", tasks), "503": answer("A critical task is down", tasks)},
                tags=probes,
                operation_id="controlPlaneHealth",
            )
        },
        routes.LIVE: {
            "get": operation(
                "200 while the control loop runs",
                {
                    "200": answer("Live", obj({"status": enum(("live",))})),
                    "503": answer("Stopped", obj({"status": enum(("stopped",))})),
                },
                tags=probes,
                operation_id="controlPlaneLive",
            )
        },
        routes.READY: {
            "get": operation(
                "200 while this instance acts (holds the lease, or runs alone)",
                {"200": answer("Acting", ready), "503": answer("Standby, or stopped", ready)},
                tags=probes,
                operation_id="controlPlaneReady",
            )
        },
        routes.METRICS: metrics_path_item("controlPlaneMetrics"),
        routes.STATUS: {
            "get": operation(
                "The deployment's processes, with the control plane's summary",
                {"200": answer("The inventory's view", obj({"control_plane": obj()}))},
                tags=feed,
                operation_id="status",
            )
        },
        routes.SUMMARY: {
            "get": operation(
                "Alarms, health checks, the DNS answer, the failover controller",
                {"200": answer("The summary", obj())},
                tags=feed,
                operation_id="summary",
            )
        },
        routes.WRITER: {
            "get": operation(
                "The writer's region and epoch, what app servers fence their writes with",
                {
                    "200": answer(
                        "The writer",
                        obj(
                            {
                                "region": string(),
                                "epoch": integer(),
                                "redis": nullable(string("`ADDRESS:PORT`")),
                            }
                        ),
                    ),
                    "503": _error("The writer is not known yet"),
                },
                tags=feed,
                operation_id="writer",
            )
        },
        routes.METRICS_INGEST: {
            "post": operation(
                "A canary's datapoints (CloudWatch's PutMetricData shape), signed",
                {
                    "200": answer("Stored", obj({"stored": integer(minimum=0)})),
                    "400": _error("Not a PutMetricData body"),
                    "401": _error("Unsigned, forged, stale or replayed"),
                    "403": _error("From a browser, or about another region than the signer's"),
                    "413": _error("Body over 1 MiB"),
                    "415": _error("Not `application/json`"),
                    "503": _error("Too many requests to check at once"),
                },
                tags=feed,
                operation_id="putMetricData",
                description="An HMAC-SHA256 over the body, a timestamp and a nonce, with "
                "the region's key (`rideout.auth.request_signing`). " + machine,
                security=[{CANARY: []}],
                parameters=[
                    header_param(name, string(), what, required=True)
                    for name, what in (
                        ("X-Rideout-Region", "The signer's region"),
                        ("X-Rideout-Timestamp", "Unix seconds"),
                        ("X-Rideout-Nonce", "Once per request"),
                    )
                ],
                body=json_body(
                    obj(
                        {
                            "Namespace": string(minLength=1, examples=["App"]),
                            "MetricData": array(
                                obj(
                                    {
                                        "MetricName": string(
                                            minLength=1, examples=["WebSocketHealth", "ZoneFull"]
                                        ),
                                        "Value": number(examples=[1, 0]),
                                    },
                                    {
                                        "Dimensions": array(
                                            obj({"Name": string(), "Value": string()})
                                        ),
                                        "Timestamp": number("Unix seconds"),
                                    },
                                ),
                                minItems=1,
                                maxItems=1000,
                            ),
                        }
                    ),
                    "PutMetricData: `ApiId` = the signer's region, `Zone`",
                ),
            )
        },
        routes.RESOLVE: {
            "get": operation(
                "DNS-over-HTTPS JSON (the Google and Cloudflare format), for browsers",
                {
                    "200": answer(
                        "The answer",
                        obj(
                            {"Status": integer(), "Question": array(obj())},
                            {"Answer": array(obj()), "Authority": array(obj())},
                        ),
                        media="application/dns-json",
                    ),
                    "400": answer("A bad name or type", obj({"error": string()})),
                },
                tags=["dns"],
                operation_id="resolve",
                parameters=[
                    query("name", string(), "The name to resolve", required=True),
                    query("type", string(), "A type's name or number (default A)"),
                    query("cd", string(), "Checking disabled (`1`, `true`)"),
                ],
            ),
            "options": operation(
                "CORS preflight",
                {"204": answer("Allowed")},
                tags=["dns"],
                operation_id="resolvePreflight",
            ),
        },
        routes.STREAM: {
            "get": operation(
                "Server-sent events: one shared `summary` frame per period",
                {
                    "200": answer("The stream", string(), media="text/event-stream"),
                    "403": _error("Another `Host`"),
                    "503": _error("Every reader's seat is taken", **{"Retry-After": _RETRY_AFTER}),
                },
                tags=feed,
                operation_id="stream",
            )
        },
        routes.DASHBOARD: {
            "get": operation(
                "What the dashboard's script needs (same Host only)",
                {
                    "200": answer(
                        "Chaos on or off, the session's CSRF token",
                        obj(
                            {
                                "local": boolean(),
                                "regions": array(string()),
                                "session": boolean(),
                                "csrf": nullable(string()),
                                "login": string(),
                            }
                        ),
                    ),
                    "403": _error("Another `Host`"),
                },
                tags=ops,
                operation_id="dashboardConfig",
            )
        },
        routes.LOGIN_CODES: {
            "post": operation(
                "A one-time dashboard login link (for `rideout dashboard login`)",
                {
                    "200": answer("The link", obj({"url": string(), "expires_at": number()})),
                    "401": unauthorized,
                    "403": _error("From a browser, or another `Host`"),
                },
                tags=ops,
                operation_id="loginCodes",
                description=machine,
                security=admin,
            )
        },
        routes.LOGIN: {
            "get": operation(
                "Redeem a login link once for an operator session cookie",
                {
                    "303": answer(
                        "To the dashboard, with the session cookie",
                        headers={
                            "Location": header("`/`", required=True),
                            "Set-Cookie": header("`rideout_operator`", required=True),
                        },
                    ),
                    "401": _error("Unknown, used or expired link"),
                    "403": _error("Another `Host`"),
                },
                tags=ops,
                operation_id="login",
                parameters=[query("code", string(), "The link's code", required=True)],
            )
        },
        routes.CHAOS: {
            "post": operation(
                "One chaos command for the local supervisor",
                {
                    "200": answer("Done", obj({"message": string()})),
                    "400": _error("Not `{op, region}`, or not JSON"),
                    "401": _error("No credential, or a wrong admin token"),
                    "403": _error("Another `Host` or `Origin`, or a missing or wrong CSRF token"),
                    "404": _error("Not in local mode"),
                    "409": _error("The supervisor refused or failed (its message)"),
                    "413": _error("Body over 4096 bytes"),
                    "415": _error("Not `application/json`"),
                    "501": _error("No local supervisor behind this control plane"),
                },
                tags=ops,
                operation_id="chaos",
                description="The admin token, or an operator session with its CSRF token "
                "(`X-CSRF-Token`) from the dashboard's own `Origin`.",
                security=[*admin, {SESSION: [], CSRF: []}],
                body=json_body(
                    obj(
                        {
                            "op": enum(("kill", "freeze", "throttle", "kill-redis", "restore")),
                            "region": string(),
                        }
                    ),
                    "The command",
                ),
            )
        },
        routes.DASHBOARD_ZONES: {
            "post": operation(
                "Evacuate or recover a zone from the dashboard, through the evacuation engine",
                {
                    "200": answer(
                        "Done", obj({"message": string(), "changed": {"type": "integer"}})
                    ),
                    "400": _error("Not `{op, zone}` (no other field), or not JSON"),
                    "401": _error("No credential, or a wrong admin token"),
                    "403": _error("Another `Host` or `Origin`, or a missing or wrong CSRF token"),
                    "404": _error("No such zone in this deployment"),
                    "409": _error("Refused: the zone's lock is held, or the last serving zone"),
                    "413": _error("Body over 4096 bytes"),
                    "415": _error("Not `application/json`"),
                },
                tags=["zones"],
                operation_id="dashboardZone",
                description="The dashboard's zone buttons: recorded in the evacuation "
                "ledger with operator `dashboard`, so `rideout recover` undoes them. The "
                "admin token, or an operator session with its CSRF token (`X-CSRF-Token`) "
                "from the dashboard's own `Origin`.",
                security=[*admin, {SESSION: [], CSRF: []}],
                body=json_body(
                    obj({"op": enum(("evacuate", "recover")), "zone": string()}),
                    "What to do, to which zone",
                ),
            )
        },
        routes.ZONES: {
            "get": operation(
                "Every zone: evacuated or not, since when, by whom, why, its drain",
                {"200": answer("The zones", obj({"zones": array(ref("ZoneView"))}))},
                tags=["zones"],
                operation_id="zones",
            )
        },
        routes.ZONE_EVACUATE: {
            "post": operation(
                "Take a zone out of DNS and drain its clients to the region's other zones",
                {
                    "200": answer("The zone", ref("ZoneView")),
                    "400": _error("An unknown field, or a field of the wrong type or range"),
                    "401": unauthorized,
                    "403": _error("From a browser, or another `Host`"),
                    "404": _error("No such zone"),
                    "409": _error("The region's last serving zone"),
                    "413": _error("Body over 4096 bytes"),
                    "415": _error("Not `application/json`"),
                },
                tags=["zones"],
                operation_id="evacuateZone",
                description=machine,
                security=admin,
                parameters=[zone_id],
                body=json_body(
                    obj(
                        optional={
                            "operator": string(minLength=1),
                            "reason": enum(("manual", "autoshift", "practice")),
                            "expires_in": nullable(number("Seconds", exclusiveMinimum=0)),
                        },
                        closed=True,
                    ),
                    "Options (an empty body: none)",
                    required=False,
                ),
            )
        },
        routes.ZONE_RECOVER: {
            "post": operation(
                "Answer a zone's address in DNS again",
                {
                    "200": answer("The zone", ref("ZoneView")),
                    "401": unauthorized,
                    "403": _error("From a browser, or another `Host`"),
                    "404": _error("No such zone"),
                },
                tags=["zones"],
                operation_id="recoverZone",
                description=machine,
                security=admin,
                parameters=[zone_id],
            )
        },
        "/": {
            "get": operation(
                "The operations dashboard",
                {"200": answer("The page", string(), media=HTML)},
                tags=ops,
                operation_id="dashboard",
            )
        },
        routes.OPENAPI: document_path_item(),
    }


def control_plane_document() -> dict[str, Any]:
    """The control plane's OpenAPI 3.1 document."""
    schemes = {
        **SECURITY_SCHEMES,
        CANARY: {
            "type": "apiKey",
            "in": "header",
            "name": "X-Rideout-Signature",
            "description": "A region's canary key (`KEYS_DIR/canary-REGION.key`): HMAC-SHA256 "
            "over the method, path, timestamp, nonce and body",
        },
        SESSION: {
            "type": "apiKey",
            "in": "cookie",
            "name": "rideout_operator",
            "description": "An operator session, from a `/login` link",
        },
        CSRF: {
            "type": "apiKey",
            "in": "header",
            "name": "X-CSRF-Token",
            "description": "The session's CSRF token (`GET /v1/dashboard`)",
        },
    }
    fragment = {
        "paths": _paths(),
        "components": {
            "schemas": {"Error": _ERROR, "ZoneView": _zone_view()},
            "securitySchemes": schemes,
        },
        "tags": [
            {"name": "probes", "description": "Health, liveness, readiness, metrics"},
            {"name": "state", "description": "What the control plane knows, and its ingest"},
            {"name": "dns", "description": "DNS-over-HTTPS"},
            {"name": "operations", "description": "The dashboard, its login, chaos"},
            {"name": "zones", "description": "Zone evacuation"},
            DOCUMENTS_TAG,
        ],
    }
    return document(
        "rideout control plane",
        "Failure detection, failover, DNS and zone evacuation for a rideout deployment "
        "(docs/control-plane.md). DNS itself is served on UDP and TCP.",
        fragment,
    )
