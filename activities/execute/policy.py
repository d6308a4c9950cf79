"""The policy step of ``ExecuteCapability``: the start's signature, the decision, the key.

One transaction, keyed by the execution's receipt id, so a retried check or a reset run
gets the decision first recorded; the events it records are appended in that transaction.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple

from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.evidence import Chain, signal_id
from activities.execute.events import (
    ADAPTER_ACTOR,
    attempt_started,
    chained,
    intake_events,
    policy_events,
)
from schemas.approvals import ApprovalStatus
from schemas.capabilities import CapabilitySpec
from schemas.errors import ErrorCode
from schemas.events import AggregateType, EventDraft, EventType
from schemas.identity import ExecutionRef
from schemas.names import CHECK_POLICY
from schemas.policy import DEFAULT_APPROVAL_TTL_SECONDS, PolicyRule, PolicyVersion
from schemas.quotas import DEFAULT_QUOTAS, Quota, QuotaLimits, exceeded
from schemas.records import Decision, PolicyMode, Receipt, RuleHit
from schemas.run import PolicyInput, PolicyOutcome, longest_run_seconds
from schemas.scopes import capability_scopes, missing_scopes
from schemas.start import CLAIMS_VERSION, START_NOT_SIGNED, StartClaims
from store import (
    api_keys,
    approvals,
    budgets,
    db,
    event_writes,
    idempotency,
    policy,
    policy_versions,
    quotas,
    receipts,
    tenancy,
    tenants,
)
from store import events as event_log
from store.keyrings.start import StartKeyring
from store.models import PolicyDecisionRow, Tenant

_DECISION_NAMESPACE = uuid.UUID("6f1c7e9a-3b1d-4f7e-9a55-0d8f3c2b1a00")
TENANT_ID_MAX = 64  # the tenants.id column
# A decision: what was decided, by which rule, why, and the budget it was taken against.
Verdict = tuple[Decision, RuleHit, str, budgets.BudgetState | None]


class Budgeted(NamedTuple):
    """The budget of the checked capability as the check's opening read it, its row locked
    (``state`` None: the capability has none)."""

    state: budgets.BudgetState | None


class Unexpected(Exception):
    """A check decided ahead of its reads found them other than it expected
    (``policy.UNEXPECTED``): nothing was written, nothing committed."""


# How many tenants' last checks a worker remembers, and each tenant's capabilities.
EXPECTED_TENANTS = 4096
EXPECTED_CAPABILITIES = 256


class Expected(NamedTuple):
    """What a check of the tenant read last on this worker, for the next to decide ahead
    of its reads: the tenant, its current document, and the checked capability's budget
    (its limit and period; None: it has none)."""

    tenant: Tenant
    document: PolicyVersion
    budget: tuple[int, str] | None

    def budgeted(self, now: datetime) -> Budgeted:
        """The budget as the check's opening would give it: locked, not counted."""
        if self.budget is None:
            return Budgeted(None)
        return Budgeted(budgets.uncounted(self.budget[0], self.budget[1], now))

    def params(self, inp: PolicyInput, now: datetime) -> dict[str, Any]:
        """``policy.EXPECTED``'s parameters for the check of ``inp`` at ``now``."""
        return policy.expected_params(
            tenant_id=inp.ref.tenant_id,
            policy_mode=self.tenant.policy_mode,
            allow_bypass=bool(self.tenant.allow_bypass),
            http_allow_hosts=self.tenant.http_allow_hosts,
            policy_version=self.document.version,
            idempotency_key=inp.ref.idempotency_key,
            receipt_id=inp.ref.receipt_id,
            now=now,
            capability_id=inp.capability.id,
            budget=self.budget,
        )


class ExpectedChecks:
    """What this worker's checks read last, by tenant and capability (``Expected``),
    learned from every check's opening; the oldest tenants are forgotten first."""

    def __init__(self) -> None:
        self._tenants: dict[str, tuple[Tenant, PolicyVersion]] = {}
        self._budgets: dict[str, dict[str, tuple[int, str] | None]] = {}

    def learn(self, inp: PolicyInput, opened: _Opened) -> None:
        """What a check's opening read (a dry run's or a synthetic run's is not kept: they
        read no budget)."""
        if opened.tenant is None or opened.budget is None:
            return
        tenant_id = inp.ref.tenant_id
        self._tenants.pop(tenant_id, None)
        self._tenants[tenant_id] = opened.tenant, opened.document
        if len(self._tenants) > EXPECTED_TENANTS:
            oldest = next(iter(self._tenants))
            del self._tenants[oldest]
            self._budgets.pop(oldest, None)
        state = opened.budget.state
        known = self._budgets.setdefault(tenant_id, {})
        known.pop(inp.capability.id, None)
        known[inp.capability.id] = None if state is None else (state.limit, state.period)
        if len(known) > EXPECTED_CAPABILITIES:
            del known[next(iter(known))]

    def of(self, inp: PolicyInput) -> Expected | None:
        """What the check of ``inp`` can be decided ahead of its reads against; None when
        it cannot: a dry run or a synthetic run, a tenant or capability not checked here
        yet, or a call its strict policy makes wait for a person (whose checks read more)."""
        if inp.dry_run or inp.ref.is_synthetic:
            return None
        tenant_id = inp.ref.tenant_id
        known = self._tenants.get(tenant_id)
        budgets_known = self._budgets.get(tenant_id, {})
        if known is None or inp.capability.id not in budgets_known:
            return None
        tenant, document = known
        if document.mode == PolicyMode.STRICT and _requires_approval(document, inp):
            return None
        return Expected(tenant, document, budgets_known[inp.capability.id])


def decision_id_for(receipt_id: str) -> str:
    """The policy decision of an execution has a fixed id, so a retried check reuses it."""
    return str(uuid.uuid5(_DECISION_NAMESPACE, receipt_id))


class PolicyStep:
    """The ``check_policy`` activity, built once in ``worker.py`` with its dependencies."""

    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        start_keys: StartKeyring,
        quota_limits: QuotaLimits | None = None,
        prepare: Callable[[str, str], Awaitable[None]] | None = None,
    ) -> None:
        self._quota_limits = quota_limits or DEFAULT_QUOTAS
        self._sessions = sessions
        self._start_keys = start_keys
        # What of the run's record can be made ahead (``RecordStep.prepare``), made beside a
        # check that writes the first attempt's start: that attempt has no transaction of
        # its own before its call to make it beside.
        self._prepare = prepare
        self._expected = ExpectedChecks()

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
        preparing = None
        if inp.log_first_attempt and not inp.dry_run and self._prepare is not None:
            preparing = asyncio.ensure_future(self._prepare(inp.ref.tenant_id, inp.ref.run_id))
        now = datetime.now(UTC)
        try:
            try:
                outcome = await self._first(inp, now)
            except budgets.UsedUp:
                # The budget decided against was used up: nothing was committed, and the
                # check runs again reading its uses and holds first.
                outcome = await self._committing(inp, now, counted=True)
        finally:
            if preparing is not None:
                await preparing
        # The paths the run takes, recorded with the outcome (``workflows.execute.PATHS_VERSION``).
        return outcome.model_copy(update={"paths_version": inp.paths_version})

    async def _first(self, inp: PolicyInput, now: datetime) -> PolicyOutcome:
        """The check's first try: in one round trip when the check can decide ahead of its
        reads, from what this worker's last check of the tenant read (``Expected``), else
        in two. What it expected is checked in the same round trip, before anything is
        written (``policy.EXPECTED``): when the tenant, its document, the key's claim or
        the budget is not what was expected, nothing was, and the check runs in two."""
        expected = self._expected.of(inp)
        if expected is not None:
            try:
                return await self._ahead(inp, now, expected)
            except (Unexpected, event_log.PartialAppend):
                pass
        return await self._committing(inp, now, counted=False)

    async def _ahead(self, inp: PolicyInput, now: datetime, expected: Expected) -> PolicyOutcome:
        """A fresh run's check decided ahead of its reads: the opening's statements, the
        expectation's, then the decision with its budget's guard and hold, its events and
        the COMMIT, in one round trip."""
        opening = _opening_statements(inp, now, counted=False)
        expectation = (policy.EXPECTED, expected.params(inp, now))
        async with self._sessions.begin() as session:
            return await self._decide(
                session,
                inp,
                expected.document,
                expected.tenant,
                now,
                events=True,
                committing=True,
                budget=expected.budgeted(now),
                ahead=[*opening, expectation],
            )

    async def _committing(self, inp: PolicyInput, now: datetime, counted: bool) -> PolicyOutcome:
        try:
            if counted:
                return await self._check(inp, now, committing=True, counted=True)
            return await self._check(inp, now, committing=True)
        except event_log.PartialAppend:
            # A write of the check's last round trip was made already (its decision, or some
            # of its events): nothing was committed, and the check runs again the ordinary
            # way, which answers with the decision recorded first.
            return await self._check(inp, now, committing=False)

    async def _check(
        self, inp: PolicyInput, now: datetime, *, committing: bool, counted: bool | None = None
    ) -> PolicyOutcome:
        """The check in one transaction; ``committing``: a fresh run's last statements go
        with the transaction's COMMIT (``events.committed``). ``counted``: the budget's uses
        and holds read in its opening; by default not when ``committing`` (they are
        guarded then: ``budgets.guard``)."""
        counted = not committing if counted is None else counted
        async with self._sessions.begin() as session:
            tenant, document, held, budget = opened = await _opening(session, inp, now, counted)
            self._expected.learn(inp, opened)
            if held is None:  # a dry run claims nothing
                return await self._decide(session, inp, document, tenant, now, events=False)
            claim, existing = held
            if claim.receipt_id != inp.ref.receipt_id and existing is None:
                # Another execution holds the key and has not recorded its outcome yet.
                raise ApplicationError(
                    f"idempotency key held by running execution {claim.receipt_id}",
                    type=ErrorCode.IDEMPOTENCY_KEY_BUSY,
                )
            if existing is None:
                resumed = not claim.taken_now
                return await self._decide(
                    session,
                    inp,
                    document,
                    tenant,
                    now,
                    events=True,
                    resumed=resumed,
                    committing=committing and not resumed,
                    budget=budget,
                )
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
                mode=document.mode,
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
            "workflow_id": inp.ref.workflow_id,
            "claimed_receipt_id": inp.ref.receipt_id,
            "capability_id": inp.capability.id,
        }
        activity.logger.warning(
            "refused a start not signed by a gateway (%s) naming tenant %r: %s",
            reason,
            inp.ref.tenant_id[:64],
            claimed,
        )
        if len(inp.ref.tenant_id) > TENANT_ID_MAX or not db.storable(inp.ref.tenant_id):
            return
        async with self._sessions.begin() as session:
            await tenancy.set_tenant(session, inp.ref.tenant_id)
            if await tenants.get_tenant(session, inp.ref.tenant_id) is None:
                return
            correlation = f"refused:{inp.ref.run_id}"
            named: dict[str, Any] = {k: v[:300] for k, v in claimed.items() if db.storable(v)}
            chain = Chain(inp.ref.tenant_id, correlation, inp.ref.run_id, "moat.policy")
            chain.add(
                EventType.RUN_FAILED,
                AggregateType.RUN,
                correlation,
                error_code=START_NOT_SIGNED,
                reason=reason,
                **named,
            )
            # No request was accepted, so none was received: the intake only failed.
            chain.add(
                EventType.SIGNAL_PROCESSING_FAILED,
                AggregateType.SIGNAL,
                signal_id(correlation),
                error_code=START_NOT_SIGNED,
                reason=reason,
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
        resumed: bool = False,
        committing: bool = False,
        budget: Budgeted | None = None,
        ahead: list[tuple[str, dict[str, Any]]] | None = None,
    ) -> PolicyOutcome:
        # A fresh run: its decision, budget hold, events and COMMIT in one round trip, the
        # decision as inserted (one recorded already fails it: the check runs again), and
        # one taken against an uncounted budget guarded (a budget used up fails it).
        together = committing and events
        if budget is not None and budget.state is not None and not together:
            budget = budget if budget.state.counted else None  # ``_evaluate`` counts it
        denial: dict[str, Any] = {}
        decision, rule, reason, state = await _evaluate(
            session, inp, document, tenant, now, self._quota_limits, denial, budget
        )
        values = _decision_values(inp, document, inp.ref.receipt_id, decision, rule, reason)
        row = (
            PolicyDecisionRow(**values)
            if together
            else await policy.insert_policy_decision(session, **values)
        )
        if row.rule_hit == RuleHit.QUOTA_EXCEEDED.value:
            denial = denial or {"quota": Quota.PENDING_APPROVALS.value}
        matched = document.rule_for(inp.capability.id)
        waits = row.rule_hit == RuleHit.APPROVAL_REQUIRED.value
        ttl = matched.approval_ttl_seconds if matched else DEFAULT_APPROVAL_TTL_SECONDS
        holding: list[tuple[str, dict[str, Any]]] = []
        if together and state is not None and not state.counted:
            ref = inp.ref
            holding.append(budgets.guard(ref.tenant_id, inp.capability.id, now, ref.receipt_id))
        held = state is not None and not inp.dry_run and row.decision != Decision.DENY.value
        if state is not None and held:
            # The execution holds its unit until it records: concurrent checks count it,
            # through a wait for its approval too.
            run = longest_run_seconds(inp.capability) + (ttl if waits else 0)
            hold = (inp.ref.tenant_id, inp.capability.id, inp.ref.receipt_id, state)
            until = now + timedelta(seconds=run)
            if together:  # sent with the decision
                holding += budgets.hold_statements(*hold, until)
            else:
                await budgets.hold_budget(session, *hold, until)
        outcome = _outcome(row, tenant, matched, ttl if waits else None, held, denial)
        # The run's next step is the call: its first attempt's start is written here, as
        # the adapter step writes it, and that attempt writes none.
        logged = events and inp.log_first_attempt and outcome.calls_at_once
        outcome = outcome.model_copy(update={"resumed": resumed, "first_attempt_logged": logged})
        if events:
            drafts = _check_events(inp, row.id, outcome)
            decided = values if together else None
            await _append(session, drafts, decided, holding, committing, ahead or [])
        return outcome


def _check_events(inp: PolicyInput, decision_id: str, outcome: PolicyOutcome) -> list[EventDraft]:
    """The check's events, and the first attempt's start when the outcome says the check
    writes it (``PolicyOutcome.first_attempt_logged``), as the adapter step would."""
    ref = inp.ref
    chain = Chain(ref.tenant_id, ref.receipt_id, ref.run_id, "moat.policy")
    own = intake_events(inp, outcome.resumed) + policy_events(inp, decision_id, outcome)
    drafts = chained(chain, own)
    if outcome.first_attempt_logged:
        with chain.acting(ADAPTER_ACTOR):
            started = attempt_started(ref.receipt_id, inp.capability, 1, outcome.resumed)
            drafts = chained(chain, started)
    return drafts


async def _append(
    session: AsyncSession,
    drafts: list[EventDraft],
    decision: dict[str, Any] | None,
    holding: list[tuple[str, dict[str, Any]]],
    committing: bool,
    ahead: list[tuple[str, dict[str, Any]]],
) -> None:
    """The check's events as its last statement: after ``ahead`` (the opening of a check
    decided ahead of its reads), the insert of ``decision`` (its
    ``policy.insert_policy_decision`` values) and ``holding`` (its budget's hold), and with
    the COMMIT, when given; else with the COMMIT when ``committing``; else as ordinary
    statements."""
    if decision is not None:
        assert event_log.committable(drafts), "a check's events announce nothing"
        insert = (policy.INSERT_NEW_DECISION, decision)
        last = event_writes.committing(drafts, False)
        try:
            await event_log.committed(session, [*ahead, insert, *holding, last])
        except DBAPIError as err:
            state = getattr(err.orig, "sqlstate", None)
            if state == budgets.USED_UP:
                raise budgets.UsedUp(str(err.orig)) from err
            if state == policy.UNEXPECTED:
                raise Unexpected(str(err.orig)) from err
            raise
    elif committing:
        await event_log.append_committing(session, drafts)
    else:
        await event_log.append(session, drafts)


async def preview(
    session: AsyncSession,
    tenant_id: str,
    capability: CapabilitySpec,
    scopes: list[str],
    subject_id: str,
    limits: QuotaLimits | None = None,
) -> PolicyOutcome:
    """The decision a call of ``capability`` by a key with ``scopes`` would get now, as a
    dry run evaluates it, recording nothing (a plan's preview of its steps). The caller
    has named the tenant."""
    tenant, document = await policy_versions.tenant_and_current(session, tenant_id)
    inp = PolicyInput(
        ref=ExecutionRef(
            receipt_id=subject_id, tenant_id=tenant_id, idempotency_key="", input_hash=""
        ),
        capability=capability,
        idempotency_ttl_seconds=0,
        dry_run=True,
        scopes=scopes,
    )
    denial: dict[str, Any] = {}
    decision, rule, reason, _ = await _evaluate(
        session, inp, document, tenant, datetime.now(UTC), limits or DEFAULT_QUOTAS, denial
    )
    matched = document.rule_for(capability.id)
    waits = rule == RuleHit.APPROVAL_REQUIRED
    ttl = matched.approval_ttl_seconds if matched else DEFAULT_APPROVAL_TTL_SECONDS
    return PolicyOutcome(
        policy_decision_id="",
        decision=decision,
        rule_hit=rule,
        mode=document.mode,
        reason=reason,
        policy_version=document.version,
        approval_ttl_seconds=ttl if waits else None,
        allow_self_approval=bool(matched and matched.allow_self_approval),
        denial_details=denial or None,
    )


class _Opened(NamedTuple):
    tenant: Tenant | None
    document: PolicyVersion
    held: tuple[idempotency.Claim, Receipt | None] | None  # None: a dry run claims nothing
    budget: Budgeted | None  # the capability's budget, locked (None: not read)


async def _opening(
    session: AsyncSession, inp: PolicyInput, now: datetime, counted: bool
) -> _Opened:
    """The transaction's first round trip: its BEGIN and tenant, the tenant and its policy
    document and, unless a dry run, the key's claim with the receipt of the execution
    holding it (read again on its own when the claim's statement could not read it), then
    the lock of the capability's budget, if it has one (none for a synthetic run), with its
    limit and period and, when ``counted``, its uses and holds, read once the lock is
    granted: taken after the claim, as a check always takes them."""
    ref = inp.ref
    rows = await db.pipelined(session, _opening_statements(inp, now, counted))
    tenant, document = policy_versions.tenant_and_current_of(rows[1])
    if inp.dry_run:
        return _Opened(tenant, document, None, None)
    held = idempotency.claimed(rows[2])
    if held is None:
        holder = await idempotency.holder(session, ref.tenant_id, ref.idempotency_key)
        held = holder, await receipts.get_receipt(session, ref.tenant_id, holder.receipt_id)
    if ref.is_synthetic:
        return _Opened(tenant, document, held, None)
    lock = rows[3]
    if counted:
        return _Opened(tenant, document, held, Budgeted(budgets.state_of(rows[4])))
    found = None if lock is None else budgets.uncounted(int(lock[0]), str(lock[1]), now)
    return _Opened(tenant, document, held, Budgeted(found))


def _opening_statements(
    inp: PolicyInput, now: datetime, counted: bool
) -> list[tuple[str, dict[str, Any]]]:
    """``_opening``'s statements (driver SQL), in their order."""
    ref = inp.ref
    statements: list[tuple[str, dict[str, Any]]] = [
        (tenancy.SET_TENANT, {"tenant": ref.tenant_id}),
        (policy_versions.TENANT_AND_CURRENT, {"tenant_id": ref.tenant_id}),
    ]
    if not inp.dry_run:
        claim = idempotency.claim_params(
            tenant_id=ref.tenant_id,
            key=ref.idempotency_key,
            receipt_id=ref.receipt_id,
            input_hash=ref.input_hash,
            workflow_id=ref.workflow_id,
            now=now,
            ttl_seconds=inp.idempotency_ttl_seconds,
        )
        statements.append((idempotency.CLAIM_WITH_RECEIPT, claim))
        if not ref.is_synthetic:
            locked = {"tenant_id": ref.tenant_id, "capability_id": inp.capability.id}
            statements.append((policy.BUDGET_LOCK, locked))
            if counted:
                state = budgets.locked_state(ref.tenant_id, inp.capability.id, now, ref.receipt_id)
                statements.append(state)
    return statements


def _outcome(
    row: PolicyDecisionRow,
    tenant: Tenant | None,
    matched: PolicyRule | None,
    approval_ttl: int | None,
    budget_held: bool,
    denial: dict[str, Any],
) -> PolicyOutcome:
    """The decision as recorded: a retried check returns the one first recorded, not a
    re-evaluation."""
    return PolicyOutcome(
        policy_decision_id=row.id,
        decision=Decision(row.decision),
        rule_hit=RuleHit(row.rule_hit),
        mode=PolicyMode(row.mode),
        reason=row.reason,
        budget_held=budget_held,
        http_allow_hosts=list(tenant.http_allow_hosts) if tenant is not None else [],
        policy_version=row.policy_version,
        approval_ttl_seconds=approval_ttl,
        allow_self_approval=bool(matched and matched.allow_self_approval),
        denial_details=denial or None,
    )


async def _record_decision(
    session: AsyncSession,
    inp: PolicyInput,
    document: PolicyVersion,
    receipt_id: str,
    decision: Decision,
    rule: RuleHit,
    reason: str,
) -> PolicyDecisionRow:
    """The execution's one decision (a fixed id: a retried check gets the first one back),
    the transaction's last statement: sent with its COMMIT."""
    values = _decision_values(inp, document, receipt_id, decision, rule, reason)
    return await policy.insert_policy_decision_committing(session, values)


def _decision_values(
    inp: PolicyInput,
    document: PolicyVersion,
    receipt_id: str,
    decision: Decision,
    rule: RuleHit,
    reason: str,
) -> dict[str, Any]:
    """The decision's row (``policy.insert_policy_decision``'s parameters)."""
    return dict(
        id=decision_id_for(inp.ref.receipt_id),
        tenant_id=inp.ref.tenant_id,
        receipt_id=receipt_id,
        capability_id=inp.capability.id,
        idempotency_key=inp.ref.idempotency_key,
        mode=document.mode.value,
        decision=decision.value,
        rule_hit=rule.value,
        reason=reason,
        is_synthetic=inp.ref.is_synthetic,
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
    opened: Budgeted | None = None,
) -> Verdict:
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
    early = await _before_budget(session, inp, mode, tenant)
    if early is not None:
        return early
    strict = mode == PolicyMode.STRICT and _requires_approval(document, inp)
    budget = await _budget(session, inp, now, opened, counting=strict)
    if budget is not None and budget.exhausted:
        reason = (
            f"budget {budget.limit} per {budget.period} used up: {budget.used} used, "
            f"{budget.held} in flight"
        )
        if mode == PolicyMode.AUDIT:
            return Decision.WOULD_DENY, RuleHit.BUDGET_EXCEEDED, reason, budget
        return Decision.DENY, RuleHit.BUDGET_EXCEEDED, reason, budget
    if strict:
        return await _approval_verdict(session, inp, document, now, limits, denial, budget)
    if mode == PolicyMode.BYPASS:
        return Decision.ALLOW, RuleHit.ALLOWED, "bypass not allowed for tenant: standard", budget
    if inp.ref.is_synthetic:
        return Decision.ALLOW, RuleHit.ALLOWED, "synthetic probe: budgets not applied", None
    return Decision.ALLOW, RuleHit.ALLOWED, "", budget


async def _budget(
    session: AsyncSession,
    inp: PolicyInput,
    now: datetime,
    opened: Budgeted | None,
    *,
    counting: bool,
) -> budgets.BudgetState | None:
    """The budget a decision is taken against: none for a synthetic probe, else the one
    ``opened`` by the check's opening (counted now when ``counting``: a check whose
    approval's checks take round trips of their own is not guarded), else read here."""
    ref = inp.ref
    if ref.is_synthetic:
        return None
    if opened is None:
        return await budgets.budget_state(
            session,
            ref.tenant_id,
            inp.capability.id,
            now,
            lock=not inp.dry_run,
            exclude_receipt=ref.receipt_id,
        )
    if opened.state is None or opened.state.counted or not counting:
        return opened.state
    state = budgets.locked_state(ref.tenant_id, inp.capability.id, now, ref.receipt_id)
    return budgets.state_of((await db.pipelined(session, [state]))[0])


async def _before_budget(
    session: AsyncSession, inp: PolicyInput, mode: PolicyMode, tenant: Tenant | None
) -> Verdict | None:
    """The decisions taken before any budget is read: a synthetic run's lender refused, a
    bypass the operators allowed, a scope missing (None: none of them)."""
    if inp.ref.is_synthetic:
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
    return None


async def _lender_refusal(session: AsyncSession, inp: PolicyInput) -> str | None:
    """Why a synthetic run may not act for the key it names (None: it may). Its start is
    signed (``v3`` claims name the key and its scopes); ``api_key_id`` "" is Moat's own
    (a probe an operator made)."""
    if inp.scopes is None or not inp.start_signature.startswith(CLAIMS_VERSION + "."):
        return "the probe's run carries no key's authority: resume the probe with a key"
    if inp.api_key_id and await api_keys.is_revoked(session, inp.ref.tenant_id, inp.api_key_id):
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
        await quotas.lock(session, inp.ref.tenant_id, quota)
    own = await quotas.override(session, inp.ref.tenant_id, quota)
    limit = own if own is not None else limits[quota]
    usage = await quotas.usage(
        session, inp.ref.tenant_id, quota, now, own_receipt=inp.ref.receipt_id
    )
    if usage < limit:
        return None
    return exceeded(quota, limit, usage, "tenant" if own is not None else "default")


async def _approval_verdict(
    session: AsyncSession,
    inp: PolicyInput,
    document: PolicyVersion,
    now: datetime,
    limits: QuotaLimits,
    denial: dict[str, Any],
    budget: budgets.BudgetState | None,
) -> Verdict:
    """A call a person must approve under a strict policy: covered by its plan's approval,
    refused when the tenant's calls waiting are at their quota, else waiting."""
    rule = document.rule_for(inp.capability.id)
    why = f"rule {rule.capability!r}" if rule else f"catalog entry {inp.capability.id}"
    if await _plan_approved(session, inp):
        reason = f"{why}: approved with its plan ({inp.plan_approval_id})"
        return Decision.ALLOW, RuleHit.PLAN_APPROVED, reason, budget
    full = await _approvals_full(session, inp, now, limits)
    if full is not None:
        reason, details = full
        denial.update(details)
        return Decision.DENY, RuleHit.QUOTA_EXCEEDED, reason, budget
    return Decision.ALLOW, RuleHit.APPROVAL_REQUIRED, f"approval required by {why}", budget


async def _plan_approved(session: AsyncSession, inp: PolicyInput) -> bool:
    """Whether the step's plan was approved as a whole by a person (the start's ``v4``
    signature names that approval; it must still be recorded as approved)."""
    if inp.plan_approval_id is None:
        return False
    row = await approvals.get(session, inp.ref.tenant_id, inp.plan_approval_id)
    return row is not None and row.status == ApprovalStatus.APPROVED.value


def _requires_approval(document: PolicyVersion, inp: PolicyInput) -> bool:
    rule = document.rule_for(inp.capability.id)
    if rule is not None and rule.requires_approval is not None:
        return rule.requires_approval
    return inp.capability.requires_approval
