"""The record step of ``ExecuteCapability``: the receipt, its outcome event and the answer.

One transaction, keyed by the receipt id: the receipt is written once, and with it (only
then) the outcome event, the budget's use, the answer kept for replays and the run's last
events; a retried or reset record finds the receipt and returns it.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio import activity

from activities.alerts import Alerter
from activities.evidence import Chain, continue_chain
from activities.execute.events import ADAPTER_ACTOR, attempt_completed, chained, outcome_events
from activities.manifest import ManifestActivities, Ready, Staging
from schemas.alerts import AlertKind, is_alert_key
from schemas.ids import uuid7
from schemas.names import RECORD_OUTCOME, RECORD_RUN
from schemas.records import OUTCOME_UNKNOWN, ExecutionStatus, OutcomeEvent, Receipt
from schemas.run import AdapterOutput, RecordedRun, RecordInput, RecordRunInput
from schemas.webhooks import execution_dead_letter_id
from store import budgets, outputs, receipts
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
        manifests: ManifestActivities | None = None,
    ) -> None:
        self._sessions = sessions
        self._sealer = sealer
        self._alerter = alerter
        self._manifests = manifests

    @activity.defn(name=RECORD_OUTCOME)
    async def record_outcome(self, inp: RecordInput) -> Receipt:
        receipt, _ = await self._record(inp, datetime.now(UTC))
        await self._alert(inp)
        return receipt

    @activity.defn(name=RECORD_RUN)
    async def record_run(self, inp: RecordRunInput) -> RecordedRun:
        """The receipt, the run's manifest and the adapter's completion, in one transaction.
        The manifest is signed and stored once the receipt is known to be new, before the
        commit (write-once, found again by a retried attempt: the receipt is the same each
        time); one that cannot be is left to the run's manifest step, and the receipt is
        recorded all the same."""
        recorded = await self.recorded(inp)
        await self._alert(inp.record)
        return recorded

    async def prepare(self, tenant_id: str, run_id: str) -> None:
        """What of the record can be made before the outcome is known: the run's manifest
        folder, while the adapter attempt writes its events. A failure leaves it to the
        record, which makes it then."""
        if self._manifests is None:
            return
        try:
            await self._manifests.make_folder(tenant_id, run_id)
        except Exception as err:
            activity.logger.warning("manifest folder not made ahead: %s", type(err).__name__)

    async def recorded(self, inp: RecordRunInput) -> RecordedRun:
        """``record_run``'s transaction, for a caller that alerts nothing: the successful
        adapter attempt that records itself (``AdapterInput.record``)."""
        receipt, written_now = await self._record(inp.record, inp.recorded_at, inp.completed, inp)
        return RecordedRun(receipt=receipt, manifest_written=written_now)

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

    async def _record(
        self,
        inp: RecordInput,
        now: datetime,
        completed: AdapterOutput | None = None,
        run: RecordRunInput | None = None,
    ) -> tuple[Receipt, bool]:
        """The receipt and, when it is new, whether the manifest was indexed with it. The
        manifest is signed and staged while the receipt's statements run, and published
        only once the receipt is known to be new; its index and the events go with the
        transaction's COMMIT. When that cannot be (something of it was written already),
        nothing was, and the record is made again statement by statement."""
        try:
            return await self._record_once(inp, now, completed, run, committing=True)
        except event_log.PartialAppend:
            return await self._record_once(inp, now, completed, run, committing=False)

    async def _record_once(
        self,
        inp: RecordInput,
        now: datetime,
        completed: AdapterOutput | None,
        run: RecordRunInput | None,
        *,
        committing: bool,
    ) -> tuple[Receipt, bool]:
        receipt = _receipt(inp, now)
        staging = self._staging(receipt, run)
        try:
            async with self._sessions.begin() as session:
                # The transaction's first statement: with its BEGIN and its tenant.
                subscribed = await receipts.insert_with_outcome(
                    session,
                    receipt,
                    _outcome_event(inp, receipt),
                    self._kept(inp, now),
                    _budget_use(inp, now),
                    scope=True,
                )
                if subscribed is None:
                    stored = await receipts.get_receipt(
                        session, inp.ref.tenant_id, inp.ref.receipt_id
                    )
                    assert stored is not None
                    return stored, False
                # The outcome's events follow the log's latest (``Chain.append``).
                chain = continue_chain(
                    inp.ref.tenant_id, inp.ref.receipt_id, inp.ref.run_id, "moat.record"
                )
                if completed is not None:
                    _completion(chain, inp, completed)
                chained(chain, outcome_events(inp))
                known = {inp.ref.tenant_id: subscribed}
                if not committing:
                    written = await self._manifest(session, chain, receipt, staging)
                    await chain.append(session, known)
                    return receipt, written
                index = await self._new_index(chain, receipt, staging)
                await event_log.append_committing(
                    session,
                    chain.drafts,
                    first_cause_from_log=True,
                    subscribed=known,
                    before=[index] if index is not None else [],
                )
                return receipt, index is not None
        finally:
            if staging is not None:
                await staging.close()

    def _staging(self, receipt: Receipt, run: RecordRunInput | None) -> Staging | None:
        """The run's manifest made ready from now on (None: the record step writes none)."""
        if run is None or self._manifests is None:
            return None
        inp = run.manifest.input_for(receipt, run.run_id)
        return self._manifests.staging(inp, unrecorded=True)

    async def _published(self, staging: Staging | None, receipt: Receipt) -> Ready | None:
        """The run's manifest stored, for its new receipt; None when it could not be (the
        run's manifest step writes it then) or the step writes none."""
        if staging is None:
            return None
        try:
            return await staging.published()
        except Exception:
            activity.logger.exception("manifest of receipt %s not written", receipt.id)
            return None

    async def _manifest(
        self, session: AsyncSession, chain: Chain, receipt: Receipt, staging: Staging | None
    ) -> bool:
        """The run's manifest stored and indexed with its new receipt; False when it could
        not be."""
        ready = await self._published(staging, receipt)
        if ready is None or staging is None or self._manifests is None:
            return False
        with chain.acting("moat.manifest"):  # its events, as the step's own
            await self._manifests.index(
                session, staging.input, chain, ready.signed, ready.path, ready.digest
            )
        return True

    async def _new_index(
        self, chain: Chain, receipt: Receipt, staging: Staging | None
    ) -> tuple[str, dict[str, Any]] | None:
        """``_manifest``'s index as a statement to send with the events and the COMMIT (its
        events added to ``chain``); None when the manifest could not be stored."""
        ready = await self._published(staging, receipt)
        if ready is None or staging is None or self._manifests is None:
            return None
        with chain.acting("moat.manifest"):
            return self._manifests.new_index(
                staging.input, chain, ready.signed, ready.path, ready.digest
            )

    def _kept(self, inp: RecordInput, now: datetime) -> dict[str, Any] | None:
        """The answer, kept with the receipt (in its statement) for as long as the key's
        claim lasts: a replay finds both or neither. None: no answer to keep."""
        kept = inp.kept()
        if kept is None:
            return None
        return outputs.kept_params(
            self._sealer,
            inp.ref.tenant_id,
            inp.ref.receipt_id,
            kept,
            now + DEFAULT_OUTPUT_WINDOW,
            inp.ref.idempotency_key,
        )


def _budget_use(inp: RecordInput, now: datetime) -> dict[str, Any]:
    """Bill once: only a success, only when its receipt is first written (the receipt's
    statement counts it); the unit the policy step held becomes used, or is given back."""
    return budgets.use_params(
        use=inp.success and not inp.ref.is_synthetic, release=inp.budget_held, now=now
    )


def _completion(chain: Chain, inp: RecordInput, out: AdapterOutput) -> None:
    """The adapter's completed attempt, as the adapter step writes it (its actor)."""
    duration = out.duration_ms or 0
    with chain.acting(ADAPTER_ACTOR):
        chained(
            chain,
            attempt_completed(inp.ref.receipt_id, inp.capability, out.attempt, duration, out),
        )


def _outcome_event(inp: RecordInput, receipt: Receipt) -> OutcomeEvent:
    return OutcomeEvent(
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
