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
from schemas.errors import ErrorCode
from schemas.execute import Envelope, EnvelopeStatus, ErrorBody
from schemas.records import ExecutionStatus
from starter.runtime.observability import current_trace_id
from starter.service import MoatError, field_errors

log = logging.getLogger("moat.gateway")

# The HTTP status of every refusal code. A code missing here is a fault: 500.
STATUS: dict[str, int] = {
    ErrorCode.BAD_JSON: 400,
    ErrorCode.BAD_REQUEST: 400,
    ErrorCode.SCHEMA_VALIDATION_FAILED: 400,
    ErrorCode.UNSUPPORTED_SCHEMA_VERSION: 400,
    ErrorCode.IDEMPOTENCY_KEY_INVALID: 400,
    ErrorCode.INVALID_CURSOR: 400,
    ErrorCode.CONNECTION_TYPE_MISMATCH: 400,
    ErrorCode.CONNECTION_REQUIRED: 400,
    ErrorCode.WEBHOOK_URL_INVALID: 400,
    ErrorCode.WEBHOOK_URL_NOT_ALLOWED: 400,
    ErrorCode.EFFECT_STATEMENT_REQUIRED: 400,
    ErrorCode.CAPABILITY_NOT_PROBEABLE: 400,
    ErrorCode.PLAN_INVALID: 400,
    ErrorCode.ID_AMBIGUOUS: 400,
    ErrorCode.UNAUTHENTICATED: 401,
    ErrorCode.FORBIDDEN: 403,
    ErrorCode.SCOPE_MISSING: 403,
    ErrorCode.KEY_REVOKED: 403,
    ErrorCode.CONNECTION_REVOKED: 403,
    ErrorCode.CONNECTION_NEEDS_REAUTH: 403,
    ErrorCode.CONNECTION_ORIGIN_MISMATCH: 403,
    ErrorCode.BYPASS_NOT_ALLOWED: 403,
    ErrorCode.SELF_APPROVAL_FORBIDDEN: 403,
    ErrorCode.DECISION_NOT_SIGNED: 403,
    ErrorCode.APPROVAL_EXPIRED: 403,
    ErrorCode.APPROVAL_REJECTED: 403,
    ErrorCode.APPROVAL_NOT_FOUND: 404,
    ErrorCode.POLICY_VERSION_NOT_FOUND: 404,
    ErrorCode.APPROVAL_MISMATCH: 409,
    ErrorCode.APPROVAL_STALE: 409,
    ErrorCode.APPROVAL_NOT_PENDING: 409,
    ErrorCode.CAPABILITY_NOT_FOUND: 404,
    ErrorCode.EXECUTION_NOT_FOUND: 404,
    ErrorCode.PLAN_NOT_FOUND: 404,
    ErrorCode.RECEIPT_NOT_FOUND: 404,
    ErrorCode.MANIFEST_NOT_FOUND: 404,
    ErrorCode.LOG_CHECKPOINT_NOT_FOUND: 404,
    ErrorCode.LOG_LEAF_NOT_FOUND: 404,
    ErrorCode.LOG_SIZE_NOT_FOUND: 404,
    ErrorCode.LOG_SIZE_INVALID: 400,
    ErrorCode.LOG_LEAF_NOT_CHECKPOINTED: 409,
    ErrorCode.LOG_COSIGNATURE_INVALID: 422,
    ErrorCode.TENANT_NOT_FOUND: 404,
    ErrorCode.KEY_NOT_FOUND: 404,
    ErrorCode.CONNECTION_NOT_FOUND: 404,
    ErrorCode.PROBE_NOT_FOUND: 404,
    ErrorCode.NOT_FOUND: 404,
    ErrorCode.WEBHOOK_NOT_FOUND: 404,
    ErrorCode.DEAD_LETTER_NOT_FOUND: 404,
    ErrorCode.PERSON_NOT_FOUND: 404,
    ErrorCode.COMPENSATING_ACTION_NOT_FOUND: 404,
    ErrorCode.METHOD_NOT_ALLOWED: 405,
    ErrorCode.CONNECTION_GONE: 410,
    ErrorCode.NOT_ACCEPTABLE: 406,
    ErrorCode.CONFLICT: 409,
    ErrorCode.DEAD_LETTER_CLOSED: 409,
    ErrorCode.PLAN_NOT_RESUMABLE: 409,
    ErrorCode.PLAN_FINISHED: 409,
    ErrorCode.PAYLOAD_TOO_LARGE: 413,
    ErrorCode.UNSUPPORTED_MEDIA_TYPE: 415,
    ErrorCode.IDEMPOTENCY_KEY_REUSED: 422,
    ErrorCode.PAYLOAD_NOT_DECODABLE: 422,
    ErrorCode.RATE_LIMITED: 429,
    ErrorCode.QUOTA_EXCEEDED: 429,
    ErrorCode.GATEWAY_ERROR: 500,
    ErrorCode.JWKS_UNAVAILABLE: 503,
    ErrorCode.LOG_KEY_UNAVAILABLE: 503,
    ErrorCode.UNAVAILABLE: 503,
}
# Starlette's own refusals (routing, methods), by status.
_CODE_OF_STATUS = {
    400: ErrorCode.BAD_REQUEST,
    401: ErrorCode.UNAUTHENTICATED,
    403: ErrorCode.FORBIDDEN,
    404: ErrorCode.NOT_FOUND,
    405: ErrorCode.METHOD_NOT_ALLOWED,
    406: ErrorCode.NOT_ACCEPTABLE,
    409: ErrorCode.CONFLICT,
    413: ErrorCode.PAYLOAD_TOO_LARGE,
    415: ErrorCode.UNSUPPORTED_MEDIA_TYPE,
    422: ErrorCode.SCHEMA_VALIDATION_FAILED,
}
# An execution that ran and failed: a refusal by policy or by the host guard is the
# caller's to fix (403), Moat's own fault is 500, anything else the provider's (502).
_FAILED_EXECUTION_STATUS: dict[str, int] = {
    ErrorCode.HOST_NOT_ALLOWED: 403,
    ErrorCode.CONNECTION_REVOKED: 403,
    ErrorCode.CONNECTION_NEEDS_REAUTH: 403,
    ErrorCode.CONNECTION_ORIGIN_MISMATCH: 403,
    ErrorCode.CONNECTION_NOT_FOUND: 404,
    ErrorCode.GATEWAY_ERROR: 500,
}
PROVIDER_FAILED = 502
# Every ``unauthenticated`` answer names the scheme to authenticate with.
_CHALLENGE = {"WWW-Authenticate": "Bearer"}


# A failed plan that never reached a provider: refused before its steps, or stopped.
_FAILED_PLAN_STATUS: dict[str, int] = {
    ErrorCode.APPROVAL_REJECTED: 403,
    ErrorCode.APPROVAL_EXPIRED: 403,
    ErrorCode.PLAN_CANCELLED: 409,
    ErrorCode.SCOPE_MISSING: 403,
    ErrorCode.BUDGET_EXCEEDED: 403,
    ErrorCode.POLICY_DENIED: 403,
    ErrorCode.KEY_REVOKED: 403,
    ErrorCode.QUOTA_EXCEEDED: 429,
    ErrorCode.SCHEMA_VALIDATION_FAILED: 400,
}


def plan_status(status: str, code: str | None) -> int:
    """The status of a plan's envelope: 202 while it runs, 200 once executed (or
    planned), and for a failed one its failing step's, as that execution's would be."""
    if status == "accepted":
        return 202
    if status != "failed":
        return 200
    code = code or ""
    return _FAILED_PLAN_STATUS.get(code) or _FAILED_EXECUTION_STATUS.get(code, PROVIDER_FAILED)


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
    if (
        code == ErrorCode.QUOTA_EXCEEDED
    ):  # refused by policy, yet the tenant's to free: as elsewhere
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
    if code == ErrorCode.UNAUTHENTICATED:
        headers = {**_CHALLENGE, **(headers or {})}
    return EnvelopeJSONResponse(
        body.model_dump(mode="json"),
        status_code=status if status is not None else status_of(code),
        headers=headers,
    )


def gateway_error(trace_id: str | None = None) -> JSONResponse:
    return error_response(
        ErrorCode.GATEWAY_ERROR,
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
        code = _CODE_OF_STATUS.get(exc.status_code, ErrorCode.HTTP_ERROR)
        headers = dict(exc.headers) if exc.headers else None
        if exc.status_code == 405:
            headers = {**(headers or {}), "Allow": _allowed_methods(request)}
        return error_response(code, str(exc.detail), status=exc.status_code, headers=headers)

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        return error_response(
            ErrorCode.SCHEMA_VALIDATION_FAILED,
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
    "`invalid_cursor`, `capability_not_probeable`, `id_ambiguous` (an id given by a prefix "
    "that starts several: `details.candidates`), `connection_required`, "
    "`connection_type_mismatch`, `webhook_url_invalid`, `webhook_url_not_allowed` (an address "
    "literal that is not public), `effect_statement_required`.",
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
