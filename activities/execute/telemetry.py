"""The adapter attempt's span, in the OpenTelemetry GenAI conventions for tool execution,
so a tracing backend that groups agents' tool calls groups Moat's with them.

The span is ``execute_tool {capability id}`` (kind INTERNAL, a child of the Temporal
interceptor's ``RunActivity`` span, the provider call's ``traceparent`` its child):

- ``gen_ai.operation.name`` ``execute_tool``; ``gen_ai.tool.name`` the capability id;
  ``gen_ai.tool.call.id`` the receipt id (one call, however many attempts);
  ``gen_ai.tool.type`` ``extension`` (why: ``schemas.telemetry``).
- On failure: ``error.type`` the failure's class in Moat's taxonomy
  (``provider_server_error``, ``timeout`` and the like: low-cardinality, as the
  conventions ask), status ERROR with Moat's error code as its description, never the
  message (it may quote a provider's answer).
- Moat's own beside them: ``moat.receipt_id``, ``moat.capability.version``,
  ``moat.adapter``, ``moat.attempt``, ``moat.tenant_id`` and, on failure,
  ``moat.error.code`` and ``moat.http.status``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, StatusCode
from temporalio.exceptions import ApplicationError

from schemas.run import AdapterInput
from schemas.telemetry import (
    ERROR_TYPE,
    EXECUTE_TOOL,
    MOAT_RECEIPT_ID,
    OPERATION_NAME,
    OTHER_ERROR,
    TOOL_CALL_ID,
    TOOL_NAME,
    TOOL_TYPE,
    TOOL_TYPE_EXTENSION,
)

_tracer = trace.get_tracer("moat.adapter")


def tool_attributes(inp: AdapterInput, attempt: int) -> dict[str, Any]:
    return {
        OPERATION_NAME: EXECUTE_TOOL,
        TOOL_NAME: inp.capability.id,
        TOOL_CALL_ID: inp.ref.receipt_id,
        TOOL_TYPE: TOOL_TYPE_EXTENSION,
        MOAT_RECEIPT_ID: inp.ref.receipt_id,
        "moat.capability.version": inp.capability.version,
        "moat.adapter": inp.capability.adapter,
        "moat.attempt": attempt,
        "moat.tenant_id": inp.ref.tenant_id,
    }


@contextmanager
def tool_span(inp: AdapterInput, attempt: int) -> Iterator[Span]:
    """The attempt's span, current while the block runs; a failure out of the block marks
    it (and goes on)."""
    with _tracer.start_as_current_span(
        f"{EXECUTE_TOOL} {inp.capability.id}",
        kind=SpanKind.INTERNAL,
        attributes=tool_attributes(inp, attempt),
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        try:
            yield span
        except ApplicationError as err:
            details = err.details[0] if err.details and isinstance(err.details[0], dict) else {}
            code = str(details.get("error_code") or err.type or OTHER_ERROR)
            span.set_attributes({ERROR_TYPE: err.type or OTHER_ERROR, "moat.error.code": code})
            if isinstance(details.get("http_status"), int):
                span.set_attribute("moat.http.status", details["http_status"])
            span.set_status(StatusCode.ERROR, code)
            raise
        except BaseException as err:
            span.set_attribute(ERROR_TYPE, type(err).__qualname__)
            span.set_status(StatusCode.ERROR)
            raise
