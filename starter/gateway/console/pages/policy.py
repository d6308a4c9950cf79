"""The console's policy page: the version in force and its mode, the history of versions
(who, when) and a line diff between any two, as ``GET /v1/policy`` and its versions show
them; setting the mode and replacing the document through the same service, with
``policy:write``, refused with the API's codes (the problems listed one a line)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import RedirectResponse, Response
from pydantic import ValidationError
from sqlalchemy.ext.asyncio import AsyncSession

from schemas.errors import ErrorCode
from schemas.policy import PolicyDocument
from schemas.records import PolicyMode
from schemas.scopes import POLICY_WRITE
from starter.gateway.access import needs
from starter.gateway.console.auth import CheckedForm, ConsoleSession, SignedIn, field
from starter.gateway.console.nav import NavEntry
from starter.gateway.console.problems import Problems, problems_of
from starter.gateway.console.render import page
from starter.gateway.deps import deps_of
from starter.gateway.errors import STATUS
from starter.service import MoatError, json_body, policy, tenants
from starter.service.console_sessions import Principal
from store.models import Tenant

router = APIRouter(prefix="/console/policy")
NAV = NavEntry("Policy", "/console/policy", order=70)

WRITE = needs(POLICY_WRITE, also="a console session and its form token (CSRF)")
LISTED = 200
# A document's JSON as typed in the form: larger is refused before it is parsed.
MAX_DOCUMENT_CHARS = 200_000
VersionNumber = Annotated[int | None, Query(ge=0, le=2**31 - 1)]


async def _tenant(session: AsyncSession, tenant_id: str) -> Tenant:
    tenant = await tenants.get_tenant(session, tenant_id)
    if tenant is None:
        raise MoatError(ErrorCode.TENANT_NOT_FOUND, f"No tenant {tenant_id!r}.")
    return tenant


async def _page(
    request: Request,
    principal: Principal,
    session: AsyncSession,
    *,
    old: int | None = None,
    new: int | None = None,
    typed: str | None = None,
    problems: Problems | None = None,
    done: int | None = None,
) -> Response:
    tenant = await _tenant(session, principal.tenant_id)
    current = await policy.current(session, tenant)
    versions = await policy.history(session, tenant, None, LISTED)
    numbers = [v.version for v in versions] + [0]
    if old is None and new is None and len(numbers) >= 2:
        new, old = numbers[0], numbers[1]
    diff: dict[str, Any] | None = None
    if old is not None and new is not None:
        diff = {
            "old": old,
            "new": new,
            "lines": policy.diff(
                await policy.version(session, tenant, old),
                await policy.version(session, tenant, new),
            ),
        }
    return page(
        request,
        "policy.html",
        principal,
        status_code=STATUS.get(problems.code, 400) if problems else 200,
        title="Policy",
        current=current,
        document=typed if typed is not None else policy.canonical_text(current),
        versions=versions,
        numbers=numbers,
        diff=diff,
        modes=[m.value for m in PolicyMode],
        can_write=POLICY_WRITE in principal.scopes,
        problems=problems,
        done=done,
    )


@router.get("", dependencies=[needs(also="a console session")])
async def policy_page(
    request: Request,
    principal: SignedIn,
    session: ConsoleSession,
    old: VersionNumber = None,
    new: VersionNumber = None,
    saved: VersionNumber = None,
) -> Response:
    return await _page(request, principal, session, old=old, new=new, done=saved)


async def _replace(
    request: Request, principal: Principal, session: AsyncSession, document: PolicyDocument
) -> int:
    tenant = await _tenant(session, principal.tenant_id)
    limits = deps_of(request).settings.quota_limits
    async with session.begin_nested():
        stored = await policy.replace(session, tenant, document, principal.actor, limits)
    return stored.version


@router.post("/mode", dependencies=[WRITE])
async def set_mode(
    request: Request, principal: SignedIn, session: ConsoleSession, form: CheckedForm
) -> Response:
    """The document in force again, with the mode chosen: a new version."""
    current = await policy.current(session, await _tenant(session, principal.tenant_id))
    try:
        document = PolicyDocument.model_validate(
            {"mode": field(form, "mode", 20), "rules": current.model_dump()["rules"]}
        )
        version = await _replace(request, principal, session, document)
    except (ValidationError, MoatError) as err:
        return await _page(request, principal, session, problems=problems_of(err))
    return RedirectResponse(f"/console/policy?saved={version}", status_code=303)


@router.post("", dependencies=[WRITE])
async def replace(
    request: Request, principal: SignedIn, session: ConsoleSession, form: CheckedForm
) -> Response:
    """The document typed in the form, read as the API reads ``PUT /v1/policy``'s body."""
    typed = field(form, "document", MAX_DOCUMENT_CHARS + 1)
    try:
        if len(typed) > MAX_DOCUMENT_CHARS:
            raise MoatError(
                ErrorCode.SCHEMA_VALIDATION_FAILED,
                f"The document is longer than {MAX_DOCUMENT_CHARS} characters.",
            )
        document = PolicyDocument.model_validate(json_body.parse(typed))
        version = await _replace(request, principal, session, document)
    except (ValidationError, MoatError) as err:
        return await _page(request, principal, session, typed=typed, problems=problems_of(err))
    return RedirectResponse(f"/console/policy?saved={version}", status_code=303)
