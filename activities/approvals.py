"""The approval steps of ``ExecuteCapability``: ask for a person's approval, and record the
decision (approved, rejected, or expired when nobody decided in time).

Each step is one transaction holding the approval's new state and the event that records
it. The row itself arbitrates: it leaves ``pending`` once, so a decision racing the expiry
(or another decision) finds the first one and changes nothing.

A person's decision counts only when a gateway signed it for this run (the start keyring,
``schemas.start.DecisionClaims``), and the approver rules are checked again here, where it
is recorded, against the signed decider: the decider holds ``approvals:write`` (or is the
admin), is among the approvers the policy's rule names, and is not the key that made the
call unless the rule allows. Anyone able to send updates in the namespace without the
keyring can decide nothing.

When the tenant has an approvals channel, each step hands the approval's Slack message on
(``activities.announce``) after its transaction commits, on every attempt: the request
posts it, a decision (or the expiry) replaces it with the outcome.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio import activity

from activities.announce import Announcer
from activities.evidence import continue_chain
from schemas.approvals import (
    ADMIN_ACTOR,
    KEY_ACTOR_PREFIX,
    Approval,
    ApprovalRecorded,
    ApprovalRecordInput,
    ApprovalRequestInput,
    ApprovalStatus,
    ApprovalVerdict,
    approval_id_for,
    deciding_actor,
    may_decide,
)
from schemas.errors import ErrorCode
from schemas.events import AggregateType, EventType
from schemas.names import RECORD_APPROVAL, REQUEST_APPROVAL
from schemas.scopes import APPROVALS_WRITE, missing_scopes
from schemas.slack_approvals import is_announcement_key
from schemas.start import DECISION_NOT_SIGNED, DecisionClaims
from store import approval_channels, approvals, policy_versions, tenancy
from store.keyrings.codec import OutputSealer
from store.keyrings.start import StartKeyring
from store.models import ApprovalRow

_OUTCOME = {
    "approve": (ApprovalStatus.APPROVED, EventType.APPROVAL_GRANTED),
    "reject": (ApprovalStatus.REJECTED, EventType.APPROVAL_REJECTED),
    "expire": (ApprovalStatus.EXPIRED, EventType.APPROVAL_EXPIRED),
}


class ApprovalActivities:
    """Built once in ``worker.py``."""

    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        sealer: OutputSealer,
        start_keys: StartKeyring,
        announcer: Announcer | None = None,
    ) -> None:
        self._sessions = sessions
        self._sealer = sealer
        self._start_keys = start_keys
        self._announcer = announcer

    @activity.defn(name=REQUEST_APPROVAL)
    async def request_approval(self, inp: ApprovalRequestInput) -> Approval:
        """The execution's approval request, made now or found (a retried step, a reset
        run): ``APPROVAL_REQUESTED`` is written with the request, once."""
        now = datetime.now(UTC)
        row = ApprovalRow(
            id=approval_id_for(inp.ref.receipt_id),
            tenant_id=inp.ref.tenant_id,
            receipt_id=inp.ref.receipt_id,
            workflow_id=inp.ref.workflow_id,
            status=ApprovalStatus.PENDING.value,
            capability_id=inp.capability_id,
            capability_version=inp.capability_version,
            input_hash=inp.ref.input_hash,
            policy_version=inp.policy_version,
            requested_by=inp.requested_by,
            allow_self_approval=inp.allow_self_approval,
            requested_at=now,
            expires_at=now + timedelta(seconds=inp.ttl_seconds),
        )
        approvals.seal_input(self._sealer, row, inp.input)
        async with self._sessions.begin() as session:
            await tenancy.set_tenant(session, inp.ref.tenant_id)
            stored, inserted = await approvals.request(session, row)
            if inserted:
                chain = continue_chain(
                    inp.ref.tenant_id, inp.ref.receipt_id, inp.ref.run_id, "moat.approval"
                )
                chain.add(
                    EventType.APPROVAL_REQUESTED,
                    AggregateType.APPROVAL,
                    stored.id,
                    input_hash=stored.input_hash,
                    policy_version=stored.policy_version,
                    capability_id=stored.capability_id,
                    requested_by=stored.requested_by,
                    expires_at=stored.expires_at.isoformat(),
                )
                await chain.append(session)
            announced = await self._announced(session, inp.ref.tenant_id)
            requested = approvals.to_approval(stored)
        if announced is not None and not is_announcement_key(inp.ref.idempotency_key):
            # After the commit, on every attempt: the message's workflow finds the approval,
            # and a retried step finds the workflow already started.
            await announced.hand_off(inp.ref.tenant_id, requested.id, "requested")
        return requested

    async def _announced(self, session: AsyncSession, tenant_id: str) -> Announcer | None:
        """Who posts the tenant's approvals to Slack, when it has an approvals channel."""
        if self._announcer is None or await approval_channels.get(session, tenant_id) is None:
            return None
        return self._announcer

    @activity.defn(name=RECORD_APPROVAL)
    async def record_approval(self, inp: ApprovalRecordInput) -> ApprovalRecorded:
        """Decide the approval unless it was decided already. An approval is refused (and
        nothing changes) when the tenant's policy changed since the request
        (``approval_stale``) or its time is up (``approval_expired``). A decided approval's
        Slack message is handed on to be replaced with the outcome (once per decision)."""
        recorded = await self._record(inp)
        if recorded.refusal is None and recorded.approval.status != ApprovalStatus.PENDING:
            async with tenancy.tenant_transaction(self._sessions, inp.tenant_id) as session:
                announced = await self._announced(session, inp.tenant_id)
            if announced is not None:
                await announced.hand_off(inp.tenant_id, recorded.approval.id, "decided")
        return recorded

    async def _record(self, inp: ApprovalRecordInput) -> ApprovalRecorded:
        verdict = inp.verdict
        now = datetime.now(UTC)
        if verdict.action != "expire":
            claims = DecisionClaims.of(inp.tenant_id, activity.info().workflow_id or "", verdict)
            unsigned = self._start_keys.refusal(claims, verdict.signature)
            if unsigned is not None:
                activity.logger.warning(
                    "refused a decision on %s not signed by a gateway (%s) for %r",
                    verdict.approval_id[:64],
                    unsigned,
                    verdict.decided_by[:80],
                )
                return await self._refused(inp, DECISION_NOT_SIGNED)
        async with self._sessions.begin() as session:
            await tenancy.set_tenant(session, inp.tenant_id)
            row = await approvals.get(session, inp.tenant_id, verdict.approval_id, lock=True)
            if row is None:
                raise ValueError(f"no approval {verdict.approval_id}")
            if row.status != ApprovalStatus.PENDING.value:
                return ApprovalRecorded(approval=approvals.to_approval(row))
            if verdict.action != "expire" and (
                verdict.input_hash != row.input_hash or verdict.policy_version != row.policy_version
            ):
                return ApprovalRecorded(
                    approval=approvals.to_approval(row), refusal=ErrorCode.APPROVAL_MISMATCH
                )
            refused = (
                await self._approver_refusal(session, inp.tenant_id, row, verdict)
                if verdict.action != "expire"
                else None
            )
            if refused is not None:
                return ApprovalRecorded(approval=approvals.to_approval(row), refusal=refused)
            if verdict.action == "approve":
                refusal = None
                if now >= row.expires_at:
                    refusal = ErrorCode.APPROVAL_EXPIRED
                elif await policy_versions.latest_version(session, inp.tenant_id) != (
                    row.policy_version
                ):
                    refusal = ErrorCode.APPROVAL_STALE
                if refusal is not None:
                    return ApprovalRecorded(approval=approvals.to_approval(row), refusal=refusal)
            status, event = _OUTCOME[verdict.action]
            decided_by = verdict.decided_by if verdict.action != "expire" else "moat"
            await approvals.decide(
                session,
                row,
                status.value,
                decided_by=decided_by,
                decided_at=now,
                comment=verdict.comment,
                digest=verdict.input_hash if verdict.action != "expire" else None,
            )
            chain = continue_chain(inp.tenant_id, inp.receipt_id, inp.run_id, "moat.approval")
            chain.add(
                event,
                AggregateType.APPROVAL,
                row.id,
                decided_by=decided_by,
                input_hash=row.approved_digest,
                policy_version=row.policy_version,
                comment=row.comment,
                **_in_session_mark(verdict),
            )
            await chain.append(session)
            return ApprovalRecorded(approval=approvals.to_approval(row))

    async def _refused(self, inp: ApprovalRecordInput, refusal: str) -> ApprovalRecorded:
        async with self._sessions.begin() as session:
            await tenancy.set_tenant(session, inp.tenant_id)
            row = await approvals.get(session, inp.tenant_id, inp.verdict.approval_id)
            if row is None:
                raise ValueError(f"no approval {inp.verdict.approval_id}")
            return ApprovalRecorded(approval=approvals.to_approval(row), refusal=refusal)

    @staticmethod
    async def _approver_refusal(
        session: AsyncSession, tenant_id: str, row: ApprovalRow, verdict: ApprovalVerdict
    ) -> str | None:
        """The approver rules, as the gateway checked them, against the signed decider."""
        actor = verdict.decided_by
        if verdict.in_session:
            return await _in_session_refusal(session, tenant_id, row, actor)
        if actor != ADMIN_ACTOR:
            if not deciding_actor(actor) or missing_scopes(
                verdict.decider_scopes, [APPROVALS_WRITE]
            ):
                return ErrorCode.FORBIDDEN
            under = await policy_versions.get(session, tenant_id, row.policy_version)
            if under is not None:
                rule = policy_versions.to_version(under).rule_for(row.capability_id)
                if rule is not None and not may_decide(
                    rule.approvers, actor, verdict.decider_scopes
                ):
                    return ErrorCode.FORBIDDEN
        if (
            verdict.action == "approve"
            and actor == row.requested_by
            and not row.allow_self_approval
        ):
            return ErrorCode.SELF_APPROVAL_FORBIDDEN
        return None


def _in_session_mark(verdict: ApprovalVerdict) -> dict[str, Any]:
    """The decision's event says when the requester decided in their own session."""
    return {"in_session": True} if verdict.in_session else {}


async def _in_session_refusal(
    session: AsyncSession, tenant_id: str, row: ApprovalRow, actor: str
) -> str | None:
    """A decision in the requester's own MCP session counts only when the requesting key
    itself decides and the rule under the approval's policy version has
    ``approve_in_session``: the one exception to separation of duties, and it needs no
    ``approvals:write`` (the person assents to their own call)."""
    if actor != row.requested_by or not actor.startswith(KEY_ACTOR_PREFIX):
        return ErrorCode.FORBIDDEN
    under = await policy_versions.get(session, tenant_id, row.policy_version)
    rule = policy_versions.to_version(under).rule_for(row.capability_id) if under else None
    if rule is None or not rule.approve_in_session:
        return ErrorCode.SELF_APPROVAL_FORBIDDEN
    return None
