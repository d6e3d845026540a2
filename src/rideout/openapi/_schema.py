"""Small builders for the documents' JSON Schema and OpenAPI objects: every document is
plain data, and these keep the repeated shapes (a JSON answer, an error, a query
parameter) written once."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

Schema = dict[str, Any]

JSON: Final = "application/json"
PROBLEM: Final = "application/problem+json"
HTML: Final = "text/html"
TEXT: Final = "text/plain"


def ref(name: str) -> Schema:
    """A reference to ``#/components/schemas/NAME``."""
    return {"$ref": f"#/components/schemas/{name}"}


def obj(
    required: Mapping[str, Schema] | None = None,
    optional: Mapping[str, Schema] | None = None,
    *,
    closed: bool = False,
    description: str | None = None,
) -> Schema:
    """A JSON object: `required` and `optional` properties; `closed` refuses others."""
    properties = {**(required or {}), **(optional or {})}
    out: Schema = {"type": "object", "properties": properties}
    if required:
        out["required"] = list(required)
    if closed:
        out["additionalProperties"] = False
    if description is not None:
        out["description"] = description
    return out


def _typed(kind: str, description: str | None, keywords: Mapping[str, Any]) -> Schema:
    out: Schema = {"type": kind, **keywords}
    if description is not None:
        out["description"] = description
    return out


def string(description: str | None = None, **kw: Any) -> Schema:
    return _typed("string", description, kw)


def integer(description: str | None = None, **kw: Any) -> Schema:
    return _typed("integer", description, kw)


def number(description: str | None = None, **kw: Any) -> Schema:
    return _typed("number", description, kw)


def boolean(description: str | None = None) -> Schema:
    return _typed("boolean", description, {})


def nullable(schema: Schema) -> Schema:
    """`schema` or JSON ``null`` (OpenAPI 3.1: a type list)."""
    if "type" in schema and isinstance(schema["type"], str):
        return {**schema, "type": [schema["type"], "null"]}
    return {"anyOf": [schema, {"type": "null"}]}


def array(items: Schema, description: str | None = None, **kw: Any) -> Schema:
    return _typed("array", description, {"items": items, **kw})


def enum(values: Iterable[str], description: str | None = None) -> Schema:
    return string(description, enum=list(values))


def header(description: str, schema: Schema | None = None, *, required: bool = False) -> Schema:
    out: Schema = {"description": description, "schema": schema or string()}
    if required:
        out["required"] = True
    return out


def answer(
    description: str,
    schema: Schema | None = None,
    *,
    media: str = JSON,
    headers: Mapping[str, Schema] | None = None,
    also: Mapping[str, Schema] | None = None,
) -> Schema:
    """A response: `schema` as `media` (none without a schema), and `also` more media."""
    out: Schema = {"description": description}
    content = {} if schema is None else {media: {"schema": schema}}
    content.update({m: {"schema": s} for m, s in (also or {}).items()})
    if content:
        out["content"] = content
    if headers:
        out["headers"] = dict(headers)
    return out


def query(name: str, schema: Schema, description: str, *, required: bool = False) -> Schema:
    return {
        "name": name,
        "in": "query",
        "required": required,
        "description": description,
        "schema": schema,
    }


def path(name: str, schema: Schema, description: str) -> Schema:
    return {
        "name": name,
        "in": "path",
        "required": True,
        "description": description,
        "schema": schema,
    }


def header_param(name: str, schema: Schema, description: str, *, required: bool = False) -> Schema:
    return {
        "name": name,
        "in": "header",
        "required": required,
        "description": description,
        "schema": schema,
    }


def json_body(schema: Schema, description: str, *, required: bool = True) -> Schema:
    return {"required": required, "description": description, "content": {JSON: {"schema": schema}}}


def operation(
    summary: str,
    responses: Mapping[str, Schema],
    *,
    tags: Iterable[str] = (),
    description: str | None = None,
    parameters: Iterable[Schema] = (),
    body: Schema | None = None,
    security: list[dict[str, list[str]]] | None = None,
    operation_id: str | None = None,
) -> Schema:
    """One operation; ``security`` None: none is asked (``[]`` written out)."""
    out: Schema = {"summary": summary}
    if operation_id is not None:
        out["operationId"] = operation_id
    if description is not None:
        out["description"] = description
    if tags:
        out["tags"] = list(tags)
    params = list(parameters)
    if params:
        out["parameters"] = params
    if body is not None:
        out["requestBody"] = body
    out["security"] = security if security is not None else []
    out["responses"] = dict(responses)
    return out


def merge(*fragments: Mapping[str, Any]) -> dict[str, Any]:
    """Fragments (``{"paths", "components", "tags"}``) as one: the same path's
    operations together; a method described twice, or a component named twice with two
    definitions, is an error."""
    paths: dict[str, dict[str, Any]] = {}
    components: dict[str, dict[str, Any]] = {}
    tags: dict[str, dict[str, Any]] = {}
    for fragment in fragments:
        for route, item in fragment.get("paths", {}).items():
            into = paths.setdefault(route, {})
            for method, op in item.items():
                if method in into and into[method] != op:
                    raise ValueError(f"{method.upper()} {route} is described twice")
                into[method] = op
        for kind, named in fragment.get("components", {}).items():
            into = components.setdefault(kind, {})
            for name, value in named.items():
                if name in into and into[name] != value:
                    raise ValueError(f"components.{kind}.{name} is defined twice, differently")
                into[name] = value
        for tag in fragment.get("tags", []):
            tags.setdefault(tag["name"], tag)
    return {"paths": paths, "components": components, "tags": list(tags.values())}


def document_path_item() -> Schema:
    """The path item of ``/openapi.json`` itself, in each document."""
    return {
        "get": operation(
            "This document",
            {"200": answer("The OpenAPI 3.1 document of this server", {"type": "object"})},
            tags=["documents"],
            operation_id="openapi",
        )
    }


def metrics_path_item(operation_id: str) -> Schema:
    """The path item of a server's ``/metrics``."""
    return {
        "get": operation(
            "Prometheus text exposition",
            {"200": answer("The metrics", string(), media=TEXT)},
            tags=["probes"],
            operation_id=operation_id,
        )
    }


DOCUMENTS_TAG: Final = {"name": "documents", "description": "This server's OpenAPI document"}
