"""Every way the gateway says no, as ``MoatError`` with the gateway's stable ``code``, and
subclasses for the answers an agent branches on.

A refusal the gateway sent carries its ``http_status``, ``details`` and ``trace_id`` (quote
it to whoever runs the gateway). Three errors are the client's own: ``GatewayUnavailable``
(no answer, or only server errors, until the total deadline), ``ExecutionPending`` (the run
is still going at the deadline: ask again with its ``receipt_id``) and its subclass
``ApprovalRequired`` (raised at once: the run waits for a person's decision).
"""

from __future__ import annotations

from typing import Any

from moat_client.codes import ClientErrorCode, ErrorCode
from moat_client.models import ApprovalRef, Envelope, ErrorBody


class MoatError(Exception):
    """The gateway refused the request, or the client gave up waiting for it."""

    def __init__(
        self,
        http_status: int,
        error: ErrorBody,
        trace_id: str,
        *,
        envelope: Envelope | None = None,
    ) -> None:
        super().__init__(f"{error.code}: {error.message}")
        self.http_status = http_status
        self.code = error.code
        self.message = error.message
        self.details: dict[str, Any] = error.details
        self.trace_id = trace_id
        # A refusal that left a receipt (a policy denial) carries the whole envelope.
        self.envelope = envelope

    @property
    def receipt_id(self) -> str | None:
        """The receipt of a refusal that left one (a policy denial), else None."""
        return self.envelope.receipt_id if self.envelope is not None else None


class InvalidRequest(MoatError):
    """The request is malformed (``schema_validation_failed`` lists the failing fields in
    ``details["errors"]``): fix it, retrying the same request cannot help."""


class Unauthenticated(MoatError):
    """No API key, or an unknown or revoked one (``MOAT_API_KEY``)."""


class Forbidden(MoatError):
    """The key may not use this route (a tenant key on an admin route)."""


class NotFound(MoatError):
    """No such capability, execution, receipt, plan or route for this tenant."""


class IdempotencyKeyReused(MoatError):
    """The key was used before with other input; ``original_receipt_id`` is that run's."""

    @property
    def original_receipt_id(self) -> str | None:
        """The receipt id of the execution that first used the key, when the gateway named it."""
        value = self.details.get("original_receipt_id")
        return value if isinstance(value, str) else None


class PolicyDenied(MoatError):
    """Moat's policy refused the execution and recorded it (``receipt_id``): nothing ran."""


class BudgetExceeded(PolicyDenied):
    """The tenant's budget for the capability is used up for the period."""


class HostNotAllowed(PolicyDenied):
    """``http.request`` to a host outside the tenant's allow-list."""


class ApprovalRejected(PolicyDenied):
    """A person rejected the call it waited for: nothing ran, no budget was used."""


class ApprovalExpired(PolicyDenied):
    """Nobody decided the call before its approval expired: nothing ran. Sending it again
    with a new idempotency key asks for a new approval."""


class GatewayUnavailable(MoatError):
    """No usable answer before the deadline (network errors, timeouts, 5xx). The request
    may have reached Moat: send it again with the same ``idempotency_key`` to find out,
    never with a new one."""

    def __init__(self, message: str, *, idempotency_key: str | None, http_status: int = 0) -> None:
        super().__init__(
            http_status,
            ErrorBody(
                code=ClientErrorCode.GATEWAY_UNAVAILABLE,
                message=message,
                details={"idempotency_key": idempotency_key},
            ),
            "",
        )
        self.idempotency_key = idempotency_key


class ExecutionPending(MoatError):
    """The run was accepted and is still going when the deadline passed: nothing is lost
    (Moat holds it). Ask later with ``client.wait(receipt_id)`` or ``get_execution``."""

    def __init__(
        self, envelope: Envelope, message: str, code: str = ClientErrorCode.EXECUTION_PENDING
    ) -> None:
        super().__init__(
            202,
            ErrorBody(code=code, message=message, details={"receipt_id": envelope.receipt_id}),
            envelope.trace_id,
            envelope=envelope,
        )


class ApprovalRequired(ExecutionPending):
    """The run waits for a person to approve or reject it. ``approval`` is what they decide
    on (``id``, ``input_hash``, ``policy_version``, ``expires_at``): hand its ``id`` to
    whoever approves; ``client.wait(receipt_id)`` returns once they have decided (the
    result, or ``ApprovalRejected``/``ApprovalExpired``). Sending the call again with the
    same key answers the same approval, never a second one."""

    def __init__(self, envelope: Envelope) -> None:
        super().__init__(
            envelope,
            "the execution waits for a person's approval: ask again later with its receipt_id",
            code=ClientErrorCode.APPROVAL_REQUIRED,
        )
        if envelope.approval is not None:
            self.details["approval_id"] = envelope.approval.id

    @property
    def approval(self) -> ApprovalRef | None:
        """What the person decides on: ``id``, ``input_hash``, ``policy_version`` and
        ``expires_at``."""
        return self.envelope.approval if self.envelope is not None else None


_BY_CODE: dict[str, type[MoatError]] = {
    ErrorCode.BAD_JSON: InvalidRequest,
    ErrorCode.SCHEMA_VALIDATION_FAILED: InvalidRequest,
    ErrorCode.UNSUPPORTED_SCHEMA_VERSION: InvalidRequest,
    ErrorCode.IDEMPOTENCY_KEY_INVALID: InvalidRequest,
    ErrorCode.INVALID_CURSOR: InvalidRequest,
    ErrorCode.PLAN_INVALID: InvalidRequest,
    ErrorCode.EFFECT_STATEMENT_REQUIRED: InvalidRequest,
    ErrorCode.PAYLOAD_TOO_LARGE: InvalidRequest,
    ErrorCode.UNAUTHENTICATED: Unauthenticated,
    ErrorCode.FORBIDDEN: Forbidden,
    ErrorCode.CAPABILITY_NOT_FOUND: NotFound,
    ErrorCode.EXECUTION_NOT_FOUND: NotFound,
    ErrorCode.RECEIPT_NOT_FOUND: NotFound,
    ErrorCode.PLAN_NOT_FOUND: NotFound,
    ErrorCode.NOT_FOUND: NotFound,
    ErrorCode.IDEMPOTENCY_KEY_REUSED: IdempotencyKeyReused,
    ErrorCode.POLICY_DENIED: PolicyDenied,
    ErrorCode.BUDGET_EXCEEDED: BudgetExceeded,
    ErrorCode.HOST_NOT_ALLOWED: HostNotAllowed,
    ErrorCode.APPROVAL_REJECTED: ApprovalRejected,
    ErrorCode.APPROVAL_EXPIRED: ApprovalExpired,
}


def error_for(
    http_status: int, error: ErrorBody, trace_id: str, envelope: Envelope | None = None
) -> MoatError:
    """The most specific ``MoatError`` for a gateway's refusal.

    Args:
        http_status: The answer's HTTP status.
        error: The envelope's ``error``.
        trace_id: The envelope's ``trace_id``.
        envelope: The whole envelope, when the refusal left a receipt.

    Returns:
        The subclass the ``code`` maps to, or ``MoatError`` itself for a code this client
        does not know (a newer gateway's). It is returned, not raised.
    """
    kind = _BY_CODE.get(error.code, MoatError)
    return kind(http_status, error, trace_id, envelope=envelope)
