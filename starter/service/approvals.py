"""Approvals: list and read them, and decide one, for the tenant's API and the CLI.

A decision binds to the exact call: the ``input_hash`` and ``policy_version`` the person
saw must be the pending request's (``approval_mismatch`` otherwise, and nothing changes).
An approval under a policy that has changed since is stale; one past its expiry is
expired; the key that made the call may not approve it unless its rule allows. The
decision reaches the waiting run as a Temporal update signed with the start keyring
(``schemas.start.DecisionClaims``), whose validator checks the binding again and whose
activity checks the signature and the approver rules once more, then records the decision
with its event in one transaction: a decision sent straight through Temporal is refused.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Literal

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio.client import Client, WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from schemas.approvals import (
    ADMIN_ACTOR,
    KEY_ACTOR_PREFIX,
    Approval,
    ApprovalAction,
    ApprovalDecision,
    ApprovalStatus,
    ApprovalVerdict,
    may_decide,
)
from schemas.errors import ErrorCode
from schemas.names import DECIDE_APPROVAL_UPDATE
from schemas.pages import Key
from schemas.policy import PolicyRule
from schemas.start import DECISION_NOT_SIGNED
from starter.service import prefixes
from starter.service.errors import MoatError
from store import approvals, policy_versions, tenancy
from store.held import HeldReads
from store.keyrings.codec import OutputSealer
from store.keyrings.start import StartKeyring
from store.models import ApprovalRow

LIST_LIMIT = 200
Action = Literal["approve", "reject"]
_MESSAGES: dict[str, str] = {
    ErrorCode.APPROVAL_MISMATCH: "The decision names another call or policy version than the one "
    "waiting: read the approval again (GET /v1/approvals/{id}) and decide on what it shows.",
    ErrorCode.APPROVAL_STALE: "The tenant's policy changed since this call asked for approval: the "
    "agent must make the call again under the current policy.",
    ErrorCode.APPROVAL_EXPIRED: "The approval's time is up; the run ends with approval_expired.",
    ErrorCode.APPROVAL_NOT_PENDING: "The approval is no longer pending.",
    ErrorCode.SELF_APPROVAL_FORBIDDEN: "The key that made this call cannot approve it (separation "
    "of duties): another person's key with scope approvals:write, or the admin key, must "
    "decide.",
    ErrorCode.FORBIDDEN: "The deciding key may not decide this approval: it needs approvals:write "
    "and to be among the approvers the policy's rule names.",
    DECISION_NOT_SIGNED: "The run refused the decision's signature: gateways and workers "
    "must share the same MOAT_START_KEYRING.",
}


def not_found(approval_id: str) -> MoatError:
    return MoatError(ErrorCode.APPROVAL_NOT_FOUND, f"No approval {approval_id[:80]!r}.")


async def list_approvals(
    session: AsyncSession,
    tenant_id: str,
    status: ApprovalStatus | None,
    limit: int = LIST_LIMIT,
    after: Key | None = None,
) -> list[Approval]:
    """Newest first, without their inputs (``show`` has them)."""
    kind = status.value if status else None
    rows = await approvals.listing(session, tenant_id, kind, limit, after)
    return [approvals.to_approval(r) for r in rows]


async def get(
    session: AsyncSession, sealer: OutputSealer, tenant_id: str, approval_id: str
) -> Approval:
    """One approval with the redacted input it is about."""
    row = await approvals.get(session, tenant_id, approval_id)
    if row is None:
        whole = await prefixes.unique_id(session, ApprovalRow, tenant_id, approval_id, "approval")
        row = await approvals.get(session, tenant_id, whole) if whole else None
    if row is None:
        raise not_found(approval_id)
    return approvals.to_approval(row, sealer)


async def pending_for(session: AsyncSession, tenant_id: str, receipt_id: str) -> Approval | None:
    """The approval an execution waits for, if it waits for one."""
    row = await approvals.by_receipt(session, tenant_id, receipt_id)
    if row is None or row.status != ApprovalStatus.PENDING.value:
        return None
    return approvals.to_approval(row)


async def pending_of_workflow(
    session: AsyncSession, tenant_id: str, workflow_id: str
) -> Approval | None:
    """The approval the execution running as ``workflow_id`` waits for, if any."""
    row = await approvals.pending_of_workflow(session, tenant_id, workflow_id)
    return approvals.to_approval(row) if row is not None else None


async def awaits_approval_held(reads: HeldReads, tenant_id: str, workflow_id: str) -> bool | None:
    """Whether ``pending_of_workflow`` would find one, in one statement on a held connection
    (``store.held``); None when it was not read there (no held connection free)."""
    return await approvals.pending_of_workflow_held(reads, tenant_id, workflow_id)


async def decide(
    sessions: async_sessionmaker[AsyncSession],
    client: Client,
    sealer: OutputSealer,
    start_keys: StartKeyring,
    *,
    tenant_id: str,
    approval_id: str,
    action: Action,
    decision: ApprovalDecision,
    actor: str,
    actor_scopes: Sequence[str] = (),
    in_session: bool = False,
) -> Approval:
    """Approve or reject for ``actor`` (``key:<id>`` with ``actor_scopes``, or ``admin``):
    checked here, then sent to the waiting run, which records it. The approval as
    recorded. Its reads are short transactions of their own, before and after the wait
    for the run's answer: no connection is held across it.

    ``in_session``: the requesting key's own decision, given by the person in their MCP
    session (elicitation) under a rule with ``approve_in_session``; only the MCP server's
    in-session door sets it, never a route."""
    async with tenancy.tenant_transaction(sessions, tenant_id) as session:
        row = await approvals.get(session, tenant_id, approval_id)
        if row is None:
            raise not_found(approval_id)
        current = await policy_versions.latest_version(session, tenant_id)
        under = await policy_versions.get(session, tenant_id, row.policy_version)
    rule = policy_versions.to_version(under).rule_for(row.capability_id) if under else None
    _check_decider(row, rule, actor, actor_scopes, in_session)
    _check(row, action, decision, actor, current, datetime.now(UTC), in_session)
    verdict = ApprovalVerdict(
        approval_id=row.id,
        action=action,
        input_hash=decision.input_hash,
        policy_version=decision.policy_version,
        decided_by=actor,
        comment=decision.comment,
        decider_scopes=list(actor_scopes) if actor != ADMIN_ACTOR else [],
        in_session=in_session,
    )
    verdict = start_keys.signed_decision(tenant_id, row.workflow_id, verdict)
    handle = client.get_workflow_handle(row.workflow_id)
    try:
        decided = await handle.execute_update(DECIDE_APPROVAL_UPDATE, verdict, result_type=Approval)
    except WorkflowUpdateFailedError as err:
        raise _refusal(err.cause, row) from err
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            raise _refused(ErrorCode.APPROVAL_NOT_PENDING, row) from err
        raise
    if decided.status.value != _STATUS[action] or decided.decided_by != actor:
        # Another decision (or the expiry) came first.
        raise _refused(ErrorCode.APPROVAL_NOT_PENDING, row, status=decided.status.value)
    async with tenancy.tenant_transaction(sessions, tenant_id) as session:
        return await get(session, sealer, tenant_id, approval_id)


def _check_decider(
    row: ApprovalRow,
    rule: PolicyRule | None,
    actor: str,
    actor_scopes: Sequence[str],
    in_session: bool,
) -> None:
    if in_session:
        if not _in_session_allowed(row, rule, actor):
            raise MoatError(
                ErrorCode.SELF_APPROVAL_FORBIDDEN,
                "Only the key that made the call decides in its own MCP session, and only "
                "where the policy's rule has approve_in_session.",
                {"approval_id": row.id},
            )
    elif (
        rule is not None
        and actor != ADMIN_ACTOR
        and not may_decide(rule.approvers, actor, list(actor_scopes))
    ):
        raise MoatError(
            ErrorCode.FORBIDDEN,
            "The policy's rule for this capability names other approvers: "
            + ", ".join(rule.approvers),
            {"approval_id": row.id, "approvers": rule.approvers},
        )


def _in_session_allowed(row: ApprovalRow, rule: PolicyRule | None, actor: str) -> bool:
    return (
        actor == row.requested_by
        and actor.startswith(KEY_ACTOR_PREFIX)
        and rule is not None
        and rule.approve_in_session
    )


async def in_session_ask(
    session: AsyncSession, sealer: OutputSealer, tenant_id: str, approval_id: str, actor: str
) -> Approval | None:
    """The approval to put to the person in ``actor``'s own MCP session, with its redacted
    input: pending, asked for by ``actor``, under a rule with ``approve_in_session``. None
    otherwise (the call stays ``accepted``, for an approver to decide)."""
    row = await approvals.get(session, tenant_id, approval_id)
    if row is None or row.status != ApprovalStatus.PENDING.value:
        return None
    under = await policy_versions.get(session, tenant_id, row.policy_version)
    rule = policy_versions.to_version(under).rule_for(row.capability_id) if under else None
    if not _in_session_allowed(row, rule, actor):
        return None
    return approvals.to_approval(row, sealer)


_STATUS = {"approve": "approved", "reject": "rejected", "expire": "expired"}


def _check(
    row: ApprovalRow,
    action: ApprovalAction,
    decision: ApprovalDecision,
    actor: str,
    current_version: int,
    now: datetime,
    in_session: bool = False,
) -> None:
    if row.status != ApprovalStatus.PENDING.value:
        raise _refused(ErrorCode.APPROVAL_NOT_PENDING, row, status=row.status)
    if (decision.input_hash, decision.policy_version) != (row.input_hash, row.policy_version):
        raise _refused(ErrorCode.APPROVAL_MISMATCH, row)
    if now >= row.expires_at:
        raise _refused(ErrorCode.APPROVAL_EXPIRED, row)
    if action == "approve" and current_version != row.policy_version:
        raise _refused(ErrorCode.APPROVAL_STALE, row, current_policy_version=current_version)
    self_approval = actor == row.requested_by and not row.allow_self_approval
    if action == "approve" and self_approval and not in_session:
        raise MoatError(
            ErrorCode.SELF_APPROVAL_FORBIDDEN,
            "The key that made this call cannot approve it (separation of duties): another "
            "person's key with scope approvals:write, or the admin key, must decide.",
            {"approval_id": row.id},
        )


def _refused(code: str, row: ApprovalRow, **details: object) -> MoatError:
    return MoatError(code, _MESSAGES[code], {"approval_id": row.id, **details})


def _refusal(cause: BaseException | None, row: ApprovalRow) -> MoatError:
    """The run's refusal of the update, as the API's error."""
    while cause is not None:
        if isinstance(cause, ApplicationError) and cause.type in _MESSAGES:
            return _refused(cause.type, row)
        cause = cause.__cause__
    return _refused(ErrorCode.APPROVAL_NOT_PENDING, row)
