"""What every adapter keeps to: its signature, how it fails, how it reads its input.

An adapter returns an ``AdapterOutput`` or raises ``ApplicationError`` whose ``type`` is an
``ErrorTaxonomy`` value and whose first detail carries the provider's HTTP status.

A failure's message is Moat's own wording and the exception's type, never a third-party
exception's text, and never chained to that exception: the text may repeat the request or
the answer (an HTTP library refusing a header quotes its value, a secret), and a message
reaches the logs, Temporal's history and the run manifest.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from temporalio.exceptions import ApplicationError

from schemas.connections import Credential
from schemas.errors import ErrorCode
from schemas.names import PROVIDER_RESPONSE
from schemas.records import ErrorTaxonomy
from schemas.run import AdapterInput, AdapterOutput

# An adapter is called with the run's input and, when the request named a connection, its
# decrypted credential (resolved by the activity for this one call, never stored).
Adapter = Callable[[AdapterInput, Credential | None], Awaitable[AdapterOutput]]

M = TypeVar("M", bound=BaseModel)


def fail(
    taxonomy: ErrorTaxonomy,
    message: str,
    *,
    code: str | None = None,
    http_status: int | None = None,
    retryable: bool = True,
    retry_after: timedelta | None = None,
    provider_response: Any = None,
    more: dict[str, Any] | None = None,
) -> ApplicationError:
    """An adapter failure: ``type`` is its stable error code (the taxonomy value unless a more
    precise ``code`` is given); the details carry the taxonomy and the provider's status,
    and ``more`` (nothing secret: the details reach the caller's envelope)."""
    code = code or taxonomy.value
    details: dict[str, Any] = {
        **(more or {}),
        "http_status": http_status,
        "taxonomy": taxonomy.value,
        "error_code": code,
    }
    if provider_response is not None:
        details[PROVIDER_RESPONSE] = provider_response
    return ApplicationError(
        message,
        details,
        type=code,
        non_retryable=not retryable,
        next_retry_delay=retry_after,
    )


def parse_input(inp: AdapterInput, model: type[M]) -> M:
    """The input, validated again: a run may have been started past the gateway's checks."""
    try:
        return model.model_validate(inp.input)
    except ValidationError as err:
        # Locations and types only: a refused value may be a secret.
        where = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'input'} ({e['type']})" for e in err.errors()
        )
        raise fail(
            ErrorTaxonomy.GATEWAY_ERROR,
            f"the input does not match {inp.capability.id}'s input schema: {where}",
            code=ErrorCode.SCHEMA_VALIDATION_FAILED,
            retryable=False,
        ) from None
