"""The error codes of ``MoatError.code``: the gateway's (``ErrorCode``) and the client's own
(``ClientErrorCode``).

``ErrorCode`` is a copy of the gateway's table of stable codes (the client imports nothing of
the server); a test of the repository holds the two equal. A code is added, never renamed or
removed, so an agent may branch on ``err.code == ErrorCode.RATE_LIMITED``; a newer gateway
may still answer a code this copy does not know, so compare, never convert.
"""

from __future__ import annotations

from enum import StrEnum


class ErrorCode(StrEnum):
    """A stable error code. A member equals its string, so stored and recorded codes (plain
    strings in receipts, histories and dead letters) compare equal to it."""

    # The request is malformed.
    BAD_JSON = "bad_json"
    BAD_REQUEST = "bad_request"
    SCHEMA_VALIDATION_FAILED = "schema_validation_failed"
    UNSUPPORTED_SCHEMA_VERSION = "unsupported_schema_version"
    IDEMPOTENCY_KEY_INVALID = "idempotency_key_invalid"
    INVALID_CURSOR = "invalid_cursor"
    CONNECTION_TYPE_MISMATCH = "connection_type_mismatch"
    WEBHOOK_URL_INVALID = "webhook_url_invalid"
    WEBHOOK_URL_NOT_ALLOWED = "webhook_url_not_allowed"
    EFFECT_STATEMENT_REQUIRED = "effect_statement_required"
    CAPABILITY_NOT_PROBEABLE = "capability_not_probeable"
    PLAN_INVALID = "plan_invalid"
    # Who asks may not do it.
    UNAUTHENTICATED = "unauthenticated"
    FORBIDDEN = "forbidden"
    SCOPE_MISSING = "scope_missing"
    KEY_REVOKED = "key_revoked"
    CONNECTION_REVOKED = "connection_revoked"
    CONNECTION_NEEDS_REAUTH = "connection_needs_reauth"
    CONNECTION_ORIGIN_MISMATCH = "connection_origin_mismatch"
    BYPASS_NOT_ALLOWED = "bypass_not_allowed"
    SELF_APPROVAL_FORBIDDEN = "self_approval_forbidden"
    DECISION_NOT_SIGNED = "decision_not_signed"
    # Approvals.
    APPROVAL_EXPIRED = "approval_expired"
    APPROVAL_REJECTED = "approval_rejected"
    APPROVAL_NOT_FOUND = "approval_not_found"
    APPROVAL_MISMATCH = "approval_mismatch"
    APPROVAL_STALE = "approval_stale"
    APPROVAL_NOT_PENDING = "approval_not_pending"
    # Nothing by that name, for this tenant.
    POLICY_VERSION_NOT_FOUND = "policy_version_not_found"
    CAPABILITY_NOT_FOUND = "capability_not_found"
    EXECUTION_NOT_FOUND = "execution_not_found"
    PLAN_NOT_FOUND = "plan_not_found"
    RECEIPT_NOT_FOUND = "receipt_not_found"
    MANIFEST_NOT_FOUND = "manifest_not_found"
    TENANT_NOT_FOUND = "tenant_not_found"
    KEY_NOT_FOUND = "key_not_found"
    CONNECTION_NOT_FOUND = "connection_not_found"
    PROBE_NOT_FOUND = "probe_not_found"
    PERSON_NOT_FOUND = "person_not_found"
    NOT_FOUND = "not_found"
    WEBHOOK_NOT_FOUND = "webhook_not_found"
    DEAD_LETTER_NOT_FOUND = "dead_letter_not_found"
    COMPENSATING_ACTION_NOT_FOUND = "compensating_action_not_found"
    # An id given by a prefix that starts more than one.
    ID_AMBIGUOUS = "id_ambiguous"
    # HTTP itself, and the state of what the request names.
    METHOD_NOT_ALLOWED = "method_not_allowed"
    CONNECTION_GONE = "connection_gone"
    NOT_ACCEPTABLE = "not_acceptable"
    CONFLICT = "conflict"
    DEAD_LETTER_CLOSED = "dead_letter_closed"
    # Resume of a plan that is running, executed or compensated; cancel of a finished one.
    PLAN_NOT_RESUMABLE = "plan_not_resumable"
    PLAN_FINISHED = "plan_finished"
    # A plan stopped by a person before it finished.
    PLAN_CANCELLED = "plan_cancelled"
    PAYLOAD_TOO_LARGE = "payload_too_large"
    UNSUPPORTED_MEDIA_TYPE = "unsupported_media_type"
    IDEMPOTENCY_KEY_REUSED = "idempotency_key_reused"
    PAYLOAD_NOT_DECODABLE = "payload_not_decodable"
    HTTP_ERROR = "http_error"
    # Limits.
    RATE_LIMITED = "rate_limited"
    QUOTA_EXCEEDED = "quota_exceeded"
    # The transparency log.
    LOG_CHECKPOINT_NOT_FOUND = "log_checkpoint_not_found"
    LOG_LEAF_NOT_FOUND = "log_leaf_not_found"
    LOG_SIZE_NOT_FOUND = "log_size_not_found"
    LOG_SIZE_INVALID = "log_size_invalid"
    LOG_LEAF_NOT_CHECKPOINTED = "log_leaf_not_checkpointed"
    LOG_COSIGNATURE_INVALID = "log_cosignature_invalid"
    LOG_KEY_UNAVAILABLE = "log_key_unavailable"
    # Moat itself.
    GATEWAY_ERROR = "gateway_error"
    JWKS_UNAVAILABLE = "jwks_unavailable"
    UNAVAILABLE = "unavailable"

    # An execution that ran (or was refused by policy and recorded) and failed: the values
    # of ``schemas.records.ErrorTaxonomy`` besides ``none``, and the adapters' finer codes.
    PROVIDER_RATE_LIMITED = "provider_rate_limited"
    PROVIDER_AUTH_FAILURE = "provider_auth_failure"
    PROVIDER_SERVER_ERROR = "provider_server_error"
    PROVIDER_NOT_FOUND = "provider_not_found"
    PROVIDER_INVALID_INPUT = "provider_invalid_input"
    PROVIDER_INVALID_RESPONSE = "provider_invalid_response"
    TIMEOUT = "timeout"
    NETWORK_ERROR = "network_error"
    POLICY_DENIED = "policy_denied"
    BUDGET_EXCEEDED = "budget_exceeded"
    HOST_NOT_ALLOWED = "host_not_allowed"
    CONNECTION_INVALID = "connection_invalid"
    CONNECTION_REQUIRED = "connection_required"
    OUTCOME_UNKNOWN = "outcome_unknown"
    START_NOT_SIGNED = "start_not_signed"
    UNKNOWN = "unknown"
    # A warning on an executed call: the provider's answer was larger than Moat reads.
    PROVIDER_RESPONSE_TRUNCATED = "provider_response_truncated"

    # Types of Temporal failures that stay inside Moat: a step retried while another
    # execution holds its idempotency key, and a payload the codec refuses to read.
    IDEMPOTENCY_KEY_BUSY = "idempotency_key_busy"
    PAYLOAD_NOT_ENCRYPTED = "payload_not_encrypted"


class ClientErrorCode(StrEnum):
    """The codes of the errors the client raises itself, never answered by a gateway."""

    CLIENT_NOT_CONFIGURED = "client_not_configured"
    GATEWAY_UNAVAILABLE = "gateway_unavailable"
    EXECUTION_PENDING = "execution_pending"
    APPROVAL_REQUIRED = "approval_required"
