"""The adapter step of ``ExecuteCapability``: one attempt at the provider call.

Each attempt records its events in transactions of its own (the attempt itself is the state
they record): the call before the provider is asked, then its failure or completion. A run
may have its policy check write the first attempt's call, in the check's transaction
(``AdapterInput.first_attempt_logged``): it schedules that attempt in the same workflow task,
with nothing of its own in between. A run that records its receipt with ``RECORD_RUN`` has
a success's completion written there, in the receipt's transaction
(``AdapterInput.defer_completion``). A run that says what its success records
(``AdapterInput.record``) has the successful attempt write that transaction itself, before
it reports (``RecordStep.recorded``); when it cannot, in time or at all, the run's record
step writes it as before. An attempt of such a run that follows another first looks for the
receipt: one recorded by an attempt whose report was lost is the answer, and the provider is
not called again.
"""

from __future__ import annotations

import asyncio
import traceback
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from http import HTTPStatus
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.adapters import Adapter, fail
from activities.evidence import continue_chain
from activities.execute.events import (
    ADAPTER_ACTOR,
    AttemptFailure,
    Draft,
    attempt_completed,
    attempt_failed,
    attempt_started,
    chained,
)
from activities.execute.record import RecordStep
from activities.execute.telemetry import tool_span
from activities.heartbeat import heartbeating
from schemas.connections import ConnectionResolver, Credential, TokenRefresher
from schemas.errors import ErrorCode
from schemas.names import CALL_ADAPTER
from schemas.oauth import OAUTH2
from schemas.records import RESPONSE_TRUNCATED, ErrorTaxonomy, Receipt
from schemas.run import AdapterInput, AdapterOutput, RecordedRun
from store import events as event_log
from store import receipts, tenancy


class AdapterStep:
    """The ``call_adapter`` activity, built once in ``worker.py`` with its dependencies."""

    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        adapters: Mapping[str, Adapter],
        connections: ConnectionResolver | None = None,
        recorder: RecordStep | None = None,
    ) -> None:
        self._sessions = sessions
        self._adapters = adapters
        self._connections = connections
        self._recorder = recorder

    @activity.defn(name=CALL_ADAPTER)
    async def call_adapter(self, inp: AdapterInput) -> AdapterOutput:
        # The whole attempt, not only the provider call: its event writes wait on
        # PostgreSQL, which may be slow or restarting, and a live attempt must not time out.
        async with heartbeating():
            with tool_span(inp, activity.info().attempt):
                return await self._attempt(inp)

    async def _attempt(self, inp: AdapterInput) -> AdapterOutput:
        info = activity.info()
        if info.attempt > 1 and inp.record is not None:
            found = await self._recorded_before(inp)
            if found is not None:
                return _answer_of(found, info.attempt)
        invoked_at = datetime.now(UTC)
        run_id = info.workflow_run_id or ""
        if info.attempt > 1 or not inp.first_attempt_logged:  # else the policy check wrote it
            await self._started(inp, run_id, info.attempt)
        adapter = self._adapters.get(inp.capability.adapter)
        if adapter is None:
            raise ApplicationError(
                f"no adapter {inp.capability.adapter!r} on this worker",
                type=ErrorTaxonomy.GATEWAY_ERROR.value,
                non_retryable=True,
            )
        try:
            credential = await self._credential(inp)
            out = await self._call(
                adapter, inp.model_copy(update={"attempt": info.attempt}), credential
            )
        except ApplicationError as err:
            details = err.details[0] if err.details and isinstance(err.details[0], dict) else {}
            failure = _failure(inp, err, details, info.attempt, invoked_at)
            await self._adapter_events(inp, run_id, attempt_failed(inp.ref.receipt_id, failure))
            # Not chained: Temporal records a cause's text, which Moat did not write.
            raise ApplicationError(
                err.message,
                {**details, "attempt": info.attempt},
                type=err.type,
                non_retryable=err.non_retryable,
                next_retry_delay=err.next_retry_delay,
            ) from None
        duration_ms = _ms_since(invoked_at)
        if not inp.defer_completion:  # else the record step writes it, with the receipt
            done = attempt_completed(
                inp.ref.receipt_id, inp.capability, info.attempt, duration_ms, out
            )
            await self._adapter_events(inp, run_id, done)
        out = out.model_copy(
            update={"invoked_at": invoked_at, "attempt": info.attempt, "duration_ms": duration_ms}
        )
        recorded = await self._record_success(inp, out, info)
        return out if recorded is None else out.model_copy(update={"recorded": recorded})

    async def _started(self, inp: AdapterInput, run_id: str, attempt: int) -> None:
        """The attempt's start, before the provider is asked: its events, and beside them
        what a success records itself is prepared, off its way."""
        started = attempt_started(inp.ref.receipt_id, inp.capability, attempt, inp.resumed)
        preparing = None
        if inp.record is not None and self._recorder is not None:
            preparing = asyncio.ensure_future(self._recorder.prepare(inp.ref.tenant_id, run_id))
        try:
            await self._adapter_events(inp, run_id, started)
        finally:
            if preparing is not None:
                await preparing

    async def _recorded_before(self, inp: AdapterInput) -> Receipt | None:
        """The execution's receipt, when an earlier attempt recorded it and its report was
        lost (its worker died after the commit): the call is not made again. By then the
        caller may have been answered with it, and acted on the effect: a repeat, even one
        a look-up would settle, could redo what the caller has since undone."""
        tenant_id = inp.ref.tenant_id
        async with tenancy.tenant_transaction(self._sessions, tenant_id) as session:
            return await receipts.get_receipt(session, tenant_id, inp.ref.receipt_id)

    async def _record_success(
        self, inp: AdapterInput, out: AdapterOutput, info: activity.Info
    ) -> RecordedRun | None:
        """The receipt, manifest and completion of this successful attempt, recorded as the
        run's record step would (``AdapterInput.record``), while the attempt has the time
        for it: a record that failed or could not finish in time is left to the run's record
        step, which never calls the provider again. None: left to it."""
        if inp.record is None or self._recorder is None:
            return None
        left = _seconds_left(info)
        if left is not None and left < RECORD_TIME_NEEDED:
            return None
        run = inp.record.run_input(inp, out, datetime.now(UTC))
        try:
            async with asyncio.timeout(None if left is None else left - REPORT_TIME):
                return await self._recorder.recorded(run)
        except Exception as err:  # the run's record step records it
            activity.logger.warning(
                "receipt %s left to the run's record step: %s",
                inp.ref.receipt_id,
                type(err).__name__,
            )
            return None

    async def _credential(self, inp: AdapterInput) -> Credential | None:
        """The request's connection, resolved afresh on every attempt (a rotation applies
        from the next attempt on)."""
        if inp.ref.connection_id is None:
            return None
        if self._connections is None:
            raise ApplicationError(
                "this worker cannot resolve connections",
                {"error_code": ErrorCode.CONNECTION_NOT_FOUND},
                type=ErrorTaxonomy.GATEWAY_ERROR.value,
                non_retryable=True,
            )
        return await self._connections.resolve(inp.ref.tenant_id, inp.ref.connection_id)

    async def _call(
        self, adapter: Adapter, inp: AdapterInput, credential: Credential | None
    ) -> AdapterOutput:
        """The adapter's call; an OAuth 2 token the provider refused (401) although it looked
        fresh is refreshed once and the call made once more (a 401 took no effect)."""
        try:
            return await _guarded(adapter, inp, credential)
        except ApplicationError as err:
            details = err.details[0] if err.details and isinstance(err.details[0], dict) else {}
            refresher = self._connections
            if (
                credential is None
                or credential.type != OAUTH2
                or details.get("http_status") != HTTPStatus.UNAUTHORIZED
                or not isinstance(refresher, TokenRefresher)
            ):
                raise
            fresh = await refresher.refreshed(inp.ref.tenant_id, credential)
            return await _guarded(adapter, inp, fresh)

    async def _adapter_events(self, inp: AdapterInput, run_id: str, events: list[Draft]) -> None:
        """Events of the adapter step, in a transaction of their own (the attempt itself is
        the state they record): its BEGIN, tenant, events and COMMIT in one round trip."""
        tenant_id, receipt_id = inp.ref.tenant_id, inp.ref.receipt_id
        drafts = chained(continue_chain(tenant_id, receipt_id, run_id, ADAPTER_ACTOR), events)
        try:
            async with self._sessions.begin() as session:
                await event_log.append_committing(
                    session, drafts, scope=tenant_id, first_cause_from_log=True
                )
        except event_log.PartialAppend:
            async with self._sessions.begin() as session:
                await tenancy.set_tenant(session, tenant_id)
                await event_log.append(session, drafts, first_cause_from_log=True)


# What a successful attempt leaves itself to record its receipt in (``_record_success``),
# within the attempt's start-to-close timeout; and to report, of that.
RECORD_TIME_NEEDED = 3.0
REPORT_TIME = 1.0


def _seconds_left(info: activity.Info) -> float | None:
    """How long the attempt has before its start-to-close timeout (None: no timeout)."""
    if info.start_to_close_timeout is None:
        return None
    deadline = info.started_time + info.start_to_close_timeout
    return (deadline - datetime.now(UTC)).total_seconds()


def _answer_of(receipt: Receipt, attempt: int) -> AdapterOutput:
    """What an attempt that found its execution's receipt recorded reports: the receipt,
    and the answer as the receipt tells it (its output is kept with it, which the gateway
    reads). The run writes the manifest if the recording attempt did not."""
    return AdapterOutput(
        http_status=receipt.http_status,
        attempt=attempt,
        output_hash=receipt.output_hash or "",
        truncated=receipt.error_code == RESPONSE_TRUNCATED,
        evidence=receipt.provider_evidence,
        recorded=RecordedRun(receipt=receipt, manifest_written=False),
    )


def _failure(
    inp: AdapterInput,
    err: ApplicationError,
    details: dict[str, Any],
    attempt: int,
    invoked_at: datetime,
) -> AttemptFailure:
    """What a failed attempt's events say: Temporal retries it unless the failure is final
    or the capability's retries are used up, after the provider's wait or the backoff."""
    retries_left = attempt <= inp.capability.retry_settings.max_retries
    will_retry = not err.non_retryable and retries_left
    delay = err.next_retry_delay or (_backoff(inp, attempt) if will_retry else None)
    return AttemptFailure(
        attempt=attempt,
        duration_ms=_ms_since(invoked_at),
        error_type=err.type,
        error_code=details.get("error_code") or err.type,
        http_status=details.get("http_status"),
        retry_after=err.next_retry_delay,
        next_retry_at=(datetime.now(UTC) + delay if will_retry and delay is not None else None),
    )


def _ms_since(start: datetime) -> int:
    return max(0, int((datetime.now(UTC) - start).total_seconds() * 1000))


def _backoff(inp: AdapterInput, attempt: int) -> timedelta:
    """The wait Temporal's retry policy puts before the next attempt (the workflow's)."""
    retry = inp.capability.retry_settings
    return timedelta(
        seconds=min(retry.base_delay_seconds * 2 ** (attempt - 1), retry.max_delay_seconds)
    )


async def _guarded(
    adapter: Adapter, inp: AdapterInput, credential: Credential | None
) -> AdapterOutput:
    """The adapter's answer; any fault it did not classify becomes an ``unknown`` failure,
    retried like a provider's server error (a provider oddity may pass, and the downstream
    ``Idempotency-Key`` keeps a repeat from taking effect twice).

    Only the fault's type is reported, and its stack without values in the worker log: its
    text may repeat the input or the provider's answer, secrets included."""
    try:
        return await adapter(inp, credential)
    except ApplicationError:
        raise
    except Exception as err:
        name = type(err).__name__
        activity.logger.warning(
            "adapter %s failed with %s at\n%s",
            inp.capability.adapter,
            name,
            "".join(traceback.format_tb(err.__traceback__)),
        )
        raise fail(
            ErrorTaxonomy.UNKNOWN,
            f"the {inp.capability.adapter} adapter failed unexpectedly ({name}); the trace id "
            "identifies the fault",
        ) from None
