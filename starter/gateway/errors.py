"""The one error envelope of the HTTP API: stable ``code``, human ``message``, ``details``
and the request's ``trace_id``. No request ever sees a stack trace.

``Boundary`` wraps every request: one span (whose id is the ``trace_id``), the body size
limit, and the last resort that turns any fault into ``gateway_error``.
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
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from schemas.api import ErrorEnvelope
from schemas.execute import Envelope, EnvelopeStatus, ErrorBody
from schemas.names import TRACE_HEADER
from starter.runtime import observability
from starter.runtime.observability import current_trace_id

log = logging.getLogger("moat.gateway")


class EnvelopeJSONResponse(JSONResponse):
    """JSON with non-ASCII characters escaped: an answer that echoes a caller's text holding
    a lone surrogate still renders (UTF-8 cannot encode one)."""

    def render(self, content: Any) -> bytes:
        return json.dumps(content, ensure_ascii=True, separators=(",", ":")).encode("ascii")


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
    headers: Mapping[str, str] | None = None,
) -> JSONResponse:
    body = Envelope(
        receipt_id=receipt_id,
        trace_id=trace_id or current_trace_id(),
        status=EnvelopeStatus.FAILED,
        idempotency_key=idempotency_key,
        error=ErrorBody(code=code, message=message, details=details or {}),
    )
    return EnvelopeJSONResponse(body.model_dump(mode="json"), status_code=status, headers=headers)


_STATUS_CODES = {
    400: "bad_request",
    401: "unauthenticated",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    406: "not_acceptable",
    413: "payload_too_large",
    415: "unsupported_media_type",
    409: "conflict",
    422: "schema_validation_failed",
}


def install(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def _api_error(_: Request, exc: ApiError) -> JSONResponse:
        return error_response(exc.status, exc.code, exc.message, exc.details, headers=exc.headers)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = _STATUS_CODES.get(exc.status_code, "http_error")
        headers = dict(exc.headers) if exc.headers else None
        if exc.status_code == 405:
            headers = {**(headers or {}), "Allow": _allowed_methods(request)}
        return error_response(exc.status_code, code, str(exc.detail), headers=headers)

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
        # Reached only for faults outside the Boundary; inside, the Boundary answers.
        log.error("internal error", exc_info=exc)
        return _gateway_error()


def _allowed_methods(request: Request) -> str:
    """Every method the path supports (Starlette's 405 names only the first route's)."""
    allowed = []
    for method in _METHODS:
        scope = {**request.scope, "method": method}
        if any(route.matches(scope)[0] == Match.FULL for route in request.app.router.routes):
            allowed.append(method)
    return ", ".join(allowed)


_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


def _gateway_error(trace_id: str | None = None) -> JSONResponse:
    return error_response(
        500,
        "gateway_error",
        "Moat failed internally; quote the trace id when reporting it.",
        trace_id=trace_id,
    )


DRAIN_BYTES = 1024 * 1024


class Boundary:
    """Outermost ASGI layer of the gateway (inside Starlette's own error middleware).

    - opens the request's span, so every answer, error or not, carries its trace id (also
      as the ``X-Moat-Trace-Id`` header);
    - refuses bodies over ``max_body_bytes`` with 413 before anything reads them;
    - answers any uncaught fault with the ``gateway_error`` envelope, logged with the trace
      id, never with a stack trace in the answer.
    """

    def __init__(self, app: ASGIApp, max_body_bytes: int) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.tracer = observability.tracer("moat.gateway")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        # Named by the route's template once routed ("GET /v1/receipts/{receipt_id}"): a raw
        # path may hold a credential (the codec's UI token) and has unbounded cardinality.
        with self.tracer.start_as_current_span(
            f"{scope['method']} (unrouted)", record_exception=False
        ) as span:
            trace_id = current_trace_id()
            started = False

            async def send_traced(message: Message) -> None:
                nonlocal started
                if message["type"] == "http.response.start":
                    started = True
                    headers = list(message.get("headers", []))
                    headers.append((TRACE_HEADER.lower().encode(), trace_id.encode()))
                    message = {**message, "headers": headers}
                await send(message)

            try:
                replay = await self._read_body(scope, receive)
                if replay is None:
                    too_large = error_response(
                        413,
                        "payload_too_large",
                        f"The body is over {self.max_body_bytes} bytes.",
                        {"max_body_bytes": self.max_body_bytes},
                        trace_id=trace_id,
                        headers={"Connection": "close"},
                    )
                    await too_large(scope, receive, send_traced)
                    return
                await self.app(scope, replay, send_traced)
            except Exception:
                log.exception("internal error (trace %s)", trace_id)
                if started:
                    raise  # the answer is under way; only dropping the connection is left
                await _gateway_error(trace_id)(scope, receive, send_traced)
            finally:
                route = scope.get("route")
                if route is not None and hasattr(route, "path"):
                    span.update_name(f"{scope['method']} {route.path}")

    async def _read_body(self, scope: Scope, receive: Receive) -> Receive | None:
        """The request with its body read up front (at most ``max_body_bytes``), or None
        when the body is larger."""
        for name, value in scope.get("headers", []):
            if name == b"content-length" and value.isdigit():
                length = int(value)
                if length > self.max_body_bytes + DRAIN_BYTES:
                    return None  # not worth reading: answer, and let the server close
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                break  # http.disconnect: hand it on as the last message
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                await self._drain(receive, message, size)
                return None
            chunks.append(chunk)
            if not message.get("more_body", False):
                message = {"type": "http.request", "body": b"".join(chunks), "more_body": False}
                break
        pending = [message]

        async def replay() -> Message:
            return pending.pop() if pending else await receive()

        return replay

    async def _drain(self, receive: Receive, message: Message, size: int) -> None:
        """Read (and drop) the rest of a refused body, up to ``DRAIN_BYTES``, so a client
        still sending it can read the 413 instead of a reset connection."""
        while message.get("more_body", False) and size <= self.max_body_bytes + DRAIN_BYTES:
            message = await receive()
            if message["type"] != "http.request":
                return
            size += len(message.get("body", b""))


def documented_errors(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` entries for error statuses, all with the error envelope."""
    return {
        status: {"model": ErrorEnvelope, "description": ERROR_DESCRIPTIONS[status]}
        for status in statuses
    }


ERROR_DESCRIPTIONS = {
    400: "Refused request: `bad_json`, `schema_validation_failed` (with the failing fields in "
    "`details.errors`), `unsupported_schema_version`, `idempotency_key_invalid`, "
    "`invalid_cursor`.",
    401: "`unauthenticated`: no API key, or an unknown or revoked one.",
    403: "`forbidden`: the key may not use this route.",
    404: "Not found (`not_found`, `receipt_not_found`, `execution_not_found`, "
    "`capability_not_found`, `tenant_not_found`, `key_not_found`). Another tenant's records "
    "are not found either.",
    405: "`method_not_allowed`; the `Allow` header lists the methods.",
    409: "`conflict`: the name is taken.",
    413: "`payload_too_large`: the body is over the gateway's limit.",
    422: "`idempotency_key_reused`: the key was used with a different request; "
    "`details.original_receipt_id` names the first execution.",
    500: "`gateway_error`: Moat failed internally; the `trace_id` identifies the fault.",
    503: "`jwks_unavailable`: the gateway has no readable public key set to serve yet.",
}


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
