"""The record step of ``ExecuteCapability``: the receipt, its outcome event and the answer.

One transaction, keyed by the receipt id: the receipt is written once, and with it (only
then) the outcome event, the budget's use, the answer kept for replays and the run's last
events; a retried or reset record finds the receipt and returns it.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio import activity

from activities.alerts import Alerter
from activities.evidence import start_chain
from activities.execute.events import chained, outcome_events
from schemas.alerts import AlertKind, is_alert_key
from schemas.ids import uuid7
from schemas.names import RECORD_OUTCOME
from schemas.records import OUTCOME_UNKNOWN, ExecutionStatus, OutcomeEvent, Receipt
from schemas.run import RecordInput
from schemas.webhooks import execution_dead_letter_id
from store import budgets, idempotency, outputs, receipts, translog
from store import events as event_log
from store.keyrings.codec import OutputSealer

# An execution always claims its key first; this only covers a claim that is gone.
DEFAULT_OUTPUT_WINDOW = timedelta(hours=24)


class RecordStep:
    """The ``record_outcome`` activity, built once in ``worker.py`` with its dependencies."""

    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        sealer: OutputSealer,
        alerter: Alerter | None = None,
    ) -> None:
        self._sessions = sessions
        self._sealer = sealer
        self._alerter = alerter

    @activity.defn(name=RECORD_OUTCOME)
    async def record_outcome(self, inp: RecordInput) -> Receipt:
        receipt = await self._record(inp)
        await self._alert(inp)
        return receipt

    async def _alert(self, inp: RecordInput) -> None:
        """The alert of an execution that dead-lettered (an ``outcome_unknown`` is alerted
        as such, once, not also as its dead letter), handed off after the transaction that
        recorded it, on every attempt (a retry after a lost hand-off sends it). Neither a
        probe's run nor an alert's own execution is alerted."""
        if self._alerter is None or inp.success or inp.ref.is_synthetic:
            return
        if is_alert_key(inp.ref.idempotency_key):
            return
        receipt_id, tenant_id = inp.ref.receipt_id, inp.ref.tenant_id
        if inp.error_code == OUTCOME_UNKNOWN:
            await self._alerter.hand_off(tenant_id, AlertKind.OUTCOME_UNKNOWN, receipt_id)
        elif inp.retry_exhausted:
            dl_id = execution_dead_letter_id(receipt_id)
            await self._alerter.hand_off(tenant_id, AlertKind.DEAD_LETTER, dl_id)

    async def _record(self, inp: RecordInput) -> Receipt:
        now = datetime.now(UTC)
        receipt = _receipt(inp, now)
        async with self._sessions.begin() as session:
            # The latest event is read first, with the tenant: the outcome's events follow it.
            chain = await start_chain(
                session, inp.ref.tenant_id, inp.ref.receipt_id, inp.ref.run_id, "moat.record"
            )
            if not await receipts.insert_receipt(session, receipt):
                stored = await receipts.get_receipt(session, inp.ref.tenant_id, inp.ref.receipt_id)
                assert stored is not None
                return stored
            await translog.append_receipt(session, receipt)
            await receipts.insert_outcome_event(
                session,
                OutcomeEvent(
                    id=str(uuid7()),
                    receipt_id=receipt.id,
                    capability_id=receipt.capability_id,
                    capability_version=receipt.capability_version,
                    tenant_id=receipt.tenant_id,
                    success=inp.success,
                    latency_ms=receipt.latency_ms,
                    error_taxonomy=inp.taxonomy,
                    http_status=inp.http_status,
                    timestamp=receipt.timestamp,
                    is_synthetic=inp.ref.is_synthetic,
                    adapter_id=receipt.adapter_id,
                ),
            )
            # Bill once: only a success, only when its receipt is first written; the unit
            # the policy step held becomes used (or is given back) in the same transaction.
            if inp.success and not inp.ref.is_synthetic:
                await budgets.increment_budget(session, inp.ref.tenant_id, inp.capability.id, now)
            if inp.budget_held:
                await budgets.release_budget_hold(session, inp.ref.tenant_id, inp.ref.receipt_id)
            await self._keep_output(session, inp, now)
            await event_log.append(session, chained(chain, outcome_events(inp)))
        return receipt

    async def _keep_output(self, session: AsyncSession, inp: RecordInput, now: datetime) -> None:
        """The answer, kept with the receipt for as long as the key's claim lasts: a replay
        finds both or neither."""
        kept = inp.kept()
        if kept is None:
            return
        claim = await idempotency.find_claim_by_receipt(
            session, inp.ref.tenant_id, inp.ref.receipt_id
        )
        expires_at = claim.expires_at if claim is not None else now + DEFAULT_OUTPUT_WINDOW
        await outputs.keep(
            session, self._sealer, inp.ref.tenant_id, inp.ref.receipt_id, kept, expires_at
        )


def _receipt(inp: RecordInput, now: datetime) -> Receipt:
    return Receipt(
        id=inp.ref.receipt_id,
        capability_id=inp.capability.id,
        capability_version=inp.capability.version,
        adapter_id=inp.capability.adapter_id,
        tenant_id=inp.ref.tenant_id,
        connection_id=inp.ref.connection_id or "",
        request_id=inp.request_id,
        timestamp=inp.submitted_at,
        latency_ms=max(0, int((now - inp.submitted_at).total_seconds() * 1000)),
        idempotency_key=inp.ref.idempotency_key,
        input_hash=inp.ref.input_hash,
        output_hash=inp.output_hash,
        status=ExecutionStatus(inp.status),
        error_code=inp.error_code,
        http_status=inp.http_status,
        policy_decision_id=inp.policy_decision_id,
        is_synthetic=inp.ref.is_synthetic,
        workflow_id=inp.ref.workflow_id,
        run_id=inp.ref.run_id,
        trace_id=inp.trace_id,
        provider_evidence=inp.provider_evidence,
    )
