"""The OpenAPI documents: valid OpenAPI 3.1 (openapi-spec-validator), served as built at
``GET /openapi.json``, and describing exactly the routes the apps mount: a route without
its operation in the document fails, and so does an operation without its route."""

from __future__ import annotations

import json
import re
from typing import Any

import httpx
from openapi_spec_validator import validate
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from rideout import openapi, routes
from rideout.openapi.control_plane import control_plane_document
from rideout.openapi.room import room_fragment
from rideout.realtime.app import zone_document
from rideout.waitingroom.extension import OIDC_OTHER
from tests.openapi.conftest import Live, operations

# What the documents leave out, on purpose. Nothing else may be missing.
# - HEAD: Starlette answers it for every GET route (the GET's operation describes it).
# - Static files (the auction and room pages and their scripts at a zone's `/`, the
#   dashboard's `/static`): files for browsers, not an API.
# - `/ws`, the WebSocket API: OpenAPI describes no WebSocket (docs/realtime-api.md); the
#   zone's ASGI app takes it before Starlette's router, so it is not among these routes.
# - The OpenID adapter's catch-all under `/oidc/{event_id}/` (a JSON 404 for an event
#   without a client, or a path no provider has): each OpenID operation's 404.
IMPLICIT = frozenset({"HEAD"})
UNDESCRIBED = frozenset({OIDC_OTHER})


def mounted(app_routes: list[BaseRoute], prefix: str = "") -> set[tuple[str, str]]:
    """Every (METHOD, path) the routes answer, Mounts' included, static files left out."""
    found: set[tuple[str, str]] = set()
    for route in app_routes:
        if isinstance(route, Mount):
            if isinstance(route.app, StaticFiles):
                continue
            found |= mounted(list(route.routes), prefix + route.path)
        elif isinstance(route, Route):
            if route.path in UNDESCRIBED:
                continue
            methods = set(route.methods or {"GET"}) - IMPLICIT
            found |= {(method, prefix + route.path) for method in methods}
        else:
            raise AssertionError(f"a route of an unexpected kind: {route!r}")
    return found


def described(document: dict[str, Any]) -> set[tuple[str, str]]:
    """Every (METHOD, path) of `document`, a path parameter with an ``enum`` written out
    for each of its values (the OpenID adapter's routes exist per registered event)."""
    found: set[tuple[str, str]] = set()
    for method, path in operations(document):
        operation = document["paths"][path][method.lower()]
        concrete = [path]
        for parameter in operation.get("parameters", []):
            values = parameter["schema"].get("enum")
            if parameter["in"] == "path" and values:
                name = "{" + parameter["name"] + "}"
                concrete = [p.replace(name, str(v)) for p in concrete for v in values]
        found |= {(method, p) for p in concrete}
    return found


def test_each_document_is_valid_openapi_3_1() -> None:
    class Room:
        def openapi(self) -> dict[str, Any]:
            return room_fragment(["auction", "launch"])

    for document in (control_plane_document(), zone_document(), zone_document([Room()])):
        validate(document)
        assert document["openapi"] == "3.1.0"


def test_every_operation_has_an_id_tags_responses_and_says_its_security() -> None:
    class Room:
        def openapi(self) -> dict[str, Any]:
            return room_fragment(["auction"])

    for document in (control_plane_document(), zone_document([Room()])):
        ids = []
        schemes = set(document["components"]["securitySchemes"])
        for method, path in operations(document):
            op = document["paths"][path][method.lower()]
            ids.append(op["operationId"])
            assert op["tags"], (method, path)
            assert op["responses"], (method, path)
            assert "security" in op, (method, path)
            for requirement in op["security"]:
                assert set(requirement) <= schemes, (method, path, requirement)
            for status, response in op["responses"].items():
                assert re.fullmatch(r"[1-5][0-9][0-9]", status), (method, path, status)
                assert response["description"], (method, path, status)
        assert len(ids) == len(set(ids)), "operationIds must be unique"


def test_the_private_and_admin_routes_ask_for_the_admin_token() -> None:
    class Room:
        def openapi(self) -> dict[str, Any]:
            return room_fragment(["auction"])

    zone = zone_document([Room()])
    for method, path in operations(zone):
        if path.startswith(("/private/", "/admin/")):
            assert zone["paths"][path][method.lower()]["security"] == [{"adminToken": []}]
    cp = control_plane_document()
    for path in (routes.ZONE_EVACUATE, routes.ZONE_RECOVER, routes.LOGIN_CODES):
        assert cp["paths"][path]["post"]["security"] == [{"adminToken": []}]
    assert {"adminToken": []} in cp["paths"][routes.CHAOS]["post"]["security"]


def test_the_zone_serves_its_document_and_describes_every_route(live: Live) -> None:
    served = httpx.get(live.zone + routes.OPENAPI, timeout=10)
    assert served.status_code == 200
    assert served.headers["content-type"] == "application/json"
    document = served.json()
    validate(document)
    assert document == json.loads(openapi.encode(zone_document([live.room])))
    app_routes = mounted(live.zone_app.web.router.routes)
    assert ("POST", routes.ROOM_ASSIGN_QUEUE_NUM) in app_routes  # the extension's are there
    assert ("GET", "/oidc/auction/authorize") in app_routes
    missing = app_routes - described(document)
    assert not missing, f"routes the zone's document does not describe: {sorted(missing)}"
    extra = described(document) - app_routes
    assert not extra, f"operations the zone does not serve: {sorted(extra)}"


def test_the_control_plane_serves_its_document_and_describes_every_route(live: Live) -> None:
    served = httpx.get(live.control_plane + routes.OPENAPI, timeout=10)
    assert served.status_code == 200
    document = served.json()
    validate(document)
    assert document == json.loads(openapi.encode(control_plane_document()))
    app_routes = mounted(list(live.control_plane_app.router.routes))
    missing = app_routes - described(document)
    assert not missing, f"routes the control plane's document misses: {sorted(missing)}"
    extra = described(document) - app_routes
    assert not extra, f"operations the control plane does not serve: {sorted(extra)}"


def test_a_route_added_without_its_operation_is_caught() -> None:
    async def handler(request: Any) -> Any:
        raise AssertionError

    document = control_plane_document()
    app_routes = {("GET", routes.HEALTH), ("POST", "/v1/new")}
    assert ("POST", "/v1/new") in app_routes - described(document)
    nested = mounted([Mount("/x", routes=[Route("/y", handler, methods=["PUT"])])])
    assert nested == {("PUT", "/x/y")}


def test_a_path_under_oidc_that_no_provider_has_is_a_json_404(live: Live) -> None:
    # Found by the fuzzer: an event without a client fell through to the pages' mount,
    # which answered a POST with 405 and a GET with a text/plain 404.
    for method, path in (
        ("POST", "/oidc/RevocationRecords/userinfo"),
        ("POST", "/oidc/nope/token"),
        ("GET", "/oidc/nope/wait"),
        ("GET", "/oidc/auction/nothing-here"),
    ):
        r = httpx.request(method, live.zone + path, timeout=10)
        assert r.status_code == 404, (method, path, r.status_code, r.text)
        assert r.headers["content-type"] == "application/json"
        assert r.json()["error"] == "invalid_request"
    r = httpx.get(live.zone + "/oidc/auction/.well-known/openid-configuration", timeout=10)
    assert r.status_code == 200
