"""What the ``reconcile`` adapters share (providers with no idempotency key).

Such an adapter marks what it creates with the execution's downstream key and, before any
attempt that may repeat an earlier one (a retry, or the first attempt of a reset or resumed
run), looks for its mark over a window that starts before the execution did. Found: the
earlier effect is the answer. Not found: the effect is performed.

What cannot be settled that way ends ``outcome_unknown`` (taxonomy ``timeout``), never a
blind retry: the look-up is refused (no scope to read), or keeps failing until the attempts
run out, or the last attempt's own call ended without an answer.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from temporalio.exceptions import ApplicationError

from activities.adapters.base import fail
from schemas import oauth
from schemas.connections import Credential
from schemas.errors import ErrorCode
from schemas.records import OUTCOME_UNKNOWN, ErrorTaxonomy
from schemas.run import AdapterInput

# The metadata event type (Slack) and comment (GitHub) that carry the key.
MARK_EVENT_TYPE = "moat_execution"
# Clocks differ (ours, the provider's): the window opens this long before the execution.
CLOCK_SKEW = timedelta(minutes=5)
# Without a time-ordered receipt id (a run started past the gateway), look back this far.
FALLBACK_LOOKBACK = timedelta(hours=24)
# Failures after which the call may have taken effect at the provider.
AMBIGUOUS = frozenset(
    {
        ErrorTaxonomy.TIMEOUT.value,
        ErrorTaxonomy.NETWORK_ERROR.value,
        ErrorTaxonomy.PROVIDER_SERVER_ERROR.value,
        ErrorTaxonomy.UNKNOWN.value,
    }
)
# A failure's detail saying the provider was not given the effect (an SMTP refusal, or a
# connection lost, before the message's last byte): ambiguous by type, yet safe to repeat.
NOT_PERFORMED = "not_performed"


def ambiguous(err: ApplicationError) -> bool:
    """Whether the call that failed so may have taken effect."""
    return err.type in AMBIGUOUS and _details(err).get(NOT_PERFORMED) is not True


def window_start(inp: AdapterInput, now: datetime | None = None) -> datetime:
    """When to look from: the execution's start (its receipt id is a UUID v7, which holds
    the millisecond it was made) less ``CLOCK_SKEW``."""
    try:
        rid = uuid.UUID(inp.ref.receipt_id)
    except ValueError:
        rid = None
    if rid is not None and rid.version == 7:
        started = datetime.fromtimestamp((rid.int >> 80) / 1000, UTC)
        return started - CLOCK_SKEW
    return (now or datetime.now(UTC)) - FALLBACK_LOOKBACK


def credential_of(inp: AdapterInput, credential: Credential | None, kind: str) -> Credential:
    """The call's credential, which must be of ``kind``."""
    if credential is None:
        raise fail(
            ErrorTaxonomy.GATEWAY_ERROR,
            f"{inp.capability.id} needs a connection of type {kind}: create one "
            "(moat connection add) and name it in the request's connection_id",
            code=ErrorCode.CONNECTION_REQUIRED,
            retryable=False,
        )
    if credential.type != kind and oauth.stands_for(credential.type, credential.config) != kind:
        raise fail(
            ErrorTaxonomy.GATEWAY_ERROR,
            f"{inp.capability.id} takes a {kind} connection, not {credential.type}",
            code=ErrorCode.CONNECTION_TYPE_MISMATCH,
            retryable=False,
        )
    return credential


def base_url(credential: Credential, default: str) -> str:
    configured = credential.config.get("base_url")
    return (configured if isinstance(configured, str) and configured else default).rstrip("/")


def last_attempt(inp: AdapterInput) -> bool:
    return inp.attempt > inp.capability.retry_settings.max_retries


def outcome_unknown(
    message: str, *, http_status: int | None = None, provider_response: object = None
) -> ApplicationError:
    return fail(
        ErrorTaxonomy.TIMEOUT,
        f"outcome unknown: {message}; it was not retried so as not to do it twice. Check the "
        "provider; if nothing was done, execute again with a new idempotency key",
        code=OUTCOME_UNKNOWN,
        http_status=http_status,
        retryable=False,
        provider_response=provider_response,
    )


def _details(err: ApplicationError) -> dict[str, object]:
    first = err.details[0] if err.details else None
    return first if isinstance(first, dict) else {}


def lookup_failed(inp: AdapterInput, err: ApplicationError, what: str) -> ApplicationError:
    """A look-up that failed: retried while attempts remain and the failure may pass;
    otherwise the outcome is unknown."""
    if not err.non_retryable and not last_attempt(inp):
        return err
    details = _details(err)
    status = details.get("http_status")
    return outcome_unknown(
        f"{what} could not be read ({err.type})",
        http_status=status if isinstance(status, int) else None,
        provider_response=details.get("provider_response"),
    )


def call_failed(inp: AdapterInput, err: ApplicationError, what: str) -> ApplicationError:
    """The effect's own call failed. If it may have taken effect and no attempt is left to
    look for it, the outcome is unknown; otherwise the failure stands (a retry looks
    first)."""
    if ambiguous(err) and last_attempt(inp):
        details = _details(err)
        status = details.get("http_status")
        return outcome_unknown(
            f"{what} ended without an answer ({err.type}) on the last attempt",
            http_status=status if isinstance(status, int) else None,
        )
    return err
