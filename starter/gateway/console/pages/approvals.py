"""The approvals inbox (``/console/approvals``): the calls waiting for a person, each with
its redacted input (and what redaction hid), digest, policy version and expiry; approve or
reject with a comment; the approvals decided lately, by whom and when.

A decision sends exactly the digest (``input_hash``) and policy version the page showed
(hidden fields of the form) through ``approvals.decide`` with the session's actor and
scopes, as the API does: a refusal (the approval changed since, the policy changed, time
is up, separation of duties) is shown on the page in words, and nothing is decided.
Reading needs ``approvals:read``; deciding ``approvals:write``."""

from __future__ import annotations

import re
from typing import Annotated

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import RedirectResponse, Response
from pydantic import ValidationError

from schemas.approvals import MAX_COMMENT, ApprovalDecision
from schemas.errors import ErrorCode
from schemas.scopes import APPROVALS_READ, APPROVALS_WRITE, missing_scopes
from starter.gateway.access import needs
from starter.gateway.console.auth import CheckedForm, SignedIn, field
from starter.gateway.console.nav import NavEntry
from starter.gateway.console.render import page
from starter.gateway.deps import deps_of
from starter.gateway.errors import STATUS
from starter.service import MoatError, approvals, inbox
from starter.service.console_sessions import Principal
from store import tenancy

router = APIRouter(prefix="/console/approvals")
NAV = NavEntry("Approvals", "/console/approvals", scopes=(APPROVALS_READ,), order=10)

APPROVAL_ID = r"^apr_[0-9a-f]+$"
ApprovalId = Annotated[str, Path(max_length=64, pattern=APPROVAL_ID)]
# What a refused decision means for the person, before the API's own message.
HEADLINES: dict[str, str] = {
    ErrorCode.APPROVAL_MISMATCH: "Nothing was decided: this approval is no longer the call "
    "this page showed you.",
    ErrorCode.APPROVAL_STALE: "Nothing was decided: the tenant's policy changed since this "
    "call asked for approval.",
    ErrorCode.APPROVAL_EXPIRED: "Nothing was decided: the approval's time is up.",
    ErrorCode.APPROVAL_NOT_PENDING: "Nothing was decided: this approval is no longer waiting.",
    ErrorCode.SELF_APPROVAL_FORBIDDEN: "Nothing was decided: you made this call, so you "
    "cannot approve it.",
    ErrorCode.FORBIDDEN: "Nothing was decided: you may not decide this approval.",
    ErrorCode.APPROVAL_NOT_FOUND: "Nothing was decided: there is no such approval.",
    ErrorCode.SCHEMA_VALIDATION_FAILED: "Nothing was decided: the form's fields were not valid.",
}
OUTCOMES = {"approve": "approved", "reject": "rejected"}


async def _inbox_page(
    request: Request,
    principal: Principal,
    *,
    status_code: int = 200,
    refusal: MoatError | None = None,
    refused_id: str = "",
    done: str = "",
    done_id: str = "",
) -> Response:
    deps = deps_of(request)
    async with tenancy.tenant_transaction(deps.sessions, principal.tenant_id) as session:
        shown = await inbox.read(session, deps.executions.sealer, principal.tenant_id)
    return page(
        request,
        "approvals.html",
        principal,
        status_code=status_code,
        title="Approvals",
        inbox=shown,
        may_decide=not missing_scopes(list(principal.scopes), [APPROVALS_WRITE]),
        refusal=refusal,
        headline=HEADLINES.get(refusal.code, "Nothing was decided.") if refusal else "",
        refused_id=refused_id,
        done=done,
        done_id=done_id,
        max_comment=MAX_COMMENT,
    )


@router.get("", dependencies=[needs(APPROVALS_READ)])
async def approvals_inbox(
    request: Request,
    principal: SignedIn,
    decided: Annotated[str | None, Query(max_length=64)] = None,
    outcome: Annotated[str | None, Query(max_length=16)] = None,
) -> Response:
    done_id = decided if decided and re.match(APPROVAL_ID, decided) else ""
    done = outcome if outcome in OUTCOMES.values() and done_id else ""
    return await _inbox_page(request, principal, done=done or "", done_id=done_id)


@router.post(
    "/{approval_id}/decide",
    dependencies=[needs(APPROVALS_WRITE, also="a console session and its form token (CSRF)")],
)
async def decide(
    request: Request, principal: SignedIn, form: CheckedForm, approval_id: ApprovalId
) -> Response:
    """Approve or reject exactly what the page showed (the form's digest and version)."""
    action = field(form, "action", 16)
    try:
        if action not in OUTCOMES:
            raise MoatError(ErrorCode.SCHEMA_VALIDATION_FAILED, "Choose Approve or Reject.")
        decision = _decision(
            field(form, "input_hash", 100),
            field(form, "policy_version", 20),
            field(form, "comment", MAX_COMMENT + 1),
        )
        deps = deps_of(request)
        await approvals.decide(
            deps.sessions,
            deps.client,
            deps.executions.sealer,
            deps.executions.start_keys,
            tenant_id=principal.tenant_id,
            approval_id=approval_id,
            action="approve" if action == "approve" else "reject",
            decision=decision,
            actor=principal.actor,
            actor_scopes=principal.scopes,
        )
    except MoatError as err:
        if missing_scopes(list(principal.scopes), [APPROVALS_READ]):
            raise
        status = STATUS.get(err.code, 400)
        return await _inbox_page(
            request, principal, status_code=status, refusal=err, refused_id=approval_id
        )
    return RedirectResponse(
        f"/console/approvals?decided={approval_id}&outcome={OUTCOMES[action]}", status_code=303
    )


def _decision(input_hash: str, policy_version: str, comment: str) -> ApprovalDecision:
    try:
        return ApprovalDecision(
            input_hash=input_hash,
            policy_version=int(policy_version) if policy_version.isdigit() else -1,
            comment=comment.strip() or None,
        )
    except ValidationError as err:
        raise MoatError(
            ErrorCode.SCHEMA_VALIDATION_FAILED,
            "The decision needs the digest and policy version the page showed, and a comment "
            f"of at most {MAX_COMMENT} characters.",
            {"fields": [".".join(map(str, e["loc"])) for e in err.errors()]},
        ) from None
