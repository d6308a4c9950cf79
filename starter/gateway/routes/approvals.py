"""Approval routes (``/v1/approvals``): the calls waiting for a person, and their decision.

Reading needs the scope ``approvals:read`` (an approval shows the call's input); deciding
needs ``approvals:write`` (the admin key decides through
``/v1/admin/tenants/{id}/approvals``)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Path, Query, Request

from schemas.approvals import Approval, ApprovalDecision, ApprovalStatus, key_actor
from schemas.pages import ApprovalPage
from schemas.scopes import APPROVALS_READ, APPROVALS_WRITE
from starter.gateway.access import needs
from starter.gateway.deps import Caller, CallerOnly, TenantSession, deps_of
from starter.gateway.errors import documented_errors
from starter.gateway.pages import Cursor
from starter.service import approvals, pages
from store.api_keys import AuthenticatedTenant

router = APIRouter(
    prefix="/v1/approvals", tags=["approvals"], responses=documented_errors(401, 403, 500)
)

ApprovalId = Annotated[str, Path(max_length=64, pattern=r"^apr_[0-9a-f]+$")]
DECISION_ERRORS = documented_errors(400, 404, 409)


@router.get(
    "",
    summary="Approvals, newest first",
    response_model=ApprovalPage,
    responses=documented_errors(400),
    dependencies=[needs(APPROVALS_READ)],
)
async def list_approvals(
    session: TenantSession,
    caller: Caller,
    status: Annotated[ApprovalStatus | None, Query(description="Only these.")] = None,
    limit: Annotated[int, Query(ge=1, le=approvals.LIST_LIMIT)] = 50,
    cursor: Cursor = None,
) -> ApprovalPage:
    after = pages.after(cursor, (datetime, str))
    rows = await approvals.list_approvals(session, caller.tenant_id, status, limit + 1, after)
    return ApprovalPage(**pages.cut(rows, limit, lambda a: (a.requested_at, a.id)))


@router.get(
    "/{approval_id}",
    summary="One approval, with the redacted input it is about",
    response_model=Approval,
    responses=documented_errors(400, 404),
    dependencies=[needs(APPROVALS_READ)],
)
async def get_approval(
    request: Request, session: TenantSession, caller: Caller, approval_id: ApprovalId
) -> Approval:
    sealer = deps_of(request).executions.sealer
    return await approvals.get(session, sealer, caller.tenant_id, approval_id)


@router.post(
    "/{approval_id}/approve",
    summary="Approve the exact call",
    response_model=Approval,
    responses=DECISION_ERRORS,
    dependencies=[needs(APPROVALS_WRITE)],
)
async def approve(
    request: Request, caller: CallerOnly, approval_id: ApprovalId, body: ApprovalDecision
) -> Approval:
    """`input_hash` and `policy_version` must be the approval's (`409 approval_mismatch`
    otherwise, and nothing changes). `409 approval_stale`: the policy changed since the
    call was made; `403 approval_expired`; `403 self_approval_forbidden`: the key that
    made the call cannot approve it unless its rule allows. The run then executes once."""
    return await _decide(request, caller, approval_id, body, "approve")


@router.post(
    "/{approval_id}/reject",
    summary="Reject the call",
    response_model=Approval,
    responses=DECISION_ERRORS,
    dependencies=[needs(APPROVALS_WRITE)],
)
async def reject(
    request: Request, caller: CallerOnly, approval_id: ApprovalId, body: ApprovalDecision
) -> Approval:
    """The same binding as approving; the run ends `failed` with `403 approval_rejected`,
    without calling the provider or using budget."""
    return await _decide(request, caller, approval_id, body, "reject")


async def _decide(
    request: Request,
    caller: AuthenticatedTenant,
    approval_id: str,
    body: ApprovalDecision,
    action: approvals.Action,
) -> Approval:
    # No request-long transaction: the decision waits for the run's answer (a Temporal
    # update), and the service reads and re-reads the approval in short ones around it.
    deps = deps_of(request)
    return await approvals.decide(
        deps.sessions,
        deps.client,
        deps.executions.sealer,
        deps.executions.start_keys,
        tenant_id=caller.tenant_id,
        approval_id=approval_id,
        action=action,
        decision=body,
        actor=key_actor(caller.key_id),
        actor_scopes=caller.scopes,
    )
