"""The side effects of ``ExecuteCapability``: policy check, adapter call, outcome record.

Each bookkeeping step is one transaction, keyed by the execution's receipt id, so a retried
attempt or a reset run repeats nothing; the events each step records are appended in that
same transaction.
"""

from __future__ import annotations

import traceback
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.adapters import Adapter, fail
from activities.evidence import Chain, start_chain, step_id
from activities.heartbeat import heartbeating
from schemas.connections import ConnectionResolver, Credential
from schemas.events import AggregateType, EventDraft, EventType
from schemas.ids import uuid7
from schemas.names import CALL_ADAPTER, CHECK_POLICY, RECORD_OUTCOME
from schemas.policy import DEFAULT_APPROVAL_TTL_SECONDS, PolicyVersion
from schemas.quotas import DEFAULT_QUOTAS, Quota, QuotaLimits, exceeded
from schemas.records import (
    OUTCOME_UNKNOWN,
    Decision,
    ErrorTaxonomy,
    ExecutionStatus,
    OutcomeEvent,
    PolicyMode,
    Receipt,
    RuleHit,
)
from schemas.run import (
    AdapterInput,
    AdapterOutput,
    PolicyInput,
    PolicyOutcome,
    RecordInput,
    longest_run_seconds,
)
from schemas.scopes import capability_scopes, missing_scopes
from schemas.start import CLAIMS_VERSION, START_NOT_SIGNED, StartClaims
from store import (
    api_keys,
    budgets,
    db,
    idempotency,
    outputs,
    policy,
    policy_versions,
    quotas,
    receipts,
    tenancy,
    tenants,
)
from store import events as event_log
from store.keyrings.codec import OutputSealer
from store.keyrings.start import StartKeyring
from store.models import PolicyDecisionRow, Tenant

_DECISION_NAMESPACE = uuid.UUID("6f1c7e9a-3b1d-4f7e-9a55-0d8f3c2b1a00")
ADAPTER_STEP = "adapter"
ADAPTER_STEP_INDEX = 1
# An adapter-step event to append: type, aggregate, name (None: the type), data.
_Draft = tuple[EventType, AggregateType, str | None, dict[str, Any]]
TENANT_ID_MAX = 64  # the tenants.id column
# An execution always claims its key first; this only covers a claim that is gone.
DEFAULT_OUTPUT_WINDOW = timedelta(hours=24)


def decision_id_for(receipt_id: str) -> str:
    """The policy decision of an execution has a fixed id, so a retried check reuses it."""
    return str(uuid.uuid5(_DECISION_NAMESPACE, receipt_id))


class ExecuteActivities:
    """Built once in ``worker.py`` with its dependencies."""

    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        adapters: Mapping[str, Adapter],
        start_keys: StartKeyring,
        sealer: OutputSealer,
        connections: ConnectionResolver | None = None,
        quota_limits: QuotaLimits | None = None,
    ) -> None:
        self._quota_limits = quota_limits or DEFAULT_QUOTAS
        self._sessions = sessions
        self._adapters = adapters
        self._start_keys = start_keys
        self._sealer = sealer
        self._connections = connections

    @activity.defn(name=CHECK_POLICY)
    async def check_policy(self, inp: PolicyInput) -> PolicyOutcome:
        # First of all: nothing of a run the gateway did not vouch for is acted on.
        refusal = self._start_keys.refusal(StartClaims.of_policy(inp), inp.start_signature)
        if refusal is not None:
            await self._record_refused_start(inp, refusal)
            raise ApplicationError(
                f"The run's start is not signed by a Moat gateway for what it names ({refusal}); "
                "executions start through the gateway's API. If a gateway did start it, give "
                "the gateways and workers the same MOAT_START_KEYRING.",
                {"reason": refusal},
                type=START_NOT_SIGNED,
                non_retryable=True,
            )
        now = datetime.now(UTC)
        async with self._sessions.begin() as session:
            await tenancy.set_tenant(session, inp.tenant_id)
            tenant = await tenants.get_tenant(session, inp.tenant_id)
            document = await policy_versions.current(session, inp.tenant_id, tenant)
            mode = document.mode
            if inp.dry_run:
                return await self._decide(session, inp, document, tenant, now, events=False)
            claim = await idempotency.claim_key(
                session,
                tenant_id=inp.tenant_id,
                key=inp.idempotency_key,
                receipt_id=inp.receipt_id,
                input_hash=inp.input_hash,
                workflow_id=inp.workflow_id,
                now=now,
                ttl_seconds=inp.idempotency_ttl_seconds,
            )
            existing = await receipts.get_receipt(session, inp.tenant_id, claim.receipt_id)
            if claim.receipt_id != inp.receipt_id and existing is None:
                # Another execution holds the key and has not recorded its outcome yet.
                raise ApplicationError(
                    f"idempotency key held by running execution {claim.receipt_id}",
                    type="idempotency_key_busy",
                )
            if existing is None:
                outcome = await self._decide(session, inp, document, tenant, now, events=True)
                return outcome.model_copy(update={"resumed": not claim.taken_now})
            row = await _record_decision(
                session,
                inp,
                document,
                existing.id,
                Decision.ALLOW,
                RuleHit.IDEMPOTENT_HIT,
                "receipt already recorded for this key",
            )
            return PolicyOutcome(
                policy_decision_id=row.id,
                decision=Decision.ALLOW,
                rule_hit=RuleHit.IDEMPOTENT_HIT,
                mode=mode,
                existing_receipt=existing,
                policy_version=row.policy_version,
            )

    async def _record_refused_start(self, inp: PolicyInput, reason: str) -> None:
        """A ``RUN_FAILED`` event for a refused start, in the log of the tenant it names,
        when that tenant exists: it is the one someone tried to act for. The event gets a
        correlation id of its own, never the claimed receipt id, so an unsigned start can
        neither join a real execution's chain nor move its projection; no receipt, policy
        decision or idempotency claim is written."""
        claimed = {
            "workflow_id": inp.workflow_id,
            "claimed_receipt_id": inp.receipt_id,
            "capability_id": inp.capability.id,
        }
        activity.logger.warning(
            "refused a start not signed by a gateway (%s) naming tenant %r: %s",
            reason,
            inp.tenant_id[:64],
            claimed,
        )
        if len(inp.tenant_id) > TENANT_ID_MAX or not db.storable(inp.tenant_id):
            return
        async with self._sessions.begin() as session:
            await tenancy.set_tenant(session, inp.tenant_id)
            if await tenants.get_tenant(session, inp.tenant_id) is None:
                return
            correlation = f"refused:{inp.run_id}"
            chain = Chain(inp.tenant_id, correlation, inp.run_id, "moat.policy")
            chain.add(
                EventType.RUN_FAILED,
                AggregateType.RUN,
                correlation,
                error_code=START_NOT_SIGNED,
                reason=reason,
                **{k: v[:300] for k, v in claimed.items() if db.storable(v)},
            )
            await event_log.append(session, chain.drafts)

    async def _decide(
        self,
        session: AsyncSession,
        inp: PolicyInput,
        document: PolicyVersion,
        tenant: Tenant | None,
        now: datetime,
        *,
        events: bool,
    ) -> PolicyOutcome:
        denial: dict[str, Any] = {}
        decision, rule, reason, budget = await _evaluate(
            session, inp, document, tenant, now, self._quota_limits, denial
        )
        row = await _record_decision(session, inp, document, inp.receipt_id, decision, rule, reason)
        if row.rule_hit == RuleHit.QUOTA_EXCEEDED.value:
            denial = denial or {"quota": Quota.PENDING_APPROVALS.value}
        matched = document.rule_for(inp.capability.id)
        waits = row.rule_hit == RuleHit.APPROVAL_REQUIRED.value
        ttl = matched.approval_ttl_seconds if matched else DEFAULT_APPROVAL_TTL_SECONDS
        held = False
        if budget is not None and not inp.dry_run and row.decision != Decision.DENY.value:
            # The execution holds its unit until it records: concurrent checks count it,
            # through a wait for its approval too.
            run = longest_run_seconds(inp.capability) + (ttl if waits else 0)
            await budgets.hold_budget(
                session,
                inp.tenant_id,
                inp.capability.id,
                inp.receipt_id,
                budget,
                now + timedelta(seconds=run),
            )
            held = True
        # A retried check returns the decision first recorded, not a re-evaluation.
        outcome = PolicyOutcome(
            policy_decision_id=row.id,
            decision=Decision(row.decision),
            rule_hit=RuleHit(row.rule_hit),
            mode=PolicyMode(row.mode),
            reason=row.reason,
            budget_held=held,
            http_allow_hosts=list(tenant.http_allow_hosts) if tenant is not None else [],
            policy_version=row.policy_version,
            approval_ttl_seconds=ttl if waits else None,
            allow_self_approval=bool(matched and matched.allow_self_approval),
            denial_details=denial or None,
        )
        if events:
            chain = Chain(inp.tenant_id, inp.receipt_id, inp.run_id, "moat.policy")
            chain.add(
                EventType.RUN_STARTED,
                AggregateType.RUN,
                inp.receipt_id,
                workflow_id=inp.workflow_id,
                capability_id=inp.capability.id,
                capability_version=inp.capability.version,
                input_hash=inp.input_hash,
                **_synthetic(inp.is_synthetic),
            )
            chain.add(
                EventType.POLICY_EVALUATED,
                AggregateType.POLICY,
                row.id,
                mode=outcome.mode.value,
                decision=outcome.decision.value,
                rule_hit=outcome.rule_hit.value,
                reason=outcome.reason,
                policy_version=outcome.policy_version,
            )
            if outcome.decision != Decision.DENY:
                chain.add(
                    EventType.EFFECT_REQUESTED,
                    AggregateType.EFFECT,
                    step_id(inp.receipt_id, ADAPTER_STEP),
                    effect_type=inp.capability.effect_type.value,
                    adapter_id=inp.capability.adapter_id,
                )
            await event_log.append(session, chain.drafts)
        return outcome

    @activity.defn(name=CALL_ADAPTER)
    async def call_adapter(self, inp: AdapterInput) -> AdapterOutput:
        # The whole attempt, not only the provider call: its event writes wait on
        # PostgreSQL, which may be slow or restarting, and a live attempt must not time out.
        async with heartbeating():
            return await self._attempt(inp)

    async def _attempt(self, inp: AdapterInput) -> AdapterOutput:
        info = activity.info()
        invoked_at = datetime.now(UTC)
        run_id = info.workflow_run_id or ""
        effect = step_id(inp.receipt_id, ADAPTER_STEP)
        # The adapter step is the run's second (after the policy check): the step index the
        # events design gives every step event.
        step: dict[str, Any] = {
            "step": ADAPTER_STEP,
            "step_index": ADAPTER_STEP_INDEX,
            "effect_id": effect,
        }
        called: _Draft = (
            EventType.TOOL_CALLED,
            AggregateType.STEP,
            f"TOOL_CALLED:{info.attempt}",
            {
                **step,
                "tool_name": inp.capability.id,
                "attempt": info.attempt,
                "retry_count": info.attempt - 1,
                "resumed": inp.resumed,
            },
        )
        first: _Draft
        if info.attempt == 1:
            first = (
                EventType.STEP_STARTED,
                AggregateType.STEP,
                None,
                {"step": ADAPTER_STEP, "adapter_id": inp.capability.adapter_id},
            )
        else:
            first = (
                EventType.STEP_RETRIED,
                AggregateType.STEP,
                f"STEP_RETRIED:{info.attempt}",
                {"step": ADAPTER_STEP, "attempt": info.attempt},
            )
        await self._adapter_events(inp, run_id, [first, called])
        adapter = self._adapters.get(inp.capability.adapter)
        if adapter is None:
            raise ApplicationError(
                f"no adapter {inp.capability.adapter!r} on this worker",
                type=ErrorTaxonomy.GATEWAY_ERROR.value,
                non_retryable=True,
            )
        try:
            credential = await self._credential(inp)
            out = await _guarded(
                adapter, inp.model_copy(update={"attempt": info.attempt}), credential
            )
        except ApplicationError as err:
            details = err.details[0] if err.details and isinstance(err.details[0], dict) else {}
            retries_left = info.attempt <= inp.capability.retry_settings.max_retries
            will_retry = not err.non_retryable and retries_left
            error_code = details.get("error_code") or err.type
            delay = err.next_retry_delay or (_backoff(inp, info.attempt) if will_retry else None)
            failed: list[_Draft] = [
                (
                    EventType.TOOL_FAILED,
                    AggregateType.STEP,
                    f"TOOL_FAILED:{info.attempt}",
                    {
                        **step,
                        "attempt": info.attempt,
                        "retry_count": info.attempt - 1,
                        "duration_ms": _ms_since(invoked_at),
                        "error_code": error_code,
                        "http_status": details.get("http_status"),
                        "next_retry_at": (
                            (datetime.now(UTC) + delay).isoformat()
                            if will_retry and delay is not None
                            else None
                        ),
                    },
                )
            ]
            if will_retry:
                failed.append(
                    (
                        EventType.EFFECT_RETRYING,
                        AggregateType.EFFECT,
                        f"EFFECT_RETRYING:{info.attempt}",
                        {
                            "attempt": info.attempt,
                            "error_code": err.type,
                            "http_status": details.get("http_status"),
                            "retry_after_seconds": (
                                err.next_retry_delay.total_seconds()
                                if err.next_retry_delay
                                else None
                            ),
                        },
                    )
                )
            await self._adapter_events(inp, run_id, failed)
            # Not chained: Temporal records a cause's text, which Moat did not write.
            raise ApplicationError(
                err.message,
                {**details, "attempt": info.attempt},
                type=err.type,
                non_retryable=err.non_retryable,
                next_retry_delay=err.next_retry_delay,
            ) from None
        done: list[_Draft] = []
        if out.reconciled is not None:
            # What the look-up before this repeated attempt found.
            done.append(
                (
                    EventType.EFFECT_RECONCILED,
                    AggregateType.EFFECT,
                    f"EFFECT_RECONCILED:{info.attempt}",
                    {
                        "effect_id": effect,
                        "attempt": info.attempt,
                        "found": out.reconciled,
                        "strategy": inp.capability.idempotency.value,
                        "output_hash": out.output_hash,
                    },
                )
            )
        done.append(
            (
                EventType.TOOL_COMPLETED,
                AggregateType.STEP,
                f"TOOL_COMPLETED:{info.attempt}",
                {
                    **step,
                    "attempt": info.attempt,
                    "retry_count": info.attempt - 1,
                    "duration_ms": _ms_since(invoked_at),
                    "http_status": out.http_status,
                    "output_hash": out.output_hash,
                    "reconciled": bool(out.reconciled),
                },
            )
        )
        await self._adapter_events(inp, run_id, done)
        return out.model_copy(update={"invoked_at": invoked_at, "attempt": info.attempt})

    async def _credential(self, inp: AdapterInput) -> Credential | None:
        """The request's connection, resolved afresh on every attempt (a rotation applies
        from the next attempt on)."""
        if inp.connection_id is None:
            return None
        if self._connections is None:
            raise ApplicationError(
                "this worker cannot resolve connections",
                {"error_code": "connection_not_found"},
                type=ErrorTaxonomy.GATEWAY_ERROR.value,
                non_retryable=True,
            )
        return await self._connections.resolve(inp.tenant_id, inp.connection_id)

    async def _adapter_events(self, inp: AdapterInput, run_id: str, events: list[_Draft]) -> None:
        """Events of the adapter step, in a transaction of their own (the attempt itself is
        the state they record)."""
        async with self._sessions.begin() as session:
            chain = await start_chain(
                session, inp.tenant_id, inp.receipt_id, run_id, "moat.adapter"
            )
            for event_type, aggregate, name, data in events:
                aggregate_id = step_id(inp.receipt_id, ADAPTER_STEP)
                chain.add(event_type, aggregate, aggregate_id, name, **data)
            await event_log.append(session, chain.drafts)

    @activity.defn(name=RECORD_OUTCOME)
    async def record_outcome(self, inp: RecordInput) -> Receipt:
        now = datetime.now(UTC)
        receipt = _receipt(inp, now)
        async with self._sessions.begin() as session:
            # The latest event is read first, with the tenant: the outcome's events follow it.
            chain = await start_chain(
                session, inp.tenant_id, inp.receipt_id, inp.run_id, "moat.record"
            )
            if not await receipts.insert_receipt(session, receipt):
                stored = await receipts.get_receipt(session, inp.tenant_id, inp.receipt_id)
                assert stored is not None
                return stored
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
                    is_synthetic=inp.is_synthetic,
                    adapter_id=receipt.adapter_id,
                ),
            )
            # Bill once: only a success, only when its receipt is first written; the unit
            # the policy step held becomes used (or is given back) in the same transaction.
            if inp.success and not inp.is_synthetic:
                await budgets.increment_budget(session, inp.tenant_id, inp.capability.id, now)
            if inp.budget_held:
                await budgets.release_budget_hold(session, inp.tenant_id, inp.receipt_id)
            await self._keep_output(session, inp, now)
            await event_log.append(session, _outcome_events(inp, chain))
        return receipt

    async def _keep_output(self, session: AsyncSession, inp: RecordInput, now: datetime) -> None:
        """The answer, kept with the receipt for as long as the key's claim lasts: a replay
        finds both or neither."""
        kept = inp.kept()
        if kept is None:
            return
        claim = await idempotency.find_claim_by_receipt(session, inp.tenant_id, inp.receipt_id)
        expires_at = claim.expires_at if claim is not None else now + DEFAULT_OUTPUT_WINDOW
        await outputs.keep(session, self._sealer, inp.tenant_id, inp.receipt_id, kept, expires_at)


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


async def _record_decision(
    session: AsyncSession,
    inp: PolicyInput,
    document: PolicyVersion,
    receipt_id: str,
    decision: Decision,
    rule: RuleHit,
    reason: str,
) -> PolicyDecisionRow:
    """The execution's one decision (a fixed id: a retried check gets the first one back)."""
    return await policy.insert_policy_decision(
        session,
        id=decision_id_for(inp.receipt_id),
        tenant_id=inp.tenant_id,
        receipt_id=receipt_id,
        capability_id=inp.capability.id,
        idempotency_key=inp.idempotency_key,
        mode=document.mode.value,
        decision=decision.value,
        rule_hit=rule.value,
        reason=reason,
        is_synthetic=inp.is_synthetic,
        policy_version=document.version,
    )


async def _evaluate(
    session: AsyncSession,
    inp: PolicyInput,
    document: PolicyVersion,
    tenant: Tenant | None,
    now: datetime,
    limits: QuotaLimits,
    denial: dict[str, Any],
) -> tuple[Decision, RuleHit, str, budgets.BudgetState | None]:
    """The decision, and the budget it was taken against (None when none applies); what a
    denial's envelope says beside its code goes into ``denial``.

    ``bypass`` skips every check, and only for a tenant the operators allowed it; otherwise
    the tenant is held to ``standard``. ``audit`` evaluates like ``standard`` and records
    what it would deny without denying it. ``strict`` is ``standard`` plus a person's
    approval for the capabilities its rule (or else the catalog) marks.

    A synthetic run (a probe's) is held to the same rules with its creator's scopes and
    key, budgets aside; and since nobody presented that key just now, the key must still be
    live: one that is revoked (or a run carrying no key's authority at all) is denied
    whatever the mode, as an unauthenticated call would be."""
    mode = document.mode
    if inp.is_synthetic:
        refused = await _lender_refusal(session, inp)
        if refused is not None:
            return Decision.DENY, RuleHit.KEY_REVOKED, refused, None
    if mode == PolicyMode.BYPASS and tenant is not None and tenant.allow_bypass:
        return Decision.ALLOW, RuleHit.BYPASSED, "bypass mode", None
    if inp.scopes is not None:
        needed = capability_scopes(inp.capability.id, inp.capability.required_scopes)
        missing = missing_scopes(inp.scopes, needed)
        if missing:
            reason = f"the API key lacks the scope {' and '.join(missing)}"
            if mode == PolicyMode.AUDIT:
                return Decision.WOULD_DENY, RuleHit.SCOPE_MISSING, reason, None
            return Decision.DENY, RuleHit.SCOPE_MISSING, reason, None
    # Synthetic probes never touch budgets.
    budget = (
        None
        if inp.is_synthetic
        else await budgets.budget_state(
            session,
            inp.tenant_id,
            inp.capability.id,
            now,
            lock=not inp.dry_run,
            exclude_receipt=inp.receipt_id,
        )
    )
    if budget is not None and budget.exhausted:
        reason = (
            f"budget {budget.limit} per {budget.period} used up: {budget.used} used, "
            f"{budget.held} in flight"
        )
        if mode == PolicyMode.AUDIT:
            return Decision.WOULD_DENY, RuleHit.BUDGET_EXCEEDED, reason, budget
        return Decision.DENY, RuleHit.BUDGET_EXCEEDED, reason, budget
    if mode == PolicyMode.STRICT and _requires_approval(document, inp):
        rule = document.rule_for(inp.capability.id)
        why = f"rule {rule.capability!r}" if rule else f"catalog entry {inp.capability.id}"
        full = await _approvals_full(session, inp, now, limits)
        if full is not None:
            reason, details = full
            denial.update(details)
            return Decision.DENY, RuleHit.QUOTA_EXCEEDED, reason, budget
        return Decision.ALLOW, RuleHit.APPROVAL_REQUIRED, f"approval required by {why}", budget
    if mode == PolicyMode.BYPASS:
        return Decision.ALLOW, RuleHit.ALLOWED, "bypass not allowed for tenant: standard", budget
    if inp.is_synthetic:
        return Decision.ALLOW, RuleHit.ALLOWED, "synthetic probe: budgets not applied", None
    return Decision.ALLOW, RuleHit.ALLOWED, "", budget


async def _lender_refusal(session: AsyncSession, inp: PolicyInput) -> str | None:
    """Why a synthetic run may not act for the key it names (None: it may). Its start is
    signed (``v3`` claims name the key and its scopes); ``api_key_id`` "" is Moat's own
    (a probe an operator made)."""
    if inp.scopes is None or not inp.start_signature.startswith(CLAIMS_VERSION + "."):
        return "the probe's run carries no key's authority: resume the probe with a key"
    if inp.api_key_id and await api_keys.is_revoked(session, inp.tenant_id, inp.api_key_id):
        return f"the probe's key {inp.api_key_id} is revoked: resume the probe with a live key"
    return None


async def _approvals_full(
    session: AsyncSession, inp: PolicyInput, now: datetime, limits: QuotaLimits
) -> tuple[str, dict[str, Any]] | None:
    """The refusal of a call that would wait for approval while the tenant already has its
    quota of calls waiting, else None. Decided here, not at ingest: only this step knows
    whether the call waits (its policy version, its rules), and it holds the quota's lock
    through its decision, which counts as waiting until the approval row replaces it; so two
    calls racing for the last slot cannot both pass."""
    quota = Quota.PENDING_APPROVALS
    if not inp.dry_run:
        await quotas.lock(session, inp.tenant_id, quota)
    own = await quotas.override(session, inp.tenant_id, quota)
    limit = own if own is not None else limits[quota]
    usage = await quotas.usage(session, inp.tenant_id, quota, now, own_receipt=inp.receipt_id)
    if usage < limit:
        return None
    return exceeded(quota, limit, usage, "tenant" if own is not None else "default")


def _requires_approval(document: PolicyVersion, inp: PolicyInput) -> bool:
    rule = document.rule_for(inp.capability.id)
    if rule is not None and rule.requires_approval is not None:
        return rule.requires_approval
    return inp.capability.requires_approval


def _receipt(inp: RecordInput, now: datetime) -> Receipt:
    return Receipt(
        id=inp.receipt_id,
        capability_id=inp.capability.id,
        capability_version=inp.capability.version,
        adapter_id=inp.capability.adapter_id,
        tenant_id=inp.tenant_id,
        connection_id=inp.connection_id or "",
        request_id=inp.request_id,
        timestamp=inp.submitted_at,
        latency_ms=max(0, int((now - inp.submitted_at).total_seconds() * 1000)),
        idempotency_key=inp.idempotency_key,
        input_hash=inp.input_hash,
        output_hash=inp.output_hash,
        status=ExecutionStatus(inp.status),
        error_code=inp.error_code,
        http_status=inp.http_status,
        policy_decision_id=inp.policy_decision_id,
        is_synthetic=inp.is_synthetic,
        workflow_id=inp.workflow_id,
        run_id=inp.run_id,
        trace_id=inp.trace_id,
    )


def _outcome_events(inp: RecordInput, chain: Chain) -> list[EventDraft]:
    sid = step_id(inp.receipt_id, ADAPTER_STEP)
    outcome: dict[str, Any] = {
        "status": inp.status,
        "error_code": inp.error_code,
        "http_status": inp.http_status,
    }
    if inp.adapter_called:
        if inp.success:
            chain.add(
                EventType.STEP_COMPLETED, AggregateType.STEP, sid, step=ADAPTER_STEP, **outcome
            )
            chain.add(
                EventType.EFFECT_COMPLETED,
                AggregateType.EFFECT,
                sid,
                output_hash=inp.output_hash,
                http_status=inp.http_status,
            )
        else:
            chain.add(EventType.STEP_FAILED, AggregateType.STEP, sid, step=ADAPTER_STEP, **outcome)
            chain.add(EventType.EFFECT_FAILED, AggregateType.EFFECT, sid, **outcome)
            if inp.retry_exhausted or inp.error_code == OUTCOME_UNKNOWN:
                # Retries ran out, or the effect may have happened and could not be looked
                # up: either way a person decides what happens next.
                chain.add(
                    EventType.EFFECT_DEAD_LETTERED,
                    AggregateType.EFFECT,
                    sid,
                    error_code=inp.error_code,
                    max_retries=inp.capability.retry_settings.max_retries,
                    outcome_unknown=inp.error_code == OUTCOME_UNKNOWN,
                )
    if inp.success:
        chain.add(
            EventType.RUN_COMPLETED,
            AggregateType.RUN,
            inp.receipt_id,
            receipt_status=inp.status,
            **_synthetic(inp.is_synthetic),
        )
    else:
        chain.add(
            EventType.RUN_FAILED,
            AggregateType.RUN,
            inp.receipt_id,
            receipt_status=inp.status,
            error_code=inp.error_code,
            policy_denied=inp.status == ExecutionStatus.POLICY_DENIED,
            **_synthetic(inp.is_synthetic),
        )
    return chain.drafts


def _synthetic(is_synthetic: bool) -> dict[str, Any]:
    """A probe's run is tagged in its events; real runs' events stay as they were."""
    return {"is_synthetic": True} if is_synthetic else {}
