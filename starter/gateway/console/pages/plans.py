"""``/console/plans``: the tenant's plans, newest first, and one plan's steps (status, the
execution each step ran as, its error, its compensation). Both need ``outputs:read``, as
``GET /v1/plans`` and ``GET /v1/plans/{id}`` do. A step's output is on its execution's
page."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response

from schemas.approvals import ApprovalStatus, approval_id_for
from schemas.errors import ErrorCode
from schemas.plans import PlanStatus, StepState
from schemas.scopes import OUTPUTS_READ
from starter.gateway.access import needs
from starter.gateway.console.auth import ConsoleSession, SignedIn
from starter.gateway.console.nav import NavEntry
from starter.gateway.console.render import page
from starter.service import MoatError, pages
from starter.service.plans import listed, plans_store_row
from store import approvals

router = APIRouter(prefix="/console/plans")
NAV = NavEntry("Plans", "/console/plans", scopes=(OUTPUTS_READ,), order=25)
PAGE_SIZE = 50


def _status(value: str) -> PlanStatus | None:
    if not value:
        return None
    try:
        return PlanStatus(value)
    except ValueError:
        raise MoatError(
            ErrorCode.SCHEMA_VALIDATION_FAILED,
            f"status must be one of {', '.join(s.value for s in PlanStatus)}.",
        ) from None


@router.get("", dependencies=[needs(OUTPUTS_READ, also="a console session")])
async def listing(
    request: Request,
    principal: SignedIn,
    session: ConsoleSession,
    status: Annotated[str, Query(max_length=40)] = "",
    cursor: Annotated[str, Query(max_length=400)] = "",
) -> Response:
    after = pages.after(cursor or None, (datetime, str))
    rows = await listed(session, principal.tenant_id, _status(status), PAGE_SIZE + 1, after)
    found = pages.cut(rows, PAGE_SIZE, lambda p: (p.created_at, p.plan_id))
    query = {"status": status} if status else {}
    return page(
        request,
        "plans.html",
        principal,
        title="Plans",
        plans=found["items"],
        status=status,
        statuses=[s.value for s in PlanStatus],
        next_link=(
            f"/console/plans?{urlencode({**query, 'cursor': found['next_cursor']})}"
            if found["next_cursor"]
            else ""
        ),
    )


@dataclass(frozen=True)
class StepView:
    state: StepState
    undo: str  # the capability that undoes the step, '' when none is declared


@router.get("/{plan_id}", dependencies=[needs(OUTPUTS_READ, also="a console session")])
async def detail(
    request: Request, principal: SignedIn, session: ConsoleSession, plan_id: str
) -> Response:
    row = await plans_store_row(session, principal.tenant_id, plan_id[:64])
    declared: dict[str, Any] = {
        str(s.get("id")): s for s in (row.document or {}).get("steps", []) if isinstance(s, dict)
    }
    steps = [
        StepView(
            state,
            str((declared.get(state.id, {}).get("compensate") or {}).get("capability_id", "")),
        )
        for state in (StepState.model_validate(s) for s in row.steps)
    ]
    waiting = None
    if row.status == PlanStatus.ACCEPTED.value:
        found = await approvals.get(session, row.tenant_id, approval_id_for(row.id))
        if found is not None and found.status == ApprovalStatus.PENDING.value:
            waiting = found.id
    return page(
        request,
        "plan.html",
        principal,
        title=f"Plan {row.id}",
        plan=row,
        steps=steps,
        waiting_approval=waiting,
    )
