"""The gateway's OpenAPI document: FastAPI's, completed where the routes read raw bodies
and stripped of FastAPI's default validation error (Moat answers 400 with its envelope)."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from schemas.execute import SUPPORTED_SCHEMA_VERSIONS, ExecuteRequest

REF = "#/components/schemas/{model}"
_FASTAPI_VALIDATION = "#/components/schemas/HTTPValidationError"


def build(app: FastAPI) -> dict[str, Any]:
    schema = get_openapi(
        title=app.title,
        version=app.version,
        description=app.description,
        routes=app.routes,
        tags=app.openapi_tags,
    )
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    request = ExecuteRequest.model_json_schema(ref_template=REF)
    components.update(request.pop("$defs", {}))
    # The one version served is the only valid value (others: unsupported_schema_version).
    request["properties"]["schema_version"]["enum"] = list(SUPPORTED_SCHEMA_VERSIONS)
    components["ExecuteRequest"] = request
    for path in schema.get("paths", {}).values():
        for operation in path.values():
            responses = operation.get("responses", {})
            default_422 = responses.get("422", {}).get("content", {}).get("application/json", {})
            if default_422.get("schema", {}).get("$ref") == _FASTAPI_VALIDATION:
                del responses["422"]
    for name in ("HTTPValidationError", "ValidationError"):
        components.pop(name, None)
    return schema


def install(app: FastAPI) -> None:
    """Serve the completed document at ``/openapi.json`` (built once, on first request)."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = build(app)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
