"""The one error envelope of the HTTP API: stable ``code``, human ``message``, ``details``
and the request's ``trace_id``. No request ever sees a stack trace."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from schemas.execute import Envelope, EnvelopeStatus, ErrorBody
from starter.observability import current_trace_id

log = logging.getLogger("moat.gateway")


class ApiError(Exception):
    """An error answered with the envelope."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        details: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.details = details or {}
        self.headers = headers


def error_response(
    status: int,
    code: str,
    message: str,
    details: dict[str, Any] | None = None,
    *,
    trace_id: str | None = None,
    idempotency_key: str | None = None,
    receipt_id: str | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    body = Envelope(
        receipt_id=receipt_id,
        trace_id=trace_id or current_trace_id(),
        status=EnvelopeStatus.FAILED,
        idempotency_key=idempotency_key,
        error=ErrorBody(code=code, message=message, details=details or {}),
    )
    return JSONResponse(body.model_dump(mode="json"), status_code=status, headers=headers)


_STATUS_CODES = {
    400: "bad_request",
    401: "unauthenticated",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    406: "not_acceptable",
    413: "payload_too_large",
    415: "unsupported_media_type",
    422: "schema_validation_failed",
}


def install(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def _api_error(_: Request, exc: ApiError) -> JSONResponse:
        return error_response(exc.status, exc.code, exc.message, exc.details, headers=exc.headers)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = _STATUS_CODES.get(exc.status_code, "http_error")
        return error_response(exc.status_code, code, str(exc.detail))

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        return error_response(
            400,
            "schema_validation_failed",
            "The request is not valid.",
            {"errors": field_errors(exc.errors())},
        )

    @app.exception_handler(Exception)
    async def _internal(_: Request, exc: Exception) -> JSONResponse:
        log.exception("internal error (trace %s)", current_trace_id())
        return error_response(
            500, "gateway_error", "Moat failed internally; quote the trace id when reporting it."
        )


def field_errors(errors: Any) -> list[dict[str, Any]]:
    """Pydantic errors reduced to location, message and type (never the input value)."""
    return [
        {
            "loc": [str(p) for p in e.get("loc", ())],
            "msg": str(e.get("msg", "")),
            "type": str(e.get("type", "")),
        }
        for e in errors
    ]
