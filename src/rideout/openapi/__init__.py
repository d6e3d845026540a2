"""OpenAPI 3.1 documents of rideout's REST surfaces, as data (docs/openapi.md).

Two documents are served, each at ``GET /openapi.json`` (:data:`rideout.routes.OPENAPI`):

- **a zone's** (every app server): its own routes (:mod:`.zone`), then whatever its
  extensions describe: the waiting room's public and private API and the OpenID
  adapter's endpoints (:mod:`.room`), mounted by ``rideout serve``;
- **the control plane's** (:mod:`.control_plane`).

The private and admin routes are in the same document, each marked with the security
scheme it asks for (the deployment's admin token as a bearer credential, the dashboard's
operator session, a canary's signature). The documents describe the routes: they do not
put a framework in front of them. Each is built once, when its app starts, and served
as the same bytes after that. ``tests/test_openapi.py`` holds every route of the apps
and every path of the documents to each other, and validates the documents;
``tests/test_openapi_fuzz.py`` fuzzes the live servers from them (Schemathesis).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from rideout import __version__, routes
from rideout.openapi._schema import merge

__all__ = ["OPENAPI_VERSION", "document", "document_route", "encode"]

OPENAPI_VERSION: Final = "3.1.0"


def document(title: str, description: str, *fragments: Mapping[str, Any]) -> dict[str, Any]:
    """An OpenAPI 3.1 document of `fragments` (``{"paths", "components", "tags"}``)."""
    merged = merge(*fragments)
    out: dict[str, Any] = {
        "openapi": OPENAPI_VERSION,
        "info": {
            "title": title,
            "version": __version__,
            "description": description,
            "license": {"name": "Apache-2.0", "identifier": "Apache-2.0"},
        },
        "tags": merged["tags"],
        "paths": dict(sorted(merged["paths"].items())),
        "components": merged["components"],
    }
    return out


def encode(doc: Mapping[str, Any]) -> bytes:
    """The document as the bytes served (sorted keys: the same document, the same bytes)."""
    return json.dumps(doc, indent=1, sort_keys=True).encode()


def document_route(body: bytes) -> Route:
    """``GET /openapi.json``: `body`, an encoded document, as it is."""

    async def openapi(request: Request) -> Response:
        return Response(body, media_type="application/json", headers={"Cache-Control": "no-cache"})

    return Route(routes.OPENAPI, openapi, methods=["GET"])
