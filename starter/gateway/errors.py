"""The gateway's one error envelope and its one code → status table.

Every refusal, whoever raises it (a service's ``MoatError``, a route, Starlette itself), is
answered with the same envelope: stable ``code``, human ``message``, ``details`` and the
request's ``trace_id``; no answer ever carries a stack trace. The status comes from the
code, in ``STATUS``, and nowhere else.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from schemas.api import ErrorEnvelope
from schemas.execute import Envelope, EnvelopeStatus, ErrorBody
from schemas.records import ExecutionStatus
from starter.runtime.observability import current_trace_id
from starter.service import MoatError
from starter.service.errors import field_errors

log = logging.getLogger("moat.gateway")

# The HTTP status of every refusal code. A code missing here is a fault: 500.
STATUS: dict[str, int] = {
    "bad_json": 400,
    "bad_request": 400,
    "schema_validation_failed": 400,
    "unsupported_schema_version": 400,
    "idempotency_key_invalid": 400,
    "invalid_cursor": 400,
    "connection_type_mismatch": 400,
    "webhook_url_invalid": 400,
    "webhook_url_not_allowed": 400,
    "effect_statement_required": 400,
    "capability_not_probeable": 400,
    "unauthenticated": 401,
    "forbidden": 403,
    "scope_missing": 403,
    "key_revoked": 403,
    "connection_revoked": 403,
    "connection_origin_mismatch": 403,
    "bypass_not_allowed": 403,
    "self_approval_forbidden": 403,
    "decision_not_signed": 403,
    "approval_expired": 403,
    "approval_rejected": 403,
    "approval_not_found": 404,
    "policy_version_not_found": 404,
    "approval_mismatch": 409,
    "approval_stale": 409,
    "approval_not_pending": 409,
    "capability_not_found": 404,
    "execution_not_found": 404,
    "receipt_not_found": 404,
    "manifest_not_found": 404,
    "tenant_not_found": 404,
    "key_not_found": 404,
    "connection_not_found": 404,
    "probe_not_found": 404,
    "not_found": 404,
    "webhook_not_found": 404,
    "dead_letter_not_found": 404,
    "compensating_action_not_found": 404,
    "method_not_allowed": 405,
    "connection_gone": 410,
    "not_acceptable": 406,
    "conflict": 409,
    "dead_letter_closed": 409,
    "payload_too_large": 413,
    "unsupported_media_type": 415,
    "idempotency_key_reused": 422,
    "payload_not_decodable": 422,
    "rate_limited": 429,
    "quota_exceeded": 429,
    "gateway_error": 500,
    "jwks_unavailable": 503,
    "unavailable": 503,
}
# Starlette's own refusals (routing, methods), by status.
_CODE_OF_STATUS = {
    400: "bad_request",
    401: "unauthenticated",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    406: "not_acceptable",
    409: "conflict",
    413: "payload_too_large",
    415: "unsupported_media_type",
    422: "schema_validation_failed",
}
# An execution that ran and failed: a refusal by policy or by the host guard is the
# caller's to fix (403), Moat's own fault is 500, anything else the provider's (502).
_FAILED_EXECUTION_STATUS = {
    "host_not_allowed": 403,
    "connection_revoked": 403,
    "connection_origin_mismatch": 403,
    "connection_not_found": 404,
    "gateway_error": 500,
}
PROVIDER_FAILED = 502
# Every ``unauthenticated`` answer names the scheme to authenticate with.
_CHALLENGE = {"WWW-Authenticate": "Bearer"}


def status_of(code: str) -> int:
    return STATUS.get(code, 500)


def execution_status(envelope: Envelope) -> int:
    """The status of an execution's envelope: 202 while it runs, 200 once executed (or
    planned), and for a failed one the failure's."""
    if envelope.status == EnvelopeStatus.ACCEPTED:
        return 202
    if envelope.status != EnvelopeStatus.FAILED:
        return 200
    code = envelope.error.code if envelope.error is not None else ""
    if code == "quota_exceeded":  # refused by policy, yet the tenant's to free: as elsewhere
        return STATUS[code]
    if envelope.receipt is not None and envelope.receipt.status == ExecutionStatus.POLICY_DENIED:
        return 403
    return _FAILED_EXECUTION_STATUS.get(code, PROVIDER_FAILED)


class EnvelopeJSONResponse(JSONResponse):
    """JSON with non-ASCII characters escaped: an answer that echoes a caller's text holding
    a lone surrogate still renders (UTF-8 cannot encode one)."""

    def render(self, content: Any) -> bytes:
        return render_json(content)


def render_json(content: Any) -> bytes:
    """JSON as ``EnvelopeJSONResponse`` sends it."""
    return json.dumps(content, ensure_ascii=True, separators=(",", ":")).encode("ascii")


def error_response(
    code: str,
    message: str,
    details: dict[str, Any] | None = None,
    *,
    status: int | None = None,
    trace_id: str | None = None,
    headers: Mapping[str, str] | None = None,
) -> JSONResponse:
    """The envelope of a refusal; its status is the code's unless given."""
    body = Envelope(
        trace_id=trace_id or current_trace_id(),
        status=EnvelopeStatus.FAILED,
        error=ErrorBody(code=code, message=message, details=details or {}),
    )
    if code == "unauthenticated":
        headers = {**_CHALLENGE, **(headers or {})}
    return EnvelopeJSONResponse(
        body.model_dump(mode="json"),
        status_code=status if status is not None else status_of(code),
        headers=headers,
    )


def gateway_error(trace_id: str | None = None) -> JSONResponse:
    return error_response(
        "gateway_error",
        "Moat failed internally; quote the trace id when reporting it.",
        trace_id=trace_id,
    )


def install(app: FastAPI) -> None:
    @app.exception_handler(MoatError)
    async def _refused(_: Request, exc: MoatError) -> JSONResponse:
        # A refusal that says when to come back says it in the header too (RFC 9110).
        wait = exc.details.get("retry_after_seconds")
        headers = {"Retry-After": str(wait)} if isinstance(wait, int) else None
        return error_response(exc.code, exc.message, exc.details, headers=headers)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = _CODE_OF_STATUS.get(exc.status_code, "http_error")
        headers = dict(exc.headers) if exc.headers else None
        if exc.status_code == 405:
            headers = {**(headers or {}), "Allow": _allowed_methods(request)}
        return error_response(code, str(exc.detail), status=exc.status_code, headers=headers)

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        return error_response(
            "schema_validation_failed",
            "The request is not valid.",
            {"errors": field_errors(exc.errors())},
        )

    @app.exception_handler(Exception)
    async def _internal(_: Request, exc: Exception) -> JSONResponse:
        # Reached only for faults outside the Boundary; inside, the Boundary answers.
        log.error("internal error", exc_info=exc)
        return gateway_error()


def _allowed_methods(request: Request) -> str:
    """Every method the path supports (Starlette's 405 names only the first route's)."""
    allowed = []
    for method in _METHODS:
        scope = {**request.scope, "method": method}
        if any(route.matches(scope)[0] == Match.FULL for route in request.app.router.routes):
            allowed.append(method)
    return ", ".join(allowed)


_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


def documented_errors(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` entries for error statuses, all with the error envelope."""
    return {
        status: {"model": ErrorEnvelope, "description": ERROR_DESCRIPTIONS[status]}
        for status in statuses
    }


ERROR_DESCRIPTIONS = {
    400: "Refused request: `bad_json`, `schema_validation_failed` (with the failing fields in "
    "`details.errors`), `unsupported_schema_version`, `idempotency_key_invalid`, "
    "`invalid_cursor`, `capability_not_probeable`.",
    401: "`unauthenticated`: no API key, or an unknown or revoked one.",
    403: "`forbidden`: the key may not use this route; `scope_missing`: it lacks the "
    "route's scope; `bypass_not_allowed`, `self_approval_forbidden`, `approval_expired`.",
    404: "Not found (`not_found`, `receipt_not_found`, `execution_not_found`, "
    "`capability_not_found`, `tenant_not_found`, `key_not_found`, `approval_not_found`, "
    "`policy_version_not_found`, `probe_not_found`). Another tenant's records are not found "
    "either.",
    405: "`method_not_allowed`; the `Allow` header lists the methods.",
    409: "`conflict`: the name is taken; `approval_mismatch`: the decision names another "
    "call or policy version than the one waiting (nothing changed); `approval_stale`: the "
    "policy changed since the call; `approval_not_pending`: it was decided already.",
    410: "`connection_gone`: the connection was revoked (`DELETE`); the list still shows it "
    "for the record, `details.revoked_at` says when.",
    413: "`payload_too_large`: the body is over the gateway's limit.",
    422: "`idempotency_key_reused`: the key was used with a different request; "
    "`details.original_receipt_id` names the first execution.",
    429: "`rate_limited`: the tenant is over its rate; retry after `Retry-After` seconds "
    "(also `details.retry_after_seconds`). "
    "`quota_exceeded`: the tenant holds as many of something as its quota allows "
    "(an execution: as many calls waiting for approval); `details` names the `quota`, its "
    "`limit` and the `usage` now. Remove some, or ask an admin to raise it.",
    500: "`gateway_error`: Moat failed internally; the `trace_id` identifies the fault.",
    503: "`jwks_unavailable`: the gateway has no readable public key set to serve yet; "
    "`unavailable`: a dependency (PostgreSQL, Temporal) is briefly away: retry after "
    "`Retry-After` seconds (also `details.retry_after_seconds`) with the same idempotency key.",
}
