"""A stand-in for the Kubernetes API's node endpoints, served on loopback by uvicorn.

There is no Kubernetes API server here, so the EKS tests talk to this: a small ASGI app
that answers the documented requests as the API documents them and records each one.

- ``GET /api/v1/nodes`` with ``labelSelector`` (equality ``k=v`` and existence ``k``,
  comma-separated), ``limit`` and ``continue``: a ``NodeList`` whose
  ``metadata.continue`` names the next page;
- ``GET /api/v1/nodes/NAME``;
- ``PATCH /api/v1/nodes/NAME`` with ``application/strategic-merge-patch+json``: maps
  merged, ``null`` deletes, lists without a merge key (``spec.taints``) replaced whole;
  a ``metadata.resourceVersion`` that is not the node's current one is a 409 Conflict;
  every change bumps the resourceVersion;
- a bearer token is required (401 otherwise); errors are ``Status`` objects.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from tests.conftest import free_port, until_sync

PATCH_TYPE = "application/strategic-merge-patch+json"


def status(code: int, reason: str, message: str) -> JSONResponse:
    body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message,
            "reason": reason, "code": code}  # fmt: skip
    return JSONResponse(body, status_code=code)


def merge(target: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict):
            current = target.get(key)
            target[key] = merge(current if isinstance(current, dict) else {}, value)
        else:
            target[key] = copy.deepcopy(value)
    return target


def matches(labels: dict[str, str], selector: str) -> bool:
    for term in filter(None, selector.split(",")):
        key, eq, value = term.partition("=")
        if key not in labels or (eq and labels[key] != value):
            return False
    return True


@dataclass
class FakeKubernetes:
    token: str
    page_size: int = 500
    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)
    requests: list[dict[str, Any]] = field(default_factory=list)
    conflicts: int = 0  # the next N patches find the node changed (a concurrent writer)
    # Nodes whose patches fail with a 500, after this many more have succeeded.
    broken: dict[str, int] = field(default_factory=dict)
    _version: int = 0

    def add_node(self, name: str, zone: str | None, **spec: Any) -> None:
        self._version += 1
        labels = {"kubernetes.io/hostname": name}
        if zone is not None:
            labels["topology.kubernetes.io/zone"] = zone
        self.nodes[name] = {
            "kind": "Node",
            "apiVersion": "v1",
            "metadata": {"name": name, "labels": labels, "resourceVersion": str(self._version)},
            "spec": dict(spec),
        }

    def _bump(self, node: dict[str, Any]) -> None:
        self._version += 1
        node["metadata"]["resourceVersion"] = str(self._version)

    def _authorized(self, request: Request) -> bool:
        return request.headers.get("authorization") == f"Bearer {self.token}"

    async def _record(self, request: Request) -> None:
        self.requests.append(
            {
                "method": request.method,
                "path": request.url.path,
                "query": dict(request.query_params),
                "content_type": request.headers.get("content-type", ""),
                "body": (await request.json()) if request.method == "PATCH" else None,
            }
        )

    async def list_nodes(self, request: Request) -> JSONResponse:
        await self._record(request)
        if not self._authorized(request):
            return status(401, "Unauthorized", "Unauthorized")
        selector = request.query_params.get("labelSelector", "")
        limit = min(int(request.query_params.get("limit", "500")), self.page_size)
        start = int(request.query_params.get("continue", "0") or "0")
        found = [
            n for _, n in sorted(self.nodes.items()) if matches(n["metadata"]["labels"], selector)
        ]
        page = found[start : start + limit]
        metadata: dict[str, Any] = {"resourceVersion": str(self._version)}
        if start + limit < len(found):
            metadata["continue"] = str(start + limit)
        return JSONResponse({"kind": "NodeList", "apiVersion": "v1", "metadata": metadata,
                             "items": page})  # fmt: skip

    async def node(self, request: Request) -> JSONResponse:
        await self._record(request)
        if not self._authorized(request):
            return status(401, "Unauthorized", "Unauthorized")
        name = request.path_params["name"]
        node = self.nodes.get(name)
        if node is None:
            return status(404, "NotFound", f'nodes "{name}" not found')
        if request.method == "GET":
            return JSONResponse(node)
        if request.headers.get("content-type") != PATCH_TYPE:
            return status(415, "UnsupportedMediaType", "unsupported patch type")
        if name in self.broken:
            if not self.broken[name]:
                return status(500, "InternalError", "etcdserver: request timed out")
            self.broken[name] -= 1
        if self.conflicts:
            self.conflicts -= 1
            self._bump(node)  # someone else wrote the node first
        patch = await request.json()
        wanted = (patch.get("metadata") or {}).get("resourceVersion")
        if wanted is not None and wanted != node["metadata"]["resourceVersion"]:
            return status(
                409, "Conflict", f'Operation cannot be fulfilled on nodes "{name}": the object'
                " has been modified; please apply your changes to the latest version and try again",
            )  # fmt: skip
        patch = copy.deepcopy(patch)
        patch.get("metadata", {}).pop("resourceVersion", None)
        merge(node, patch)
        self._bump(node)
        return JSONResponse(node)

    def app(self) -> Starlette:
        return Starlette(
            routes=[
                Route("/api/v1/nodes", self.list_nodes, methods=["GET"]),
                Route("/api/v1/nodes/{name}", self.node, methods=["GET", "PATCH"]),
            ]
        )


@contextmanager
def serving_kubernetes(fake: FakeKubernetes) -> Iterator[str]:
    """``fake`` on 127.0.0.1 and a free port, in a thread (the client under test is
    synchronous); stopped on every exit path."""
    port = free_port("127.0.0.1")
    server = uvicorn.Server(
        uvicorn.Config(fake.app(), host="127.0.0.1", port=port, log_level="warning", lifespan="off")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        until_sync(lambda: server.started or not thread.is_alive(), 30, message="fake kube API")
        assert server.started, "the stand-in Kubernetes API did not start"
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
