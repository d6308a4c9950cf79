"""The gateway's OpenAPI document: FastAPI's, completed where the routes read raw bodies or
the catalog decides what a body may hold (``bodies``), with every status a route can
answer, and stripped of FastAPI's default validation error (Moat answers 400 with its
envelope). Its schemas state the rules the server enforces wherever JSON Schema can."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from schemas.capabilities import CapabilityCatalog
from schemas.execute import MAX_IDEMPOTENCY_KEY_LENGTH
from schemas.jsonvalues import with_defs
from schemas.plans import MAX_PLAN_KEY_LENGTH
from starter.gateway import bodies
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


def build(
    app: FastAPI, catalog: CapabilityCatalog, probe_min_interval_seconds: int = 1
) -> dict[str, Any]:
    schema = get_openapi(
        title=app.title,
        version=app.version,
        description=app.description,
        routes=app.routes,
        tags=app.openapi_tags,
    )
    defs: dict[str, Any] = {}
    schema = bodies.hoisted(with_defs(schema), defs)
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    components.update(defs)
    components["ExecuteRequest"] = bodies.execute_request(catalog, components)
    components["PlanRequest"] = bodies.plan_request(catalog, components)
    if "ProbeCreate" in components:
        components["ProbeCreate"] = bodies.probe_request(
            catalog, components, probe_min_interval_seconds
        )
    for path in schema.get("paths", {}).values():
        for operation in path.values():
            _document_idempotency_header(operation)
            _document_cursor(operation)
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
    """Answers any route can give: 500 and 503 (a dependency briefly away) always; 400 when
    it reads parameters or a body (the envelope replaces FastAPI's 422); 413 when it reads
    a body. A 429 or 503 says when to come back in ``Retry-After``."""
    responses = operation.setdefault("responses", {})
    statuses = ["500", "503"]
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
    for status in ("429", "503"):
        if status in responses:
            responses[status].setdefault("headers", {})["Retry-After"] = RETRY_AFTER


RETRY_AFTER = {
    "description": "Seconds to wait before trying again (also `details.retry_after_seconds`).",
    "schema": {"type": "string", "pattern": "^[0-9]+$"},
}
# A cursor is what a previous page's `next_cursor` held: unpadded base64url. Which strings
# of that alphabet are cursors only the server can tell (`invalid_cursor` otherwise).
CURSOR_PATTERN = "^[A-Za-z0-9_-]+$"


def _document_cursor(operation: dict[str, Any]) -> None:
    for parameter in operation.get("parameters", []):
        if parameter["in"] == "query" and parameter["name"] == "cursor":
            for option in parameter["schema"].get("anyOf", [parameter["schema"]]):
                if option.get("type") == "string":
                    option["pattern"] = CURSOR_PATTERN


def _document_idempotency_header(operation: dict[str, Any]) -> None:
    """The route checks the header's length itself (to answer `idempotency_key_invalid`);
    the document still states the limits."""
    for parameter in operation.get("parameters", []):
        if parameter["in"] == "header" and parameter["name"] == "Idempotency-Key":
            schema = parameter["schema"]
            options = schema.get("anyOf", [schema])
            # A plan's key leaves room for its steps' keys (``<key>/<step id>``).
            longest = (
                MAX_PLAN_KEY_LENGTH
                if operation.get("operationId") == "run_plan"
                else MAX_IDEMPOTENCY_KEY_LENGTH
            )
            for option in options:
                if option.get("type") == "string":
                    option.update(minLength=1, maxLength=longest)


def install(app: FastAPI, catalog: CapabilityCatalog, probe_min_interval_seconds: int) -> None:
    """Serve the completed document at ``/openapi.json`` (built once, on first request)."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = build(app, catalog, probe_min_interval_seconds)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
