"""The gateway's OpenAPI document: FastAPI's, completed where the routes read raw bodies
and stripped of FastAPI's default validation error (Moat answers 400 with its envelope)."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from schemas.capabilities import CapabilityCatalog
from schemas.execute import MAX_IDEMPOTENCY_KEY_LENGTH, SUPPORTED_SCHEMA_VERSIONS, ExecuteRequest
from starter.gateway.errors import ERROR_DESCRIPTIONS

REF = "#/components/schemas/{model}"
_FASTAPI_VALIDATION = "#/components/schemas/HTTPValidationError"
ERROR_ENVELOPE = "#/components/schemas/ErrorEnvelope"

# OpenAPI links: where the ids an answer carries lead (for readers, client generators and
# stateful testing). Keyed by operation id and status.
_EXECUTION_LINKS = {
    "get_execution": {
        "operationId": "get_execution",
        "parameters": {"receipt_id": "$response.body#/receipt_id"},
        "description": "Poll the execution.",
    }
}
LINKS: dict[tuple[str, str], dict[str, Any]] = {
    ("execute", "200"): {
        **_EXECUTION_LINKS,
        "get_receipt": {
            "operationId": "get_receipt",
            "parameters": {"receipt_id": "$response.body#/receipt_id"},
            "description": "The receipt of an executed or failed execution.",
        },
    },
    ("execute", "202"): _EXECUTION_LINKS,
    ("create_tenant", "201"): {
        "get_tenant": {
            "operationId": "get_tenant",
            "parameters": {"tenant_id": "$response.body#/tenant/id"},
        },
        "create_key": {
            "operationId": "create_key",
            "parameters": {"tenant_id": "$response.body#/tenant/id"},
        },
        "list_keys": {
            "operationId": "list_keys",
            "parameters": {"tenant_id": "$response.body#/tenant/id"},
        },
    },
    ("create_key", "201"): {
        "revoke_key": {
            "operationId": "revoke_key",
            "parameters": {"key_id": "$response.body#/id"},
        }
    },
}


def build(app: FastAPI, catalog: CapabilityCatalog) -> dict[str, Any]:
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
    request["properties"]["capability_id"]["examples"] = sorted({s.id for s in catalog.all()})
    request["properties"]["input"]["examples"] = [{"hello": "world"}]
    components["ExecuteRequest"] = request
    for path in schema.get("paths", {}).values():
        for operation in path.values():
            _document_idempotency_header(operation)
            for status, response in operation.get("responses", {}).items():
                if links := LINKS.get((operation.get("operationId", ""), status)):
                    response["links"] = links
            _document_generic_errors(operation)
            responses = operation.get("responses", {})
            default_422 = responses.get("422", {}).get("content", {}).get("application/json", {})
            if default_422.get("schema", {}).get("$ref") == _FASTAPI_VALIDATION:
                del responses["422"]
    for name in ("HTTPValidationError", "ValidationError"):
        components.pop(name, None)
    return schema


def _document_generic_errors(operation: dict[str, Any]) -> None:
    """Answers any route can give: 500 always; 400 when it reads parameters or a body (the
    envelope replaces FastAPI's 422); 413 when it reads a body."""
    responses = operation.setdefault("responses", {})
    statuses = ["500"]
    if operation.get("parameters") or operation.get("requestBody"):
        statuses.append("400")
    if operation.get("requestBody"):
        statuses.append("413")
    for status in statuses:
        responses.setdefault(
            status,
            {
                "description": ERROR_DESCRIPTIONS[int(status)],
                "content": {"application/json": {"schema": {"$ref": ERROR_ENVELOPE}}},
            },
        )


def _document_idempotency_header(operation: dict[str, Any]) -> None:
    """The route checks the header's length itself (to answer `idempotency_key_invalid`);
    the document still states the limits."""
    for parameter in operation.get("parameters", []):
        if parameter["in"] == "header" and parameter["name"] == "Idempotency-Key":
            schema = parameter["schema"]
            options = schema.get("anyOf", [schema])
            for option in options:
                if option.get("type") == "string":
                    option.update(minLength=1, maxLength=MAX_IDEMPOTENCY_KEY_LENGTH)


def install(app: FastAPI, catalog: CapabilityCatalog) -> None:
    """Serve the completed document at ``/openapi.json`` (built once, on first request)."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = build(app, catalog)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
